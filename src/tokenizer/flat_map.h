#pragma once
// Open-addressing hash tables for the tokenizer's two hot lookups (token text -> id and
// merge pair -> rank): one flat array each, no per-entry allocation, few cache misses.
#include <bit>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvtax::tok {

inline uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h ^ (h >> 29);
}

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  return x;
}

// Text -> id; the texts are owned elsewhere (the vocabulary) and must outlive the table.
class TextIdMap {
 public:
  void build(const std::vector<std::string>& texts) {
    texts_ = &texts;
    size_t cap = 16;
    while (cap < texts.size() * 2) cap <<= 1;
    slots_.assign(cap, Slot{0, -1});
    for (size_t i = 0; i < texts.size(); ++i) {
      if (texts[i].empty()) continue;
      insert(texts[i], int32_t(i));
    }
  }
  int32_t find(std::string_view s) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash_bytes(s);
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& e = slots_[i];
      if (e.id < 0) return -1;
      if (e.hash == uint32_t(h >> 32) && (*texts_)[size_t(e.id)] == s) return e.id;
    }
  }

 private:
  struct Slot { uint32_t hash; int32_t id; };
  void insert(std::string_view s, int32_t id) {
    const uint64_t h = hash_bytes(s);
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& e = slots_[i];
      if (e.id < 0) { e = {uint32_t(h >> 32), id}; return; }
      if (e.hash == uint32_t(h >> 32) && (*texts_)[size_t(e.id)] == s) { e.id = id; return; }  // later id wins
    }
  }
  const std::vector<std::string>* texts_ = nullptr;
  std::vector<Slot> slots_;
};

// (left id, right id) -> (rank, merged id); the first insertion of a pair wins.
class PairMap {
 public:
  struct Value { int32_t rank, merged; };
  void reserve(size_t n) {  // load factor <= 3/4: Llama 3's 280k merges take 8 MiB, not 16
    size_t cap = 16;
    while (cap * 3 < n * 4) cap <<= 1;
    slots_.assign(cap, Slot{~0ull, {0, 0}});
  }
  void insert(int32_t a, int32_t b, Value v) {
    const uint64_t k = key(a, b);
    const size_t mask = slots_.size() - 1;
    for (size_t i = mix64(k) & mask;; i = (i + 1) & mask) {
      if (slots_[i].key == k) return;
      if (slots_[i].key == ~0ull) { slots_[i] = {k, v}; return; }
    }
  }
  const Value* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t k = key(a, b);
    const size_t mask = slots_.size() - 1;
    for (size_t i = mix64(k) & mask;; i = (i + 1) & mask) {
      if (slots_[i].key == k) return &slots_[i].value;
      if (slots_[i].key == ~0ull) return nullptr;
    }
  }

 private:
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  struct Slot { uint64_t key; Value value; };
  std::vector<Slot> slots_;
};

}  // namespace kvtax::tok
