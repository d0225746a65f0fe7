// llama.cpp's whole-model decode and prefill speed through its public C API, measured the way
// kvtax_decode_bench measures kvtax, so bench/decode_vs_llama.sh can print ratios.
//   decode:  a short prompt (--prompt, default 256 tokens) is prefilled, its sequence state is read with
//            llama_state_seq_get_data, the cells are tiled to --depth D (positions 0..D-1, cell p holding
//            the rows of cell p % prompt) and loaded back with llama_state_seq_set_data; then N single-token
//            decodes are timed. The state layout is parsed exactly as this llama.cpp version writes it
//            (see src/llama-kv-cache.cpp state_write) and anything unexpected stops the program.
//   prefill: --prefill P times one P-token prompt at depth 0 (n_batch = n_ubatch = 512), median of --reps.
// Flash attention is on; K and V types from --ctk/--ctv (f16, q8_0, q4_0). Built on demand against the
// static libraries in ~/.cache/kvtax/peers/llama.cpp/build by bench/decode_vs_llama.sh (never in CI).
//   llama_decode -m FILE [--depth D] [-n N] [-t T] [--ctk T] [--ctv T] [--prompt P0] [--prefill P] [--reps R]
// Prints one JSON object on one line.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "llama.h"
#include "../bench_util.h"

namespace {

using kvtax_bench::status_bytes;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "llama_decode: %s\n", msg.c_str());
  std::exit(1);
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

ggml_type type_of(const std::string& s) {
  if (s == "f16") return GGML_TYPE_F16;
  if (s == "q8_0") return GGML_TYPE_Q8_0;
  if (s == "q4_0") return GGML_TYPE_Q4_0;
  die("unknown cache type '" + s + "' (f16, q8_0, q4_0)");
}

// Resets VmHWM so the peak covers the timed part only (the state buffers are gone by then).
void reset_peak_rss() {
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

// Bounds-checked reader over the state bytes.
struct Reader {
  const uint8_t* p;
  size_t n, at = 0;
  template <typename T>
  T get(const char* what) {
    if (n - at < sizeof(T)) die(std::string("sequence state ends inside ") + what);
    T v;
    std::memcpy(&v, p + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  const uint8_t* bytes(size_t k, const char* what) {
    if (n - at < k) die(std::string("sequence state ends inside ") + what);
    const uint8_t* r = p + at;
    at += k;
    return r;
  }
};

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const auto* b = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), b, b + sizeof(T));
}

constexpr uint32_t kStateMagic = 0xaf143cd8;  // llama-context.cpp's io_magic for sequence states

struct TensorRows {
  int32_t type;
  uint64_t row_bytes;
  const uint8_t* rows;  // cell_count rows
};

// Parses one sequence's state (one stream, `cells` cells at positions 0..cells-1 of sequence 0, no
// per-cell extension, V not transposed) and writes the same state tiled to `depth` cells.
std::vector<uint8_t> tile_state(const std::vector<uint8_t>& state, uint32_t cells, uint32_t n_layer, int depth,
                                ggml_type tk, ggml_type tv, double* kv_bytes_per_token) {
  Reader r{state.data(), state.size()};
  if (r.get<uint32_t>("magic") != kStateMagic) die("sequence state: unexpected magic (another llama.cpp version?)");
  if (r.get<int32_t>("seq id") != 0) die("sequence state: not sequence 0");
  if (r.get<uint32_t>("stream count") != 1) die("sequence state: expected one KV stream");
  const uint32_t cell_count = r.get<uint32_t>("cell count");
  if (cell_count != cells) die("sequence state: " + std::to_string(cell_count) + " cells, expected " + std::to_string(cells));
  for (uint32_t i = 0; i < cell_count; ++i) {
    const int32_t pos = r.get<int32_t>("cell position");
    const uint32_t n_seq = r.get<uint32_t>("cell sequence count");
    if (pos != int32_t(i) || n_seq != 1)
      die("sequence state: cell " + std::to_string(i) + " has position " + std::to_string(pos) + " and " +
          std::to_string(n_seq) + " sequences (expected position " + std::to_string(i) +
          ", 1 sequence; a per-cell extension would also land here)");
    if (r.get<int32_t>("cell sequence id") != 0) die("sequence state: a cell belongs to another sequence");
  }
  if (r.get<uint32_t>("v_trans") != 0) die("sequence state: V is transposed (flash attention should be on)");
  if (r.get<uint32_t>("layer count") != n_layer) die("sequence state: layer count differs from the model's");
  std::vector<TensorRows> k(n_layer), v(n_layer);
  for (auto* part : {&k, &v})
    for (uint32_t l = 0; l < n_layer; ++l) {
      TensorRows& t = (*part)[l];
      t.type = r.get<int32_t>("tensor type");
      t.row_bytes = r.get<uint64_t>("row size");
      if (t.type != int32_t(part == &k ? tk : tv)) die("sequence state: layer " + std::to_string(l) + " has another cache type");
      if (t.row_bytes == 0 || t.row_bytes > (uint64_t(1) << 24)) die("sequence state: implausible row size");
      t.rows = r.bytes(t.row_bytes * cell_count, "cache rows");
    }
  if (r.at != r.n) die("sequence state: " + std::to_string(r.n - r.at) + " bytes left over after the last layer");

  double per_token = 0;
  for (uint32_t l = 0; l < n_layer; ++l) per_token += double(k[l].row_bytes + v[l].row_bytes);
  *kv_bytes_per_token = per_token;
  std::vector<uint8_t> out;
  out.reserve(size_t(32) + size_t(depth) * (12 + size_t(per_token)) + 24 * n_layer);
  put(out, kStateMagic);
  put(out, int32_t(0));
  put(out, uint32_t(1));
  put(out, uint32_t(depth));
  for (int i = 0; i < depth; ++i) {
    put(out, int32_t(i));
    put(out, uint32_t(1));
    put(out, int32_t(0));
  }
  put(out, uint32_t(0));
  put(out, n_layer);
  for (auto* part : {&k, &v})
    for (const TensorRows& t : *part) {
      put(out, t.type);
      put(out, t.row_bytes);
      for (int i = 0; i < depth; i += int(cell_count)) {
        const size_t n = std::min<size_t>(cell_count, size_t(depth - i));
        out.insert(out.end(), t.rows, t.rows + n * t.row_bytes);
      }
    }
  return out;
}

void decode_batch(llama_context* ctx, const std::vector<llama_token>& toks, int pos0, bool all_logits) {
  llama_batch b = llama_batch_init(int32_t(toks.size()), 0, 1);
  b.n_tokens = int32_t(toks.size());
  for (size_t i = 0; i < toks.size(); ++i) {
    b.token[i] = toks[i];
    b.pos[i] = llama_pos(pos0 + int(i));
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = all_logits || i + 1 == toks.size();
  }
  const int rc = llama_decode(ctx, b);
  llama_batch_free(b);
  if (rc != 0) die("llama_decode returned " + std::to_string(rc));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, ctk = "f16", ctv = "f16";
  int depth = 0, n = 32, threads = 2, prompt = 256, prefill = 0, reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) die(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "-m") path = v;
    else if (a == "--depth") depth = std::atoi(v.c_str());
    else if (a == "-n") n = std::atoi(v.c_str());
    else if (a == "-t") threads = std::atoi(v.c_str());
    else if (a == "--ctk") ctk = v;
    else if (a == "--ctv") ctv = v;
    else if (a == "--prompt") prompt = std::atoi(v.c_str());
    else if (a == "--prefill") prefill = std::atoi(v.c_str());
    else if (a == "--reps") reps = std::atoi(v.c_str());
    else die("unknown option " + a);
  }
  if (path.empty()) die("usage: llama_decode -m FILE [--depth D] [-n N] [-t T] [--ctk T] [--ctv T] [--prompt P0] [--prefill P] [--reps R]");
  if (depth < 0 || n < 1 || threads < 1 || prompt < 1 || prefill < 0 || reps < 1) die("bad option value");

  llama_log_set([](ggml_log_level level, const char* text, void*) {
    if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
  }, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(path.c_str(), mp);
  if (!model) die("cannot load " + path);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const uint32_t n_layer = uint32_t(llama_model_n_layer(model));

  const int fill = std::min(prompt, depth);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = uint32_t(prefill > 0 ? prefill : depth + n + 1);
  cp.n_batch = cp.n_ubatch = 512;
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = threads;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
  cp.type_k = type_of(ctk);
  cp.type_v = type_of(ctv);
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) die("cannot create a context (n_ctx " + std::to_string(cp.n_ctx) + ")");
  llama_memory_t mem = llama_get_memory(ctx);

  std::mt19937 rng(1);
  auto random_tokens = [&](int k) {
    std::vector<llama_token> t(size_t(std::max(k, 0)));
    for (auto& x : t) x = llama_token(rng() % uint32_t(n_vocab));
    return t;
  };
  std::printf("{\"engine\": \"llama.cpp\", \"model\": \"%s\", \"kv\": \"%s/%s\", \"threads\": %d, ", path.c_str(),
              ctk.c_str(), ctv.c_str(), threads);

  if (prefill > 0) {
    const auto toks = random_tokens(prefill);
    decode_batch(ctx, std::vector<llama_token>(toks.begin(), toks.begin() + std::min(prefill, 16)), 0, false);  // warm-up
    std::vector<double> ts;
    for (int r = 0; r < reps; ++r) {
      llama_memory_clear(mem, true);
      const double t0 = now();
      for (int i = 0; i < prefill; i += 512)
        decode_batch(ctx, std::vector<llama_token>(toks.begin() + i, toks.begin() + std::min(prefill, i + 512)), i, false);
      ts.push_back(now() - t0);
    }
    std::printf("\"mode\": \"prefill\", \"prompt\": %d, \"reps\": %d, \"tok_s\": %.4f, \"best_tok_s\": %.4f}\n", prefill,
                reps, prefill / median(ts), prefill / *std::min_element(ts.begin(), ts.end()));
    return 0;
  }

  double kv_per_token = 0, fill_s = 0;
  if (depth > 0) {
    const double t0 = now();
    decode_batch(ctx, random_tokens(fill), 0, false);
    if (depth > fill) {
      std::vector<uint8_t> state(llama_state_seq_get_size(ctx, 0));
      if (state.empty() || llama_state_seq_get_data(ctx, state.data(), state.size(), 0) != state.size())
        die("llama_state_seq_get_data failed");
      std::vector<uint8_t> tiled = tile_state(state, uint32_t(fill), n_layer, depth, cp.type_k, cp.type_v, &kv_per_token);
      state = {};
      llama_memory_clear(mem, true);
      if (llama_state_seq_set_data(ctx, tiled.data(), tiled.size(), 0) != tiled.size())
        die("llama_state_seq_set_data did not take the tiled state");
    } else {
      std::vector<uint8_t> state(llama_state_seq_get_size(ctx, 0));
      llama_state_seq_get_data(ctx, state.data(), state.size(), 0);
      tile_state(state, uint32_t(fill), n_layer, fill, cp.type_k, cp.type_v, &kv_per_token);  // for the byte count
    }
    fill_s = now() - t0;
    if (llama_memory_seq_pos_min(mem, 0) != 0 || llama_memory_seq_pos_max(mem, 0) != depth - 1)
      die("after loading the state the sequence spans positions " + std::to_string(llama_memory_seq_pos_min(mem, 0)) +
          ".." + std::to_string(llama_memory_seq_pos_max(mem, 0)) + ", expected 0.." + std::to_string(depth - 1));
  }
  reset_peak_rss();

  llama_token tok = random_tokens(1)[0];
  int pos = depth;
  auto step = [&] {
    decode_batch(ctx, {tok}, pos++, false);
    const float* l = llama_get_logits_ith(ctx, -1);
    tok = llama_token(std::max_element(l, l + n_vocab) - l);
  };
  step();  // warm-up
  std::vector<double> ts;
  const double t0 = now();
  for (int i = 0; i < n; ++i) {
    const double s = now();
    step();
    ts.push_back(now() - s);
  }
  const double total = now() - t0;
  std::printf("\"mode\": \"decode\", \"depth\": %d, \"n\": %d, \"prompt\": %d, \"tok_s\": %.4f, \"ms_per_token\": %.4f, "
              "\"ms_median\": %.4f, \"fill_s\": %.3f, \"kv_bytes_per_token\": %.1f, \"peak_rss_bytes\": %zu, "
              "\"rss_file_bytes\": %zu, \"rss_anon_bytes\": %zu}\n",
              depth, n, fill, n / total, total / n * 1e3, median(ts) * 1e3, fill_s, kv_per_token,
              status_bytes("VmHWM:"), status_bytes("RssFile:"), status_bytes("RssAnon:"));
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
