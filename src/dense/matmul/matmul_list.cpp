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
#include "dense/matmul/weight_rows.h"
#include "dense/onednn/dense.h"

namespace cpudl::dense {

namespace {

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

// ---- cpudl's weight-row product (weight_rows.h): a Linear layer on one to eight rows.
const MatmulImpl kImpls[] = {
    {"weight_rows", weight_rows_fit, weight_rows_fit, weight_rows_f32},
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
