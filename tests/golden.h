#pragma once
// Reader for llama.cpp logits dumped by tools/peers/llama_logits.cpp (format described there).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

struct Golden {
  std::vector<int32_t> tokens;
  uint32_t n_rows = 0, n_vocab = 0, top_k = 0;
  std::vector<float> full;                       // n_rows x n_vocab when top_k == 0
  std::vector<std::vector<std::pair<int32_t, float>>> top;  // per row, highest first, when top_k > 0

  static bool load(const std::string& path, Golden& g) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    uint32_t h[6];
    bool ok = std::fread(h, sizeof h, 1, f) == 1 && h[0] == 0x4c47564b && h[1] == 1;
    if (ok) {
      g.n_rows = h[3], g.n_vocab = h[4], g.top_k = h[5];
      g.tokens.resize(h[2]);
      ok = std::fread(g.tokens.data(), 4, h[2], f) == h[2];
    }
    if (ok && g.top_k == 0) {
      g.full.resize(size_t(g.n_rows) * g.n_vocab);
      ok = std::fread(g.full.data(), 4, g.full.size(), f) == g.full.size();
    } else if (ok) {
      g.top.resize(g.n_rows);
      for (auto& row : g.top) {
        row.resize(g.top_k);
        for (auto& [id, v] : row) ok = ok && std::fread(&id, 4, 1, f) == 1 && std::fread(&v, 4, 1, f) == 1;
      }
    }
    std::fclose(f);
    return ok;
  }
};
