#pragma once
// Long transcripts with planted facts (the "vault codes" probe) and how answers are scored.
//
// A transcript is filler blocks with fact sentences placed between them, then a blank line and a question.
// Its length target is in tokens of the chat-templated prompt, counted by a caller-supplied function
// (tokenizer + chat template of the model under test), so each model gets the length it is asked for.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvtax::harness {

struct Fact {
  std::string name;  // "Aurora"
  std::string code;  // "QX-4471"
};

// The five facts of the original probe: Aurora QX-4471 ... Ember VN-8813.
std::vector<Fact> default_facts();
// n distinct names with distinct codes (two capitals, '-', four digits), deterministic in seed.
std::vector<Fact> random_facts(int n, uint64_t seed);
// "IMPORTANT: The access code for the {name} vault is {code}. "
std::string fact_sentence(const Fact& f);
// The all-facts question; for the default five it is the original wording, word for word.
std::string recall_question(const std::vector<Fact>& facts);
// "What is the access code for the {name} vault?"
std::string binding_question(const Fact& f);

struct Placement {
  enum class Kind { early, spread, late, depth };
  Kind kind = Kind::early;
  double depth_percent = 0;  // Kind::depth: 0 = start of the transcript, 100 = just before the question

  // "early" | "spread" | "late" | "depth=P" (P in percent, 0..100); throws kvtax::Error otherwise.
  static Placement parse(std::string_view s);
  std::string str() const;
};
// early: fact i follows filler block 3(i+1) (3, 6, 9, ...), as the original probe did.
// late: mirror image, fact i is followed by 3(n-i) blocks. spread: evenly over the depth.
// depth=P: all facts together, after round(P% of the blocks).
inline constexpr size_t kFactStride = 3;
size_t min_blocks(const Placement& p, size_t n_facts);
// For each fact (in order), how many filler blocks precede it. Requires blocks >= min_blocks.
std::vector<size_t> fact_positions(const Placement& p, size_t n_facts, size_t blocks);

enum class FillerKind {
  repeat,  // one bland ~81-word facilities-report paragraph, verbatim every time (the original)
  varied   // generated paragraphs of the same style, different each block, deterministic in the seed
};
FillerKind parse_filler(std::string_view s);
const char* filler_name(FillerKind k);
// Filler block `index` (0-based); each ends with a space so blocks and facts concatenate.
std::string filler_block(FillerKind k, uint64_t seed, size_t index);

struct TranscriptSpec {
  std::vector<Fact> facts = default_facts();
  Placement placement;
  FillerKind filler = FillerKind::repeat;
  uint64_t seed = 0;  // for varied filler
};

// Tokens of the chat-templated prompt holding this single user message (no system prompt).
using CountTokens = std::function<size_t(const std::string& user_message)>;

struct Transcript {
  std::vector<Fact> facts;
  std::string context;                    // filler + facts, no trailing whitespace
  size_t blocks = 0;                      // filler blocks used
  std::vector<size_t> fact_after_block;   // per fact: filler blocks before it
  size_t target_tokens = 0;
  size_t prompt_tokens = 0;               // counted tokens of recall_message()
  int count_calls = 0;                    // how often the counter ran to reach the target

  std::string recall_message() const;                 // context, blank line, recall question
  std::string binding_message(size_t fact) const;     // context, blank line, binding question
};

// Smallest number of filler blocks (at least min_blocks) whose templated recall prompt has at least
// target_tokens tokens. Counts a handful of candidate transcripts, not one per block: the token cost of
// a block is measured, the block count extrapolated, then corrected from the bracketing counts.
Transcript build_transcript(const TranscriptSpec& spec, size_t target_tokens, const CountTokens& count);

// Assemble the transcript for a given block count (no counting).
Transcript assemble_transcript(const TranscriptSpec& spec, size_t blocks);

struct RecallScore {
  int found = 0;
  int total = 0;
  std::vector<bool> which;  // per fact, in order
};
// Exact, case-sensitive substring match of each code in the answer.
RecallScore score_recall(std::string_view answer, const std::vector<Fact>& facts);
// Binding: the asked fact's code appears and no other planted code does, so an answer that lists every
// code it saw does not count as knowing which code belongs to the name.
bool score_binding(std::string_view answer, const std::vector<Fact>& facts, size_t asked);

}  // namespace kvtax::harness
