// oneDNN-backed dense ops against the direct-loop references of dense_reference.h: matmul,
// linear, convolution, pooling and batch norm, forward and backward, both activation layouts;
// plus the primitive cache and weight-reorder counters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "dense/conv/implicit_gemm_weight_grad.h"
#include "dense/conv/pointwise_conv.h"
#include "dense/conv/tap_gemm_weight_grad.h"
#include "dense/conv/winograd_conv.h"
#include "dense/matmul/matmul_list.h"
#include "dense/matmul/weight_rows.h"
#include "dense/onednn/dense.h"
#include "dense/onednn/engine.h"
#include "dense_reference.h"
#include "kernels/half.h"
#include "kernels/kernel_types.h"
#include "runtime/aligned_buffer.h"

namespace cpudl::onednn {
namespace {

using dense::matmul;

std::vector<float> random_vector(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// |got - want| <= tolerance * (1 + |want|), elementwise, reporting the first failure.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tolerance,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tolerance * (1.0 + std::fabs(want[i]))) << what << " at " << i;
}

std::vector<float> to_nhwc(const std::vector<float>& x, std::int64_t n, std::int64_t c, std::int64_t h,
                           std::int64_t w) {
  std::vector<float> y(x.size());
  for (std::int64_t a = 0; a < n; ++a)
    for (std::int64_t b = 0; b < c; ++b)
      for (std::int64_t i = 0; i < h * w; ++i)
        y[static_cast<std::size_t>((a * h * w + i) * c + b)] =
            x[static_cast<std::size_t>((a * c + b) * h * w + i)];
  return y;
}

std::vector<float> to_nchw(const std::vector<float>& x, std::int64_t n, std::int64_t c, std::int64_t h,
                           std::int64_t w) {
  std::vector<float> y(x.size());
  for (std::int64_t a = 0; a < n; ++a)
    for (std::int64_t b = 0; b < c; ++b)
      for (std::int64_t i = 0; i < h * w; ++i)
        y[static_cast<std::size_t>((a * c + b) * h * w + i)] =
            x[static_cast<std::size_t>((a * h * w + i) * c + b)];
  return y;
}

// ------------------------------------------------------------------------------------ matmul
// Entry (p, i, j) of the product, in double.
double reference_entry(const MatmulShape& s, const std::vector<float>& a, const std::vector<float>& b,
                       std::int64_t p, std::int64_t i, std::int64_t j) {
  double acc = 0;
  for (std::int64_t l = 0; l < s.k; ++l) {
    const float av = s.transpose_a ? a[static_cast<std::size_t>(p * s.m * s.k + l * s.m + i)]
                                   : a[static_cast<std::size_t>(p * s.m * s.k + i * s.k + l)];
    const float bv = s.transpose_b ? b[static_cast<std::size_t>(p * s.k * s.n + j * s.k + l)]
                                   : b[static_cast<std::size_t>(p * s.k * s.n + l * s.n + j)];
    acc += static_cast<double>(av) * bv;
  }
  return acc;
}

std::vector<float> reference_matmul(const MatmulShape& s, const std::vector<float>& a,
                                    const std::vector<float>& b) {
  std::vector<float> c(static_cast<std::size_t>(s.batch * s.m * s.n));
  for (std::int64_t p = 0; p < s.batch; ++p)
    for (std::int64_t i = 0; i < s.m; ++i)
      for (std::int64_t j = 0; j < s.n; ++j)
        c[static_cast<std::size_t>(p * s.m * s.n + i * s.n + j)] =
            static_cast<float>(reference_entry(s, a, b, p, i, j));
  return c;
}

// Every entry of the matmul list (dense/matmul/matmul_list.h) that runs a product -- oneDNN's
// primitive and sgemm, cpudl's native SGEMM, and OpenBLAS and BLIS where installed -- against the
// double-precision product, with each epilogue it takes; and the walk's choice.
TEST(MatmulList, EveryEntryThatRunsMatchesTheReference) {
  // m = 1 over 1500 rows of B (split across the threads, k not a multiple of the vector) and m = 5
  // (four rows of A per pass, then one): the weight-row entry's cases.
  const MatmulShape shapes[] = {{1, 1, 1, 1},     {1, 7, 13, 5},     {2, 33, 17, 40},
                                {1, 64, 96, 130}, {1, 1, 1500, 300}, {1, 5, 70, 37}};
  int ran = 0;
  for (MatmulShape s : shapes)
    for (int t = 0; t < 4; ++t)
      for (int epilogue = 0; epilogue < 3; ++epilogue) {
        s.transpose_a = t & 1;
        s.transpose_b = t & 2;
        const auto a = random_vector(static_cast<std::size_t>(s.batch * s.m * s.k), 11);
        const auto b = random_vector(static_cast<std::size_t>(s.batch * s.k * s.n), 12);
        const auto bias = random_vector(static_cast<std::size_t>(s.n), 13);
        const auto c0 = random_vector(static_cast<std::size_t>(s.batch * s.m * s.n), 14);
        MatmulEpilogue e;
        if (epilogue == 1) e.bias = bias.data(), e.activation = Activation::relu;
        if (epilogue == 2) e.accumulate = true;
        std::vector<float> want = reference_matmul(s, a, b);
        for (std::size_t i = 0; i < want.size(); ++i) {
          if (epilogue == 1) want[i] = std::max(0.0f, want[i] + bias[i % static_cast<std::size_t>(s.n)]);
          if (epilogue == 2) want[i] += c0[i];
        }
        for (const dense::MatmulImpl& impl : dense::matmul_impls()) {
          if (!impl.runs(s, e)) continue;
          SCOPED_TRACE(testing::Message() << impl.name << " " << s.batch << "x" << s.m << "x" << s.n << "x"
                                          << s.k << " t" << t << " epilogue " << epilogue);
          std::vector<float> c = c0;
          impl.run(s, a.data(), b.data(), c.data(), e);
          expect_close(c, want, 1e-5, "matmul");
          ++ran;
        }
      }
  EXPECT_GT(ran, 6 * 4 * 3 * 2);  // oneDNN's primitive and the native SGEMM at least, everywhere
  EXPECT_EQ(dense::choose_matmul_impl({1, 64, 64, 64}, {}).name, "onednn");
  EXPECT_EQ(dense::choose_matmul_impl({1, 1024, 1024, 1024}, {}).name, "onednn_sgemm");
  std::vector<float> bias(1024);
  EXPECT_EQ(dense::choose_matmul_impl({1, 1024, 1024, 1024}, {bias.data()}).name,
            "onednn");  // the fused bias
  // A Linear layer on one to eight rows: the weight-row kernel; on more, or B not stored as rows,
  // oneDNN.
  EXPECT_EQ(dense::choose_matmul_impl({1, 1, 1024, 1024, false, true}, {bias.data()}).name, "weight_rows");
  EXPECT_EQ(dense::choose_matmul_impl({1, 8, 1024, 1024, false, true}, {}).name, "weight_rows");
  EXPECT_EQ(dense::choose_matmul_impl({1, 9, 1024, 1024, false, true}, {}).name, "onednn");
  EXPECT_EQ(dense::choose_matmul_impl({1, 1, 1024, 1024, false, false}, {}).name, "onednn");
}

// The bf16 weight-row product computes as torch.autocast does: A's and B's values rounded to bf16,
// exact products, f32 sums, then bias and activation. Checked against that in double, for 1, 3
// and 8 rows of A over 1500 weight rows (split across the threads); the unrounded A would be off
// by ~1e-3, a hundred times the tolerance.
TEST(WeightRows, Bf16ProductRoundsTheOperandsAndSumsInF32) {
  for (const std::int64_t m : {1, 3, 8}) {
    SCOPED_TRACE(testing::Message() << "m " << m);
    const MatmulShape s{1, m, 1500, 300, false, true};
    const auto a = random_vector(static_cast<std::size_t>(m * s.k), 21);
    const auto b32 = random_vector(static_cast<std::size_t>(s.n * s.k), 22);
    const auto bias = random_vector(static_cast<std::size_t>(s.n), 23);
    std::vector<std::uint16_t> b(b32.size());
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = f32_to_bf16(b32[i]);
    std::vector<float> c(static_cast<std::size_t>(m * s.n)), want(c.size());
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < s.n; ++j) {
        double sum = 0;
        for (std::int64_t q = 0; q < s.k; ++q)
          sum += static_cast<double>(bf16_to_f32(f32_to_bf16(a[static_cast<std::size_t>(i * s.k + q)]))) *
                 bf16_to_f32(b[static_cast<std::size_t>(j * s.k + q)]);
        want[static_cast<std::size_t>(i * s.n + j)] =
            std::max(0.0f, static_cast<float>(sum) + bias[static_cast<std::size_t>(j)]);
      }
    dense::weight_rows_bf16(s, a.data(), b.data(), c.data(), {bias.data(), Activation::relu});
    expect_close(c, want, 1e-5, "bf16 weight rows");
  }
}

TEST(Matmul, MatchesReferenceAcrossShapesAndTransposes) {
  const MatmulShape shapes[] = {
      {1, 1, 1, 1}, {1, 7, 13, 5}, {1, 64, 65, 33}, {3, 17, 9, 31}, {1, 128, 96, 256}};
  for (MatmulShape s : shapes)
    for (int t = 0; t < 4; ++t) {
      s.transpose_a = t & 1;
      s.transpose_b = t & 2;
      SCOPED_TRACE(testing::Message() << s.batch << "x" << s.m << "x" << s.n << "x" << s.k << " t" << t);
      const auto a = random_vector(static_cast<std::size_t>(s.batch * s.m * s.k), 1);
      const auto b = random_vector(static_cast<std::size_t>(s.batch * s.k * s.n), 2);
      std::vector<float> c(static_cast<std::size_t>(s.batch * s.m * s.n));
      matmul(s, a.data(), b.data(), c.data());
      expect_close(c, reference_matmul(s, a, b), 1e-5, "matmul");
    }
}

// Products of 2.5e8 multiply-adds and more run on oneDNN's sgemm instead of the primitive
// (matmul.cpp): every transpose, a batch and accumulate, checked at sampled entries against the
// double loop (the whole product in double would take seconds under the sanitizers).
TEST(Matmul, LargeProductsMatchReferenceAtSampledEntries) {
  for (int t = 0; t < 5; ++t) {
    const MatmulShape s{t == 4 ? 2 : 1, 130, 3000, 700, static_cast<bool>(t & 1), static_cast<bool>(t & 2)};
    const bool accumulate = t == 4;
    SCOPED_TRACE(testing::Message() << "t" << t);
    const auto a = random_vector(static_cast<std::size_t>(s.batch * s.m * s.k), 11);
    const auto b = random_vector(static_cast<std::size_t>(s.batch * s.k * s.n), 12);
    const auto before = random_vector(static_cast<std::size_t>(s.batch * s.m * s.n), 13);
    auto c = before;
    matmul(s, a.data(), b.data(), c.data(), {nullptr, Activation::none, accumulate});
    std::mt19937 gen(14);
    for (int sample = 0; sample < 300; ++sample) {
      const std::int64_t p = static_cast<std::int64_t>(gen() % static_cast<unsigned>(s.batch));
      const std::int64_t i = static_cast<std::int64_t>(gen() % static_cast<unsigned>(s.m));
      const std::int64_t j = static_cast<std::int64_t>(gen() % static_cast<unsigned>(s.n));
      const double want = (accumulate ? before[static_cast<std::size_t>((p * s.m + i) * s.n + j)] : 0.0) +
                          reference_entry(s, a, b, p, i, j);
      ASSERT_NEAR(c[static_cast<std::size_t>((p * s.m + i) * s.n + j)], want, 1e-4 * (1.0 + std::fabs(want)))
          << "at batch " << p << " row " << i << " column " << j;
    }
  }
}

TEST(Matmul, BiasReluAndAccumulateEpilogues) {
  const MatmulShape s{1, 9, 21, 14};
  const auto a = random_vector(9 * 14, 3), b = random_vector(14 * 21, 4), bias = random_vector(21, 5);
  auto want = reference_matmul(s, a, b);
  std::vector<float> c(want.size());
  matmul(s, a.data(), b.data(), c.data(), {bias.data(), Activation::relu, false});
  std::vector<float> relu_want(want.size());
  for (std::size_t i = 0; i < want.size(); ++i) relu_want[i] = std::max(0.0f, want[i] + bias[i % 21]);
  expect_close(c, relu_want, 1e-5, "bias+relu");

  std::vector<float> acc = random_vector(want.size(), 6), acc_want = acc;
  for (std::size_t i = 0; i < want.size(); ++i) acc_want[i] += want[i];
  matmul(s, a.data(), b.data(), acc.data(), {nullptr, Activation::none, true});
  expect_close(acc, acc_want, 1e-5, "accumulate");
}

// matmul_bf16 rounds A and B to bf16 and sums in f32, as torch.autocast: within 2^-8 relative
// per product of the double loop (bounded by the sum of absolute products), different from the
// f32 result in most entries (the bf16 kernels ran), for every transpose, a batch, the bias+ReLU
// and accumulate epilogues, and a linear layer's three products with LinearShape::bf16. Skipped
// without bf16 kernels.
TEST(Matmul, Bf16RoundsItsOperandsAndSumsInF32) {
  if (!bf16_compute_available()) GTEST_SKIP() << "this CPU has no bf16 kernels";
  auto magnitude = [](const MatmulShape& s, std::vector<float> a, std::vector<float> b) {
    for (float& v : a) v = std::fabs(v);
    for (float& v : b) v = std::fabs(v);
    return reference_matmul(s, a, b);
  };
  auto check = [](const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<float>& mag, const std::vector<float>& f32, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-2f * mag[i] + 1e-5f) << what << " " << i;
      differ += got[i] != f32[i];
    }
    EXPECT_GT(differ, got.size() / 2) << what << ": bf16 rounding should change most entries";
  };
  const MatmulShape shapes[] = {{1, 37, 45, 70}, {3, 17, 33, 40}};
  unsigned seed = 40;
  for (MatmulShape s : shapes)
    for (int t = 0; t < 4; ++t) {
      s.transpose_a = t & 1;
      s.transpose_b = t & 2;
      SCOPED_TRACE(testing::Message() << s.batch << "x" << s.m << "x" << s.n << "x" << s.k << " t" << t);
      const auto a = random_vector(static_cast<std::size_t>(s.batch * s.m * s.k), seed++);
      const auto b = random_vector(static_cast<std::size_t>(s.batch * s.k * s.n), seed++);
      std::vector<float> c(static_cast<std::size_t>(s.batch * s.m * s.n)), f32(c.size());
      matmul_bf16(s, a.data(), b.data(), c.data());
      matmul(s, a.data(), b.data(), f32.data());
      check(c, reference_matmul(s, a, b), magnitude(s, a, b), f32, "matmul_bf16");
    }
  const MatmulShape s{1, 9, 21, 14};
  const auto a = random_vector(9 * 14, 3), b = random_vector(14 * 21, 4), bias = random_vector(21, 5);
  const auto want = reference_matmul(s, a, b), mag = magnitude(s, a, b);
  std::vector<float> c(want.size());
  matmul_bf16(s, a.data(), b.data(), c.data(), {bias.data(), Activation::relu, false});
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(c[i], std::max(0.0f, want[i] + bias[i % 21]), 1e-2f * mag[i] + 1e-5f) << "bias+relu " << i;
  std::vector<float> acc = random_vector(want.size(), 6), start = acc;
  matmul_bf16(s, a.data(), b.data(), acc.data(), {nullptr, Activation::none, true});
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(acc[i], start[i] + want[i], 1e-2f * mag[i] + 1e-5f) << "accumulate " << i;

  const LinearShape l{6, 40, 23, true};
  const auto x = random_vector(6 * 40, 7), w = random_vector(23 * 40, 8), dy = random_vector(6 * 23, 9);
  std::vector<float> y(6 * 23), dx(6 * 40), dw(23 * 40), db(23);
  linear_forward(l, x.data(), w.data(), nullptr, y.data());
  const MatmulShape fwd{1, 6, 23, 40, false, true}, bwd_data{1, 6, 40, 23}, bwd_w{1, 23, 40, 6, true, false};
  std::vector<float> y32(y.size()), dx32(dx.size()), dw32(dw.size());
  matmul(fwd, x.data(), w.data(), y32.data());
  matmul(bwd_data, dy.data(), w.data(), dx32.data());
  matmul(bwd_w, dy.data(), x.data(), dw32.data());
  check(y, reference_matmul(fwd, x, w), magnitude(fwd, x, w), y32, "linear forward");
  linear_backward_data(l, dy.data(), w.data(), dx.data());
  check(dx, reference_matmul(bwd_data, dy, w), magnitude(bwd_data, dy, w), dx32, "linear backward data");
  linear_backward_weights(l, x.data(), dy.data(), dw.data(), db.data());
  check(dw, reference_matmul(bwd_w, dy, x), magnitude(bwd_w, dy, x), dw32, "linear dW");
  std::vector<float> db_want(23, 0.0f);
  for (std::size_t i = 0; i < dy.size(); ++i) db_want[i % 23] += dy[i];
  expect_close(db, db_want, 1e-5, "linear db stays f32");
}

TEST(Matmul, RejectsEmptyShapes) {
  float x = 0;
  try {
    matmul(MatmulShape{1, 0, 3, 3}, &x, &x, &x);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matmul [1x0x3]"), std::string::npos) << e.what();
  }
}

TEST(Linear, ForwardAndBackwardMatchReference) {
  const LinearShape s{5, 19, 11};
  const auto x = random_vector(5 * 19, 7), w = random_vector(11 * 19, 8), bias = random_vector(11, 9);
  const auto dy = random_vector(5 * 11, 10);
  std::vector<float> y(5 * 11), dx(5 * 19), dw(11 * 19), db(11);
  linear_forward(s, x.data(), w.data(), bias.data(), y.data());
  const auto xw = reference_matmul(MatmulShape{1, 5, 11, 19, false, true}, x, w);
  std::vector<float> y_want(xw);
  for (std::size_t i = 0; i < y_want.size(); ++i) y_want[i] += bias[i % 11];
  expect_close(y, y_want, 1e-5, "linear forward");
  linear_backward_data(s, dy.data(), w.data(), dx.data());
  expect_close(dx, reference_matmul(MatmulShape{1, 5, 19, 11}, dy, w), 1e-5, "linear backward data");
  linear_backward_weights(s, x.data(), dy.data(), dw.data(), db.data());
  expect_close(dw, reference_matmul(MatmulShape{1, 11, 19, 5, true, false}, dy, x), 1e-5, "linear dW");
  std::vector<float> db_want(11, 0.0f);
  for (std::size_t i = 0; i < dy.size(); ++i) db_want[i % 11] += dy[i];
  expect_close(db, db_want, 1e-5, "linear db");
}

// ------------------------------------------------------------------------------- convolution
struct ConvCase {
  ConvShape shape;
  const char* name;
};

std::vector<ConvCase> conv_cases() {
  auto make = [](std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t o,
                 std::int64_t k, std::int64_t stride, std::int64_t pad, std::int64_t dilation,
                 std::int64_t groups) {
    ConvShape s;
    s.batch = n, s.in_channels = c, s.height = h, s.width = w, s.out_channels = o;
    s.kernel_h = s.kernel_w = k, s.stride_h = s.stride_w = stride, s.pad_h = s.pad_w = pad;
    s.dilation_h = s.dilation_w = dilation, s.groups = groups;
    return s;
  };
  return {{make(2, 3, 7, 9, 4, 3, 1, 1, 1, 1), "3x3 same"},
          {make(2, 5, 11, 8, 6, 3, 2, 0, 1, 1), "3x3 stride 2"},
          {make(1, 4, 12, 12, 8, 3, 1, 2, 2, 1), "dilated"},
          {make(2, 4, 9, 9, 6, 3, 1, 1, 1, 2), "2 groups"},
          {make(2, 8, 10, 10, 8, 3, 2, 1, 1, 8), "depthwise"},
          {make(3, 16, 7, 7, 32, 1, 1, 0, 1, 1), "1x1"},
          {make(2, 1, 28, 28, 6, 5, 1, 2, 1, 1), "lenet conv1"},
          {make(1, 3, 15, 15, 16, 7, 2, 3, 1, 1), "7x7 stem"}};
}

TEST(Conv2d, ForwardBackwardMatchReferenceInBothLayouts) {
  for (const auto& c : conv_cases())
    for (ActivationLayout layout : {ActivationLayout::nchw, ActivationLayout::nhwc}) {
      ConvShape s = c.shape;
      s.layout = layout;
      SCOPED_TRACE(testing::Message() << c.name << (layout == ActivationLayout::nhwc ? " nhwc" : " nchw"));
      const std::int64_t oh = s.out_height(), ow = s.out_width();
      const auto x =
          random_vector(static_cast<std::size_t>(s.batch * s.in_channels * s.height * s.width), 11);
      const auto w = random_vector(
          static_cast<std::size_t>(s.out_channels * (s.in_channels / s.groups) * s.kernel_h * s.kernel_w),
          12);
      const auto bias = random_vector(static_cast<std::size_t>(s.out_channels), 13);
      const auto dy = random_vector(static_cast<std::size_t>(s.batch * s.out_channels * oh * ow), 14);
      const bool nhwc = layout == ActivationLayout::nhwc;
      auto in = [&](const std::vector<float>& v, std::int64_t ch, std::int64_t h, std::int64_t wd) {
        return nhwc ? to_nhwc(v, s.batch, ch, h, wd) : v;
      };
      auto out = [&](const std::vector<float>& v, std::int64_t ch, std::int64_t h, std::int64_t wd) {
        return nhwc ? to_nchw(v, s.batch, ch, h, wd) : v;
      };

      const auto x_l = in(x, s.in_channels, s.height, s.width);
      std::vector<float> y(dy.size());
      conv2d_forward(s, x_l.data(), w.data(), 0, bias.data(), y.data());
      expect_close(out(y, s.out_channels, oh, ow), reference::conv2d_forward(s, x, w, &bias), 1e-4,
                   "forward");

      const auto dy_l = in(dy, s.out_channels, oh, ow);
      std::vector<float> dx(x.size());
      conv2d_backward_data(s, dy_l.data(), w.data(), 0, dx.data());
      expect_close(out(dx, s.in_channels, s.height, s.width), reference::conv2d_backward_data(s, dy, w), 1e-4,
                   "backward data");

      std::vector<float> dw(w.size()), db(bias.size()), db_want;
      conv2d_backward_weights(s, x_l.data(), dy_l.data(), dw.data(), db.data());
      const auto dw_want = reference::conv2d_backward_weights(s, x, dy, &db_want);
      expect_close(dw, dw_want, 1e-4, "backward weights");
      expect_close(db, db_want, 1e-4, "backward bias");
    }
}

TEST(Conv2d, FusedResidualAndRelu) {
  ConvShape s = conv_cases()[0].shape;
  s.layout = ActivationLayout::nhwc;
  const std::int64_t oh = s.out_height(), ow = s.out_width();
  const auto x = random_vector(static_cast<std::size_t>(s.batch * s.in_channels * s.height * s.width), 21);
  const auto w = random_vector(static_cast<std::size_t>(s.out_channels * s.in_channels * 9), 22);
  const auto residual = random_vector(static_cast<std::size_t>(s.batch * s.out_channels * oh * ow), 23);
  std::vector<float> y(residual.size());
  conv2d_forward(s, to_nhwc(x, s.batch, s.in_channels, s.height, s.width).data(), w.data(), 0, nullptr,
                 y.data(), {Activation::relu, residual.data()});
  auto want = reference::conv2d_forward(s, x, w, nullptr);
  const auto residual_nchw = to_nchw(residual, s.batch, s.out_channels, oh, ow);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = std::max(0.0f, want[i] + residual_nchw[i]);
  expect_close(to_nchw(y, s.batch, s.out_channels, oh, ow), want, 1e-4, "conv+residual+relu");
}

// NCHW <-> the blocked layout [N][C / block][H][W][block].
std::vector<float> to_blocked(const std::vector<float>& x, std::int64_t n, std::int64_t c, std::int64_t hw,
                              std::int64_t block, bool inverse = false) {
  // Channels padded up to a whole block (8 channels in AVX-512's 16-channel blocks): the
  // padding lanes are zero, as oneDNN expects of its padded layouts.
  const std::int64_t padded = (c + block - 1) / block * block;
  std::vector<float> y(inverse ? static_cast<std::size_t>(n * c * hw)
                               : static_cast<std::size_t>(n * padded * hw));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < c; ++j)
      for (std::int64_t p = 0; p < hw; ++p) {
        const auto plain = static_cast<std::size_t>((i * c + j) * hw + p);
        const auto blocked =
            static_cast<std::size_t>(((i * padded + j / block * block) * hw + p * block) + j % block);
        if (inverse)
          y[plain] = x[blocked];
        else
          y[blocked] = x[plain];
      }
  return y;
}

// The Winograd F(4x4, 3x3) convolution against the direct double-precision loop: tile edges
// (outputs not a multiple of 4), paddings 0-2, both block sizes and channels-last (block 0),
// bias, residual and clamps.
TEST(WinogradConv, MatchesTheDirectConvolutionWithEpilogues) {
  struct Case {
    std::int64_t batch, c, h, w, k, pad, block;
    bool bias, residual;
    float lo, hi;
  };
  const Case cases[] = {{1, 8, 6, 6, 16, 0, 8, false, false, -INFINITY, INFINITY},
                        {2, 16, 9, 11, 32, 1, 8, true, false, 0.0f, INFINITY},
                        {3, 24, 7, 5, 16, 1, 8, true, true, 0.0f, INFINITY},
                        {1, 32, 13, 8, 48, 2, 16, true, true, 0.0f, 6.0f},
                        {2, 16, 3, 3, 16, 1, 16, false, true, -INFINITY, INFINITY},
                        {4, 64, 14, 14, 64, 1, 8, true, false, -INFINITY, INFINITY},
                        {2, 24, 9, 7, 32, 1, 0, true, true, 0.0f, INFINITY},
                        {1, 16, 6, 10, 48, 2, 0, false, false, -INFINITY, INFINITY}};
  for (const Case& t : cases) {
    // Channels-last is the blocked layout with one block of all channels.
    const std::int64_t in_block = t.block ? t.block : t.c, out_block = t.block ? t.block : t.k;
    SCOPED_TRACE("batch " + std::to_string(t.batch) + " c " + std::to_string(t.c) + " " +
                 std::to_string(t.h) + "x" + std::to_string(t.w) + " k " + std::to_string(t.k) + " pad " +
                 std::to_string(t.pad) + " block " + std::to_string(t.block));
    ConvShape s;
    s.batch = t.batch, s.in_channels = t.c, s.height = t.h, s.width = t.w, s.out_channels = t.k;
    s.kernel_h = s.kernel_w = 3, s.pad_h = s.pad_w = t.pad;
    const std::int64_t oh = s.out_height(), ow = s.out_width();
    const auto x = random_vector(static_cast<std::size_t>(t.batch * t.c * t.h * t.w), 31);
    const auto w = random_vector(static_cast<std::size_t>(t.k * t.c * 9), 32);
    const auto bias = random_vector(static_cast<std::size_t>(t.k), 33);
    const auto residual = random_vector(static_cast<std::size_t>(t.batch * t.k * oh * ow), 34);
    // Winograd's rounding error scales with the magnitudes summed, not with each output: the
    // bound is relative to the convolution's scale (a wrong transform misses by O(scale)).
    auto want = reference::conv2d_forward(s, x, w, t.bias ? &bias : nullptr);
    double scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      want[i] += t.residual ? residual[i] : 0.0f;
      scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
      want[i] = std::min(std::max(want[i], t.lo), t.hi);
    }
    for (const std::int64_t tile : {4, 2}) {
      SCOPED_TRACE("tile " + std::to_string(tile));
      const conv::WinogradConv winograd({t.batch, t.c, t.h, t.w, t.k, t.pad, t.block, tile}, w.data());
      const auto residual_blocked = to_blocked(residual, t.batch, t.k, oh * ow, out_block);
      std::vector<float> y(want.size(), 7.0f);
      winograd.forward(to_blocked(x, t.batch, t.c, t.h * t.w, in_block).data(),
                       t.bias ? bias.data() : nullptr, t.residual ? residual_blocked.data() : nullptr, t.lo,
                       t.hi, y.data());
      const auto got = to_blocked(y, t.batch, t.k, oh * ow, out_block, true);
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5 * scale) << "at " << i << " of scale " << scale;
    }
  }
  EXPECT_THROW(conv::WinogradConv({1, 12, 8, 8, 16, 1, 8}, std::vector<float>(16 * 12 * 9).data()), Error);
  EXPECT_THROW(conv::WinogradConv({1, 16, 8, 8, 16, 1, 8, 3}, std::vector<float>(16 * 16 * 9).data()), Error);
  EXPECT_EQ(conv::winograd_tile({1, 512, 7, 7, 512, 1, 8}), 2);  // 4 tiles of 4x4: F(2x2)
  EXPECT_EQ(conv::winograd_tile({16, 512, 7, 7, 512, 1, 8}), 4);
  EXPECT_EQ(conv::winograd_tile({16, 8, 7, 7, 512, 1, 8}), 0);  // too few input channels to pay
}

// A layer's backward-data pass as a Winograd convolution (training): dx = dy convolved with the
// rotated, transposed kernel at padding 2 - pad, channels-last, against the direct loop's input
// gradient; with caller-owned storage for the transformed weights, as training passes it.
TEST(WinogradConv, BackwardDataMatchesTheDirectInputGradient) {
  struct Case {
    std::int64_t batch, c, h, w, k, pad;
  };
  for (const Case& t : {Case{2, 16, 9, 7, 32, 1}, Case{1, 32, 8, 8, 16, 0}, Case{3, 32, 5, 6, 16, 2}}) {
    SCOPED_TRACE("c " + std::to_string(t.c) + " k " + std::to_string(t.k) + " pad " + std::to_string(t.pad));
    ConvShape s;
    s.batch = t.batch, s.in_channels = t.c, s.height = t.h, s.width = t.w, s.out_channels = t.k;
    s.kernel_h = s.kernel_w = 3, s.pad_h = s.pad_w = t.pad;
    const std::int64_t oh = s.out_height(), ow = s.out_width();
    const auto dy = random_vector(static_cast<std::size_t>(t.batch * t.k * oh * ow), 35);
    const auto w = random_vector(static_cast<std::size_t>(t.k * t.c * 9), 36);
    const auto want = reference::conv2d_backward_data(s, dy, w);
    double scale = 0;
    for (const float value : want) scale = std::max(scale, static_cast<double>(std::fabs(value)));
    for (const std::int64_t tile : {4, 2}) {
      SCOPED_TRACE("tile " + std::to_string(tile));
      const conv::WinogradConvShape backward{t.batch, t.k, oh, ow, t.c, 2 - t.pad, 0, tile};
      std::vector<float> storage(conv::WinogradConv::transformed_floats(backward) + 16);
      float* aligned = storage.data() + (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64 / 4;
      const conv::WinogradConv winograd(backward, w.data(), conv::WinogradPass::backward_data, aligned);
      std::vector<float> dx(want.size(), 7.0f);
      winograd.forward(to_nhwc(dy, t.batch, t.k, oh, ow).data(), nullptr, nullptr, -INFINITY, INFINITY,
                       dx.data());
      const auto got = to_nchw(dx, t.batch, t.c, t.h, t.w);
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5 * scale) << "at " << i << " of scale " << scale;
    }
  }
}

// Random x and dy (NCHW) for a convolution, the direct loop's weight and bias gradients (in
// double), and the weight gradient's largest magnitude: the scale tolerances are relative to.
struct WeightGradientCase {
  std::vector<float> x, dy, want_dw, want_db;
  double scale = 0;
};
WeightGradientCase weight_gradient_case(const ConvShape& s, unsigned seed) {
  WeightGradientCase c;
  c.x = random_vector(static_cast<std::size_t>(s.batch * s.in_channels * s.height * s.width), seed);
  c.dy = random_vector(static_cast<std::size_t>(s.batch * s.out_channels * s.out_height() * s.out_width()),
                       seed + 1);
  c.want_dw = reference::conv2d_backward_weights(s, c.x, c.dy, &c.want_db);
  for (const float value : c.want_dw) c.scale = std::max(c.scale, static_cast<double>(std::fabs(value)));
  return c;
}

// A layer's weight and bias gradients by Winograd F(4x4, 3x3) (training): paddings 0-2, partial tiles,
// channels-last and blocked, one and two threads (which split the output channels), one block of
// tiles and several, against the direct loop's weight gradient (in double). fp32 sums 32768
// products per weight in the last case: 1.3e-5 of the scale measured there, bound 5e-5.
TEST(WinogradConv, BackwardWeightsMatchTheDirectWeightGradient) {
  struct Case {
    std::int64_t batch, c, h, w, k, pad, block;
  };
  // The last case has 2048 tiles, more than one block of 8 MB of transformed values holds at 16
  // channels: dU accumulates over blocks.
  for (const Case& t :
       {Case{2, 16, 9, 7, 32, 1, 0}, Case{1, 32, 8, 8, 16, 0, 0}, Case{3, 24, 5, 6, 48, 2, 0},
        Case{2, 16, 10, 9, 32, 1, 8}, Case{2, 32, 7, 7, 32, 1, 16}, Case{8, 16, 64, 64, 16, 1, 0}}) {
    SCOPED_TRACE("c " + std::to_string(t.c) + " k " + std::to_string(t.k) + " pad " + std::to_string(t.pad) +
                 " block " + std::to_string(t.block));
    ConvShape s;
    s.batch = t.batch, s.in_channels = t.c, s.height = t.h, s.width = t.w, s.out_channels = t.k;
    s.kernel_h = s.kernel_w = 3, s.pad_h = s.pad_w = t.pad;
    const std::int64_t oh = s.out_height(), ow = s.out_width();
    const auto [x, dy, want, want_db, scale] = weight_gradient_case(s, 37);
    const std::int64_t in_block = t.block ? t.block : t.c, out_block = t.block ? t.block : t.k;
    const auto xb = to_blocked(x, t.batch, t.c, t.h * t.w, in_block);
    const auto dyb = to_blocked(dy, t.batch, t.k, oh * ow, out_block);
    for (const int threads : {1, 2}) {
      const cpudl::ThreadScope scope(threads);
      std::vector<float> dw(want.size(), 7.0f), db(want_db.size(), 7.0f);
      conv::winograd_backward_weights({t.batch, t.c, t.h, t.w, t.k, t.pad, t.block, 4}, xb.data(), dyb.data(),
                                      dw.data(), db.data());
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(dw[i], want[i], 5e-5 * scale)
            << "at " << i << " of scale " << scale << ", " << threads << " threads";
      for (std::size_t k = 0; k < want_db.size(); ++k)  // sums of dy, accumulated in double
        ASSERT_NEAR(db[k], want_db[k], 1e-5 * (1 + std::fabs(want_db[k]))) << "db " << k << ", " << threads;
    }
  }
  EXPECT_THROW(conv::winograd_backward_weights({1, 16, 8, 8, 16, 1, 0, 2}, nullptr, nullptr, nullptr), Error);
}

// The native weight gradients' cases (channels-last), each through `fn` on each thread count
// against the direct loop's weight and bias gradients (in double), and with no bias gradient
// asked for: the weight gradient unchanged.
struct NativeWeightGradCase {
  std::int64_t batch, c, h, w, k, kernel, stride_h, stride_w, pad_h, pad_w;
};
using NativeWeightGradFn = void (*)(const ConvShape&, const float*, const float*, float*, float*);
void expect_native_weight_gradient(const std::vector<NativeWeightGradCase>& cases,
                                   bool (*applies)(const ConvShape&), NativeWeightGradFn fn, unsigned seed,
                                   const std::vector<int>& thread_counts) {
  for (const NativeWeightGradCase& t : cases) {
    SCOPED_TRACE("c " + std::to_string(t.c) + " k " + std::to_string(t.k) + " kernel " +
                 std::to_string(t.kernel) + " stride " + std::to_string(t.stride_h) + "x" +
                 std::to_string(t.stride_w));
    ConvShape s;
    s.batch = t.batch, s.in_channels = t.c, s.height = t.h, s.width = t.w, s.out_channels = t.k;
    s.kernel_h = s.kernel_w = t.kernel, s.stride_h = t.stride_h, s.stride_w = t.stride_w;
    s.pad_h = t.pad_h, s.pad_w = t.pad_w, s.layout = ActivationLayout::nhwc;
    ASSERT_TRUE(applies(s));
    const std::int64_t oh = s.out_height(), ow = s.out_width();
    const auto [x, dy, want, want_db, scale] = weight_gradient_case(s, seed);
    const auto xc = to_nhwc(x, t.batch, t.c, t.h, t.w), dyc = to_nhwc(dy, t.batch, t.k, oh, ow);
    for (const int threads : thread_counts) {
      const cpudl::ThreadScope scope(threads);
      std::vector<float> dw(want.size(), 7.0f), db(want_db.size(), 7.0f);
      fn(s, xc.data(), dyc.data(), dw.data(), db.data());
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(dw[i], want[i], 1e-5 * scale) << "at " << i << " of scale " << scale << ", " << threads;
      for (std::size_t k = 0; k < want_db.size(); ++k)
        ASSERT_NEAR(db[k], want_db[k], 1e-5 * (1 + std::fabs(want_db[k]))) << "db " << k << ", " << threads;
      std::vector<float> dw_only(want.size(), 7.0f);
      fn(s, xc.data(), dyc.data(), dw_only.data(), nullptr);
      EXPECT_EQ(dw_only, dw);
    }
  }
}

// The implicit-GEMM weight gradient (channels-last) against the direct loop's, in double: strides
// 1 and 2 (unequal too), paddings 0-3 (unequal too), 1x1, 3x3 and 7x7 kernels, output channels
// that leave a partial tile, reductions of one block and of several (3 x 14 x 14 = 588 pixels),
// one and two threads, and a dW past L2 (500 x 1152 floats, 2.3 MB: its 400 pixels one long block
// where the tile's kc takes two). Input channels are multiples of both tiles' NR (16 and 32). A
// wrong tap offset, a skipped padding row or a dropped block moves results by the size of the values.
TEST(ImplicitGemmWeightGrad, MatchesTheDirectWeightGradient) {
  expect_native_weight_gradient({{1, 128, 40, 40, 500, 3, 2, 2, 1, 1},
                                 {2, 32, 9, 7, 20, 3, 2, 2, 1, 1},
                                 {1, 64, 8, 8, 14, 1, 2, 2, 0, 0},
                                 {1, 32, 6, 5, 32, 3, 1, 1, 1, 1},
                                 {2, 32, 11, 10, 16, 7, 2, 2, 3, 3},
                                 {3, 32, 28, 28, 40, 3, 2, 2, 1, 1},
                                 {2, 64, 7, 9, 30, 3, 2, 1, 0, 1}},
                                conv::implicit_gemm_weight_grad_applies, conv::implicit_gemm_weight_grad, 41,
                                {1, 2});
  ConvShape odd;  // channels that are not whole slivers, grouped, dilated or NCHW: not taken
  odd.batch = 1, odd.in_channels = 8, odd.height = odd.width = 8, odd.out_channels = 16;
  odd.kernel_h = odd.kernel_w = 3, odd.layout = ActivationLayout::nhwc;
  EXPECT_FALSE(conv::implicit_gemm_weight_grad_applies(odd));
  odd.in_channels = 64, odd.groups = 2;
  EXPECT_FALSE(conv::implicit_gemm_weight_grad_applies(odd));
  odd.groups = 1, odd.dilation_h = 2;
  EXPECT_FALSE(conv::implicit_gemm_weight_grad_applies(odd));
  odd.dilation_h = 1, odd.layout = ActivationLayout::nchw;
  EXPECT_FALSE(conv::implicit_gemm_weight_grad_applies(odd));
  odd.layout = ActivationLayout::nhwc;
  EXPECT_TRUE(conv::implicit_gemm_weight_grad_applies(odd));
}

// The tap-major weight gradient (channels-last) against the direct loop's, in double: strides 1
// and 2 (unequal too), paddings 0-3 (unequal too), 1x1, 3x3 and 7x7 kernels (ResNet's stem: 3
// channels), kernel rows of KW x C values that leave a partial block of 6 (3 x 20, 3, 3 x 70, 7 x
// 3), one and several output-channel tiles,
// output rows of 1 to 28 pixels, one block of rows per image and several; 1, 2 and 3 threads (3
// threads on 2 images split the channel tiles too). A wrong tap offset, a skipped padding row or
// a dropped block moves results by the size of the values.
TEST(TapGemmWeightGrad, MatchesTheDirectWeightGradient) {
  expect_native_weight_gradient({{2, 20, 9, 7, 64, 3, 2, 2, 1, 1},
                                 {1, 3, 8, 8, 128, 1, 2, 2, 0, 0},
                                 {2, 16, 6, 5, 64, 3, 1, 1, 1, 1},
                                 {2, 6, 11, 10, 64, 7, 2, 2, 3, 3},
                                 {3, 12, 56, 56, 128, 3, 2, 2, 1, 1},
                                 {2, 70, 7, 9, 192, 3, 2, 1, 0, 1},
                                 {2, 8, 3, 3, 64, 3, 2, 2, 1, 1},
                                 {2, 3, 20, 18, 64, 7, 2, 2, 3, 3}},
                                conv::tap_gemm_weight_grad_applies, conv::tap_gemm_weight_grad, 43,
                                {1, 2, 3});
  ConvShape odd;  // output channels not whole 64-channel tiles, grouped, dilated or NCHW: not taken
  odd.batch = 1, odd.in_channels = 8, odd.height = odd.width = 8, odd.out_channels = 96;
  odd.kernel_h = odd.kernel_w = 3, odd.stride_h = odd.stride_w = 2, odd.layout = ActivationLayout::nhwc;
  EXPECT_FALSE(conv::tap_gemm_weight_grad_applies(odd));
  odd.out_channels = 128, odd.groups = 2;
  EXPECT_FALSE(conv::tap_gemm_weight_grad_applies(odd));
  odd.groups = 1, odd.dilation_h = 2;
  EXPECT_FALSE(conv::tap_gemm_weight_grad_applies(odd));
  odd.dilation_h = 1, odd.layout = ActivationLayout::nchw;
  EXPECT_FALSE(conv::tap_gemm_weight_grad_applies(odd));
  odd.layout = ActivationLayout::nhwc;
  EXPECT_TRUE(conv::tap_gemm_weight_grad_applies(odd));
  odd.in_channels = 256;  // more than 128 input channels: the implicit GEMM's
  EXPECT_FALSE(conv::tap_gemm_weight_grad_preferred(odd));
}

// The pointwise (1x1, channels-last) forward and backward-data passes against the direct loops,
// in double: strides 1, 2, 3 and 2x1, sizes a stride does not divide (7x7 -> 4x4 at stride 2,
// whose last row and column skip nothing; 10x9 at 3, which skips two trailing rows), two and
// three 64-column panels, pixel counts past one 48-pixel block, 1-3 threads, with and without
// bias (24 input channels: forward only), and each case again with the outputs streamed (64-byte aligned, the
// threshold lowered). The outputs start as NaN, so every skipped pixel the backward pass fails to zero shows.
TEST(PointwiseConv, MatchesTheDirectConvolution) {
  struct Case {
    std::int64_t batch, c, h, w, k, stride_h, stride_w;
  };
  const Case cases[] = {{2, 64, 7, 7, 128, 2, 2}, {1, 128, 10, 9, 64, 3, 3}, {3, 24, 8, 6, 192, 1, 1},
                        {2, 64, 9, 8, 64, 2, 1},  {1, 192, 5, 5, 128, 2, 2}, {2, 64, 15, 14, 64, 2, 2}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Case& t : cases)
    for (const bool streamed : {false, true}) {
      SCOPED_TRACE("c " + std::to_string(t.c) + " " + std::to_string(t.h) + "x" + std::to_string(t.w) +
                   " k " + std::to_string(t.k) + " stride " + std::to_string(t.stride_h) + "x" +
                   std::to_string(t.stride_w) + (streamed ? " streamed" : ""));
      ConvShape s;
      s.batch = t.batch, s.in_channels = t.c, s.height = t.h, s.width = t.w, s.out_channels = t.k;
      s.kernel_h = s.kernel_w = 1, s.stride_h = t.stride_h, s.stride_w = t.stride_w;
      const std::int64_t oh = s.out_height(), ow = s.out_width();
      const auto x = random_vector(static_cast<std::size_t>(t.batch * t.c * t.h * t.w), 51);
      const auto w = random_vector(static_cast<std::size_t>(t.k * t.c), 52);
      const auto bias = random_vector(static_cast<std::size_t>(t.k), 53);
      const auto dy = random_vector(static_cast<std::size_t>(t.batch * t.k * oh * ow), 54);
      const auto want_y = to_nhwc(reference::conv2d_forward(s, x, w, &bias), t.batch, t.k, oh, ow);
      const auto want_y_plain = to_nhwc(reference::conv2d_forward(s, x, w, nullptr), t.batch, t.k, oh, ow);
      const auto want_dx = to_nhwc(reference::conv2d_backward_data(s, dy, w), t.batch, t.c, t.h, t.w);
      s.layout = ActivationLayout::nhwc;
      ASSERT_TRUE(conv::pointwise_conv_forward_applies(s));
      const bool backward = t.c % 64 == 0;  // 24 input channels: the forward pass only
      ASSERT_EQ(conv::pointwise_conv_backward_data_applies(s), backward);
      const auto xc = to_nhwc(x, t.batch, t.c, t.h, t.w), dyc = to_nhwc(dy, t.batch, t.k, oh, ow);
      const std::size_t saved = kernels::g_streaming_store_bytes;
      if (streamed) kernels::g_streaming_store_bytes = 64;
      AlignedBuffer y_buffer, dx_buffer;
      float* y = y_buffer.get(want_y.size());
      float* dx = dx_buffer.get(want_dx.size());
      for (const int threads : {1, 2, 3}) {
        const cpudl::ThreadScope scope(threads);
        std::fill_n(y, want_y.size(), nan);
        std::fill_n(dx, want_dx.size(), nan);
        conv::pointwise_conv_forward(s, xc.data(), w.data(), bias.data(), y);
        expect_close(std::vector<float>(y, y + want_y.size()), want_y, 1e-5, "forward");
        conv::pointwise_conv_forward(s, xc.data(), w.data(), nullptr, y);
        expect_close(std::vector<float>(y, y + want_y.size()), want_y_plain, 1e-5, "forward without bias");
        if (!backward) continue;
        conv::pointwise_conv_backward_data(s, dyc.data(), w.data(), dx);
        expect_close(std::vector<float>(dx, dx + want_dx.size()), want_dx, 1e-5, "backward data");
      }
      kernels::g_streaming_store_bytes = saved;
    }
  ConvShape odd;  // padded, 3x3, grouped, NCHW or a partial 64-column panel: not taken
  odd.batch = 1, odd.in_channels = 64, odd.height = odd.width = 8, odd.out_channels = 64;
  odd.kernel_h = odd.kernel_w = 1, odd.stride_h = odd.stride_w = 2, odd.layout = ActivationLayout::nhwc;
  EXPECT_TRUE(conv::pointwise_conv_forward_applies(odd) && conv::pointwise_conv_backward_data_applies(odd));
  odd.pad_h = 1;
  EXPECT_FALSE(conv::pointwise_conv_forward_applies(odd) || conv::pointwise_conv_backward_data_applies(odd));
  odd.pad_h = 0, odd.kernel_h = 3;
  EXPECT_FALSE(conv::pointwise_conv_forward_applies(odd) || conv::pointwise_conv_backward_data_applies(odd));
  odd.kernel_h = 1, odd.groups = 2;
  EXPECT_FALSE(conv::pointwise_conv_forward_applies(odd) || conv::pointwise_conv_backward_data_applies(odd));
  odd.groups = 1, odd.layout = ActivationLayout::nchw;
  EXPECT_FALSE(conv::pointwise_conv_forward_applies(odd) || conv::pointwise_conv_backward_data_applies(odd));
  odd.layout = ActivationLayout::nhwc, odd.out_channels = 96;  // forward needs 64-column output panels
  EXPECT_FALSE(conv::pointwise_conv_forward_applies(odd));
  EXPECT_TRUE(conv::pointwise_conv_backward_data_applies(odd));
}

// A 1x1 convolution with oneDNN's fused depthwise 3x3 stage (MobileNet's expand + depthwise)
// against the two direct double-precision loops with the clamps between them: strides 1 and 2,
// odd sizes (7 -> 4 at stride 2), with and without the depthwise bias.
TEST(Conv2d, FusedDepthwiseStageMatchesTwoDirectConvolutions) {
  const std::int64_t block = onednn::blocked_layout_channels();
  struct Case {
    std::int64_t batch, c, h, w, k, stride;
    bool dw_bias;
  };
  const Case cases[] = {{2, 16, 8, 8, 32, 1, true},
                        {1, 8, 7, 7, 48, 2, true},
                        {3, 24, 6, 9, 16, 2, false},
                        {1, 32, 5, 5, 64, 1, false}};
  for (const Case& t : cases) {
    SCOPED_TRACE("batch " + std::to_string(t.batch) + " c " + std::to_string(t.c) + " " +
                 std::to_string(t.h) + "x" + std::to_string(t.w) + " k " + std::to_string(t.k) + " stride " +
                 std::to_string(t.stride));
    ConvShape pw;
    pw.batch = t.batch, pw.in_channels = t.c, pw.height = t.h, pw.width = t.w, pw.out_channels = t.k;
    pw.kernel_h = pw.kernel_w = 1;
    ConvShape dw = pw;
    dw.in_channels = t.k, dw.groups = t.k, dw.kernel_h = dw.kernel_w = 3, dw.pad_h = dw.pad_w = 1;
    dw.stride_h = dw.stride_w = t.stride;
    const auto x = random_vector(static_cast<std::size_t>(t.batch * t.c * t.h * t.w), 41);
    const auto w1 = random_vector(static_cast<std::size_t>(t.k * t.c), 42);
    const auto b1 = random_vector(static_cast<std::size_t>(t.k), 43);
    const auto w2 = random_vector(static_cast<std::size_t>(t.k * 9), 44);
    const auto b2 = random_vector(static_cast<std::size_t>(t.k), 45);
    auto mid = reference::conv2d_forward(pw, x, w1, &b1);
    for (float& v : mid) v = std::min(std::max(v, 0.0f), 0.5f);  // the pointwise ReLU6-like clamp
    auto want = reference::conv2d_forward(dw, mid, w2, t.dw_bias ? &b2 : nullptr);
    for (float& v : want) v = std::max(v, 0.0f);

    pw.layout = ActivationLayout::blocked;
    ASSERT_TRUE(onednn::depthwise_fusion_supported(pw, t.stride));
    onednn::DepthwiseStage stage;
    stage.stride = t.stride;
    stage.weights = w2.data();
    stage.bias = t.dw_bias ? b2.data() : nullptr;
    stage.activation = Activation::relu;
    onednn::ConvEpilogue e;
    e.activation = Activation::clip;
    e.clip_min = 0.0f, e.clip_max = 0.5f;
    e.depthwise = &stage;
    const std::int64_t oh = stage.out_size(t.h), ow = stage.out_size(t.w);
    ASSERT_EQ(oh, dw.out_height());
    ASSERT_EQ(ow, dw.out_width());
    std::vector<float> y(want.size(), 7.0f);
    conv2d_forward(pw, to_blocked(x, t.batch, t.c, t.h * t.w, block).data(), w1.data(), 5, b1.data(),
                   y.data(), e);
    expect_close(to_blocked(y, t.batch, t.k, oh * ow, block, true), want, 1e-4, "1x1 + depthwise");
  }
  ConvShape strided;  // the depthwise stage follows only a 1x1 stride-1 convolution
  strided.batch = 1, strided.in_channels = 8, strided.height = strided.width = 8, strided.out_channels = 8;
  strided.kernel_h = strided.kernel_w = 1, strided.stride_h = strided.stride_w = 2;
  strided.layout = ActivationLayout::blocked;
  EXPECT_FALSE(onednn::depthwise_fusion_supported(strided, 1));
  strided.stride_h = strided.stride_w = 1;
  EXPECT_FALSE(onednn::depthwise_fusion_supported(strided, 3));
}

TEST(Conv2d, SteadyLoopCreatesNoPrimitiveAndReordersWeightsOncePerVersion) {
  ConvShape s = conv_cases()[5].shape;
  s.layout = ActivationLayout::nhwc;
  const auto x = random_vector(static_cast<std::size_t>(s.batch * s.in_channels * s.height * s.width), 31);
  const auto w = random_vector(static_cast<std::size_t>(s.out_channels * s.in_channels), 32);
  std::vector<float> y(static_cast<std::size_t>(s.batch * s.out_channels * s.out_height() * s.out_width()));
  conv2d_forward(s, x.data(), w.data(), 7, nullptr, y.data());  // warm-up: creates and reorders
  const auto created = counters().primitives_created.load();
  const auto reorders = counters().reorders.load();
  for (int i = 0; i < 20; ++i) conv2d_forward(s, x.data(), w.data(), 7, nullptr, y.data());
  EXPECT_EQ(counters().primitives_created.load(), created);
  EXPECT_EQ(counters().reorders.load(), reorders);
  const auto before_bump = counters().reorders.load();
  conv2d_forward(s, x.data(), w.data(), 8, nullptr, y.data());  // weights changed: at most one reorder
  EXPECT_LE(counters().reorders.load(), before_bump + 1);
  // And the result is still right after the cached path.
  auto x_nchw = to_nchw(x, s.batch, s.in_channels, s.height, s.width);
  s.layout = ActivationLayout::nchw;
  expect_close(to_nchw(y, s.batch, s.out_channels, s.out_height(), s.out_width()),
               reference::conv2d_forward(s, x_nchw, w, nullptr), 1e-4, "cached forward");
}

TEST(Conv2d, BadShapesNameTheProblem) {
  ConvShape s = conv_cases()[0].shape;
  s.groups = 2;  // 3 input channels are not divisible by 2
  float v = 0;
  try {
    conv2d_forward(s, &v, &v, 0, nullptr, &v);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("groups must divide"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("conv2d [2x3x7x9]"), std::string::npos) << e.what();
  }
  s = conv_cases()[0].shape;
  s.kernel_h = 20;
  EXPECT_THROW(conv2d_forward(s, &v, &v, 0, nullptr, &v), Error);
}

// ----------------------------------------------------------------------------------- pooling
TEST(Pool2d, ForwardBackwardMatchReference) {
  struct Case {
    std::int64_t k, stride, pad;
    PoolKind kind;
  };
  const Case cases[] = {{2, 2, 0, PoolKind::max},
                        {3, 2, 1, PoolKind::max},
                        {3, 1, 1, PoolKind::avg_include_padding},
                        {3, 2, 1, PoolKind::avg_exclude_padding},
                        {2, 2, 0, PoolKind::avg_include_padding}};
  for (const Case& c : cases)
    for (ActivationLayout layout : {ActivationLayout::nchw, ActivationLayout::nhwc}) {
      PoolShape s;
      s.batch = 2, s.channels = 5, s.height = 9, s.width = 8;
      s.kernel_h = s.kernel_w = c.k, s.stride_h = s.stride_w = c.stride, s.pad_h = s.pad_w = c.pad;
      s.kind = c.kind, s.layout = layout;
      SCOPED_TRACE(testing::Message() << "k" << c.k << " s" << c.stride << " p" << c.pad << " kind "
                                      << static_cast<int>(c.kind) << " layout " << static_cast<int>(layout));
      const bool nhwc = layout == ActivationLayout::nhwc;
      const std::int64_t oh = s.out_height(), ow = s.out_width();
      const auto x = random_vector(static_cast<std::size_t>(2 * 5 * 9 * 8), 41);
      const auto dy = random_vector(static_cast<std::size_t>(2 * 5 * oh * ow), 42);
      std::vector<unsigned char> workspace(pool2d_workspace_bytes(s));
      std::vector<float> y(dy.size()), dx(x.size());
      const auto x_l = nhwc ? to_nhwc(x, 2, 5, 9, 8) : x;
      pool2d_forward(s, x_l.data(), y.data(), workspace.empty() ? nullptr : workspace.data());
      expect_close(nhwc ? to_nchw(y, 2, 5, oh, ow) : y, reference::pool2d_forward(s, x, nullptr), 1e-6,
                   "forward");
      const auto dy_l = nhwc ? to_nhwc(dy, 2, 5, oh, ow) : dy;
      pool2d_backward(s, dy_l.data(), workspace.empty() ? nullptr : workspace.data(), dx.data());
      expect_close(nhwc ? to_nchw(dx, 2, 5, 9, 8) : dx, reference::pool2d_backward(s, x, dy), 1e-6,
                   "backward");
    }
}

TEST(Pool2d, MaxBackwardWithoutWorkspaceIsAnError) {
  PoolShape s;
  s.batch = 1, s.channels = 1, s.height = 4, s.width = 4, s.kernel_h = s.kernel_w = 2,
  s.stride_h = s.stride_w = 2;
  float v[16] = {};
  EXPECT_THROW(pool2d_backward(s, v, nullptr, v), Error);
}

// -------------------------------------------------------------------------------- batch norm
TEST(BatchNorm, TrainingInferenceAndBackwardMatchFormulas) {
  for (ActivationLayout layout : {ActivationLayout::nchw, ActivationLayout::nhwc}) {
    BatchNormShape s;
    s.batch = 3, s.channels = 4, s.height = 5, s.width = 6, s.layout = layout;
    const std::int64_t C = 4, HW = 30, M = 3 * 30;
    const auto x = random_vector(static_cast<std::size_t>(3 * C * HW), 51, -2.0f, 3.0f);
    const auto scale = random_vector(4, 52, 0.5f, 1.5f), shift = random_vector(4, 53);
    const auto dy = random_vector(x.size(), 54);
    const bool nhwc = layout == ActivationLayout::nhwc;
    auto in = [&](const std::vector<float>& v) { return nhwc ? to_nhwc(v, 3, C, 5, 6) : v; };
    auto out = [&](const std::vector<float>& v) { return nhwc ? to_nchw(v, 3, C, 5, 6) : v; };

    std::vector<double> mean(4, 0), var(4, 0);
    for (std::size_t i = 0; i < x.size(); ++i) mean[(i / HW) % C] += x[i] / static_cast<double>(M);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double d = x[i] - mean[(i / HW) % C];
      var[(i / HW) % C] += d * d / static_cast<double>(M);
    }
    std::vector<float> y_want(x.size()), xhat(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::size_t c = (i / HW) % C;
      xhat[i] = static_cast<float>((x[i] - mean[c]) / std::sqrt(var[c] + s.epsilon));
      y_want[i] = scale[c] * xhat[i] + shift[c];
    }

    std::vector<float> y(x.size()), m(4), v(4);
    batch_norm_forward_training(s, in(x).data(), scale.data(), shift.data(), y.data(), m.data(), v.data());
    expect_close(out(y), y_want, 1e-5, "training forward");
    expect_close(m, std::vector<float>(mean.begin(), mean.end()), 1e-6, "mean");
    expect_close(v, std::vector<float>(var.begin(), var.end()), 1e-5, "biased variance");

    std::vector<float> yi(x.size());
    batch_norm_forward_inference(s, in(x).data(), scale.data(), shift.data(), m.data(), v.data(), yi.data(),
                                 Activation::relu);
    std::vector<float> relu_want(y_want);
    for (auto& t : relu_want) t = std::max(0.0f, t);
    expect_close(out(yi), relu_want, 1e-5, "inference + relu");

    std::vector<double> sum_dy(4, 0), sum_dy_xhat(4, 0);
    for (std::size_t i = 0; i < x.size(); ++i) {
      sum_dy[(i / HW) % C] += dy[i];
      sum_dy_xhat[(i / HW) % C] += dy[i] * xhat[i];
    }
    std::vector<float> dx_want(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::size_t c = (i / HW) % C;
      const double rstd = 1.0 / std::sqrt(var[c] + s.epsilon);
      dx_want[i] = static_cast<float>(
          scale[c] * rstd *
          (dy[i] - sum_dy[c] / static_cast<double>(M) - xhat[i] * sum_dy_xhat[c] / static_cast<double>(M)));
    }
    std::vector<float> dx(x.size()), dscale(4), dshift(4);
    batch_norm_backward(s, in(x).data(), in(dy).data(), scale.data(), shift.data(), m.data(), v.data(),
                        dx.data(), dscale.data(), dshift.data());
    expect_close(out(dx), dx_want, 1e-4, "backward data");
    expect_close(dscale, std::vector<float>(sum_dy_xhat.begin(), sum_dy_xhat.end()), 1e-4, "dscale");
    expect_close(dshift, std::vector<float>(sum_dy.begin(), sum_dy.end()), 1e-5, "dshift");
  }
}

}  // namespace
}  // namespace cpudl::onednn
