// Feeds arbitrary bytes to the GGUF parser and touches everything it returns: parsing must either
// succeed with in-bounds views or throw kvtax::Error, never crash, hang or allocate without bound.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/config.h"

namespace {

uint64_t touch(const kvtax::gguf::Value& v) {
  uint64_t h = uint64_t(v.type) + v.u + uint64_t(v.i) + uint64_t(v.b) + v.s.size();
  for (unsigned char c : v.s) h = h * 31 + c;
  for (const auto& e : v.arr) h += touch(e);
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtax::gguf;
  try {
    const auto f = File::parse({data, size}, "fuzz");
    volatile uint64_t sink = 0;
    for (const auto& kv : f->metadata()) {
      sink = sink + touch(kv.value) + kv.key.size();
      (void)format_value(kv.value);
      // The typed getters must throw Error (not crash) on any type mismatch.
      try { sink = sink + f->get_uint(kv.key).value_or(0); } catch (const kvtax::Error&) {}
      try { sink = sink + f->get_strings(kv.key).value_or(std::vector<std::string>{}).size(); } catch (const kvtax::Error&) {}
      try { sink = sink + f->get_i32s(kv.key).value_or(std::vector<int32_t>{}).size(); } catch (const kvtax::Error&) {}
      try { sink = sink + uint64_t(f->get_float(kv.key).value_or(0)); } catch (const kvtax::Error&) {}
    }
    for (const auto& t : f->tensors()) {
      const auto bytes = f->tensor_data(t);
      if (bytes.size() != t.nbytes) __builtin_trap();
      if (!bytes.empty()) sink = sink + bytes.front() + bytes.back();
    }
    try {
      const auto c = kvtax::read_config(*f);
      sink = sink + c.n_layers + c.kv_bytes_per_token(2);
    } catch (const kvtax::Error&) {
    }
  } catch (const kvtax::Error&) {
  }
  return 0;
}
