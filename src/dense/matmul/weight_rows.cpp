// The weight-row product (weight_rows.h).
#include "dense/matmul/weight_rows.h"

#include <algorithm>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "runtime/parallel.h"

namespace cpudl::dense {

namespace {

void weight_rows(const MatmulShape& s, const float* a, const void* b, std::size_t b_value_bytes,
                 kernels::WeightMatmulFn fn, float* c, const MatmulEpilogue& e) {
  const auto k = static_cast<std::size_t>(s.k), n = static_cast<std::size_t>(s.n);
  const std::size_t row_bytes = k * b_value_bytes;
  // A thread's share is worth its fork when it reads 64 KiB of weights or more.
  const std::size_t grain = std::max<std::size_t>(16, (64 << 10) / row_bytes);
  parallel_for(n, grain, [&](std::size_t begin, std::size_t end) {
    fn({static_cast<const char*>(b) + begin * row_bytes, row_bytes, a, k * sizeof(float), c + begin, n,
        end - begin, static_cast<std::size_t>(s.m), k});
    for (std::int64_t i = 0; i < s.m; ++i)
      apply_epilogue(e, c + i * s.n, static_cast<std::int64_t>(begin), static_cast<std::int64_t>(end));
  });
}

}  // namespace

bool weight_rows_fit(const MatmulShape& s, const MatmulEpilogue& e) {
  return s.batch == 1 && s.m >= 1 && s.m <= kWeightRowsMaxM && s.transpose_b && !s.transpose_a &&
         !e.accumulate;
}

void weight_rows_f32(const MatmulShape& s, const float* a, const float* b, float* c,
                     const MatmulEpilogue& e) {
  weight_rows(s, a, b, sizeof(float), kernels::kernel_table().f32_f32_matmul.fn, c, e);
}

void weight_rows_bf16(const MatmulShape& s, const float* a, const std::uint16_t* b, float* c,
                      const MatmulEpilogue& e) {
  thread_local std::vector<float> rounded;
  rounded.resize(static_cast<std::size_t>(s.m * s.k));
  for (std::size_t i = 0; i < rounded.size(); ++i) rounded[i] = bf16_to_f32(f32_to_bf16(a[i]));
  weight_rows(s, rounded.data(), b, sizeof(std::uint16_t), kernels::kernel_table().bf16_f32_matmul.fn, c, e);
}

}  // namespace cpudl::dense
