// The matmul implementation list (matmul_list.h).
#include "dense/matmul/matmul_list.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "dense/blas/blas.h"
#include "dense/onednn/dense.h"
#include "kernels/dispatch.h"
#include "runtime/parallel.h"

namespace cpudl::dense {

namespace {

// The epilogue of engines that have none, on columns [j0, j1) of one row of C.
void apply_epilogue(const MatmulEpilogue& e, float* row, std::int64_t j0, std::int64_t j1) {
  if (!e.bias && e.activation == Activation::none) return;
  for (std::int64_t j = j0; j < j1; ++j) {
    float& v = row[j];
    if (e.bias) v += e.bias[j];
    if (e.activation == Activation::relu) v = std::max(0.0f, v);
    if (e.activation == Activation::clip) v = std::min(std::max(v, e.clip_min), e.clip_max);
    if (e.activation == Activation::swish) v = v / (1.0f + std::exp(-v));
  }
}

// ---- the CBLAS engines: the product, then the epilogue in a second pass.
template <blas::Backend kBackend>
void cblas_run(const MatmulShape& s, const float* a, const float* b, float* c, const MatmulEpilogue& e) {
  blas::require(kBackend);
  const int threads = compute_threads();
  for (std::int64_t p = 0; p < s.batch; ++p) {
    float* cp = c + p * s.m * s.n;
    blas::cblas_sgemm(kBackend, s.transpose_a, s.transpose_b, s.m, s.n, s.k, a + p * s.m * s.k,
                      b + p * s.k * s.n, cp, e.accumulate, threads);
    for (std::int64_t i = 0; i < s.m; ++i) apply_epilogue(e, cp + i * s.n, 0, s.n);
  }
}
template <blas::Backend kBackend>
bool installed(const MatmulShape&, const MatmulEpilogue&) {
  return blas::available(kBackend);
}
bool always(const MatmulShape&, const MatmulEpilogue&) { return true; }
bool never(const MatmulShape&, const MatmulEpilogue&) { return false; }

// ---- oneDNN
bool plain(const MatmulShape&, const MatmulEpilogue& e) {
  return !e.bias && e.activation == Activation::none;
}
void sgemm_run(const MatmulShape& s, const float* a, const float* b, float* c, const MatmulEpilogue& e) {
  onednn::matmul_sgemm(s, a, b, c, e.accumulate);
}

// ---- cpudl's weight-row product (the LLM's float kernel, kernels/quant): up to eight rows of A
// times a B stored as rows of k (B^T: every exported Linear layer's weights). Such a product is
// bound by reading the weights, not by multiply-adds; the kernel reads one row as four concurrent
// streams (a few rows: four rows of A per pass over B) and the threads split the rows of B.
// oneDNN 2.6's matmul primitive ran these at a third to a half of ONNX Runtime's speed and gained
// nothing from a second thread; at 16 rows of A it wins again on one thread (docs/BENCHMARKS.md,
// "Static int8 and bf16 CNNs", the MLP rows).
constexpr std::int64_t kWeightRowsMaxM = 8;
bool few_rows_of_b_transposed(const MatmulShape& s, const MatmulEpilogue& e) {
  return s.batch == 1 && s.m <= kWeightRowsMaxM && s.transpose_b && !s.transpose_a && !e.accumulate;
}
void weight_rows_run(const MatmulShape& s, const float* a, const float* b, float* c,
                     const MatmulEpilogue& e) {
  const kernels::WeightMatmulFn fn = kernels::kernel_table().f32_f32_matmul.fn;
  const auto k = static_cast<std::size_t>(s.k), n = static_cast<std::size_t>(s.n);
  // A thread's share is worth its fork when it reads 64 KiB of weights or more.
  const std::size_t grain = std::max<std::size_t>(16, (64 << 10) / (k * sizeof(float)));
  parallel_for(n, grain, [&](std::size_t begin, std::size_t end) {
    fn({b + begin * k, k * sizeof(float), a, k * sizeof(float), c + begin, n, end - begin,
        static_cast<std::size_t>(s.m), k});
    for (std::int64_t i = 0; i < s.m; ++i)
      apply_epilogue(e, c + i * s.n, static_cast<std::int64_t>(begin), static_cast<std::int64_t>(end));
  });
}

const MatmulImpl kImpls[] = {
    {"weight_rows", few_rows_of_b_transposed, few_rows_of_b_transposed, weight_rows_run},
    {"native", always, never, cblas_run<blas::Backend::native>},
    {"openblas", installed<blas::Backend::openblas>, never, cblas_run<blas::Backend::openblas>},
    {"blis", installed<blas::Backend::blis>, never, cblas_run<blas::Backend::blis>},
    {"onednn_sgemm", plain, onednn::sgemm_preferred, sgemm_run},
    {"onednn", always, always, onednn::matmul_primitive},
};

std::string describe_shape(const MatmulShape& s) {
  std::string t = "[";
  t += std::to_string(s.batch) + "x" + std::to_string(s.m) + "x" + std::to_string(s.k) + "] x [" +
       std::to_string(s.k) + "x" + std::to_string(s.n) + "]";
  if (s.transpose_a) t += " A^T";
  if (s.transpose_b) t += " B^T";
  return t;
}

}  // namespace

std::span<const MatmulImpl> matmul_impls() { return kImpls; }

const MatmulImpl& choose_matmul_impl(const MatmulShape& s, const MatmulEpilogue& e) {
  const MatmulImpl* chosen = nullptr;
  const blas::Backend backend = blas::active_backend();
  if (backend != blas::Backend::onednn) {
    for (const MatmulImpl& impl : kImpls)
      if (impl.name == blas::backend_name(backend)) chosen = &impl;
  }
  for (const MatmulImpl& impl : kImpls) {
    if (chosen) break;
    if (impl.runs(s, e) && impl.prefers(s, e)) chosen = &impl;
  }
  if (verbose()) {
    static std::mutex mutex;
    static std::set<std::string> seen;
    std::string line = describe_shape(s);
    line.append(" -> ").append(chosen->name);
    const std::lock_guard<std::mutex> lock(mutex);
    if (seen.insert(line).second) std::fprintf(stderr, "cpudl: matmul %s\n", line.c_str());
  }
  return *chosen;
}

void matmul(const MatmulShape& s, const float* a, const float* b, float* c, const MatmulEpilogue& e) {
  if (s.batch < 1 || s.m < 1 || s.n < 1 || s.k < 1)
    throw Error("matmul " + describe_shape(s) + ": every dimension must be at least 1");
  choose_matmul_impl(s, e).run(s, a, b, c, e);
}

}  // namespace cpudl::dense
