// Chat prompt formats. GGUF files carry their chat template as Jinja (tokenizer.chat_template);
// cpudl does not run Jinja, it recognises the common families from the template's markers and
// formats turns itself: ChatML (Qwen, many fine-tunes), Llama 2, Llama 3, Phi-3.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cpudl::llm {

enum class ChatFormat { chatml, llama2, llama3, phi3 };

// From the template text; ChatML when it has no recognisable markers (and the tokenizer is
// byte-level BPE) or Llama 2 (SentencePiece), as llama.cpp falls back.
ChatFormat detect_chat_format(std::string_view jinja_template, bool sentencepiece);
ChatFormat parse_chat_format(std::string_view name);  // UsageError for unknown names
const char* chat_format_name(ChatFormat format);

// The text to append for a user message (the system prompt only on the first turn), ending
// where the assistant's reply begins. The caller tokenizes it with special tokens parsed.
std::string format_user_turn(ChatFormat format, std::string_view system, std::string_view message,
                             bool first_turn);
// What closes the assistant's reply in the history after generation stopped on end-of-turn.
std::string format_assistant_end(ChatFormat format);

// A whole conversation (OpenAI's messages: roles "system", "user", "assistant"), formatted up to
// where the assistant's next reply begins: system messages become the first turn's system prompt,
// earlier replies are closed as the template closes them. Error naming the message for an
// unknown role or a conversation that does not end with the user's message.
struct ChatMessage {
  std::string role, content;
};
std::string format_conversation(ChatFormat format, const std::vector<ChatMessage>& messages);

}  // namespace cpudl::llm
