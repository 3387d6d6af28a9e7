#include "llm/chat/chat_template.h"

#include "cpudl/error.h"

namespace cpudl::llm {

ChatFormat detect_chat_format(std::string_view t, bool sentencepiece) {
  if (t.find("<|im_start|>") != std::string_view::npos) return ChatFormat::chatml;
  if (t.find("<|start_header_id|>") != std::string_view::npos) return ChatFormat::llama3;
  if (t.find("<|user|>") != std::string_view::npos && t.find("<|end|>") != std::string_view::npos)
    return ChatFormat::phi3;
  if (t.find("[INST]") != std::string_view::npos) return ChatFormat::llama2;
  return sentencepiece ? ChatFormat::llama2 : ChatFormat::chatml;
}

ChatFormat parse_chat_format(std::string_view name) {
  if (name == "chatml") return ChatFormat::chatml;
  if (name == "llama2") return ChatFormat::llama2;
  if (name == "llama3") return ChatFormat::llama3;
  if (name == "phi3") return ChatFormat::phi3;
  throw UsageError("--template '" + std::string(name) + "': expected chatml, llama2, llama3 or phi3");
}

const char* chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::chatml:
      return "chatml";
    case ChatFormat::llama2:
      return "llama2";
    case ChatFormat::llama3:
      return "llama3";
    case ChatFormat::phi3:
      return "phi3";
  }
  return "?";
}

std::string format_user_turn(ChatFormat format, std::string_view system, std::string_view message,
                             bool first_turn) {
  const std::string sys(system), msg(message);
  switch (format) {
    case ChatFormat::chatml: {
      std::string s;
      if (first_turn && !sys.empty()) s += "<|im_start|>system\n" + sys + "<|im_end|>\n";
      return s + "<|im_start|>user\n" + msg + "<|im_end|>\n<|im_start|>assistant\n";
    }
    case ChatFormat::llama2: {
      // BOS comes from the tokenizer on the first turn; later turns open a new sequence.
      std::string s = first_turn ? "[INST] " : "<s>[INST] ";
      if (first_turn && !sys.empty()) s += "<<SYS>>\n" + sys + "\n<</SYS>>\n\n";
      return s + msg + " [/INST]";
    }
    case ChatFormat::llama3: {
      std::string s;
      if (first_turn && !sys.empty())
        s += "<|start_header_id|>system<|end_header_id|>\n\n" + sys + "<|eot_id|>";
      return s + "<|start_header_id|>user<|end_header_id|>\n\n" + msg +
             "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    }
    case ChatFormat::phi3: {
      std::string s;
      if (first_turn && !sys.empty()) s += "<|system|>\n" + sys + "<|end|>\n";
      return s + "<|user|>\n" + msg + "<|end|>\n<|assistant|>\n";
    }
  }
  return msg;
}

std::string format_assistant_end(ChatFormat format) {
  switch (format) {
    case ChatFormat::chatml:
      return "<|im_end|>\n";
    case ChatFormat::llama2:
      return "</s>";
    case ChatFormat::llama3:
      return "<|eot_id|>";
    case ChatFormat::phi3:
      return "<|end|>\n";
  }
  return "";
}

std::string format_conversation(ChatFormat format, const std::vector<ChatMessage>& messages) {
  std::string system;
  for (const ChatMessage& m : messages)
    if (m.role == "system") system += (system.empty() ? "" : "\n") + m.content;
  std::string text;
  bool first = true;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") continue;
    if (m.role == "user") {
      text += format_user_turn(format, first ? system : "", m.content, first);
      first = false;
    } else if (m.role == "assistant") {
      if (first)
        throw Error("messages[" + std::to_string(i) + "]: an assistant reply before any user message");
      text += m.content + format_assistant_end(format);
    } else {
      throw Error("messages[" + std::to_string(i) + "].role: '" + m.role +
                  "', expected system, user or assistant");
    }
  }
  if (messages.empty() || messages.back().role != "user")
    throw Error("messages: the conversation must end with a user message");
  return text;
}

}  // namespace cpudl::llm
