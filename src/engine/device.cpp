#include "engine/device.h"

#include <map>

#include "core/error.h"

namespace kvtax {
namespace {

std::map<std::string, DeviceFactory, std::less<>>& registry() {
  static std::map<std::string, DeviceFactory, std::less<>> r;
  return r;
}

std::string known() {
  std::string s = "cpu";
  for (const auto& [name, f] : registry()) s += ", " + name;
  return s;
}

}  // namespace

void register_device(std::string name, DeviceFactory f) { registry()[std::move(name)] = f; }

void check_device_name(std::string_view name) {
  if (name == "cpu" || registry().count(name)) return;
  if (name == "cuda")
    fail("--device cuda: this kvtax was built without the CUDA backend (configure with -DKVTAX_CUDA=ON; devices "
         "here: {})", known());
  fail("--device '{}' is unknown (devices in this build: {})", name, known());
}

std::unique_ptr<DeviceBackend> open_device(std::string_view name, const Model& m) {
  check_device_name(name);
  if (name == "cpu") fail("open_device: 'cpu' runs the CPU Forward path, not a device backend");
  return registry().find(name)->second(m);
}

}  // namespace kvtax
