#include "engine/generate.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/timer.h"
#include "tokenizer/tokenizer.h"

namespace kvtax {
namespace {

std::vector<float> log_softmax(const float* l, int n) {
  const float mx = *std::max_element(l, l + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(l[i] - mx));
  const float lse = mx + float(std::log(sum));
  std::vector<float> out(l, l + n);
  for (auto& v : out) v -= lse;
  return out;
}

// Streams text while holding back anything that could still become a stop string.
class StopScanner {
 public:
  explicit StopScanner(const GenerateOptions& o) : o_(o) {
    for (const auto& s : o.stop) hold_ = std::max(hold_, s.size());
  }
  // Appends a piece; returns true when a stop string has been found (text is cut before it).
  bool add(const std::string& piece, std::string& text) {
    text += piece;
    for (const auto& s : o_.stop) {
      if (s.empty()) continue;
      const size_t at = text.find(s, emitted_ > s.size() ? emitted_ - s.size() : 0);
      if (at != std::string::npos) {
        text.resize(at);
        flush(text, text.size());
        return true;
      }
    }
    const size_t safe = text.size() > hold_ ? text.size() - hold_ : 0;
    flush(text, safe);
    return false;
  }
  void finish(const std::string& text) { flush(text, text.size()); }
  bool cancelled() const { return cancelled_; }

 private:
  void flush(const std::string& text, size_t upto) {
    // Never split a UTF-8 sequence when streaming.
    while (upto > emitted_ && upto < text.size() && (uint8_t(text[upto]) & 0xC0) == 0x80) --upto;
    if (upto > emitted_ && o_.on_text && !cancelled_) cancelled_ = !o_.on_text(text.substr(emitted_, upto - emitted_));
    emitted_ = std::max(emitted_, upto);
  }
  const GenerateOptions& o_;
  size_t hold_ = 0, emitted_ = 0;
  bool cancelled_ = false;
};

}  // namespace

GenerateOutput generate(Decoder& fw, const std::vector<int32_t>& prompt, const GenerateOptions& o) {
  const tok::Tokenizer& tokenizer = fw.model().tokenizer();
  const int n_vocab = int(fw.model().config().n_vocab);
  if (prompt.empty()) fail("empty prompt");
  if (o.cached_prefix < 0 || size_t(o.cached_prefix) >= prompt.size() || o.cached_prefix > fw.n_past())
    fail("generate: cached prefix of {} tokens is invalid for a {}-token prompt and {} cached tokens", o.cached_prefix,
         prompt.size(), fw.n_past());
  const size_t first = size_t(o.cached_prefix);
  const int room = fw.max_context() - fw.n_past();
  if (int(prompt.size() - first) > room)
    fail("context overflow: the prompt has {} tokens but only {} of the {}-token context are free",
         prompt.size() - first, room, fw.max_context());

  GenerateOutput out;
  GenerateStats& st = out.stats;
  st.prompt_tokens = int(prompt.size());
  st.cached_tokens = int(first);
  Sampler sampler(o.sampler);
  for (int32_t t : prompt) sampler.accept(t);
  std::vector<float> logits(static_cast<size_t>(n_vocab));

  const double t0 = now_seconds();
  const size_t chunk = size_t(std::max(1, std::min(o.prefill_chunk, fw.max_batch())));
  const auto cancelled = [&] { return o.cancel && o.cancel->load(std::memory_order_relaxed); };
  for (size_t i = first; i < prompt.size(); i += chunk) {
    if (cancelled()) {
      st.stop_reason = "cancel";
      st.prefill_s = st.total_s = now_seconds() - t0;
      return out;
    }
    fw.eval(prompt.data() + i, int(std::min(chunk, prompt.size() - i)), logits.data());
  }
  const double t_prefill = now_seconds();
  st.prefill_s = t_prefill - t0;

  StopScanner scanner(o);
  double t_last = t_prefill;
  const int max_new = o.teacher ? int(o.teacher->size()) : o.max_tokens;
  for (int i = 0; i < max_new; ++i) {
    if (o.teacher || o.want_logprobs) out.logprobs.push_back(log_softmax(logits.data(), n_vocab));
    const int32_t next = o.teacher ? (*o.teacher)[size_t(i)] : sampler.sample(logits.data(), n_vocab);
    const double now = now_seconds();
    if (i == 0) st.ttft_s = now - t0;
    else st.itl_s.push_back(now - t_last);
    t_last = now;
    out.tokens.push_back(next);
    st.generated_tokens++;
    if (o.stop_at_eog && !o.teacher && tokenizer.is_eog(next)) {
      st.stop_reason = "eog";
      break;
    }
    if (scanner.add(tokenizer.token_piece(next), out.text)) {
      st.stop_reason = "stop";
      break;
    }
    if (scanner.cancelled() || cancelled()) {
      st.stop_reason = "cancel";
      break;
    }
    if (i + 1 == max_new) {
      st.stop_reason = "length";
      break;
    }
    if (fw.n_past() >= fw.max_context()) {
      st.stop_reason = "context";
      break;
    }
    fw.eval(&next, 1, logits.data());
  }
  if (st.stop_reason != "stop") scanner.finish(out.text);
  st.decode_s = t_last - (t0 + st.ttft_s);
  st.total_s = now_seconds() - t0;
  return out;
}

}  // namespace kvtax
