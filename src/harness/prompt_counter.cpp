#include "harness/prompt_counter.h"

namespace kvtax::harness {

CountTokens make_prompt_counter(const tok::Tokenizer& tokenizer, const tok::ChatTemplate& chat) {
  return [&tokenizer, &chat](const std::string& user_message) {
    const std::string prompt = tok::apply_chat_template(chat, {{"user", user_message}}, true);
    return tokenizer.encode(prompt, /*add_special=*/true, /*parse_special=*/true).size();
  };
}

}  // namespace kvtax::harness
