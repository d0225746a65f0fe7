#pragma once
// Subcommands register themselves: each cli/<name>.cpp adds one entry, main.cpp knows none of them.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace kvtax::cli {

struct Command {
  std::string name;
  std::string help;
  // Adds options to `sub` and sets its callback (which may throw kvtax::Error).
  std::function<void(CLI::App& sub)> setup;
};

std::vector<Command>& commands();
inline bool add_command(Command c) {
  commands().push_back(std::move(c));
  return true;
}

}  // namespace kvtax::cli
