// Chat formats: exact renderings of the reference conversation (expected strings match the
// outputs of the models' own Jinja templates) and detection from template markers.
#include <gtest/gtest.h>

#include <filesystem>

#include "gguf/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

using namespace kvtax;
using namespace kvtax::tok;

namespace {

const std::vector<ChatMessage> kChat = {
    {"system", "You are a helpful assistant"}, {"user", "Hello"},
    {"assistant", "Hi there"},                 {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},  {"user", "Another question"},
};

std::string render(ChatStyle s, bool gen = true) {
  ChatTemplate t;
  t.style = s;
  return apply_chat_template(t, kChat, gen);
}

}  // namespace

TEST(ChatTemplate, ChatML) {
  EXPECT_EQ(render(ChatStyle::chatml),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
            "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render(ChatStyle::chatml, false).find("<|im_start|>assistant\n", 200), std::string::npos);
}

TEST(ChatTemplate, Qwen3ThinkingDisabledPrefillsEmptyThinkBlock) {
  ChatTemplate t;
  t.style = ChatStyle::qwen3;
  const std::vector<ChatMessage> chat = {{"user", "Hi"}, {"assistant", "<think>\nhmm\n</think>\n\nHello!"}, {"user", "2+2?"}};
  EXPECT_EQ(apply_chat_template(t, chat, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  t.enable_thinking = true;
  EXPECT_TRUE(apply_chat_template(t, chat, true).ends_with("<|im_start|>assistant\n"));
}

TEST(ChatTemplate, Llama3TrimsContent) {
  EXPECT_EQ(render(ChatStyle::llama3),
            "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, MistralVariants) {
  EXPECT_EQ(render(ChatStyle::mistral_v1),
            " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an "
            "assistant   </s> [INST] Another question [/INST]");
  EXPECT_EQ(render(ChatStyle::mistral_v3),
            "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am an "
            "assistant</s>[INST] Another question[/INST]");
  EXPECT_EQ(render(ChatStyle::mistral_v3_tekken),
            "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   "
            "</s>[INST]Another question[/INST]");
  EXPECT_EQ(render(ChatStyle::mistral_v7),
            "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who are "
            "you[/INST]    I am an assistant   </s>[INST] Another question[/INST]");
  EXPECT_EQ(render(ChatStyle::llama2),
            "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you "
            "[/INST]   I am an assistant   </s>[INST] Another question [/INST]");
}

TEST(ChatTemplate, Phi3) {
  EXPECT_EQ(render(ChatStyle::phi3),
            "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n"
            "<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother "
            "question<|end|>\n<|assistant|>\n");
}

TEST(ChatTemplate, DetectsByMarkers) {
  EXPECT_EQ(detect_chat_template("{{'<|im_start|>' + m['role']}}", "").style, ChatStyle::chatml);
  EXPECT_EQ(detect_chat_template("{{'<|im_start|>'}}{% if enable_thinking %}<think>{% endif %}", "").style, ChatStyle::qwen3);
  EXPECT_EQ(detect_chat_template("{{'<|start_header_id|>' + role + '<|end_header_id|>'}}", "").style, ChatStyle::llama3);
  EXPECT_EQ(detect_chat_template("[SYSTEM_PROMPT]{{x}}[INST]", "").style, ChatStyle::mistral_v7);
  EXPECT_EQ(detect_chat_template("{{ ' [INST] ' + system_message }}", "").style, ChatStyle::mistral_v1);
  EXPECT_EQ(detect_chat_template("[AVAILABLE_TOOLS]{{ \"[INST]\" + c }}", "").style, ChatStyle::mistral_v3_tekken);
  EXPECT_EQ(detect_chat_template("[AVAILABLE_TOOLS]{{ \"[INST] \" + c }}", "").style, ChatStyle::mistral_v3);
  const auto l2 = detect_chat_template("{{ '[INST] ' + c + ' [/INST]' }}", "");
  EXPECT_EQ(l2.style, ChatStyle::llama2);
  EXPECT_FALSE(l2.llama2_system_tags);
  EXPECT_EQ(detect_chat_template("<|user|>{{c}}<|end|><|assistant|>", "").style, ChatStyle::phi3);
  EXPECT_EQ(detect_chat_template("", "qwen3").style, ChatStyle::qwen3);
  EXPECT_EQ(detect_chat_template("{{'<|im_start|>' + m['role']}}", "qwen3").style, ChatStyle::qwen3);
  EXPECT_EQ(detect_chat_template("{{ something unknown }}", "llama").style, ChatStyle::chatml);
}

TEST(ChatTemplate, FromFixtureFiles) {
  const std::filesystem::path dir = std::filesystem::path(KVTAX_SHARED_DIR) / "fixtures" / "vocab";
  if (!std::filesystem::exists(dir / "ggml-vocab-qwen2.gguf")) GTEST_SKIP() << "../shared absent: " << dir;
  // Qwen2's template inserts a default system prompt when the chat has none.
  const auto qwen = gguf::File::open((dir / "ggml-vocab-qwen2.gguf").string());
  const ChatTemplate q = detect_chat_template(*qwen);
  EXPECT_EQ(q.style, ChatStyle::chatml);
  EXPECT_EQ(apply_chat_template(q, {{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(q.eos_text, "<|endoftext|>");
  const auto phi = gguf::File::open((dir / "ggml-vocab-phi-3.gguf").string());
  const ChatTemplate p = detect_chat_template(*phi);
  EXPECT_EQ(p.style, ChatStyle::phi3);
  // The rendered markers become single control tokens when parsed as special.
  const auto tok = Tokenizer::from_gguf(*qwen);
  const auto ids = tok->encode(apply_chat_template(q, {{"user", "Hi"}}, true), true, true);
  EXPECT_EQ(ids.front(), tok->find_token("<|im_start|>"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok->find_token("<|im_end|>")), 2);
}
