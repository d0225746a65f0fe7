#pragma once
// Chat prompt formats, chosen by recognising markers in the GGUF's Jinja template
// (tokenizer.chat_template) rather than by running Jinja. The rendered text never contains BOS:
// encode it with add_special = true (BOS added once, when the vocabulary asks for it) and
// parse_special = true (so the markers become their control tokens).
#include <string>
#include <string_view>
#include <vector>

namespace kvtax::gguf { class File; }

namespace kvtax::tok {

enum class ChatStyle {
  chatml,             // <|im_start|>role\n...<|im_end|>\n  (Qwen2/Qwen2.5, many others)
  qwen3,              // ChatML; thinking disabled = assistant turn prefilled with an empty <think> block
  llama3,             // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  mistral_v1,         // " [INST] ... [/INST]"
  mistral_v3,         // "[INST] ... [/INST]", assistant text trimmed
  mistral_v3_tekken,  // "[INST]...[/INST]"
  mistral_v7,         // [SYSTEM_PROMPT] ... [/SYSTEM_PROMPT][INST] ... [/INST]
  llama2,             // [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] (older Mistral/Llama 2 templates)
  phi3,               // <|role|>\n...<|end|>\n
};

struct ChatTemplate {
  ChatStyle style = ChatStyle::chatml;
  std::string eos_text = "</s>";  // closes assistant turns in the [INST] formats
  std::string default_system;     // ChatML: system prompt the template inserts when none is given
  bool enable_thinking = false;   // qwen3: leave the assistant turn open for reasoning
  bool llama2_system_tags = true; // llama2: wrap the system prompt in <<SYS>> tags
};

struct ChatMessage {
  std::string role;  // system | user | assistant (others are passed through by the role-named formats)
  std::string content;
};

std::string_view chat_style_name(ChatStyle s);

// Renders the conversation; add_generation_prompt opens the assistant turn.
std::string apply_chat_template(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, bool add_generation_prompt);

// From template text and general.architecture; unknown formats fall back to ChatML with a
// warning on stderr (once per process).
ChatTemplate detect_chat_template(std::string_view jinja, std::string_view arch);
// Reads tokenizer.chat_template, general.architecture and the EOS token text.
ChatTemplate detect_chat_template(const gguf::File& f);

}  // namespace kvtax::tok
