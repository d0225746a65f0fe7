#include "harness/sweep.h"

#include <malloc.h>

#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/timer.h"
#include "harness/kld.h"
#include "harness/progress.h"
#include "harness/rng.h"

namespace kvtax::harness {
namespace {

struct Unit {
  RunRecord id;  // identity fields only
  size_t arm = 0;
};

// The reference arm's answer at one (target, pass): what the other arms are teacher-forced on.
struct Reference {
  bool ok = false;
  std::vector<int32_t> tokens;
  std::vector<PositionLogprobs> logprobs;
  bool have_logprobs = false;
};

std::string short_result(const RunRecord& r) {
  if (!r.ok()) return fmt::format("FAILED {}: {}", r.failure, r.failure_message);
  std::string s = fmt::format("ok ctx {} ttft {:.3g}s", r.context_tokens, r.ttft_s);
  if (r.decode_tok_s) s += fmt::format(" decode {:.4g} tok/s", *r.decode_tok_s);
  if (r.kind == kKindRecall) s += fmt::format(" recall {}/{}", r.recall_found, r.recall_total);
  if (r.binding_correct) s += *r.binding_correct ? " binding ok" : " binding wrong";
  if (r.kld_mean) s += fmt::format(" kld {:.4g}", *r.kld_mean);
  if (r.cache_hit) s += fmt::format(" reused {} ({})", r.reused_prefix_tokens, *r.cache_hit ? "hit" : "MISS");
  return s;
}

std::string label_of(const RunRecord& r) {
  std::string s = fmt::format("{} {} {}{} {}", r.arm, r.target, r.warmup ? "warm-up " : "pass ", r.pass, r.kind);
  if (r.kind == kKindBinding) s += fmt::format("#{}", r.index);
  return s;
}

void check_resume_compatible(const nlohmann::json& prev, const nlohmann::json& now, const std::string& dir) {
  auto same = [&](const char* what, const nlohmann::json& a, const nlohmann::json& b) {
    if (a != b)
      fail("--resume: the {} differs from the results in {} (there: {}, now: {}); use another --out", what, dir,
           a.dump(), b.dump());
  };
  same("model", prev.value("model", nlohmann::json()), now.value("model", nlohmann::json()));
  const auto& ps = prev.value("sweep", nlohmann::json::object());
  const auto& ns = now.at("sweep");
  for (const char* k : {"facts", "placement", "filler", "seed", "max_tokens", "binding_max_tokens", "kld_top_k"})
    same(k, ps.value(k, nlohmann::json()), ns.value(k, nlohmann::json()));
}

}  // namespace

void SweepOptions::validate() const {
  if (arms.empty()) fail("sweep: no arms (give --arm at least once)");
  if (lengths.empty()) fail("sweep: no lengths");
  for (auto l : lengths)
    if (l <= 0 || l > (int64_t(1) << 26)) fail("sweep: length {} out of range (1..67108864 tokens)", l);
  for (size_t i = 0; i < lengths.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (lengths[i] == lengths[j]) fail("sweep: length {} is given twice", lengths[i]);
  if (passes < 1 || passes > 1000) fail("sweep: passes {} out of range (1..1000)", passes);
  if (warmup < 0 || warmup > 100) fail("sweep: warm-up passes {} out of range (0..100)", warmup);
  if (max_tokens < 1 || max_tokens > 1 << 20) fail("sweep: max tokens {} out of range", max_tokens);
  if (binding_max_tokens < 1 || binding_max_tokens > 1 << 20) fail("sweep: binding max tokens {} out of range", binding_max_tokens);
  if (binding_limit < 0) fail("sweep: binding limit {} is negative", binding_limit);
  if (kld_top_k < 0) fail("sweep: KLD top-k {} is negative", kld_top_k);
  if (transcript.facts.empty()) fail("sweep: no facts");
  if (run_timeout_s < 0) fail("sweep: run timeout {} is negative", run_timeout_s);
  if (prefix_reuse && (prefix_tokens < 1 || prefix_passes < 1))
    fail("sweep: the prefix-reuse leg needs prefix tokens >= 1 and passes >= 1");
  if (out_dir.empty()) fail("sweep: no output directory (--out)");
}

nlohmann::json SweepOptions::to_json() const {
  nlohmann::json arm_specs = nlohmann::json::array(), facts = nlohmann::json::array();
  for (const auto& a : arms) arm_specs.push_back(a.spec);
  for (const auto& f : transcript.facts) facts.push_back({{"name", f.name}, {"code", f.code}});
  return {{"arms", arm_specs},       {"lengths", lengths},
          {"passes", passes},        {"warmup", warmup},
          {"seed", seed},            {"facts", facts},
          {"placement", transcript.placement.str()},
          {"filler", filler_name(transcript.filler)},
          {"max_tokens", max_tokens}, {"binding", binding},
          {"binding_limit", binding_limit}, {"binding_max_tokens", binding_max_tokens},
          {"kld", kld},              {"kld_top_k", kld_top_k},
          {"isolate", isolation_name(isolate)}, {"run_timeout_s", run_timeout_s},
          {"reserve_bytes", reserve_bytes}, {"prefix_reuse", prefix_reuse},
          {"prefix_tokens", prefix_tokens}, {"prefix_passes", prefix_passes}};
}

RunRecord make_record(const Outcome& o, const std::vector<Fact>& facts) {
  RunRecord r;
  if (!o.ok()) {
    r.failure = o.failure;
    r.failure_message = o.message;
    return r;
  }
  const GenerateResult& g = o.result;
  r.context_tokens = g.prompt_tokens;
  r.generated_tokens = g.generated_tokens;
  r.reused_prefix_tokens = g.reused_prefix_tokens;
  r.ttft_s = g.ttft_s;
  r.total_s = g.total_s;
  if (g.ttft_s > 0) r.prefill_tok_s = double(g.prompt_tokens) / g.ttft_s;
  // Tokens after the first, over the time after the first: prefill stays out of decode speed.
  if (g.generated_tokens >= 2 && g.total_s > g.ttft_s)
    r.decode_tok_s = double(g.generated_tokens - 1) / (g.total_s - g.ttft_s);
  r.itl_s = g.itl_s;
  if (!g.itl_s.empty()) {
    double s = 0;
    for (double x : g.itl_s) s += x;
    r.itl_mean_s = s / double(g.itl_s.size());
  } else if (g.generated_tokens >= 2 && g.total_s > g.ttft_s) {
    r.itl_mean_s = (g.total_s - g.ttft_s) / double(g.generated_tokens - 1);
  }
  r.peak_rss = g.peak_rss;
  r.kv_bytes = g.kv_bytes;
  r.scratch_peak = g.scratch_peak;
  r.capacity_tokens = g.capacity_tokens;
  r.bytes_per_token = g.bytes_per_token;
  const RecallScore s = score_recall(g.text, facts);
  r.recall_found = s.found;
  r.recall_total = s.total;
  r.recall_which = s.which;
  r.text = g.text;
  r.tokens = g.tokens;
  r.extra = g.extra;
  return r;
}

SweepReport run_sweep(Runner& runner, const SweepOptions& opt, std::FILE* log, std::FILE* summary) {
  opt.validate();
  for (const auto& a : opt.arms) runner.check_arm(a);
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  if (ec) fail("cannot create output directory {}: {}", opt.out_dir, ec.message());
  const std::string raw = (fs::path(opt.out_dir) / "raw.jsonl").string();

  nlohmann::json meta = {{"type", "meta"},          {"time", utc_now_iso()},  {"runner", runner.describe()},
                         {"model", runner.model_info()}, {"machine", machine_info()}, {"build", build_info()},
                         {"sweep", opt.to_json()}};
  ResultsFile prev;
  std::set<std::string> done;
  if (fs::exists(raw)) {
    if (!opt.resume) fail("{} exists; pass --resume to continue that sweep, or choose another --out", raw);
    prev = read_results(raw);
    if (!prev.metas.empty()) check_resume_compatible(prev.metas.back(), meta, opt.out_dir);
    done = finished_keys(prev);
  }
  const int session = int(prev.metas.size()) + 1;
  meta["session"] = session;
  ResultsWriter writer(raw);
  writer.append(meta);

  // Plan: warm-up passes (recall only), then recorded passes; skip what a previous session finished.
  const bool want_kld = opt.kld && opt.arms.size() > 1;
  const size_t n_facts = opt.transcript.facts.size();
  const size_t n_binding = !opt.binding ? 0 : opt.binding_limit > 0 ? std::min(n_facts, size_t(opt.binding_limit)) : n_facts;
  std::vector<Unit> units;
  auto add_pass = [&](int pass, bool warm) {
    std::vector<int64_t> order = opt.lengths;
    seeded_shuffle(order, mix_seed(opt.seed, uint64_t(warm ? 1000 + pass : pass)));
    for (int64_t t : order)
      for (size_t a = 0; a < opt.arms.size(); ++a) {
        auto add = [&](const char* kind, int index) {
          Unit u;
          u.arm = a;
          u.id.arm = opt.arms[a].spec, u.id.kind = kind, u.id.target = t, u.id.pass = pass, u.id.warmup = warm;
          u.id.index = index;
          if (warm || !done.count(u.id.key())) units.push_back(u);
        };
        add(kKindRecall, 0);
        if (warm) continue;
        for (size_t i = 0; i < n_binding; ++i) add(kKindBinding, int(i));
        if (want_kld && a > 0) add(kKindKld, 0);
      }
  };
  for (int p = 1; p <= opt.passes; ++p) add_pass(p, false);
  std::vector<Unit> prefix_units;
  if (opt.prefix_reuse)
    for (size_t a = 0; a < opt.arms.size(); ++a)
      for (int p = 1; p <= opt.prefix_passes; ++p) {
        const bool cold_first = p % 2 == 1;  // alternate which goes first
        for (int k = 0; k < 2; ++k) {
          Unit u;
          u.arm = a;
          u.id.arm = opt.arms[a].spec, u.id.target = opt.prefix_tokens, u.id.pass = p;
          u.id.kind = (k == 0) == cold_first ? kKindPrefixCold : kKindPrefixWarm;
          if (!done.count(u.id.key())) prefix_units.push_back(u);
        }
      }
  if (!units.empty()) {  // warm the machine only when there is something left to measure
    std::vector<Unit> recorded = std::move(units);
    units.clear();
    for (int w = 1; w <= opt.warmup; ++w) add_pass(w, true);
    units.insert(units.end(), recorded.begin(), recorded.end());
  }

  SweepReport report;
  report.planned = int(units.size() + prefix_units.size());
  report.skipped = int(done.size());
  Progress prog(log, report.planned, opt.progress);
  if (!done.empty()) prog.message(fmt::format("resuming: {} finished runs kept, {} to go", done.size(), report.planned));

  std::map<int64_t, Transcript> transcripts;
  auto count = [&](const std::string& m) { return runner.count_prompt_tokens(m); };
  for (const auto& u : units) {
    if (transcripts.count(u.id.target)) continue;
    Transcript t = build_transcript(opt.transcript, size_t(u.id.target), count);
    prog.message(fmt::format("transcript for {} tokens: {} tokens, {} filler blocks ({} counts)", u.id.target,
                             t.prompt_tokens, t.blocks, t.count_calls));
    transcripts.emplace(u.id.target, std::move(t));
  }

  auto execute = [&](const GenerateRequest& req, bool in_process) {
    ::malloc_trim(0);  // hand freed memory back between runs, as the original cleared allocator caches
    if (opt.isolate == Isolation::process && !in_process) return run_in_child(runner, req, opt.run_timeout_s);
    return run_in_process(runner, req);
  };
  auto finish = [&](RunRecord r, const Unit& u, double t0, const std::string& started) {
    r.arm = u.id.arm, r.kind = u.id.kind, r.target = u.id.target, r.pass = u.id.pass, r.warmup = u.id.warmup;
    r.index = u.id.index, r.session = session, r.started_at = started, r.wall_s = now_seconds() - t0;
    writer.append(to_json(r));
    ++report.executed;
    if (!r.ok()) ++report.failed;
    prog.end_run(label_of(r) + ": " + short_result(r));
  };

  std::map<std::pair<int64_t, int>, Reference> refs;
  for (const auto& u : units) {
    const Transcript& tr = transcripts.at(u.id.target);
    prog.begin_run(label_of(u.id));
    const std::string started = utc_now_iso();
    const double t0 = now_seconds();
    GenerateRequest req;
    req.arm = opt.arms[u.arm];
    req.reserve_bytes = opt.reserve_bytes;
    const auto ref_key = std::make_pair(u.id.target, u.id.pass);
    if (u.id.kind == kKindRecall) {
      req.user_message = tr.recall_message();
      req.max_tokens = opt.max_tokens;
      // The reference's timed run records no distributions: a full vocabulary's log-softmax per token is host work
      // that the other arms' timed runs do not do (128k logits: ~1 ms a token beside a 1.7 ms device step). The
      // first KLD run of its (target, pass) replays its answer, teacher-forced, for them.
      Outcome o = execute(req, false);
      RunRecord r = make_record(o, tr.facts);
      if (want_kld && u.arm == 0 && !u.id.warmup) {
        refs.erase(refs.begin(), refs.end());  // one reference in memory at a time
        refs[ref_key] = {o.ok(), o.result.tokens, {}, false};
      }
      finish(std::move(r), u, t0, started);
    } else if (u.id.kind == kKindBinding) {
      req.user_message = tr.binding_message(size_t(u.id.index));
      req.max_tokens = opt.binding_max_tokens;
      Outcome o = execute(req, false);
      RunRecord r = make_record(o, tr.facts);
      if (r.ok()) r.binding_correct = score_binding(o.result.text, tr.facts, size_t(u.id.index));
      finish(std::move(r), u, t0, started);
    } else {  // kld
      auto it = refs.find(ref_key);
      if (it == refs.end()) {
        // Resumed after the reference ran: its answer is in the previous session's records.
        Reference ref;
        RunRecord want;
        want.arm = opt.arms[0].spec, want.kind = kKindRecall, want.target = u.id.target, want.pass = u.id.pass;
        for (const auto& r : prev.runs)
          if (!r.warmup && r.key() == want.key() && r.ok()) ref.ok = true, ref.tokens = r.tokens;
        refs.erase(refs.begin(), refs.end());
        it = refs.emplace(ref_key, std::move(ref)).first;
      }
      Reference& ref = it->second;
      if (ref.ok && !ref.have_logprobs && !ref.tokens.empty()) {
        // The reference arm teacher-forced on its own answer: its distributions, untimed.
        GenerateRequest rq;
        rq.user_message = tr.recall_message();
        rq.arm = opt.arms[0];
        rq.reserve_bytes = opt.reserve_bytes;
        rq.teacher_tokens = ref.tokens;
        rq.max_tokens = int(ref.tokens.size());
        rq.want_logprobs = true;
        rq.logprobs_top_k = opt.kld_top_k;
        Outcome ro = execute(rq, false);
        ref.ok = ro.ok();
        ref.logprobs = std::move(ro.result.next_token_logprobs);
        ref.have_logprobs = ro.ok();
      }
      RunRecord r;
      if (!ref.ok || !ref.have_logprobs) {
        r.failure = "other";
        r.failure_message = "the reference arm's run failed: no answer to compare against";
      } else if (ref.tokens.empty()) {
        r.failure = "other";
        r.failure_message = "the reference arm's answer is empty: no positions to compare";
      } else {
        req.user_message = tr.recall_message();
        req.teacher_tokens = ref.tokens;
        req.max_tokens = int(ref.tokens.size());
        req.want_logprobs = true;
        req.logprobs_top_k = opt.kld_top_k;
        Outcome o = execute(req, false);
        r = make_record(o, tr.facts);
        if (r.ok()) {
          try {
            const KldStats k = kld_over_answer(ref.logprobs, o.result.next_token_logprobs);
            r.kld_mean = k.mean, r.kld_max = k.max, r.kld_positions = k.positions;
          } catch (const Error& e) {
            r.failure = "other";
            r.failure_message = e.what();
          }
        }
      }
      finish(std::move(r), u, t0, started);
    }
  }

  // Prefix-reuse leg: in this process even with --isolate process, since the warm run needs the cache
  // the priming run left behind.
  if (!prefix_units.empty()) {
    TranscriptSpec ps = opt.transcript;
    ps.facts.resize(1);
    ps.placement = Placement::parse("depth=0");
    const Transcript pt = build_transcript(ps, size_t(opt.prefix_tokens), count);
    const std::string prime_msg = pt.context + "\n\nSummarise the report above in one sentence.";
    const std::string measured_msg = pt.binding_message(0);
    const size_t shared = runner.count_prompt_tokens(pt.context);
    prog.message(fmt::format("prefix-reuse leg: shared prefix of about {} tokens", shared));
    for (const auto& u : prefix_units) {
      prog.begin_run(label_of(u.id));
      const std::string started = utc_now_iso();
      const double t0 = now_seconds();
      GenerateRequest req;
      req.arm = opt.arms[u.arm];
      req.reserve_bytes = opt.reserve_bytes;
      req.max_tokens = opt.binding_max_tokens;
      req.user_message = measured_msg;
      RunRecord r;
      if (u.id.kind == kKindPrefixCold) {
        r = make_record(execute(req, true), pt.facts);
        if (r.ok() && r.reused_prefix_tokens != 0) {
          r.failure = "other";
          r.failure_message = fmt::format("cold run reused {} cached tokens; the runner ignored allow_prefix_cache=false",
                                          r.reused_prefix_tokens);
        }
      } else {
        GenerateRequest prime = req;
        prime.user_message = prime_msg;
        prime.allow_prefix_cache = true;
        const Outcome po = execute(prime, true);
        req.allow_prefix_cache = true;
        r = make_record(execute(req, true), pt.facts);
        if (!po.ok() && r.ok()) r.failure = "other", r.failure_message = "priming run failed: " + po.message;
        // Verified, not assumed: at least half of the shared prefix must have come from the cache.
        if (r.ok()) r.cache_hit = r.reused_prefix_tokens > 0 && size_t(r.reused_prefix_tokens) * 2 >= shared;
      }
      finish(std::move(r), u, t0, started);
    }
  }
  prog.close();

  report.aggregates = aggregate(read_results(raw));
  write_aggregates(report.aggregates, opt.out_dir);
  if (summary) {
    std::fputs(summary_table(report.aggregates).c_str(), summary);
    std::fflush(summary);
  }
  return report;
}

}  // namespace kvtax::harness
