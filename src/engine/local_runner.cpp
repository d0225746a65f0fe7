#include "engine/local_runner.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "attn/cpu/attention.h"
#include "core/error.h"
#include "core/memory.h"
#include "engine/generate.h"
#include "tokenizer/tokenizer.h"

namespace kvtax {
namespace {

// The reservation capacity is reported for when a request names none: 16 GiB, a common GPU/CPU budget.
constexpr size_t kDefaultReserve = size_t(16) << 30;

harness::PositionLogprobs pick(const std::vector<float>& lp, int top_k) {
  harness::PositionLogprobs p;
  if (top_k <= 0 || size_t(top_k) >= lp.size()) {
    p.logprobs = lp;
    return p;
  }
  std::vector<int32_t> ids(lp.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + top_k, ids.end(), [&](int32_t a, int32_t b) { return lp[a] > lp[b]; });
  ids.resize(size_t(top_k));
  for (int32_t id : ids) p.logprobs.push_back(lp[size_t(id)]);
  p.ids = std::move(ids);
  return p;
}

}  // namespace

LocalRunner::LocalRunner(const std::string& model_path, int threads, int batch, const std::string& device)
    : path_(model_path), model_(Model::load(model_path)), chat_(tok::detect_chat_template(model_->file())),
      threads_(threads), batch_(batch > 0 ? batch : kCpuPrefillChunk), device_batch_(batch),
      pool_(std::make_unique<ThreadPool>(threads)), device_(device) {
  if (device_ != "cpu") backend_ = open_device(device_, *model_);
}

LocalRunner::~LocalRunner() {
  decoder_.reset();  // before the backend whose weights it uses
  backend_.reset();
}

void LocalRunner::on_child_start() {
  if (backend_) fail("--isolate process does not work with --device {}: a device context does not survive fork", device_);
  session_.reset();  // it refers to the parent's pool
  pool_ = std::make_unique<ThreadPool>(threads_);
}

std::string LocalRunner::describe() const {
  const auto& c = model_->config();
  if (backend_)
    return fmt::format("kvtax in-process on {}, {} ({} {} layers, d {}, {} KV heads x {}), {}", device_, path_, c.arch,
                       c.n_layers, c.d_model, c.n_kv_heads, c.head_dim, backend_->describe());
  return fmt::format("kvtax in-process, {} ({} {} layers, d {}, {} KV heads x {}), {} threads", path_, c.arch,
                     c.n_layers, c.d_model, c.n_kv_heads, c.head_dim, pool_->size());
}

nlohmann::json LocalRunner::model_info() const {
  const auto& c = model_->config();
  return {{"runner", "kvtax-local"}, {"file", path_}, {"arch", c.arch}, {"name", c.name},
          {"n_layers", c.n_layers}, {"d_model", c.d_model}, {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads},
          {"head_dim", c.head_dim}, {"n_vocab", c.n_vocab}, {"weight_bytes", model_->weight_bytes()},
          {"chat_template", std::string(tok::chat_style_name(chat_.style))}, {"device", device_}};
}

void LocalRunner::check_arm(const harness::Arm& arm) const {
  const KvSpec spec = parse_kv_spec(arm.spec);
  const auto& c = model_->config();
  if (backend_) {
    backend_->capacity_tokens(spec, kDefaultReserve);  // throws for a spec the device does not serve
    return;
  }
  // Building a one-token cache checks the codec against this model's head size.
  KvCache probe(KvShape{int(c.n_layers), int(c.n_kv_heads), int(c.head_dim)}, spec, 1, 1);
}

std::vector<int32_t> LocalRunner::prompt_tokens(const std::string& user_message) const {
  const std::string prompt = tok::apply_chat_template(chat_, {{"user", user_message}}, true);
  return model_->tokenizer().encode(prompt, /*add_special=*/true, /*parse_special=*/true);
}

size_t LocalRunner::count_prompt_tokens(const std::string& user_message) { return prompt_tokens(user_message).size(); }

namespace {
// What every backend reports alike; the caller adds its KV, scratch and capacity figures.
harness::GenerateResult to_result(const GenerateOutput& out, const harness::GenerateRequest& req) {
  harness::GenerateResult r;
  r.text = out.text;
  r.tokens = out.tokens;
  r.prompt_tokens = out.stats.prompt_tokens;
  r.generated_tokens = out.stats.generated_tokens;
  r.ttft_s = out.stats.ttft_s;
  r.total_s = out.stats.ttft_s + out.stats.decode_s;
  r.itl_s = out.stats.itl_s;
  r.peak_rss = peak_rss_bytes();
  if (req.want_logprobs)
    for (const auto& lp : out.logprobs) r.next_token_logprobs.push_back(pick(lp, req.logprobs_top_k));
  return r;
}
}  // namespace

harness::GenerateResult LocalRunner::generate_on_device(const harness::GenerateRequest& req) {
  const KvSpec spec = parse_kv_spec(req.arm.spec);
  const std::vector<int32_t> prompt = prompt_tokens(req.user_message);
  const int answer = req.teacher_tokens.empty() ? req.max_tokens : int(req.teacher_tokens.size());
  const int ctx = int(prompt.size()) + answer + 1;
  if (!decoder_ || decoder_spec_ != spec.str() || decoder_->max_context() < ctx) {
    decoder_.reset();
    decoder_ = backend_->decoder(spec, std::max(ctx, 4096), 0);
    decoder_spec_ = spec.str();
    // Before the timed run: what its first evals would set up (prefill buffers, GEMM scratch, the decode step's
    // graph). Arms alternate, so a sweep makes a decoder per run, and that setup would fall inside its timings.
    decoder_->prepare(device_batch_ > 0 ? device_batch_ : decoder_->max_batch());
  }
  decoder_->reset();  // no prefix reuse on the device: every run starts from an empty cache
  GenerateOptions o;
  o.max_tokens = answer;
  o.prefill_chunk = device_batch_;
  o.want_logprobs = req.want_logprobs;
  if (!req.teacher_tokens.empty()) o.teacher = &req.teacher_tokens;
  GenerateOutput out = kvtax::generate(*decoder_, prompt, o);

  harness::GenerateResult r = to_result(out, req);
  r.kv_bytes = decoder_->kv_bytes_used();
  r.reused_prefix_tokens = 0;
  r.scratch_peak = decoder_->scratch_bytes();
  r.bytes_per_token = decoder_->kv_bytes_per_token();
  r.capacity_tokens = backend_->capacity_tokens(spec, req.reserve_bytes ? req.reserve_bytes : kDefaultReserve);
  r.extra = {{"prefill_tok_s", out.stats.prefill_tok_s()}, {"stop_reason", out.stats.stop_reason},
             {"kv_bytes_end", decoder_->kv_bytes_used()}, {"context_tokens", decoder_->n_past()},
             {"device", device_}, {"device_peak_bytes", backend_->peak_device_bytes()},
             {"device_weight_bytes", backend_->weight_bytes()},
             {"device_kv_reserved_bytes", decoder_->kv_bytes_reserved()}};
  return r;
}

harness::GenerateResult LocalRunner::generate(const harness::GenerateRequest& req) {
  reset_peak_rss();
  if (backend_) return generate_on_device(req);
  const KvSpec spec = parse_kv_spec(req.arm.spec);
  const auto& c = model_->config();
  const std::vector<int32_t> prompt = prompt_tokens(req.user_message);
  const int answer = req.teacher_tokens.empty() ? req.max_tokens : int(req.teacher_tokens.size());
  const int ctx = int(prompt.size()) + answer + 1;

  std::unique_ptr<Session> fresh;
  Session* session;
  if (req.allow_prefix_cache) {
    if (!session_ || session_spec_ != spec.str() || session_->max_context() < ctx) {
      session_.reset();
      session_ = std::make_unique<Session>(*model_, spec, std::max(2 * ctx, 4096), batch_, *pool_);
      session_spec_ = spec.str();
    }
    session = session_.get();
  } else {
    fresh = std::make_unique<Session>(*model_, spec, ctx, batch_, *pool_);  // fresh cache: the run is isolated
    session = fresh.get();
  }
  GenerateOptions o;
  o.max_tokens = answer;
  o.prefill_chunk = batch_;
  o.want_logprobs = req.want_logprobs;
  if (!req.teacher_tokens.empty()) o.teacher = &req.teacher_tokens;
  GenerateOutput out = session->generate(prompt, o, req.allow_prefix_cache);
  const Forward& fw = session->forward();

  harness::GenerateResult r = to_result(out, req);
  r.kv_bytes = fresh ? fw.cache().peak_bytes_used() : fw.cache().bytes_used();
  r.reused_prefix_tokens = out.stats.cached_tokens;
  r.scratch_peak = fw.scratch_bytes() + attention_scratch_peak();
  r.bytes_per_token = fw.cache().bytes_per_token();
  const KvShape shape{int(c.n_layers), int(c.n_kv_heads), int(c.head_dim)};
  r.capacity_tokens = KvCache::capacity(shape, spec, req.reserve_bytes ? req.reserve_bytes : kDefaultReserve, batch_);
  r.extra = {{"prefill_tok_s", out.stats.prefill_tok_s()}, {"stop_reason", out.stats.stop_reason},
             {"kv_bytes_end", fw.cache().bytes_used()}, {"context_tokens", fw.n_past()}};
  return r;
}

}  // namespace kvtax
