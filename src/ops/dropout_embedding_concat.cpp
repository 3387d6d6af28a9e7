// Dropout, embedding look-up and concatenation: the small ops that only move or mask values.
#include <cmath>
#include <cstring>

#include "ops/op_helpers.h"
#include "runtime/op_profile.h"

namespace cpudl {
using namespace ops_detail;

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  profiling::Scope profile("dropout");
  require_f32(x, "dropout", "input");
  if (p < 0.0f || p > 1.0f) throw Error("dropout: probability " + std::to_string(p) + " is not in [0, 1]");
  if (!training || p == 0.0f) return x;
  Tensor mask = Tensor::empty(x.shape());
  const float keep_scale = p >= 1.0f ? 0.0f : 1.0f / (1.0f - p);
  for (std::int64_t i = 0; i < mask.numel(); ++i) mask.data()[i] = gen.uniform() >= p ? keep_scale : 0.0f;
  return mul(x, mask);  // the mask's gradient is the mask: mul's backward does it
}

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  profiling::Scope profile("embedding");
  require_f32(weight, "embedding", "weight");
  if (weight.dim() != 2)
    throw Error("embedding: weight of shape " + shape_text(weight.shape()) + ", expected [num, dim]");
  const std::int64_t num = weight.size(0), dim = weight.size(1);
  const Tensor ic = contiguous_values(indices);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(ic.numel()));
  for (std::int64_t i = 0; i < ic.numel(); ++i) {
    const std::int64_t v = ic.dtype() == DType::i64   ? ic.data_as<std::int64_t>()[i]
                           : ic.dtype() == DType::i32 ? ic.data_as<std::int32_t>()[i]
                                                      : throw Error("embedding: indices must be i32 or i64");
    if (v < 0 || v >= num)
      throw Error("embedding: index " + std::to_string(v) + " at position " + std::to_string(i) +
                  " is out of range [0, " + std::to_string(num) + ")");
    idx[static_cast<std::size_t>(i)] = v;
  }
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  const Tensor wc = contiguous_values(weight);
  Tensor y = Tensor::empty(out_shape);
  for (std::size_t i = 0; i < idx.size(); ++i)
    std::memcpy(y.data() + static_cast<std::int64_t>(i) * dim, wc.data() + idx[i] * dim,
                static_cast<std::size_t>(dim) * sizeof(float));
  autograd::record(y, "embedding", {weight}, [idx, num, dim](const Tensor& g) {
    const Tensor gc = contiguous_values(g);
    Tensor dw = Tensor::zeros({num, dim});
    for (std::size_t i = 0; i < idx.size(); ++i)
      for (std::int64_t j = 0; j < dim; ++j)
        dw.data()[idx[i] * dim + j] += gc.data()[static_cast<std::int64_t>(i) * dim + j];
    return std::vector<Tensor>{dw};
  });
  return y;
}

Tensor concat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  profiling::Scope profile("concat");
  if (tensors.empty()) throw Error("concat: no tensors");
  const Shape& first = tensors[0].shape();
  const std::int64_t d = normalize_dim(dim, static_cast<std::int64_t>(first.size()));
  Shape out_shape = first;
  out_shape[static_cast<std::size_t>(d)] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    require_f32(tensors[i], "concat", "input");
    const Shape& s = tensors[i].shape();
    bool ok = s.size() == first.size();
    for (std::size_t k = 0; ok && k < s.size(); ++k)
      ok = static_cast<std::int64_t>(k) == d || s[k] == first[k];
    if (!ok)
      throw Error("concat: tensor " + std::to_string(i) + " of shape " + shape_text(s) + " does not match " +
                  shape_text(first) + " outside dimension " + std::to_string(d));
    out_shape[static_cast<std::size_t>(d)] += s[static_cast<std::size_t>(d)];
  }
  Tensor out = Tensor::empty(out_shape);
  std::vector<std::int64_t> sizes;
  {
    NoGradGuard no_grad;
    std::int64_t at = 0;
    for (const Tensor& t : tensors) {
      const std::int64_t len = t.size(d);
      copy_strided(t.contiguous(), out.slice(d, at, at + len));
      sizes.push_back(len);
      at += len;
    }
  }
  autograd::record(out, "concat", tensors, [sizes, d](const Tensor& g) {
    std::vector<Tensor> grads;
    std::int64_t at = 0;
    for (std::int64_t len : sizes) {
      grads.push_back(contiguous_values(g.slice(d, at, at + len)));
      at += len;
    }
    return grads;
  });
  return out;
}

}  // namespace cpudl
