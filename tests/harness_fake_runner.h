#pragma once
// A deterministic stand-in for the engine, for the sweep tests only (never part of the product).
// It "reads" the prompt: planted codes inside the arm's attention window are remembered, so recall,
// binding and rotating-window arms behave like a perfect small model; timings and memory are synthetic
// functions of context length, so aggregates have known exact values.
#include <csignal>
#include <cstdlib>
#include <new>
#include <regex>
#include <sstream>

#include <unistd.h>

#include "core/error.h"
#include "harness/runner.h"

namespace kvtax::harness::fake {

inline size_t count_words(const std::string& s) {
  std::istringstream in(s);
  std::string w;
  size_t n = 0;
  while (in >> w) ++n;
  return n;
}

class FakeRunner : public Runner {
 public:
  static constexpr int kTemplateTokens = 5;  // "<user>" ... "</user><assistant>"
  static constexpr int kVocab = 16;
  static constexpr double kLogprobsItl = 0.5e-3;
  int generate_calls = 0;

  std::string describe() const override { return "fake runner (tests)"; }
  nlohmann::json model_info() const override { return {{"name", "fake"}, {"vocab", kVocab}}; }
  void check_arm(const Arm& a) const override {
    static const char* known[] = {"f16", "fp8", "q8", "q4r", "crash", "oom", "sigkill", "hang"};
    for (const char* k : known)
      if (a.codec == k) return;
    fail("fake runner: unknown codec '{}'", a.codec);
  }
  size_t count_prompt_tokens(const std::string& m) override { return count_words(m) + kTemplateTokens; }

  static double slope_of(const Arm& a) { return a.codec == "f16" ? 1e-8 : 0.5e-8; }
  static double bytes_per_token_of(const Arm& a) { return a.codec == "f16" ? 4096 : a.codec == "q4r" ? 1152 : 2048; }

  GenerateResult generate(const GenerateRequest& req) override {
    ++generate_calls;
    if (req.arm.codec == "crash") std::abort();
    if (req.arm.codec == "sigkill") std::raise(SIGKILL);
    if (req.arm.codec == "oom") throw std::bad_alloc();
    if (req.arm.codec == "hang") ::sleep(30);
    GenerateResult r;
    const size_t ctx = count_prompt_tokens(req.user_message);
    // "oom_above=N": allocation fails past N context tokens (an arm that runs out of memory at length).
    for (const auto& [k, v] : req.arm.extra)
      if (k == "oom_above" && ctx > std::stoul(v)) throw std::bad_alloc();
    r.prompt_tokens = int(ctx);
    // Prefix cache: shared leading words with the last cached prompt.
    if (req.allow_prefix_cache) {
      std::istringstream a(cached_), b(req.user_message);
      std::string wa, wb;
      int common = 0;
      while (a >> wa && b >> wb && wa == wb) ++common;
      r.reused_prefix_tokens = cached_.empty() ? 0 : common;
      cached_ = req.user_message;
    } else {
      cached_.clear();
    }
    // What the arm still sees: sinks + a window of recent words, or everything.
    std::vector<std::string> words;
    {
      std::istringstream in(req.user_message);
      std::string w;
      while (in >> w) words.push_back(w);
    }
    auto visible = [&](size_t i) {
      if (!req.arm.window) return true;
      return i < size_t(req.arm.sinks.value_or(0)) || i + size_t(*req.arm.window) >= words.size();
    };
    std::vector<std::pair<std::string, std::string>> known;  // name, code
    for (size_t i = 0; i + 9 < words.size(); ++i)
      if (words[i] == "IMPORTANT:" && visible(i + 9)) {
        std::string code = words[i + 9];
        if (!code.empty() && code.back() == '.') code.pop_back();
        known.emplace_back(words[i + 6], code);
      }
    const std::string& m = req.user_message;
    std::string answer;
    const std::string bind = "What is the access code for the ";
    const size_t bq = m.rfind(bind);
    if (bq != std::string::npos && m.find("List the access codes") == std::string::npos) {
      const std::string name = m.substr(bq + bind.size(), m.find(' ', bq + bind.size()) - bq - bind.size());
      answer = "I do not know.";
      for (const auto& [n, c] : known)
        if (n == name) answer = "The code is " + c + ".";
    } else {
      for (size_t i = 0; i < known.size(); ++i) answer += (i ? ", " : "") + known[i].second;
      if (answer.empty()) answer = "I do not know.";
    }
    // Tokens: one per answer word (teacher-forced: the given ones), capped by max_tokens.
    std::vector<int32_t> toks;
    {
      std::istringstream in(answer);
      std::string w;
      while (in >> w) toks.push_back(int32_t(std::hash<std::string>{}(w) % kVocab));
    }
    if (!req.teacher_tokens.empty()) toks = req.teacher_tokens;
    if (int(toks.size()) > req.max_tokens) toks.resize(size_t(req.max_tokens));
    r.tokens = toks;
    r.text = answer;
    r.generated_tokens = int(toks.size());
    r.ttft_s = 2e-5 * double(ctx - size_t(r.reused_prefix_tokens));  // reused tokens cost no prefill
    // Recording distributions costs host time per token, as in the engine (a vocabulary's log-softmax).
    const double itl = 1e-3 + slope_of(req.arm) * double(ctx) + (req.want_logprobs ? kLogprobsItl : 0.0);
    r.total_s = r.ttft_s;
    for (size_t i = 1; i < toks.size(); ++i) r.itl_s.push_back(itl), r.total_s += itl;
    r.bytes_per_token = bytes_per_token_of(req.arm);
    const size_t kept = req.arm.window ? std::min(ctx, size_t(*req.arm.window + req.arm.sinks.value_or(0))) : ctx;
    r.kv_bytes = size_t(r.bytes_per_token * double(kept + toks.size()));
    r.peak_rss = (size_t(100) << 20) + r.kv_bytes;
    r.scratch_peak = 4096;
    const size_t reserve = req.reserve_bytes ? req.reserve_bytes : (size_t(1) << 30);
    r.capacity_tokens = size_t(double(reserve) / r.bytes_per_token);
    if (req.want_logprobs)
      for (size_t i = 0; i < toks.size(); ++i) r.next_token_logprobs.push_back(logprobs(req.arm, i, i ? toks[i - 1] : -1));
    return r;
  }

  // Distribution at a position depends on the previous token only, so free-running and teacher-forced
  // runs of one arm agree; non-f16 arms are a fixed perturbation of it.
  static PositionLogprobs logprobs(const Arm& a, size_t pos, int32_t prev) {
    std::vector<double> logit(kVocab);
    for (int v = 0; v < kVocab; ++v) logit[size_t(v)] = std::sin(0.7 * v + 1.3 * double(pos) + 0.11 * prev) * 3;
    if (a.codec != "f16")
      for (int v = 0; v < kVocab; ++v) logit[size_t(v)] += 0.25 * std::cos(1.9 * v + double(pos));
    double z = 0;
    for (double x : logit) z += std::exp(x);
    PositionLogprobs p;
    for (double x : logit) p.logprobs.push_back(float(x - std::log(z)));
    return p;
  }

 private:
  std::string cached_;
};

}  // namespace kvtax::harness::fake
