// Dumps llama.cpp's logits for a token sequence, so kvtax's forward pass can be checked against them.
// Built only on demand against a local llama.cpp build (tools/peers/build_llama.sh); never part of CI.
//
//   llama_logits MODEL OUT.bin (--tokens "1 2 3" | --prompt TEXT --greedy N) [--top K] [--ctk T --ctv T] [--fa]
//                [--dump DIR]
//
// --dump writes every f32 graph tensor as DIR/NNN_<name>.f32 (raw floats, evaluation order) to find where a
// forward pass departs from llama.cpp; compare with kvtax's KVTAX_DUMP_DIR (src/model/forward.cpp).
//
// OUT.bin (little endian): "KVGL" u32 version=1, u32 n_tokens, u32 n_rows, u32 n_vocab, u32 top_k (0 = full
// rows), i32 tokens[n_tokens], then for each row p < n_rows the logits after tokens[0..p] (predicting p+1):
// full: f32[n_vocab]; top-k: top_k x (i32 id, f32 logit), highest first.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"
#include "ggml-backend.h"

namespace {

struct DumpState {
  std::string dir;
  int n = 0;
};

bool dump_tensor(ggml_tensor* t, bool ask, void* user) {
  if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) return false;
  if (ask) return true;
  auto* st = static_cast<DumpState*>(user);
  std::vector<float> buf(size_t(ggml_nelements(t)));
  ggml_backend_tensor_get(t, buf.data(), 0, ggml_nbytes(t));
  char name[512];
  std::snprintf(name, sizeof name, "%s/%03d_%s.f32", st->dir.c_str(), st->n++, t->name);
  if (FILE* f = std::fopen(name, "wb")) {
    std::fwrite(buf.data(), sizeof(float), buf.size(), f);
    std::fclose(f);
  }
  return true;
}

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "llama_logits: %s\n", m.c_str());
  std::exit(1);
}

ggml_type kv_type(const std::string& s) {
  if (s == "f32") return GGML_TYPE_F32;
  if (s == "f16") return GGML_TYPE_F16;
  if (s == "q8_0") return GGML_TYPE_Q8_0;
  if (s == "q4_0") return GGML_TYPE_Q4_0;
  die("unknown KV type " + s);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) die("usage: llama_logits MODEL OUT.bin (--tokens IDS | --prompt TEXT --greedy N) [--top K] [--ctk T] [--ctv T] [--fa]");
  const std::string model_path = argv[1], out_path = argv[2];
  std::string tokens_arg, prompt, ctk = "f16", ctv = "f16", dump_dir;
  int greedy = 0, top_k = 0, threads = 2;
  bool fa = false;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { if (++i >= argc) die("missing value for " + a); return std::string(argv[i]); };
    if (a == "--tokens") tokens_arg = next();
    else if (a == "--prompt") prompt = next();
    else if (a == "--greedy") greedy = std::atoi(next().c_str());
    else if (a == "--top") top_k = std::atoi(next().c_str());
    else if (a == "--ctk") ctk = next();
    else if (a == "--ctv") ctv = next();
    else if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--fa") fa = true;
    else if (a == "--dump") dump_dir = next();
    else die("unknown argument " + a);
  }
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
  if (!model) die("cannot load " + model_path);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);

  std::vector<llama_token> tokens;
  if (!tokens_arg.empty()) {
    std::istringstream in(tokens_arg);
    for (int t; in >> t;) tokens.push_back(t);
  } else {
    tokens.resize(prompt.size() + 8);
    const int n = llama_tokenize(vocab, prompt.c_str(), int(prompt.size()), tokens.data(), int(tokens.size()), true, false);
    if (n < 0) die("tokenize failed");
    tokens.resize(size_t(n));
  }
  const int n_total = int(tokens.size()) + greedy;

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = uint32_t(n_total + 16);
  cp.n_batch = cp.n_ubatch = uint32_t(std::max(n_total, 32));
  cp.n_threads = cp.n_threads_batch = threads;
  cp.type_k = kv_type(ctk);
  cp.type_v = kv_type(ctv);
  cp.flash_attn_type = fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  DumpState dump{dump_dir};
  if (!dump_dir.empty()) {
    cp.cb_eval = dump_tensor;
    cp.cb_eval_user_data = &dump;
  }
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) die("cannot create context");

  std::vector<std::vector<float>> rows;
  // Prompt in one batch with logits everywhere, then greedy steps one token at a time.
  llama_batch batch = llama_batch_init(int32_t(tokens.size()), 0, 1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.token[i] = tokens[i];
    batch.pos[i] = llama_pos(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = int32_t(tokens.size());
  if (llama_decode(ctx, batch)) die("decode failed");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const float* l = llama_get_logits_ith(ctx, int32_t(i));
    rows.emplace_back(l, l + n_vocab);
  }
  llama_batch_free(batch);
  for (int g = 0; g < greedy; ++g) {
    const auto& last = rows.back();
    llama_token next = llama_token(std::max_element(last.begin(), last.end()) - last.begin());
    tokens.push_back(next);
    if (g + 1 == greedy) break;
    llama_batch one = llama_batch_get_one(&tokens.back(), 1);
    if (llama_decode(ctx, one)) die("decode failed");
    const float* l = llama_get_logits_ith(ctx, -1);
    rows.emplace_back(l, l + n_vocab);
  }
  FILE* f = std::fopen(out_path.c_str(), "wb");
  if (!f) die("cannot write " + out_path);
  const uint32_t hdr[6] = {0x4c47564b /* "KVGL" */, 1, uint32_t(tokens.size()), uint32_t(rows.size()),
                           uint32_t(n_vocab), uint32_t(top_k)};
  std::fwrite(hdr, sizeof hdr, 1, f);
  std::fwrite(tokens.data(), sizeof(llama_token), tokens.size(), f);
  std::vector<int> idx(static_cast<size_t>(n_vocab));
  for (const std::vector<float>& r : rows) {
    if (top_k == 0) {
      std::fwrite(r.data(), sizeof(float), r.size(), f);
      continue;
    }
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + top_k, idx.end(), [&](int a, int b) { return r[size_t(a)] > r[size_t(b)]; });
    for (int k = 0; k < top_k; ++k) {
      const int32_t id = idx[size_t(k)];
      std::fwrite(&id, 4, 1, f);
      std::fwrite(&r[size_t(id)], 4, 1, f);
    }
  }
  std::fclose(f);
  std::printf("wrote %zu positions x %s to %s\n", rows.size(), top_k ? ("top " + std::to_string(top_k)).c_str() : "full",
              out_path.c_str());
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
