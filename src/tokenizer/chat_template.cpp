#include "tokenizer/chat_template.h"

#include <cctype>
#include <cstdio>
#include <mutex>

#include "gguf/gguf.h"

namespace kvtax::tok {

namespace {

bool has(std::string_view hay, std::string_view needle) { return hay.find(needle) != std::string_view::npos; }

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// Qwen3 drops earlier reasoning from history: keep what follows the last </think>.
std::string strip_reasoning(std::string_view content) {
  const size_t p = content.rfind("</think>");
  if (p == std::string_view::npos) return std::string(content);
  std::string_view rest = content.substr(p + 8);
  while (!rest.empty() && rest.front() == '\n') rest.remove_prefix(1);
  return std::string(rest);
}

// A literal default system prompt in a ChatML template, e.g.
// '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' (newline written raw or as \n).
std::string find_default_system(std::string_view jinja) {
  for (std::string_view head : {std::string_view("<|im_start|>system\n"), std::string_view("<|im_start|>system\\n")}) {
    const size_t p = jinja.find(head);
    if (p == std::string_view::npos) continue;
    const size_t b = p + head.size();
    const size_t e = jinja.find("<|im_end|>", b);
    if (e == std::string_view::npos) continue;
    const std::string_view text = jinja.substr(b, e - b);
    if (text.empty() || text.find_first_of("{}'\"+\\") != std::string_view::npos) continue;  // not a literal
    return std::string(text);
  }
  return {};
}

void render_mistral(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, std::string& out) {
  const bool v1 = t.style == ChatStyle::mistral_v1;
  const char* lead = v1 ? " " : "";
  const char* pad = t.style == ChatStyle::mistral_v3_tekken ? "" : " ";
  bool in_turn = false;
  for (const auto& m : msgs) {
    if (!in_turn) {
      out.append(lead).append("[INST]").append(pad);
      in_turn = true;
    }
    if (m.role == "system") {
      out += m.content + "\n\n";
    } else if (m.role == "user") {
      out.append(m.content).append(lead).append("[/INST]");
    } else {
      out.append(pad).append(t.style == ChatStyle::mistral_v3 ? trim(m.content) : m.content).append(t.eos_text);
      in_turn = false;
    }
  }
}

void render_llama2(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, std::string& out) {
  bool in_turn = true;
  out += "[INST] ";
  for (const auto& m : msgs) {
    if (!in_turn) {
      out += "[INST] ";
      in_turn = true;
    }
    if (m.role == "system") {
      if (t.llama2_system_tags) out += "<<SYS>>\n" + m.content + "\n<</SYS>>\n\n";
      else out += m.content + "\n";
    } else if (m.role == "user") {
      out += m.content + " [/INST]";
    } else {
      out += m.content + t.eos_text;
      in_turn = false;
    }
  }
}

}  // namespace

std::string_view chat_style_name(ChatStyle s) {
  switch (s) {
    case ChatStyle::chatml: return "chatml";
    case ChatStyle::qwen3: return "qwen3";
    case ChatStyle::llama3: return "llama3";
    case ChatStyle::mistral_v1: return "mistral-v1";
    case ChatStyle::mistral_v3: return "mistral-v3";
    case ChatStyle::mistral_v3_tekken: return "mistral-v3-tekken";
    case ChatStyle::mistral_v7: return "mistral-v7";
    case ChatStyle::llama2: return "llama2";
    case ChatStyle::phi3: return "phi3";
  }
  return "?";
}

std::string apply_chat_template(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, bool add_generation_prompt) {
  std::string out;
  switch (t.style) {
    case ChatStyle::chatml:
    case ChatStyle::qwen3: {
      const bool qwen3 = t.style == ChatStyle::qwen3;
      if (!t.default_system.empty() && (msgs.empty() || msgs[0].role != "system"))
        out += "<|im_start|>system\n" + t.default_system + "<|im_end|>\n";
      for (const auto& m : msgs) {
        const std::string content = qwen3 && m.role == "assistant" ? strip_reasoning(m.content) : m.content;
        out += "<|im_start|>" + m.role + "\n" + content + "<|im_end|>\n";
      }
      if (add_generation_prompt) {
        out += "<|im_start|>assistant\n";
        if (qwen3 && !t.enable_thinking) out += "<think>\n\n</think>\n\n";
      }
      break;
    }
    case ChatStyle::llama3:
      for (const auto& m : msgs) out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatStyle::mistral_v1:
    case ChatStyle::mistral_v3:
    case ChatStyle::mistral_v3_tekken:
      render_mistral(t, msgs, out);
      break;
    case ChatStyle::mistral_v7:
      for (const auto& m : msgs) {
        if (m.role == "system") out += "[SYSTEM_PROMPT] " + m.content + "[/SYSTEM_PROMPT]";
        else if (m.role == "user") out += "[INST] " + m.content + "[/INST]";
        else out += " " + m.content + t.eos_text;
      }
      break;
    case ChatStyle::llama2:
      render_llama2(t, msgs, out);
      break;
    case ChatStyle::phi3:
      for (const auto& m : msgs) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
      if (add_generation_prompt) out += "<|assistant|>\n";
      break;
  }
  return out;
}

ChatTemplate detect_chat_template(std::string_view jinja, std::string_view arch) {
  ChatTemplate t;
  if (has(jinja, "<|im_start|>")) {
    // Qwen3 checkpoints always think unless told not to; their own templates carry <think>, but a
    // Qwen3 architecture with an older ChatML template still gets the Qwen3 turn format.
    const bool qwen3 = has(jinja, "<think>") || has(jinja, "enable_thinking") || arch == "qwen3" || arch == "qwen3moe";
    t.style = qwen3 ? ChatStyle::qwen3 : ChatStyle::chatml;
    t.default_system = find_default_system(jinja);
  } else if (has(jinja, "<|start_header_id|>") && has(jinja, "<|end_header_id|>")) {
    t.style = ChatStyle::llama3;
  } else if (has(jinja, "[INST]")) {
    if (has(jinja, "[SYSTEM_PROMPT]")) t.style = ChatStyle::mistral_v7;
    else if (has(jinja, "' [INST] ' + system_message") || has(jinja, "[AVAILABLE_TOOLS]"))
      t.style = has(jinja, " [INST]") ? ChatStyle::mistral_v1
                : has(jinja, "\"[INST]\"") ? ChatStyle::mistral_v3_tekken : ChatStyle::mistral_v3;
    else {
      t.style = ChatStyle::llama2;
      t.llama2_system_tags = has(jinja, "<<SYS>>");
    }
  } else if (has(jinja, "<|assistant|>") && has(jinja, "<|end|>")) {
    t.style = ChatStyle::phi3;
  } else if (jinja.empty() && (arch == "qwen3" || arch == "qwen3moe")) {
    t.style = ChatStyle::qwen3;
  } else if (jinja.empty() && (arch == "qwen2" || arch == "qwen2moe")) {
    t.style = ChatStyle::chatml;
  } else if (jinja.empty() && arch == "phi3") {
    t.style = ChatStyle::phi3;
  } else {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      std::fprintf(stderr, "kvtax: warning: unrecognised chat template (%s, architecture '%.*s'); using ChatML\n",
                   jinja.empty() ? "none in the file" : "not a known format", int(arch.size()), arch.data());
    });
    t.style = ChatStyle::chatml;
  }
  return t;
}

ChatTemplate detect_chat_template(const gguf::File& f) {
  const std::string jinja = f.get_string("tokenizer.chat_template").value_or("");
  const std::string arch = f.get_string("general.architecture").value_or("");
  ChatTemplate t = detect_chat_template(jinja, arch);
  if (auto eos = f.get_uint("tokenizer.ggml.eos_token_id")) {
    if (auto toks = f.find("tokenizer.ggml.tokens"); toks && *eos < toks->arr.size() &&
                                                     toks->arr[*eos].type == gguf::ValueType::STRING)
      t.eos_text = toks->arr[*eos].s;
  }
  return t;
}

}  // namespace kvtax::tok
