#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/unicode.h"

namespace kvtax::tok {

namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 '▁'

// Token texts that end a turn or the generation in common chat formats.
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", "<|end_of_text|>", "<|eom_id|>",
    "<end_of_turn>", "<EOT>", "<|return|>", "<|call|>",
};
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
};

bool contains(std::string_view hay, std::string_view needle) { return hay.find(needle) != std::string_view::npos; }

std::string lower_ascii(std::string s) {
  for (char& c : s) if (c >= 'A' && c <= 'Z') c = char(c + 32);
  return s;
}

bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// "<0xAB>" -> 0xAB, or -1.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else return -1;
  }
  return v;
}

}  // namespace

Tokenizer::Tokenizer(Vocab v) : v_(std::move(v)) {
  const size_t n = v_.tokens.size();
  if (n == 0) fail("tokenizer: vocabulary has no tokens");
  if (n > size_t(INT32_MAX) / 2) fail("tokenizer: vocabulary too large ({} tokens)", n);
  if (!v_.scores.empty() && v_.scores.size() != n)
    fail("tokenizer: {} scores for {} tokens", v_.scores.size(), n);
  if (!v_.types.empty() && v_.types.size() != n)
    fail("tokenizer: {} token types for {} tokens", v_.types.size(), n);
  for (auto* id : {&v_.bos, &v_.eos, &v_.eot, &v_.eom, &v_.unk, &v_.pad}) {
    if (*id < -1 || *id >= int32_t(n)) fail("tokenizer: special token id {} outside vocabulary of {}", *id, n);
  }

  const bool spm = v_.kind == TokenizerKind::spm;
  if (spm) {
    pre_ = PreTokenizer::none;
  } else {
    const std::string& p = v_.pre;
    if (p == "llama3" || p == "llama-v3" || p == "llama-bpe" || p == "smaug-bpe" || p == "dbrx") {
      pre_ = PreTokenizer::llama3;
      ignore_merges_ = true;
    } else if (p == "qwen2" || p == "stablelm2" || p == "hunyuan") {
      pre_ = PreTokenizer::qwen2;
    } else if (p == "gpt-2" || p == "gpt2" || p == "mpt" || p == "olmo" || p == "jais" || p == "default" || p.empty()) {
      pre_ = PreTokenizer::gpt2;
    } else {
      fail("tokenizer: unsupported BPE pre-tokenizer '{}' (supported: llama-bpe, qwen2, gpt-2, default)", p);
    }
  }
  add_bos_ = v_.add_bos.value_or(spm || pre_ == PreTokenizer::llama3);
  add_eos_ = v_.add_eos.value_or(false);
  add_space_prefix_ = v_.add_space_prefix.value_or(spm);
  if (add_bos_ && v_.bos < 0) fail("tokenizer: add_bos is set but the vocabulary has no BOS token");
  if (add_eos_ && v_.eos < 0) fail("tokenizer: add_eos is set but the vocabulary has no EOS token");

  if (v_.types.empty()) v_.types.assign(n, int32_t(TokenType::normal));
  text_to_id_.build(v_.tokens);

  // End-of-turn token: explicit id, else recognised by its text. Such tokens are control tokens
  // even when the converter typed them otherwise, so they never come out of plain text.
  if (v_.eot < 0) {
    for (auto t : kEotTexts) {
      if (int32_t id = find_token(t); id >= 0) { v_.eot = id; break; }
    }
  }
  for (auto t : kEogTexts) {
    if (int32_t id = find_token(t); id >= 0) {
      eog_.push_back(id);
      if (type(id) != TokenType::control) v_.types[id] = int32_t(TokenType::control);
    }
  }
  if (v_.eot >= 0 && type(v_.eot) != TokenType::control) v_.types[v_.eot] = int32_t(TokenType::control);
  for (int32_t id : {v_.eos, v_.eot, v_.eom}) if (id >= 0) eog_.push_back(id);
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());

  // Tokens matched as whole strings before the main algorithm, longest first.
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = type(int32_t(i));
    if ((t == TokenType::control || t == TokenType::user_defined || t == TokenType::unknown) && !v_.tokens[i].empty())
      specials_.push_back(int32_t(i));
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [&](int32_t a, int32_t b) { return v_.tokens[a].size() > v_.tokens[b].size(); });
  specials_by_byte_.resize(256);
  for (int32_t id : specials_) specials_by_byte_[static_cast<unsigned char>(v_.tokens[size_t(id)][0])].push_back(id);
  // Phi-3 templates put a newline after its markers that the reference tokenizer swallows.
  rstrip_.assign(n, 0);
  const std::string name = lower_ascii(v_.model_name);
  if (contains(name, "phi-3") || contains(name, "phi3")) {
    for (int32_t id : specials_) rstrip_[id] = 1;
    for (auto t : {"</s>"}) if (int32_t id = find_token(t); id >= 0) rstrip_[id] = 1;
    for (auto t : {"<unk>", "<s>", "<|endoftext|>"}) if (int32_t id = find_token(t); id >= 0) rstrip_[id] = 0;
  }

  if (spm) {
    spm_segment_at_spaces_ = true;
    for (const std::string& t : v_.tokens) {
      for (size_t p = t.find(kSpmSpace, 1); p != std::string::npos && spm_segment_at_spaces_; p = t.find(kSpmSpace, p + 1)) {
        if (p < kSpmSpace.size() || t.compare(p - kSpmSpace.size(), kSpmSpace.size(), kSpmSpace) != 0)
          spm_segment_at_spaces_ = false;
      }
      if (!spm_segment_at_spaces_) break;
    }
  }

  // Byte fallback and decoded pieces.
  byte_token_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    if (spm) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", b);
      int32_t id = find_token(hex);
      const char raw = char(b);
      if (id < 0) id = find_token(std::string_view(&raw, 1));  // some vocabs spell bytes literally
      byte_token_[b] = id;
    } else {
      byte_token_[b] = find_token(byte_to_alphabet(uint8_t(b)));
    }
  }
  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = v_.tokens[i];
    std::string& p = pieces_[i];
    switch (type(int32_t(i))) {
      case TokenType::control: case TokenType::unknown: case TokenType::user_defined: p = text; break;
      case TokenType::byte:
        if (int b = parse_byte_token(text); b >= 0) p.assign(1, char(b));
        else p = spm ? text : alphabet_to_bytes(text);
        break;
      case TokenType::normal:
        if (spm) {
          for (size_t k = 0; k < text.size();) {
            if (text.compare(k, kSpmSpace.size(), kSpmSpace) == 0) { p += ' '; k += kSpmSpace.size(); }
            else p += text[k++];
          }
        } else {
          p = alphabet_to_bytes(text);
        }
        break;
      default: break;  // unused / undefined tokens render as nothing
    }
  }

  if (!spm) {
    // Initial symbols: one per byte, named by the token for that byte's alphabet character.
    const auto intern = [&](std::string_view text) -> int32_t {
      if (int32_t id = find_token(text); id >= 0) return id;
      extra_texts_.emplace_back(text);
      return int32_t(n + extra_texts_.size() - 1);
    };
    std::unordered_map<std::string, int32_t> extra_ids;  // dedupe merge results missing from vocab
    const auto lookup = [&](std::string_view text) -> int32_t {
      if (int32_t id = find_token(text); id >= 0) return id;
      auto [it, fresh] = extra_ids.try_emplace(std::string(text), 0);
      if (fresh) it->second = intern(text);
      return it->second;
    };
    byte_symbol_.resize(256);
    for (int b = 0; b < 256; ++b) byte_symbol_[b] = lookup(byte_to_alphabet(uint8_t(b)));
    merges_.reserve(v_.merges.size());
    std::string ab;
    for (size_t r = 0; r < v_.merges.size(); ++r) {
      const std::string& m = v_.merges[r];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos || sp + 1 >= m.size())
        fail("tokenizer: merge {} '{}' is not two space-separated symbols", r, m);
      const std::string_view a(m.data(), sp), b(m.data() + sp + 1, m.size() - sp - 1);
      const int32_t ia = lookup(a), ib = lookup(b);
      ab.assign(a).append(b);
      const int32_t iab = lookup(ab);
      merges_.insert(ia, ib, {int32_t(r), iab});  // first rank wins
    }
  }
}

TokenType Tokenizer::type(int32_t id) const { return TokenType(v_.types[size_t(id)]); }

int32_t Tokenizer::find_token(std::string_view text) const {
  return text_to_id_.find(text);
}

const std::string& Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= n_vocab()) fail("tokenizer: token id {} outside vocabulary of {}", id, n_vocab());
  return v_.tokens[size_t(id)];
}

bool Tokenizer::is_eog(int32_t id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < n_vocab() && (type(id) == TokenType::control || type(id) == TokenType::unknown);
}

// Leftmost-longest matching of special tokens (what Hugging Face tokenizers do); control and
// unknown tokens only when parse_special, user-defined tokens always.
void Tokenizer::split_special(std::string_view text, bool parse_special, std::vector<Fragment>& frags) const {
  frags.clear();
  size_t start = 0;  // beginning of the pending text fragment
  for (size_t i = 0; i < text.size();) {
    const auto& cands = specials_by_byte_[static_cast<unsigned char>(text[i])];
    int32_t hit = -1;
    for (int32_t id : cands) {
      if (!parse_special && type(id) != TokenType::user_defined) continue;
      const std::string& s = v_.tokens[size_t(id)];
      if (text.size() - i >= s.size() && text.compare(i, s.size(), s) == 0) { hit = id; break; }
    }
    if (hit < 0) { ++i; continue; }
    if (i > start) frags.push_back({false, -1, start, i});
    frags.push_back({true, hit, i, i + v_.tokens[size_t(hit)].size()});
    i += v_.tokens[size_t(hit)].size();
    if (rstrip_[size_t(hit)]) while (i < text.size() && is_ascii_space(text[i])) ++i;
    start = i;
  }
  if (start < text.size()) frags.push_back({false, -1, start, text.size()});
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  if (text.size() >= UINT32_MAX) fail("tokenizer: text of {} bytes is too long (max 4 GiB)", text.size());
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && add_bos_) out.push_back(v_.bos);
  std::vector<Fragment> frags;
  split_special(text, parse_special, frags);
  if (v_.kind == TokenizerKind::spm) {
    std::string buf;
    bool prev_special = true;  // the first text fragment gets the prefix space too
    for (const Fragment& f : frags) {
      if (f.is_token) { out.push_back(f.token); prev_special = true; continue; }
      buf.clear();
      if (add_space_prefix_ && prev_special) buf += kSpmSpace;
      for (char c : text.substr(f.begin, f.end - f.begin)) {
        if (c == ' ') buf += kSpmSpace; else buf += c;
      }
      encode_spm(buf, out);
      prev_special = false;
    }
  } else {
    for (const Fragment& f : frags) {
      if (f.is_token) out.push_back(f.token);
      else encode_bpe(text.substr(f.begin, f.end - f.begin), out);
    }
  }
  if (add_special && add_eos_) out.push_back(v_.eos);
  return out;
}

void Tokenizer::emit_bytes(std::string_view bytes, std::vector<int32_t>& out) const {
  for (unsigned char b : bytes) {
    const int32_t id = byte_token_[b];
    if (id >= 0) out.push_back(id);
    else if (v_.unk >= 0) out.push_back(v_.unk);
  }
}

std::string Tokenizer::token_piece(int32_t id, bool special) const {
  if (id < 0 || id >= n_vocab()) fail("tokenizer: token id {} outside vocabulary of {}", id, n_vocab());
  if (!special && is_control(id)) return {};
  return pieces_[size_t(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool special) const {
  std::string out;
  bool strip = add_space_prefix_;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) fail("tokenizer: token id {} outside vocabulary of {}", id, n_vocab());
    if (!special && is_control(id)) continue;
    const std::string& p = pieces_[size_t(id)];
    if (p.empty()) continue;
    if (strip && p[0] == ' ') out.append(p, 1);
    else out += p;
    strip = false;
  }
  return out;
}

}  // namespace kvtax::tok
