#include "harness/transcript.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <set>

#include "core/error.h"
#include "harness/rng.h"

namespace kvtax::harness {
namespace {

// Our own bland paragraph in the style of the original: routine campus notes, nothing to act on.
constexpr const char* kFillerParagraph =
    "Facilities report for the north campus. The morning walk-through found the lobby clean and both "
    "elevators on their normal schedule. Heating in the east wing held steady at the usual setting, "
    "and the loading dock received two pallets of office paper shelved before noon. A light in the "
    "third-floor stairwell was replaced. The parking lot was swept as planned, the recycling bins were "
    "emptied, and the visitor log showed nothing out of the ordinary. No items require escalation at this "
    "time. ";

constexpr const char* kNames[] = {
    "Aurora",  "Basalt",  "Cinder",  "Dovewing", "Ember",   "Falcon",  "Garnet",  "Harbor",  "Indigo",
    "Juniper", "Kestrel", "Lantern", "Meadow",   "Nimbus",  "Obsidian", "Pioneer", "Quartz", "Raven",
    "Sierra",  "Thistle", "Umber",   "Vertex",   "Willow",  "Xenon",   "Yarrow",  "Zephyr",  "Alder",
    "Bramble", "Cobalt",  "Drift",   "Equinox",  "Fjord",   "Glacier", "Heron",   "Ironwood", "Jasper",
    "Kelp",    "Lichen",  "Marble",  "Nectar",   "Onyx",    "Pewter",  "Quill",   "Russet",  "Saffron",
    "Tundra",  "Umbra",   "Velvet",  "Wren",     "Yucca"};
constexpr size_t kNameCount = sizeof(kNames) / sizeof(kNames[0]);

const char* number_word(size_t n) {
  static const char* w[] = {"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"};
  return n <= 10 ? w[n] : nullptr;
}

// Pieces of the varied filler: every sentence is routine and names no vault or code.
constexpr const char* kPlaces[] = {"north campus", "south annex", "main library", "east wing", "west garage",
                                   "science building", "visitor centre", "old warehouse", "print shop",
                                   "staff canteen"};
constexpr const char* kChecks[] = {
    "The morning walk-through found the lobby clean and the doors unlocked on time.",
    "Both elevators ran on their normal schedule all day.",
    "Heating held steady at the usual setting through the afternoon.",
    "The loading dock received a delivery of office paper that was shelved before noon.",
    "A light in the stairwell was replaced after a routine check.",
    "The parking lot was swept as planned and the gates were oiled.",
    "The recycling bins were emptied and the carts were returned to the shed.",
    "The visitor log showed the usual number of guests and nothing out of the ordinary.",
    "Window cleaners finished the ground floor and will return next week for the rest.",
    "The fire doors were tested and closed properly on every floor.",
    "A leaking tap in the second-floor kitchen was tightened by the on-site technician.",
    "Grounds staff trimmed the hedges along the main path and raked the leaves.",
    "The backup generator ran its weekly test for ten minutes without issue.",
    "Air filters in the meeting rooms were changed on the regular rotation.",
    "Mail was sorted and delivered to each department before lunch.",
    "The coffee machine on the third floor was descaled and restocked.",
};
constexpr const char* kClosings[] = {"No items require escalation at this time.",
                                     "Nothing needs follow-up beyond the usual schedule.",
                                     "All systems are operating normally.",
                                     "No further action is needed today."};

template <size_t N>
const char* pick(const char* const (&arr)[N], SplitMix64& r) { return arr[r.below(N)]; }

}  // namespace

std::vector<Fact> default_facts() {
  return {{"Aurora", "QX-4471"}, {"Basalt", "ZR-9028"}, {"Cinder", "MP-1357"}, {"Dovewing", "KT-6604"},
          {"Ember", "VN-8813"}};
}

std::vector<Fact> random_facts(int n, uint64_t seed) {
  if (n < 1 || size_t(n) > kNameCount) fail("facts: count {} out of range (1..{})", n, kNameCount);
  std::vector<size_t> idx(kNameCount);
  for (size_t i = 0; i < kNameCount; ++i) idx[i] = i;
  seeded_shuffle(idx, mix_seed(seed, 0xFAC7));
  SplitMix64 r(mix_seed(seed, 0xC0DE));
  std::set<std::string> codes;
  std::vector<Fact> facts;
  while (facts.size() < size_t(n)) {
    std::string code;
    code += char('A' + r.below(26));
    code += char('A' + r.below(26));
    code += fmt::format("-{:04d}", int(r.below(10000)));
    if (!codes.insert(code).second) continue;
    facts.push_back({kNames[idx[facts.size()]], code});
  }
  return facts;
}

std::string fact_sentence(const Fact& f) {
  return fmt::format("IMPORTANT: The access code for the {} vault is {}. ", f.name, f.code);
}

std::string recall_question(const std::vector<Fact>& facts) {
  if (facts.empty()) fail("recall question: no facts");
  if (facts.size() == 1)
    return fmt::format("What is the access code for the {} vault mentioned above? Answer with just the code.",
                       facts[0].name);
  std::string names;
  for (size_t i = 0; i < facts.size(); ++i) names += (i ? ", " : "") + facts[i].name;
  const char* w = number_word(facts.size());
  const std::string count = w ? std::string(w) : std::to_string(facts.size());
  return fmt::format("List the access codes for all {} vaults mentioned above, in order ({}). Answer with just "
                     "the {} codes.", count, names, count);
}

std::string binding_question(const Fact& f) {
  return fmt::format("What is the access code for the {} vault?", f.name);
}

Placement Placement::parse(std::string_view s) {
  Placement p;
  if (s == "early") p.kind = Kind::early;
  else if (s == "spread") p.kind = Kind::spread;
  else if (s == "late") p.kind = Kind::late;
  else if (s.substr(0, 6) == "depth=") {
    std::string v(s.substr(6));
    if (!v.empty() && v.back() == '%') v.pop_back();
    char* end = nullptr;
    const double d = v.empty() ? NAN : std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !(d >= 0 && d <= 100))
      fail("placement '{}': depth must be a percentage from 0 to 100 (e.g. depth=50)", s);
    p.kind = Kind::depth;
    p.depth_percent = d;
  } else {
    fail("placement '{}' is not one of early, spread, late, depth=P", s);
  }
  return p;
}

std::string Placement::str() const {
  switch (kind) {
    case Kind::early: return "early";
    case Kind::spread: return "spread";
    case Kind::late: return "late";
    case Kind::depth: return fmt::format("depth={:g}", depth_percent);
  }
  return "?";
}

size_t min_blocks(const Placement& p, size_t n_facts) {
  switch (p.kind) {
    case Placement::Kind::early:
    case Placement::Kind::late: return kFactStride * n_facts;
    default: return 1;
  }
}

std::vector<size_t> fact_positions(const Placement& p, size_t n, size_t blocks) {
  if (blocks < min_blocks(p, n))
    fail("placement {}: {} facts need at least {} filler blocks, got {}", p.str(), n, min_blocks(p, n), blocks);
  std::vector<size_t> pos(n);
  for (size_t i = 0; i < n; ++i) {
    switch (p.kind) {
      case Placement::Kind::early: pos[i] = kFactStride * (i + 1); break;
      case Placement::Kind::late: pos[i] = blocks - kFactStride * (n - i - 1) - kFactStride; break;
      case Placement::Kind::spread: pos[i] = size_t(std::llround(double(blocks) * double(i + 1) / double(n + 1))); break;
      case Placement::Kind::depth: pos[i] = size_t(std::llround(double(blocks) * p.depth_percent / 100.0)); break;
    }
  }
  return pos;
}

FillerKind parse_filler(std::string_view s) {
  if (s == "repeat") return FillerKind::repeat;
  if (s == "varied") return FillerKind::varied;
  fail("filler '{}' is not one of repeat, varied", s);
}

const char* filler_name(FillerKind k) { return k == FillerKind::repeat ? "repeat" : "varied"; }

std::string filler_block(FillerKind k, uint64_t seed, size_t index) {
  if (k == FillerKind::repeat) return kFillerParagraph;
  // Each block depends only on (seed, index), so earlier blocks never change as the transcript grows.
  SplitMix64 r(mix_seed(seed, 0xB10C0000ull + index));
  std::string s = fmt::format("Facilities report for the {}, day {}. ", pick(kPlaces, r), index + 1);
  size_t words = 0;
  std::vector<size_t> order(sizeof(kChecks) / sizeof(kChecks[0]));
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  seeded_shuffle(order, r.next());
  for (size_t j = 0; j < order.size() && words < 62; ++j) {
    const std::string_view c = kChecks[order[j]];
    words += size_t(std::count(c.begin(), c.end(), ' ')) + 1;
    s += c;
    s += ' ';
  }
  s += pick(kClosings, r);
  s += ' ';
  return s;
}

std::string Transcript::recall_message() const { return context + "\n\n" + recall_question(facts); }

std::string Transcript::binding_message(size_t fact) const {
  if (fact >= facts.size()) fail("binding question {} out of range ({} facts)", fact, facts.size());
  return context + "\n\n" + binding_question(facts[fact]);
}

Transcript assemble_transcript(const TranscriptSpec& spec, size_t blocks) {
  if (spec.facts.empty()) fail("transcript: no facts to plant");
  Transcript t;
  t.facts = spec.facts;
  t.blocks = blocks;
  t.fact_after_block = fact_positions(spec.placement, spec.facts.size(), blocks);
  size_t next_fact = 0;
  for (size_t b = 0; b <= blocks; ++b) {
    while (next_fact < t.facts.size() && t.fact_after_block[next_fact] == b) t.context += fact_sentence(t.facts[next_fact++]);
    if (b < blocks) t.context += filler_block(spec.filler, spec.seed, b);
  }
  while (!t.context.empty() && t.context.back() == ' ') t.context.pop_back();
  return t;
}

Transcript build_transcript(const TranscriptSpec& spec, size_t target, const CountTokens& count) {
  if (!count) fail("transcript: no token counter");
  if (target == 0 || target > (size_t(1) << 26)) fail("transcript: target of {} tokens out of range (1..67M)", target);
  int calls = 0;
  auto measure = [&](size_t blocks) {
    Transcript t = assemble_transcript(spec, blocks);
    t.prompt_tokens = count(t.recall_message());
    ++calls;
    return t;
  };
  const size_t bmin = min_blocks(spec.placement, spec.facts.size());
  Transcript lo = measure(bmin);
  auto finish = [&](Transcript t) {
    t.target_tokens = target;
    t.count_calls = calls;
    return t;
  };
  if (lo.prompt_tokens >= target) return finish(std::move(lo));
  // Cost of one block, then extrapolate. Invariant: lo is below the target, hi (once known) reaches it.
  Transcript probe = measure(bmin + 1);
  if (probe.prompt_tokens >= target) return finish(std::move(probe));
  if (probe.prompt_tokens <= lo.prompt_tokens) fail("transcript: a filler block adds no tokens under this tokenizer");
  double per_block = double(probe.prompt_tokens - lo.prompt_tokens);
  lo = std::move(probe);
  std::optional<Transcript> hi;
  const size_t max_blocks = bmin + target + 1;  // every block holds at least one token
  for (int iter = 0; iter < 200; ++iter) {
    if (hi && hi->blocks == lo.blocks + 1) return finish(std::move(*hi));
    size_t guess;
    if (iter < 8) {
      guess = lo.blocks + size_t(std::ceil(double(target - lo.prompt_tokens) / per_block));
    } else {
      guess = hi ? lo.blocks + (hi->blocks - lo.blocks) / 2 : lo.blocks * 2;  // fall back to bisection
    }
    guess = std::max(guess, lo.blocks + 1);
    if (hi) guess = std::min(guess, hi->blocks - 1);
    if (guess > max_blocks) fail("transcript: cannot reach {} tokens (filler blocks add too few tokens)", target);
    Transcript t = measure(guess);
    if (t.prompt_tokens >= target) {
      // Aim the next guess just below the target, so the last-but-one count usually brackets it.
      if (t.blocks > lo.blocks) per_block = std::max(1e-9, double(t.prompt_tokens - lo.prompt_tokens) / double(t.blocks - lo.blocks));
      hi = std::move(t);
      if (hi->blocks > lo.blocks + 1) {
        const size_t over = hi->prompt_tokens - target;
        const size_t back = size_t(double(over) / per_block);
        if (back == 0) {  // within one block of the target: only the block before decides
          Transcript prev = measure(hi->blocks - 1);
          if (prev.prompt_tokens >= target) hi = std::move(prev);
          else return finish(std::move(*hi));
        }
      }
    } else {
      if (t.blocks > lo.blocks) per_block = std::max(1e-9, double(t.prompt_tokens - lo.prompt_tokens) / double(t.blocks - lo.blocks));
      lo = std::move(t);
    }
  }
  fail("transcript: token counts do not settle on {} tokens (is the counter monotonic?)", target);
}

RecallScore score_recall(std::string_view answer, const std::vector<Fact>& facts) {
  RecallScore s;
  s.total = int(facts.size());
  for (const auto& f : facts) {
    const bool hit = answer.find(f.code) != std::string_view::npos;
    s.which.push_back(hit);
    s.found += hit;
  }
  return s;
}

bool score_binding(std::string_view answer, const std::vector<Fact>& facts, size_t asked) {
  if (asked >= facts.size()) fail("binding score: fact {} out of range ({} facts)", asked, facts.size());
  for (size_t i = 0; i < facts.size(); ++i) {
    const bool present = answer.find(facts[i].code) != std::string_view::npos;
    if (present != (i == asked)) return false;
  }
  return true;
}

}  // namespace kvtax::harness
