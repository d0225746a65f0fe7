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

}  // namespace

namespace detail {

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

}  // namespace detail

using detail::StopScanner;

Generation::Generation(const tok::Tokenizer& tokenizer, int n_vocab, const std::vector<int32_t>& prompt,
                       const GenerateOptions& o, int n_past, int max_context)
    : tokenizer_(tokenizer), o_(o), prompt_(prompt), sampler_(o.sampler), own_logits_(size_t(n_vocab)),
      logits_(own_logits_.data()), n_past_(n_past), max_context_(max_context) {
  if (prompt_.empty()) fail("empty prompt");
  if (o_.cached_prefix < 0 || size_t(o_.cached_prefix) >= prompt_.size() || o_.cached_prefix > n_past)
    fail("generate: cached prefix of {} tokens is invalid for a {}-token prompt and {} cached tokens", o_.cached_prefix,
         prompt_.size(), n_past);
  cursor_ = size_t(o_.cached_prefix);
  const int room = max_context - n_past;
  if (int(prompt_.size() - cursor_) > room)
    fail("context overflow: the prompt has {} tokens but only {} of the {}-token context are free",
         prompt_.size() - cursor_, room, max_context);
  scanner_ = std::make_unique<StopScanner>(o_);
  GenerateStats& st = out_.stats;
  st.prompt_tokens = int(prompt_.size());
  st.cached_tokens = int(cursor_);
  for (int32_t t : prompt_) sampler_.accept(t);
  max_new_ = o_.teacher ? int(o_.teacher->size()) : o_.max_tokens;
  pickable_ = sampler_.pickable(n_vocab) && !o_.teacher && !o_.want_logprobs;
  t0_ = now_seconds();
}

Generation::~Generation() = default;

bool Generation::cancelled() const { return o_.cancel && o_.cancel->load(std::memory_order_relaxed); }

std::span<const int32_t> Generation::next(int max_tokens) {
  if (done_) return {};
  if (cursor_ < prompt_.size()) {
    if (cancelled()) {
      out_.stats.stop_reason = "cancel";
      out_.stats.prefill_s = out_.stats.total_s = now_seconds() - t0_;
      done_ = true;
      return {};
    }
    const int want = o_.prefill_chunk > 0 ? std::min(o_.prefill_chunk, max_tokens) : max_tokens;
    const size_t chunk = size_t(std::max(1, want));
    pending_ = int(std::min(chunk, prompt_.size() - cursor_));
    return {prompt_.data() + cursor_, size_t(pending_)};
  }
  pending_ = 1;
  return {&next_token_, 1};
}

std::optional<TokenPick> Generation::pick() {
  if (!pickable_ || pending_ == 0) return std::nullopt;
  pick_given_ = true;
  // A prompt chunk before the last samples nothing: no uniform is taken for it.
  if (cursor_ < prompt_.size() && cursor_ + size_t(pending_) < prompt_.size()) return TokenPick{};
  return sampler_.pick();
}

void Generation::advance(int32_t picked) {
  if (!pick_given_) fail("generation: advance(token) without a pick() for these tokens");
  given_ = picked;
  advance();  // a throw (NaN logits) ends the generation: its given_ is never read again
  given_.reset();
}

void Generation::advance() {
  if (done_ || pending_ == 0) fail("generation: advance() without tokens from next()");
  pick_given_ = false;
  n_past_ += pending_;
  if (cursor_ < prompt_.size()) {
    cursor_ += size_t(pending_);
    pending_ = 0;
    if (cursor_ < prompt_.size()) return;
    t_last_ = now_seconds();
    out_.stats.prefill_s = t_last_ - t0_;
  }
  pending_ = 0;
  sample();
}

void Generation::sample() {
  GenerateStats& st = out_.stats;
  const int i = st.generated_tokens;
  if (i >= max_new_) return finish("");  // nothing to generate (max_tokens 0, empty teacher)
  const int n_vocab = int(own_logits_.size());
  if (o_.teacher || o_.want_logprobs) out_.logprobs.push_back(log_softmax(logits_, n_vocab));
  int32_t next;
  if (o_.teacher) {
    next = (*o_.teacher)[size_t(i)];
  } else if (given_) {
    next = *given_;
    if (next != kNoPick) sampler_.accept(next);  // the window sample() would have kept
  } else {
    next = sampler_.sample(logits_, n_vocab);
  }
  // NaN logits (an overflow in the forward pass, e.g. activations beyond a 16-bit format's range) pick nothing: the
  // generation stops with an error rather than emit an arbitrary token.
  if (next == kNoPick)
    fail("the logits after {} tokens are NaN (or carry no weight): the forward pass overflowed; no token generated",
         n_past_);
  const double now = now_seconds();
  if (i == 0) st.ttft_s = now - t0_;
  else st.itl_s.push_back(now - t_last_);
  t_last_ = now;
  out_.tokens.push_back(next);
  st.generated_tokens++;
  if (o_.stop_at_eog && !o_.teacher && tokenizer_.is_eog(next)) return finish("eog");
  if (scanner_->add(tokenizer_.token_piece(next), out_.text)) return finish("stop");
  if (scanner_->cancelled() || cancelled()) return finish("cancel");
  if (i + 1 == max_new_) return finish("length");
  if (n_past_ >= max_context_) return finish("context");
  next_token_ = next;
}

void Generation::finish(const char* reason) {
  GenerateStats& st = out_.stats;
  st.stop_reason = reason;
  if (st.stop_reason != "stop") scanner_->finish(out_.text);
  st.decode_s = t_last_ - (t0_ + st.ttft_s);
  st.total_s = now_seconds() - t0_;
  done_ = true;
}

GenerateOutput generate(Decoder& fw, const std::vector<int32_t>& prompt, const GenerateOptions& o) {
  Generation g(fw.model().tokenizer(), int(fw.model().config().n_vocab), prompt, o, fw.n_past(), fw.max_context());
  g.use_logits_row(fw.logits_row());
  for (auto t = g.next(fw.max_batch()); !t.empty(); t = g.next(fw.max_batch())) {
    if (const std::optional<TokenPick> p = fw.has_pick() ? g.pick() : std::nullopt) {
      g.advance(fw.eval_pick(t.data(), int(t.size()), *p));
    } else {
      fw.eval(t.data(), int(t.size()), g.logits());
      g.advance();
    }
  }
  return g.take_output();
}

}  // namespace kvtax
