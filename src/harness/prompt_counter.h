#pragma once
// The token counter transcripts are sized with: one user message rendered with the model's chat template
// (no system prompt, generation prompt open, thinking off) and encoded the way the engine will encode it.
#include "harness/transcript.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvtax::harness {

// The returned function keeps references to tokenizer and chat template: they must outlive it.
CountTokens make_prompt_counter(const tok::Tokenizer& tokenizer, const tok::ChatTemplate& chat);

}  // namespace kvtax::harness
