// Token sampling: repetition penalty, then greedy or temperature sampling restricted by top-k,
// top-p (nucleus) and min-p, in llama.cpp's order (k, p, min-p, then temperature), seeded.
#include <algorithm>
#include <cmath>

#include "cpudl/llm.h"

namespace cpudl::llm {

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {}

std::int32_t Sampler::sample(const float* logits, int vocab, std::span<const std::int32_t> recent) {
  candidates_.resize(static_cast<std::size_t>(vocab));
  for (int i = 0; i < vocab; ++i) candidates_[static_cast<std::size_t>(i)] = {logits[i], i};
  for (const auto& [token, bias] : options_.logit_bias)
    if (token >= 0 && token < vocab) candidates_[static_cast<std::size_t>(token)].first += bias;
  if (options_.repeat_penalty != 1.0f && options_.repeat_last_n != 0) {
    const std::size_t n = options_.repeat_last_n < 0
                              ? recent.size()
                              : std::min(recent.size(), static_cast<std::size_t>(options_.repeat_last_n));
    // Each distinct recent token once: candidates_ is still indexed by token id here.
    for (std::size_t i = recent.size() - n; i < recent.size(); ++i) {
      const std::int32_t t = recent[i];
      if (t < 0 || t >= vocab ||
          std::find(recent.begin() + static_cast<std::ptrdiff_t>(recent.size() - n),
                    recent.begin() + static_cast<std::ptrdiff_t>(i),
                    t) != recent.begin() + static_cast<std::ptrdiff_t>(i))
        continue;
      float& l = candidates_[static_cast<std::size_t>(t)].first;
      l = l > 0 ? l / options_.repeat_penalty : l * options_.repeat_penalty;
    }
  }
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (options_.temperature <= 0.0f)
    return std::min_element(candidates_.begin(), candidates_.end(), by_logit)->second;

  std::size_t keep = candidates_.size();
  if (options_.top_k > 0) keep = std::min(keep, static_cast<std::size_t>(options_.top_k));
  std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(keep),
                    candidates_.end(), by_logit);
  candidates_.resize(keep);
  // Probabilities at temperature 1 for the top-p and min-p cuts.
  const float top = candidates_[0].first;
  std::vector<double>& p = probabilities_;
  p.resize(keep);
  double sum = 0;
  for (std::size_t i = 0; i < keep; ++i)
    sum += p[i] = std::exp(static_cast<double>(candidates_[i].first - top));
  if (options_.top_p < 1.0f) {
    double cumulative = 0;
    for (std::size_t i = 0; i < keep; ++i) {
      cumulative += p[i] / sum;
      if (cumulative >= options_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (options_.min_p > 0.0f) {
    std::size_t i = 1;
    while (i < keep && p[i] >= options_.min_p * p[0]) ++i;
    keep = i;
  }
  candidates_.resize(keep);
  p.resize(keep);
  for (std::size_t i = 0; i < keep; ++i)
    p[i] = std::exp(static_cast<double>(candidates_[i].first - top) / options_.temperature);
  std::discrete_distribution<std::size_t> pick(p.begin(), p.end());
  return candidates_[pick(rng_)].second;
}

}  // namespace cpudl::llm
