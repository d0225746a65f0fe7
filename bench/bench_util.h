#pragma once
// Small helpers shared by kvtax's benchmarks and the llama.cpp peer programs (bench/peers/, built as C++17
// against ggml alone, so nothing here may include kvtax headers).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace kvtax_bench {

// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    size_t b = s.find(',', a);
    if (b == std::string::npos) b = s.size();
    if (b > a) out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}

// A /proc/self/status figure in bytes ("VmHWM:", "RssFile:" = mapped weights and the binary, "RssAnon:" =
// heap); 0 when absent.
inline size_t status_bytes(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, std::strlen(key)) == 0) std::sscanf(line + std::strlen(key), " %zu", &kib);
  std::fclose(f);
  return kib * 1024;
}

}  // namespace kvtax_bench
