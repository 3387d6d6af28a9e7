// One generation from a prompt, the loop `cpudl generate` and `cpudl serve` share: evaluate the
// prompt, then sample, stream and stop on an end-of-generation token, a stop string, the token
// budget, a full context, or the caller's word (a client that went away).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cpudl/llm.h"

namespace cpudl::llm {

// Holds back text that could be the start of a stop string, so streamed output never shows a
// stop string (or its beginning) that then ends generation.
class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Adds generated text; returns what may be shown now. Sets stopped() when a stop string appears.
  std::string feed(const std::string& piece);
  std::string flush() { return std::exchange(pending_, {}); }
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

// How a generation's tokens (its prompt, then each sampled token) are evaluated: by default
// ctx.eval; a server passes its batcher, which runs them in one forward pass with other
// sequences' tokens (Context::eval_batch).
using Evaluate = std::function<void(Context& ctx, std::span<const std::int32_t> tokens, bool all_logits)>;

struct GenerationOptions {
  int max_tokens = 128;
  SamplerOptions sampling;
  std::vector<std::string> stops;
  bool all_prompt_logits = false;  // keep every prompt position's logits (for after_prompt)
  Evaluate evaluate;               // empty: ctx.eval
};

// OpenAI's finish_reason: "stop" (an end-of-generation token or a stop string), "length" (the
// token budget or the context), "cancelled" (the caller asked).
enum class FinishReason { stop, length, cancelled };
const char* finish_reason_name(FinishReason reason);

struct Generation {
  std::vector<std::int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::length;
  bool end_token = false;     // stop: an end-of-generation token (else a stop string)
  bool context_full = false;  // length: the context filled before the budget ran out
  double prompt_seconds = 0, generation_seconds = 0;
};

// Why the generation ended, finer than FinishReason (llama.cpp's stop types): "eos" (an
// end-of-generation token), "stop" (a stop string), "length" (the token budget), "context" (the
// context filled), "cancelled".
const char* stop_reason_name(const Generation& g);

// Text as it becomes final (stop strings held back); returning false cancels the generation.
using TextSink = std::function<bool(std::string_view piece)>;

// Appends `prompt` to what `ctx` holds and generates. The caller checks that the prompt fits
// the context. after_prompt, when given, sees the context right after the prompt's evaluation
// (its logits, every position's with all_prompt_logits).
Generation generate(const Model& model, Context& ctx, std::span<const std::int32_t> prompt,
                    const GenerationOptions& options, const TextSink& on_text = {},
                    const std::function<void(const Context&)>& after_prompt = {});

}  // namespace cpudl::llm
