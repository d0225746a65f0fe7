#include <cstdio>
#include <exception>
#include <new>

#include "cli/command.h"
#include "core/error.h"
#if KVTAX_WITH_CUDA
#include "cuda/device_model.h"
#endif

namespace kvtax::cli {
std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}
}  // namespace kvtax::cli

int main(int argc, char** argv) {
#if KVTAX_WITH_CUDA
  kvtax::cuda::register_backend();  // --device cuda
#endif
  CLI::App app{"kvtax: long-context LLM inference and the KV-cache tax harness"};
  app.set_version_flag("--version", std::string("kvtax ") + KVTAX_VERSION);
  app.require_subcommand(1);
  for (auto& c : kvtax::cli::commands()) c.setup(*app.add_subcommand(c.name, c.help));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kvtax::Error& e) {
    std::fprintf(stderr, "kvtax: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "kvtax: error: out of memory\n");
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvtax: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
