// Perplexity of a text under a model, as llama.cpp's `perplexity` tool computes it, so figures
// compare across the two: the tokens are cut into chunks of n_ctx; each chunk is evaluated alone
// (its first token replaced by BOS when the model takes one), and only its second half is scored,
// each token predicted from at least n_ctx / 2 tokens of context. PPL = exp(mean negative
// log-likelihood over the scored tokens), with llama.cpp's standard error.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "cpudl/llm.h"

namespace cpudl::llm {

struct Perplexity {
  double ppl = 0, ppl_error = 0;  // exp(mean NLL), and its standard error
  double mean_nll = 0;
  std::int64_t scored = 0;      // tokens scored
  std::vector<double> running;  // the estimate after each chunk
};

// `bos`: replace each chunk's first token with the model's BOS (text tokenized with it). Throws
// UsageError when the tokens do not fill one chunk. `on_chunk` sees the running estimate.
Perplexity perplexity(
    const Model& model, Context& ctx, std::span<const std::int32_t> tokens, int n_ctx, bool bos,
    const std::function<void(std::size_t chunk, std::size_t chunks, double ppl)>& on_chunk = {});

}  // namespace cpudl::llm
