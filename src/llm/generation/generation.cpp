// The shared generation loop (generation.h).
#include "llm/generation/generation.h"

#include <chrono>

namespace cpudl::llm {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

std::string StopFilter::feed(const std::string& piece) {
  pending_ += piece;
  for (const auto& s : stops_) {
    const std::size_t at = pending_.find(s);
    if (at != std::string::npos) {
      stopped_ = true;
      std::string out = pending_.substr(0, at);
      pending_.clear();
      return out;
    }
  }
  std::size_t keep = 0;  // longest suffix of pending_ that begins some stop string
  for (const auto& s : stops_)
    for (std::size_t n = std::min(s.size() - 1, pending_.size()); n > keep; --n)
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop:
      return "stop";
    case FinishReason::cancelled:
      return "cancelled";
    case FinishReason::length:
      break;
  }
  return "length";
}

const char* stop_reason_name(const Generation& g) {
  switch (g.finish) {
    case FinishReason::stop:
      return g.end_token ? "eos" : "stop";
    case FinishReason::cancelled:
      return "cancelled";
    case FinishReason::length:
      break;
  }
  return g.context_full ? "context" : "length";
}

Generation generate(const Model& model, Context& ctx, std::span<const std::int32_t> prompt,
                    const GenerationOptions& options, const TextSink& on_text,
                    const std::function<void(const Context&)>& after_prompt) {
  Generation g;
  auto eval = [&](std::span<const std::int32_t> tokens, bool all_logits) {
    if (options.evaluate)
      options.evaluate(ctx, tokens, all_logits);
    else
      ctx.eval(tokens, all_logits);
  };
  auto t0 = std::chrono::steady_clock::now();
  eval(prompt, options.all_prompt_logits);
  g.prompt_seconds = seconds_since(t0);
  if (after_prompt) after_prompt(ctx);
  Sampler sampler(options.sampling);
  std::vector<std::int32_t> history(prompt.begin(), prompt.end());  // for the repetition penalty
  StopFilter filter(options.stops);
  bool cancelled = false;
  auto emit = [&](const std::string& s) {
    g.text += s;
    if (on_text && !s.empty() && !on_text(s)) cancelled = true;
  };
  t0 = std::chrono::steady_clock::now();
  const float* logits = ctx.logits(options.all_prompt_logits ? prompt.size() - 1 : 0);
  g.finish = FinishReason::length;
  for (int i = 0; i < options.max_tokens; ++i) {
    const std::int32_t next = sampler.sample(logits, ctx.vocab_size(), history);
    if (model.is_end_of_generation(next)) {
      g.finish = FinishReason::stop;
      g.end_token = true;
      break;
    }
    g.tokens.push_back(next);
    history.push_back(next);
    emit(filter.feed(model.token_text(next)));
    if (filter.stopped()) {
      g.finish = FinishReason::stop;
      break;
    }
    if (cancelled) break;
    if (i + 1 == options.max_tokens) break;
    if (ctx.n_past() >= ctx.n_ctx()) {
      g.context_full = true;
      break;
    }
    eval(std::span(&next, 1), false);
    logits = ctx.logits();
  }
  if (!cancelled) emit(filter.flush());
  if (cancelled) g.finish = FinishReason::cancelled;
  g.generation_seconds = seconds_since(t0);
  return g;
}

}  // namespace cpudl::llm
