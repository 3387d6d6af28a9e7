// Chunked perplexity (perplexity.h), the NLL summed in double from a log-sum-exp per position.
#include "llm/generation/perplexity.h"

#include <algorithm>
#include <cmath>

#include "cpudl/error.h"

namespace cpudl::llm {

Perplexity perplexity(const Model& model, Context& ctx, std::span<const std::int32_t> tokens, int n_ctx,
                      bool bos, const std::function<void(std::size_t, std::size_t, double)>& on_chunk) {
  if (n_ctx < 4)
    throw UsageError("perplexity: a context of " + std::to_string(n_ctx) + " tokens is too short");
  const std::size_t chunks = tokens.size() / static_cast<std::size_t>(n_ctx);
  if (chunks == 0)
    throw UsageError("perplexity: " + std::to_string(tokens.size()) +
                     " tokens do not fill one chunk of the context (" + std::to_string(n_ctx) +
                     " tokens; -c to shorten it)");
  const int first = n_ctx / 2, vocab = ctx.vocab_size();
  Perplexity p;
  double nll = 0, nll2 = 0;
  std::vector<std::int32_t> chunk(static_cast<std::size_t>(n_ctx));
  for (std::size_t c = 0; c < chunks; ++c) {
    std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(c * n_ctx), n_ctx, chunk.begin());
    if (bos && model.bos() >= 0) chunk[0] = model.bos();
    ctx.reset();
    ctx.eval(chunk, /*all_logits=*/true);
    for (int i = first; i < n_ctx - 1; ++i) {  // logits at i predict token i + 1
      const float* row = ctx.logits(static_cast<std::size_t>(i));
      const float top = *std::max_element(row, row + vocab);
      double sum = 0;
      for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - top);
      const double loss = std::log(sum) + top - row[chunk[static_cast<std::size_t>(i) + 1]];
      nll += loss;
      nll2 += loss * loss;
      ++p.scored;
    }
    p.running.push_back(std::exp(nll / static_cast<double>(p.scored)));
    if (on_chunk) on_chunk(c, chunks, p.running.back());
  }
  const auto n = static_cast<double>(p.scored);
  p.mean_nll = nll / n;
  p.ppl = std::exp(p.mean_nll);
  // llama.cpp's: the standard error of the mean NLL, carried to the PPL by its derivative.
  const double variance = n > 1 ? std::max(0.0, (nll2 / n - p.mean_nll * p.mean_nll) / (n - 1)) : 0.0;
  p.ppl_error = p.ppl * std::sqrt(variance);
  return p;
}

}  // namespace cpudl::llm
