// Every kernel variant this CPU can run, against the scalar reference, over edge sizes and
// unaligned starts. Variants above the machine's level are skipped, never executed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string_view>

#include "kernels/conv/conv.h"
#include "kernels/dispatch.h"
#include "kernels/pointwise/pointwise.h"
#include "kernels/pool/pool.h"
#include "kernels/winograd/winograd.h"
#include "runtime/parallel.h"

namespace cpudl::kernels {
namespace {

const IsaLevel kMachineLevel = runtime().isa.detected;

// 0, 1, around every vector width and unroll (8, 16, 32, 64), and a few odd large sizes.
const std::size_t kSizes[] = {0,  1,  2,  3,  7,  8,  9,   15,  16,  17,   31,
                              32, 33, 47, 63, 64, 65, 127, 128, 129, 1000, 4097};

std::vector<float> random_values(std::size_t n, unsigned seed, bool specials) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> v(n + 1);  // +1: tests start at offset 1 for unaligned access
  for (auto& x : v) x = dist(gen);
  if (specials && n > 4) {
    v[1] = -0.0f;
    v[2] = std::numeric_limits<float>::quiet_NaN();
    v[3] = -std::numeric_limits<float>::infinity();
    v[n] = std::numeric_limits<float>::denorm_min();
  }
  return v;
}

bool same_bits_or_both_nan(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof a) == 0;
}

template <class Fn, class Check>
void for_each_runnable(const std::vector<KernelVariant<Fn>>& variants, Check check) {
  int ran = 0;
  for (const auto& variant : variants) {
    if (variant.level > kMachineLevel) continue;
    SCOPED_TRACE(variant.name);
    check(variant.fn);
    ++ran;
  }
  EXPECT_GE(ran, 1);
}

void check_binary(const std::vector<KernelVariant<F32BinaryFn>>& variants, F32BinaryFn reference) {
  for_each_runnable(variants, [&](F32BinaryFn fn) {
    for (std::size_t n : kSizes) {
      const auto a = random_values(n, 1, true), b = random_values(n, 2, false);
      std::vector<float> expected(n + 2, 7.0f), got(n + 2, 7.0f);
      reference(a.data() + 1, b.data() + 1, expected.data() + 1, n);
      fn(a.data() + 1, b.data() + 1, got.data() + 1, n);
      for (std::size_t i = 0; i < n + 2; ++i)  // includes one guard element on each side
        ASSERT_TRUE(same_bits_or_both_nan(got[i], expected[i])) << "n=" << n << " i=" << i;
    }
  });
}

TEST(Kernels, F32AddMatchesReference) { check_binary(f32_add_variants(), f32_add_variants().back().fn); }
TEST(Kernels, F32AddReluMatchesReference) {
  check_binary(f32_add_relu_variants(), f32_add_relu_variants().back().fn);
}
// The fused join is the two-op form exactly: relu's reference applied to add's.
TEST(Kernels, AddReluReferenceIsReluOfAdd) {
  const std::size_t n = 1000;
  auto a = random_values(n, 3, true), b = random_values(n, 4, false);
  a[0] = NAN, b[1] = -a[1];  // NaN kept; a zero sum stays zero
  std::vector<float> fused(n), sum(n), two_ops(n);
  f32_add_relu_variants().back().fn(a.data(), b.data(), fused.data(), n);
  f32_add_variants().back().fn(a.data(), b.data(), sum.data(), n);
  f32_relu_variants().back().fn(sum.data(), two_ops.data(), n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits_or_both_nan(fused[i], two_ops[i])) << i;
}
// The transpose moves bits: every variant must equal the loop exactly, for every edge of the
// 8 x 8 tiles, with leading dimensions wider than the matrix, and must not write past it.
TEST(Kernels, F32TransposeMatchesReference) {
  const std::size_t dims[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65};
  for_each_runnable(f32_transpose_variants(), [&](F32TransposeFn fn) {
    for (std::size_t rows : dims)
      for (std::size_t cols : dims) {
        const std::size_t ld_src = cols + 3, ld_dst = rows + 5;
        const auto src = random_values(rows * ld_src, static_cast<unsigned>(rows * 131 + cols), false);
        std::vector<float> got(cols * ld_dst, 7.0f);
        fn(src.data(), rows, cols, ld_src, got.data(), ld_dst);
        for (std::size_t j = 0; j < cols; ++j)
          for (std::size_t i = 0; i < ld_dst; ++i) {
            const float want = i < rows ? src[i * ld_src + j] : 7.0f;  // padding untouched
            ASSERT_EQ(got[j * ld_dst + i], want) << rows << "x" << cols << " at " << i << "," << j;
          }
      }
    // Packed rows on the narrow side (a channels-last image with fewer than 8 channels, either
    // direction), in buffers of exactly their size: the 8-lane loads and stores that run into
    // the next row must stop before the end (ASan checks).
    for (std::size_t few = 1; few < 8; ++few)
      for (std::size_t many : {1, 7, 8, 9, 15, 16, 17, 33, 784}) {
        const auto values = random_values(few * many, static_cast<unsigned>(few * 1000 + many), false);
        const std::vector<float> src(values.begin(),
                                     values.begin() + static_cast<std::ptrdiff_t>(few * many));
        std::vector<float> to_last(few * many, 7.0f), back(few * many, 7.0f);
        fn(src.data(), few, many, many, to_last.data(), few);  // [few x many] -> [many x few]
        for (std::size_t j = 0; j < many; ++j)
          for (std::size_t i = 0; i < few; ++i)
            ASSERT_EQ(to_last[j * few + i], src[i * many + j])
                << few << "x" << many << " at " << i << "," << j;
        fn(to_last.data(), many, few, few, back.data(), many);  // and back
        ASSERT_EQ(back, src) << few << "x" << many;
      }
  });
}

// A pooling window of square kernel, stride and padding over a height x width image.
PoolWindow square_pool_window(std::size_t channels, std::size_t height, std::size_t width, std::size_t kernel,
                              std::size_t stride, std::size_t pad) {
  return {channels,
          height,
          width,
          (height + 2 * pad - kernel) / stride + 1,
          (width + 2 * pad - kernel) / stride + 1,
          kernel,
          kernel,
          stride,
          stride,
          pad,
          pad};
}

// Channels-last max pooling: values and argmax taps bit-equal to the reference, for channel
// counts around the vector width, padded and overlapping windows, and NaN (which wins and stays).
TEST(Kernels, F32MaxPoolNhwcMatchesReference) {
  const auto reference = f32_max_pool_nhwc_variants().back().fn;
  struct Geometry {
    std::size_t height, width, kernel, stride, pad;
  };
  const Geometry geometries[] = {
      {6, 8, 2, 2, 0}, {7, 7, 3, 2, 1}, {5, 5, 3, 1, 1}, {9, 4, 3, 3, 0}, {1, 1, 1, 1, 0}};
  for_each_runnable(f32_max_pool_nhwc_variants(), [&](MaxPoolNhwcFn fn) {
    for (std::size_t channels : {1, 3, 6, 7, 8, 9, 15, 16, 17}) {
      for (const Geometry& g : geometries) {
        const PoolWindow w = square_pool_window(channels, g.height, g.width, g.kernel, g.stride, g.pad);
        auto src = random_values(g.height * g.width * channels,
                                 static_cast<unsigned>(channels * 7 + g.height), false);
        src.resize(g.height * g.width *
                   channels);  // exact size: loads past the image would be caught by ASan
        if (src.size() > 5) src[5] = std::numeric_limits<float>::quiet_NaN();
        const std::size_t outputs = w.out_h * w.out_w * channels;
        std::vector<float> want(outputs), got(outputs);
        std::vector<std::uint8_t> want_arg(outputs), got_arg(outputs);
        reference(w, src.data(), want.data(), want_arg.data());
        fn(w, src.data(), got.data(), got_arg.data());
        for (std::size_t i = 0; i < outputs; ++i) {
          ASSERT_TRUE(same_bits_or_both_nan(got[i], want[i])) << "channels " << channels << " output " << i;
          ASSERT_EQ(got_arg[i], want_arg[i]) << "channels " << channels << " output " << i;
        }
        std::vector<float> no_arg(outputs);
        fn(w, src.data(), no_arg.data(), nullptr);
        for (std::size_t i = 0; i < outputs; ++i) ASSERT_TRUE(same_bits_or_both_nan(no_arg[i], want[i]));
      }
    }
  });
}

// uint8 channels-last max pooling: every variant equal to the reference, for channel counts
// around the 64-byte vector, padded (windows whose taps are partly outside), overlapping and
// gapped windows; the source exactly its size (ASan catches a load past it).
TEST(Kernels, U8MaxPoolNhwcMatchesReference) {
  const auto reference = u8_max_pool_nhwc_variants().back().fn;
  struct Geometry {
    std::size_t height, width, kernel, stride, pad;
  };
  const Geometry geometries[] = {{6, 8, 2, 2, 0}, {7, 7, 3, 2, 1}, {5, 5, 3, 1, 1},
                                 {9, 4, 3, 3, 0}, {1, 1, 1, 1, 0}, {8, 8, 2, 3, 0}};
  std::mt19937 rng(7);
  for_each_runnable(u8_max_pool_nhwc_variants(), [&](U8MaxPoolNhwcFn fn) {
    for (std::size_t channels : {1, 6, 16, 63, 64, 65, 130}) {
      for (const Geometry& g : geometries) {
        const PoolWindow w = square_pool_window(channels, g.height, g.width, g.kernel, g.stride, g.pad);
        std::vector<std::uint8_t> src(g.height * g.width * channels);
        for (auto& v : src) v = static_cast<std::uint8_t>(rng());
        const std::size_t outputs = w.out_h * w.out_w * channels;
        std::vector<std::uint8_t> want(outputs, 0xAA), got(outputs, 0x55);
        reference(w, src.data(), want.data());
        fn(w, src.data(), got.data());
        ASSERT_EQ(got, want) << "channels " << channels << ", " << g.height << "x" << g.width << " kernel "
                             << g.kernel << " stride " << g.stride << " pad " << g.pad;
      }
    }
  });
  // The reference itself, against a float pool of the same values.
  const PoolWindow w = square_pool_window(6, 7, 7, 3, 2, 1);
  std::vector<std::uint8_t> src(7 * 7 * 6);
  for (auto& v : src) v = static_cast<std::uint8_t>(rng());
  std::vector<float> as_float(src.begin(), src.end()), pooled(w.out_h * w.out_w * 6);
  f32_max_pool_nhwc__ref(w, as_float.data(), pooled.data(), nullptr);
  std::vector<std::uint8_t> got(pooled.size());
  reference(w, src.data(), got.data());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(static_cast<float>(got[i]), pooled[i]) << i;
}

// Channels-last max-pool backward: every variant bit-equal to the reference's zero-fill and
// scatter-add, for windows that tile the image, overlap, pad, leave edge rows uncovered or gaps
// between them (stride > kernel); argmax taps drawn at random, gradients with -0 and NaN.
TEST(Kernels, F32MaxPoolNhwcBackwardMatchesReference) {
  const auto reference = f32_max_pool_nhwc_backward_variants().back().fn;
  struct Geometry {
    std::size_t height, width, kernel, stride, pad;
  };
  const Geometry geometries[] = {{6, 8, 2, 2, 0}, {7, 7, 3, 2, 1}, {5, 5, 3, 1, 1}, {9, 4, 3, 3, 0},
                                 {7, 9, 2, 2, 0}, {1, 1, 1, 1, 0}, {8, 7, 2, 3, 0}, {9, 8, 3, 2, 0}};
  for_each_runnable(f32_max_pool_nhwc_backward_variants(), [&](MaxPoolNhwcBackwardFn fn) {
    for (std::size_t channels : {1, 3, 6, 15, 16, 17, 40}) {
      for (const Geometry& g : geometries) {
        SCOPED_TRACE("channels " + std::to_string(channels) + " kernel " + std::to_string(g.kernel) +
                     " stride " + std::to_string(g.stride) + " pad " + std::to_string(g.pad));
        const PoolWindow w = square_pool_window(channels, g.height, g.width, g.kernel, g.stride, g.pad);
        const std::size_t outputs = w.out_h * w.out_w * channels, inputs = g.height * g.width * channels;
        auto dy = random_values(outputs, static_cast<unsigned>(channels * 5 + g.width), false);
        dy.resize(outputs);  // exact sizes: ASan catches reads past either
        dy[0] = -0.0f;
        if (outputs > 3) dy[3] = std::numeric_limits<float>::quiet_NaN();
        // Taps inside the image only, as the forward pass records them.
        std::vector<std::uint8_t> arg(outputs);
        std::mt19937 rng(static_cast<unsigned>(channels + g.height));
        for (std::size_t oh = 0; oh < w.out_h; ++oh)
          for (std::size_t ow = 0; ow < w.out_w; ++ow)
            for (std::size_t k = 0; k < channels; ++k) {
              std::vector<std::uint8_t> inside;
              for (std::size_t kh = 0; kh < g.kernel; ++kh)
                for (std::size_t kw = 0; kw < g.kernel; ++kw) {
                  const std::size_t ih = oh * g.stride + kh, iw = ow * g.stride + kw;
                  if (ih >= g.pad && ih - g.pad < g.height && iw >= g.pad && iw - g.pad < g.width)
                    inside.push_back(static_cast<std::uint8_t>(kh * g.kernel + kw));
                }
              arg[(oh * w.out_w + ow) * channels + k] = inside[rng() % inside.size()];
            }
        std::vector<float> want(inputs, 7.0f), got(inputs, 7.0f);  // 7: unwritten entries show
        reference(w, dy.data(), arg.data(), want.data());
        fn(w, dy.data(), arg.data(), got.data());
        for (std::size_t i = 0; i < inputs; ++i)
          ASSERT_TRUE(same_bits_or_both_nan(got[i], want[i]))
              << "input " << i << ": " << got[i] << " vs " << want[i];
      }
    }
  });
}

// Few-input-channel weight gradients: every variant against the reference loop (to float
// rounding: the variants sum in a different order), over channel counts around the vector
// width, padding, stride and dilation; scratch lanes past OC are never read back.
TEST(Kernels, F32ConvBackwardWeightsNhwcMatchesReference) {
  const auto reference = f32_conv_backward_weights_nhwc_variants().back().fn;
  struct Case {
    std::size_t ic, h, w, oc, k, stride, pad, dilation;
  };
  const Case cases[] = {{1, 28, 28, 32, 3, 1, 0, 1}, {1, 28, 28, 6, 5, 1, 2, 1}, {3, 9, 7, 16, 3, 2, 1, 1},
                        {2, 6, 6, 33, 3, 1, 1, 2},   {4, 5, 8, 8, 1, 1, 0, 1},   {3, 7, 7, 70, 7, 2, 3, 1},
                        {1, 1, 1, 5, 3, 1, 1, 1}};
  for_each_runnable(f32_conv_backward_weights_nhwc_variants(), [&](ConvBackwardWeightsFn fn) {
    for (const Case& c : cases) {
      SCOPED_TRACE("ic " + std::to_string(c.ic) + " oc " + std::to_string(c.oc) + " k " +
                   std::to_string(c.k));
      const std::size_t oh = (c.h + 2 * c.pad - c.dilation * (c.k - 1) - 1) / c.stride + 1;
      const std::size_t ow = (c.w + 2 * c.pad - c.dilation * (c.k - 1) - 1) / c.stride + 1;
      const ConvWindow win{c.ic, c.h,      c.w,      c.oc,  oh,    ow,         c.k,
                           c.k,  c.stride, c.stride, c.pad, c.pad, c.dilation, c.dilation};
      auto x = random_values(c.h * c.w * c.ic, static_cast<unsigned>(c.oc), false);
      auto dy = random_values(oh * ow * c.oc, static_cast<unsigned>(c.oc + 1), false);
      x.resize(c.h * c.w * c.ic);  // exact sizes: ASan catches reads past either
      dy.resize(oh * ow * c.oc);
      const std::size_t pad = conv_padded_channels(c.oc), taps = c.k * c.k * c.ic;
      std::vector<float> want_w(taps * pad, 0.5f), got_w(taps * pad, 0.5f), want_b(pad, 0.25f),
          got_b(pad, 0.25f);
      reference(win, x.data(), dy.data(), want_w.data(), want_b.data());
      fn(win, x.data(), dy.data(), got_w.data(), got_b.data());
      for (std::size_t t = 0; t < taps; ++t)
        for (std::size_t o = 0; o < c.oc; ++o)
          ASSERT_NEAR(got_w[t * pad + o], want_w[t * pad + o], 1e-3f * (1 + std::fabs(want_w[t * pad + o])))
              << "tap " << t << " channel " << o;
      for (std::size_t o = 0; o < c.oc; ++o)
        ASSERT_NEAR(got_b[o], want_b[o], 1e-3f * (1 + std::fabs(want_b[o])));
    }
  });
}

// The planar first-layer kernels (conv.h) against their reference loops, over channel counts
// around the vector width, row widths below, at and past multiples of 8 and 16, and with and without
// the fused ReLU. Buffers are exact (ASan catches a read past x or dy); outputs carry guard values.
struct PlanesCase {
  std::size_t ic, oc, out_h, out_w, k;
};
constexpr PlanesCase kPlanesCases[] = {{1, 32, 26, 26, 3}, {1, 6, 28, 28, 5}, {3, 70, 5, 9, 3},
                                       {4, 8, 3, 16, 1},   {2, 13, 4, 7, 3},  {1, 1, 2, 8, 2},
                                       {2, 11, 3, 17, 2},  {3, 9, 4, 33, 3},  {1, 17, 5, 48, 7}};

ConvPlanes planes_of(const PlanesCase& c) {
  const std::size_t x_ld = conv_planes_row(c.out_w, c.k);
  return {c.ic, c.oc, c.out_h, c.out_w, c.k, c.k, x_ld, (c.out_h + c.k - 1) * x_ld};
}

TEST(Kernels, F32ConvForwardPlanesMatchesReference) {
  const auto reference = f32_conv_forward_planes_variants().back().fn;
  for_each_runnable(f32_conv_forward_planes_variants(), [&](ConvForwardPlanesFn fn) {
    for (const PlanesCase& c : kPlanesCases)
      for (const bool relu : {false, true}) {
        SCOPED_TRACE("ic " + std::to_string(c.ic) + " oc " + std::to_string(c.oc) + " w " +
                     std::to_string(c.out_w) + (relu ? " relu" : ""));
        const ConvPlanes p = planes_of(c);
        const std::size_t taps = c.ic * c.k * c.k, oc_pad = conv_padded_channels(c.oc);
        auto x = random_values(c.ic * p.x_plane, static_cast<unsigned>(c.oc), false);
        x.resize(c.ic * p.x_plane);
        std::vector<float> w = random_values(oc_pad * taps, 3, false), bias = random_values(oc_pad, 4, false);
        w.resize(oc_pad * taps);
        bias.resize(oc_pad);
        for (std::size_t oc = c.oc; oc < oc_pad; ++oc) {  // the packing's zero lanes
          bias[oc] = 0.0f;
          for (std::size_t t = 0; t < taps; ++t) w[(oc / 8) * taps * 8 + t * 8 + oc % 8] = 0.0f;
        }
        const std::size_t out = c.oc * c.out_h * c.out_w;
        std::vector<float> want(out + 8, 9.0f), got(out + 8, 9.0f);
        reference(p, x.data(), w.data(), bias.data(), relu, want.data());
        fn(p, x.data(), w.data(), bias.data(), relu, got.data());
        std::size_t negative = 0;
        for (std::size_t i = 0; i < out + 8; ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::fabs(want[i]))) << i;
          negative += want[i] < 0.0f;
        }
        EXPECT_EQ(negative == 0, relu);  // the case exercises the ReLU
      }
  });
}

// The pointwise tile against the reference: every row count (0-6: 0 clears the zero region
// only), k around the 16-step side-work slots, with and without bias, per-row gaps of 0-2 zero
// blocks, a zero region (a tail shorter than a vector when not streaming), and the streaming
// stores. The output buffer is compared whole, so a store outside the rows, gaps and region, or
// a missing one, fails; the fetched rows must not change anything.
TEST(Kernels, F32PointwiseTileMatchesReference) {
  const auto reference = f32_pointwise_tile_variants().back().fn;
  for_each_runnable(f32_pointwise_tile_variants(), [&](PointwiseTileFn fn) {
    constexpr int kCols = kPointwiseColumns;
    const std::int64_t lda = 2 * 130 + 3, row_floats = 5 * kCols, gap_stride = 80;
    const auto a = random_values(kPointwiseMaxRows * lda, 21, false);
    const auto b = random_values(130 * kCols, 22, false), bias = random_values(kCols, 23, false);
    const int gaps[kPointwiseMaxRows] = {1, 0, 2, 1, 2, 0};
    for (const bool stream : {false, true})
      for (int rows = 0; rows <= kPointwiseMaxRows; ++rows)
        for (const std::int64_t k : {0, 1, 15, 16, 17, 64, 130})
          for (const bool with_bias : {false, true})
            for (const std::int64_t zero_floats : {0, 16, 160, 37}) {
              if (stream && zero_floats % 16) continue;
              SCOPED_TRACE("rows " + std::to_string(rows) + " k " + std::to_string(k) + " zero " +
                           std::to_string(zero_floats) + (stream ? " streamed" : "") +
                           (with_bias ? " bias" : ""));
              // Rows, then the zero region, in one 64-byte aligned buffer of 7s.
              const std::size_t floats = kPointwiseMaxRows * row_floats + 256 + 16;
              std::vector<float> want_buffer(floats + 16, 7.0f), got_buffer(floats + 16, 7.0f);
              auto aligned = [](std::vector<float>& v) {
                const auto at = reinterpret_cast<std::uintptr_t>(v.data());
                return v.data() + (64 - at % 64) % 64 / sizeof(float);
              };
              auto run = [&](PointwiseTileFn f, float* base) {
                const float* a_rows[kPointwiseMaxRows];
                float* c_rows[kPointwiseMaxRows];
                for (int i = 0; i < kPointwiseMaxRows; ++i) {
                  a_rows[i] = a.data() + 1 + i * lda;
                  c_rows[i] = base + i * row_floats;
                }
                PointwiseTileArgs t{};
                t.k = k, t.a = a_rows, t.b = b.data() + 1, t.bias = with_bias ? bias.data() + 1 : nullptr;
                t.c = c_rows, t.rows = rows, t.gaps = gaps, t.gap_stride = gap_stride;
                t.zero = base + kPointwiseMaxRows * row_floats + 16, t.zero_floats = zero_floats;
                t.stream = stream, t.prefetch = a_rows, t.prefetch_rows = kPointwiseMaxRows;
                f(t);
              };
              float* want = aligned(want_buffer);
              float* got = aligned(got_buffer);
              run(reference, want);
              run(fn, got);
              for (std::size_t i = 0; i < floats; ++i)
                ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::fabs(want[i]))) << i;
            }
  });
}

// The tap-major weight gradient's block against the reference: every row count (1-6), runs of
// 0 to 17 pixels over 0 to 3 rows, x and dy strided as the driver reads them (x: pixels 2 x 40
// floats apart, rows further; dy: a panel with rows of 9 pixels), accumulating into a C block that
// starts non-zero.
TEST(Kernels, F32ConvWeightGradTapsMatchesReference) {
  const auto reference = f32_conv_weight_grad_taps_variants().back().fn;
  for_each_runnable(f32_conv_weight_grad_taps_variants(), [&](TapGemmFn fn) {
    const std::int64_t x_step = 80, x_row = 2000, dy_row = 9 * kTapGemmColumns;
    const auto x = random_values(4 * x_row, 11, false), dy = random_values(4 * dy_row, 12, false);
    for (int rows = 1; rows <= kTapGemmMaxRows; ++rows)
      for (const std::int64_t pixels : {0, 1, 5, 9})
        for (const std::int64_t row_count : {0, 1, 3}) {
          SCOPED_TRACE("rows " + std::to_string(rows) + " pixels " + std::to_string(pixels) + " x " +
                       std::to_string(row_count));
          TapGemmArgs a{x.data() + 1, x_step, x_row,     dy.data() + 3, kTapGemmColumns,
                        dy_row,       pixels, row_count, rows,          nullptr};
          std::vector<float> want = random_values(kTapGemmMaxRows * kTapGemmColumns, 13, false);
          std::vector<float> got = want;
          a.c = want.data();
          reference(a);
          a.c = got.data();
          fn(a);
          for (std::size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::fabs(want[i]))) << i;
        }
  });
}

TEST(Kernels, F32ConvBackwardWeightsPlanesMatchesReference) {
  const auto reference = f32_conv_backward_weights_planes_variants().back().fn;
  for_each_runnable(f32_conv_backward_weights_planes_variants(), [&](ConvBackwardWeightsPlanesFn fn) {
    for (const PlanesCase& c : kPlanesCases)
      for (const bool masked : {false, true}) {
        SCOPED_TRACE("ic " + std::to_string(c.ic) + " oc " + std::to_string(c.oc) + " w " +
                     std::to_string(c.out_w) + (masked ? " masked" : ""));
        const ConvPlanes p = planes_of(c);
        const std::size_t taps = c.ic * c.k * c.k, out = c.oc * c.out_h * c.out_w;
        auto x = random_values(c.ic * p.x_plane, static_cast<unsigned>(c.oc + 5), false);
        auto dy = random_values(out, 6, false), y = random_values(out, 7, false);
        x.resize(c.ic * p.x_plane);
        dy.resize(out);
        y.resize(out);
        std::vector<float> want_w(c.oc * taps, 0.5f), got_w = want_w, want_b(c.oc, 0.25f), got_b = want_b;
        reference(p, x.data(), dy.data(), masked ? y.data() : nullptr, want_w.data(), want_b.data());
        fn(p, x.data(), dy.data(), masked ? y.data() : nullptr, got_w.data(), got_b.data());
        for (std::size_t i = 0; i < want_w.size(); ++i)
          ASSERT_NEAR(got_w[i], want_w[i], 1e-3f * (1 + std::fabs(want_w[i]))) << i;
        for (std::size_t o = 0; o < c.oc; ++o)
          ASSERT_NEAR(got_b[o], want_b[o], 1e-3f * (1 + std::fabs(want_b[o])));
        std::vector<float> no_bias(c.oc * taps, 0.5f);  // db may be null
        fn(p, x.data(), dy.data(), masked ? y.data() : nullptr, no_bias.data(), nullptr);
        for (std::size_t i = 0; i < no_bias.size(); ++i)
          ASSERT_NEAR(no_bias[i], want_w[i], 1e-3f * (1 + std::fabs(want_w[i]))) << i;
      }
  });
}

// Narrow linear kernels (narrow.h) against their references: rows around the register blocks
// (3, 4, 8), columns around the vector width and past a chunk (1024), 1 to 16 outputs, and a
// row stride wider than k (a column range, as threads split the weight gradient). Outputs past
// each row's k columns must stay untouched.
// Each Winograd kernel against its reference (transforms written as matrix products there):
// partial tiles, paddings 0-2, both layout blocks and channels-last (block 0 here), partial tile
// ranges and output-channel ranges.
TEST(Kernels, WinogradKernelsMatchReference) {
  struct Case {
    std::size_t batch, c, h, w, k, pad, block;
  };
  const Case cases[] = {{1, 8, 6, 6, 16, 0, 8}, {2, 16, 9, 11, 32, 1, 8}, {1, 32, 7, 13, 48, 2, 16},
                        {3, 8, 5, 4, 16, 1, 8}, {2, 24, 9, 7, 32, 1, 0},  {1, 16, 6, 10, 48, 2, 0}};
  const auto& gemm = f32_winograd_gemm_variants();
  for (const std::size_t tile : {4, 2}) {
    const auto& input = tile == 4 ? f32_winograd_input_4x3_variants() : f32_winograd_input_2x3_variants();
    const auto& output = tile == 4 ? f32_winograd_output_4x3_variants() : f32_winograd_output_2x3_variants();
    const std::size_t positions = (tile + 2) * (tile + 2);
    for (std::size_t v = 0; v + 1 < input.size(); ++v) {
      if (input[v].level > kMachineLevel) continue;
      SCOPED_TRACE(input[v].name);
      for (const Case& c : cases) {
        const std::size_t oh = c.h + 2 * c.pad - 2, ow = c.w + 2 * c.pad - 2, th = (oh + tile - 1) / tile,
                          tw = (ow + tile - 1) / tile;
        const bool channels_last = c.block == 0;
        const WinogradShape s{
            c.c, c.k, c.h, c.w, oh, ow, c.pad, channels_last ? c.c : c.block, channels_last ? c.k : c.block,
            th,  tw};
        const std::size_t tiles = c.batch * th * tw, first = tiles > 2 ? 1 : 0, count = tiles - first,
                          rows = count + 3;
        SCOPED_TRACE("c " + std::to_string(c.c) + " " + std::to_string(c.h) + "x" + std::to_string(c.w) +
                     " pad " + std::to_string(c.pad) + " tiles " + std::to_string(count) +
                     (channels_last ? " channels-last" : ""));
        const auto x = random_values(c.batch * c.c * c.h * c.w, 41, false);
        std::vector<float> want_v(positions * (rows * c.c + kWinogradPositionPad), 3.0f), got_v = want_v;
        input.back().fn(s, x.data(), first, count, want_v.data(), rows);
        input[v].fn(s, x.data(), first, count, got_v.data(), rows);
        // The transform sums inputs with weights up to 25 and cancels: error relative to its scale.
        float v_scale = 0;
        for (const float value : want_v) v_scale = std::max(v_scale, std::fabs(value));
        for (std::size_t i = 0; i < want_v.size(); ++i)
          ASSERT_NEAR(got_v[i], want_v[i], 1e-6f * v_scale) << "input transform " << i;

        // Aligned weight panels (the kernels load them with aligned loads).
        std::vector<float> u_storage(positions * c.c * c.k + 16);
        float* u = u_storage.data() + (32 - reinterpret_cast<std::uintptr_t>(u_storage.data()) % 32) % 32 / 4;
        const auto u_values = random_values(positions * c.c * c.k, 42, false);
        std::copy(u_values.begin(), u_values.end(), u);
        const std::size_t k_begin = c.k > 16 ? 16 : 0;
        std::vector<float> want_m(positions * (rows * c.k + kWinogradPositionPad), 5.0f), got_m = want_m;
        gemm.back().fn(positions, want_v.data(), u, want_m.data(), count, rows, c.c, c.k, k_begin, c.k);
        for (std::size_t g = 0; g + 1 < gemm.size(); ++g) {  // every product variant (AVX-512 too)
          if (gemm[g].level > kMachineLevel) continue;
          std::fill(got_m.begin(), got_m.end(), 5.0f);
          gemm[g].fn(positions, want_v.data(), u, got_m.data(), count, rows, c.c, c.k, k_begin, c.k);
          for (std::size_t i = 0; i < want_m.size(); ++i)
            ASSERT_NEAR(got_m[i], want_m[i], 1e-4f * (1 + std::fabs(want_m[i]))) << gemm[g].name << " " << i;
        }

        const auto bias = random_values(c.k, 43, false);
        const auto residual = random_values(c.batch * c.k * oh * ow, 44, false);
        for (const bool epilogue : {false, true}) {
          const WinogradEpilogue e = epilogue ? WinogradEpilogue{bias.data(), residual.data(), 0.0f, 1.5f}
                                              : WinogradEpilogue{nullptr, nullptr, -INFINITY, INFINITY};
          std::vector<float> want_y(c.batch * c.k * oh * ow, 9.0f), got_y = want_y;
          output.back().fn(s, want_m.data(), first, count, rows, 8, c.k, e, want_y.data());
          output[v].fn(s, want_m.data(), first, count, rows, 8, c.k, e, got_y.data());
          // The transform sums products with weights up to 64 and cancels: error relative to
          // the larger of the output's and the products' scales.
          float scale = 0;
          for (const float value : want_y) scale = std::max(scale, std::fabs(value));
          for (const float value : want_m) scale = std::max(scale, std::fabs(value));
          for (std::size_t i = 0; i < want_y.size(); ++i)
            ASSERT_NEAR(got_y[i], want_y[i], 1e-5f * scale) << "output transform " << i;
        }
      }
    }
  }
}

// The weight transform against its double-precision reference (G as a matrix there, factored in
// the ISA variants): both passes' filter orders, a range of output-channel panels (the rest of
// u untouched).
TEST(Kernels, WinogradWeightTransformMatchesReference) {
  for (const std::size_t tile : {4, 2}) {
    const auto& transform =
        tile == 4 ? f32_winograd_weights_4x3_variants() : f32_winograd_weights_2x3_variants();
    const std::size_t positions = (tile + 2) * (tile + 2);
    for (std::size_t v = 0; v + 1 < transform.size(); ++v) {
      if (transform[v].level > kMachineLevel) continue;
      SCOPED_TRACE(transform[v].name);
      for (const bool backward_data : {false, true}) {
        const std::size_t C = 24, K = 48;
        const auto weights = random_values(K * C * 9, 45, false);
        std::vector<float> want(positions * C * K, 3.0f), got = want;
        transform.back().fn(weights.data(), C, K, backward_data, 16, K, want.data());
        transform[v].fn(weights.data(), C, K, backward_data, 16, K, got.data());
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-6f * (1 + std::fabs(want[i])))
              << (backward_data ? "backward data " : "forward ") << i;
      }
    }
  }
}

// The weight-gradient kernels against their references: the gradient transform (partial tiles,
// channels-last and blocked, a range of output channels), the per-position product (row counts
// around its 6-row tile, accumulating or not, a panel range) and the inverse weight transform.
TEST(Kernels, WinogradWeightGradientKernelsMatchReference) {
  struct Case {
    std::size_t batch, c, h, w, k, pad, block;
  };
  const Case cases[] = {
      {2, 16, 9, 11, 32, 1, 8}, {2, 24, 9, 7, 32, 1, 0}, {1, 8, 6, 10, 48, 2, 0}, {3, 40, 13, 9, 64, 1, 0}};
  const auto& grad = f32_winograd_output_grad_4x3_variants();
  const auto& gemm = f32_winograd_gemm_weights_variants();
  const auto& inverse = f32_winograd_weight_grad_4x3_variants();
  const std::size_t positions = kWinogradPositions;
  for (std::size_t v = 0; v + 1 < grad.size(); ++v) {
    if (grad[v].level > kMachineLevel) continue;
    SCOPED_TRACE(grad[v].name);
    for (const Case& c : cases) {
      const bool channels_last = c.block == 0;
      const std::size_t oh = c.h + 2 * c.pad - 2, ow = c.w + 2 * c.pad - 2, th = (oh + 3) / 4,
                        tw = (ow + 3) / 4;
      const WinogradShape s{
          c.c, c.k, c.h, c.w, oh, ow, c.pad, channels_last ? c.c : c.block, channels_last ? c.k : c.block,
          th,  tw};
      const std::size_t tiles = c.batch * th * tw, first = 1, count = tiles - first, rows = count + 3;
      SCOPED_TRACE("c " + std::to_string(c.c) + " k " + std::to_string(c.k) + " tiles " +
                   std::to_string(count));
      const auto dy = random_values(c.batch * c.k * oh * ow, 46, false);
      std::vector<float> want_m(positions * (rows * c.k + kWinogradPositionPad), 3.0f), got_m = want_m;
      grad.back().fn(s, dy.data(), first, count, rows, 8, c.k, want_m.data());
      grad[v].fn(s, dy.data(), first, count, rows, 8, c.k, got_m.data());
      float m_scale = 0;
      for (const float value : want_m) m_scale = std::max(m_scale, std::fabs(value));
      for (std::size_t i = 0; i < want_m.size(); ++i)
        ASSERT_NEAR(got_m[i], want_m[i], 1e-6f * m_scale) << "gradient transform " << i;

      const auto v_values = random_values(positions * (rows * c.c + kWinogradPositionPad), 47, false);
      const std::size_t k_begin = c.k > 16 ? 16 : 0;
      for (const bool accumulate : {false, true}) {
        std::vector<float> want_du(positions * c.c * c.k, 0.5f), got_du = want_du;
        gemm.back().fn(v_values.data(), want_m.data(), want_du.data(), count, rows, c.c, c.k, k_begin, c.k,
                       accumulate);
        for (std::size_t g = 0; g + 1 < gemm.size(); ++g) {  // every product variant (AVX-512 too)
          if (gemm[g].level > kMachineLevel) continue;
          std::fill(got_du.begin(), got_du.end(), 0.5f);
          gemm[g].fn(v_values.data(), want_m.data(), got_du.data(), count, rows, c.c, c.k, k_begin, c.k,
                     accumulate);
          for (std::size_t i = 0; i < want_du.size(); ++i)
            ASSERT_NEAR(got_du[i], want_du[i], 1e-4f * (1 + std::fabs(want_du[i])))
                << gemm[g].name << " " << i << (accumulate ? " accumulating" : "");
        }
      }

      const auto du = random_values(positions * c.c * c.k, 48, false);
      std::vector<float> want_dw(c.k * c.c * 9, 5.0f), got_dw = want_dw;
      inverse.back().fn(du.data(), c.c, c.k, k_begin, c.k, want_dw.data());
      inverse[v].fn(du.data(), c.c, c.k, k_begin, c.k, got_dw.data());
      for (std::size_t i = 0; i < want_dw.size(); ++i)
        ASSERT_NEAR(got_dw[i], want_dw[i], 1e-5f * (1 + std::fabs(want_dw[i]))) << "inverse transform " << i;
    }
  }
}

TEST(Kernels, NarrowLinearMatchesReference) {
  struct Case {
    std::size_t m, k, n, ld;
  };
  const Case cases[] = {{1, 8, 1, 8},   {5, 21, 3, 21},     {7, 1051, 10, 1060}, {12, 2048, 16, 2048},
                        {9, 40, 7, 45}, {4, 1024, 5, 1031}, {17, 333, 11, 333},  {130, 2056, 10, 2056}};
  const auto& forward = f32_narrow_linear_forward_variants();
  const auto& data = f32_narrow_linear_backward_data_variants();
  const auto& weights = f32_narrow_linear_backward_weights_variants();
  for (std::size_t v = 0; v < forward.size(); ++v) {
    if (forward[v].level > kMachineLevel) continue;
    SCOPED_TRACE(forward[v].name);
    for (const Case& c : cases) {
      SCOPED_TRACE("m " + std::to_string(c.m) + " k " + std::to_string(c.k) + " n " + std::to_string(c.n));
      auto x = random_values(c.m * c.ld, static_cast<unsigned>(c.k), false);
      auto w = random_values(c.n * c.ld, static_cast<unsigned>(c.k + 1), false);
      auto dy = random_values(c.m * c.n, static_cast<unsigned>(c.k + 2), false);
      x.resize(c.m * c.ld);
      w.resize(c.n * c.ld);
      dy.resize(c.m * c.n);
      const auto close = [](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-3f * (1 + std::fabs(want[i]))) << what << " " << i;
      };
      std::vector<float> want_y(c.m * c.n, 5.0f), got_y = want_y;
      forward.back().fn(x.data(), w.data(), want_y.data(), c.m, c.k, c.n, c.ld);
      forward[v].fn(x.data(), w.data(), got_y.data(), c.m, c.k, c.n, c.ld);
      close(got_y, want_y, "forward");
      // dx 32-byte aligned: a large aligned output takes the non-temporal stores.
      std::vector<float> want_buf(c.m * c.ld + 8, 5.0f), got_buf = want_buf;
      const auto aligned = [](std::vector<float>& b) {
        const auto at = reinterpret_cast<std::uintptr_t>(b.data());
        return b.data() + ((32 - at % 32) % 32) / sizeof(float);
      };
      float *want_p = aligned(want_buf), *got_p = aligned(got_buf);
      data.back().fn(dy.data(), w.data(), want_p, c.m, c.k, c.n, c.ld);
      data[v].fn(dy.data(), w.data(), got_p, c.m, c.k, c.n, c.ld);
      const std::vector<float> want_dx(want_p, want_p + c.m * c.ld), got_dx(got_p, got_p + c.m * c.ld);
      close(got_dx, want_dx, "data");
      std::vector<float> want_dw(c.n * c.ld, 5.0f), got_dw = want_dw;
      weights.back().fn(x.data(), dy.data(), want_dw.data(), c.m, c.k, c.n, c.ld);
      weights[v].fn(x.data(), dy.data(), got_dw.data(), c.m, c.k, c.n, c.ld);
      close(got_dw, want_dw, "weights");
      for (std::size_t i = 0; i < c.m; ++i)
        for (std::size_t q = c.k; q < c.ld; ++q) ASSERT_EQ(got_dx[i * c.ld + q], 5.0f) << "dx past k";
    }
  }
}

TEST(Kernels, F32MulMatchesReference) { check_binary(f32_mul_variants(), f32_mul_variants().back().fn); }

// Every variant equals the reference bit for bit at an unaligned start, guard elements untouched.
void check_unary_exact(const std::vector<KernelVariant<F32UnaryFn>>& variants, unsigned seed) {
  const auto reference = variants.back().fn;
  for_each_runnable(variants, [&](F32UnaryFn fn) {
    for (std::size_t n : kSizes) {
      const auto x = random_values(n, seed, true);
      std::vector<float> expected(n + 2, 7.0f), got(n + 2, 7.0f);
      reference(x.data() + 1, expected.data() + 1, n);
      fn(x.data() + 1, got.data() + 1, n);
      for (std::size_t i = 0; i < n + 2; ++i)
        ASSERT_TRUE(same_bits_or_both_nan(got[i], expected[i])) << "n=" << n << " i=" << i;
    }
  });
}

TEST(Kernels, F32ReluMatchesReference) { check_unary_exact(f32_relu_variants(), 3); }

TEST(Kernels, ReluReferenceSemantics) {
  const float x[] = {-1.0f, 0.0f, 2.5f, std::numeric_limits<float>::quiet_NaN()};
  float y[4];
  f32_relu_variants().back().fn(x, y, 4);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 2.5f);
  EXPECT_TRUE(std::isnan(y[3]));
}

// Outputs past g_streaming_store_bytes take map_into's non-temporal path (aligned head, four
// vectors a step, a fence, masked tail). With the threshold lowered to 64 bytes every size above
// 16 floats takes it, at an unaligned output, and must still equal the reference bit for bit.
TEST(Kernels, StreamingStoresMatchReference) {
  kernel_table();  // its first use sets the threshold: before the test lowers it
  struct LoweredThreshold {
    std::size_t saved = g_streaming_store_bytes;
    LoweredThreshold() { g_streaming_store_bytes = 64; }
    ~LoweredThreshold() { g_streaming_store_bytes = saved; }
  } lowered;
  check_binary(f32_add_variants(), f32_add_variants().back().fn);
  check_binary(f32_mul_variants(), f32_mul_variants().back().fn);
  check_unary_exact(f32_relu_variants(), 4);
}

// Bare metal streams what its L3 cannot hold; a guest, whose CPUID reports the host's whole L3,
// streams past its per-core share of it (2 MiB a usable core); never below 4 MiB.
TEST(Kernels, StreamingStoreThresholdFollowsTheCacheAGuestCanCountOn) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  CpuFeatures bare, guest;
  guest.hypervisor = "KVMKVMKVM";
  SystemInfo desktop;
  desktop.l3_bytes = 32 * kMiB;
  desktop.usable_physical_cores = 8;
  EXPECT_EQ(streaming_store_threshold(bare, desktop), 32 * kMiB);
  EXPECT_EQ(streaming_store_threshold(guest, desktop), 16 * kMiB);
  SystemInfo cloud;  // this machine: two vCPUs of a 480 MiB-L3 host
  cloud.l3_bytes = 480 * kMiB;
  cloud.usable_physical_cores = 2;
  EXPECT_EQ(streaming_store_threshold(bare, cloud), 480 * kMiB);
  EXPECT_EQ(streaming_store_threshold(guest, cloud), 4 * kMiB);
  cloud.usable_physical_cores = 16;
  EXPECT_EQ(streaming_store_threshold(guest, cloud), 32 * kMiB);
  SystemInfo small;  // a tiny L3, and an unknown one
  small.l3_bytes = 2 * kMiB;
  EXPECT_EQ(streaming_store_threshold(bare, small), 4 * kMiB);
  EXPECT_EQ(streaming_store_threshold(bare, SystemInfo{}), 32 * kMiB);
  EXPECT_EQ(streaming_store_threshold(guest, SystemInfo{}), 4 * kMiB);
}

TEST(Kernels, SubAndDivMatchReferenceExactly) {
  check_binary(f32_sub_variants(), f32_sub_variants().back().fn);
  check_binary(f32_div_variants(), f32_div_variants().back().fn);
}

// |got - want| <= rtol |want| + atol, with NaN matching NaN and infinities matching exactly.
::testing::AssertionResult close(float got, float want, double rtol, double atol) {
  if (std::isnan(want) && std::isnan(got)) return ::testing::AssertionSuccess();
  if (std::isinf(want) && got == want) return ::testing::AssertionSuccess();
  if (std::fabs(static_cast<double>(got) - want) <= rtol * std::fabs(static_cast<double>(want)) + atol)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << " want " << want << " (diff "
                                       << std::fabs(static_cast<double>(got) - want) << ")";
}

std::vector<float> spread(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

struct UnaryCase {
  const std::vector<KernelVariant<F32UnaryFn>>* variants;
  const char* name;
  float lo, hi;
  std::vector<float> specials;
  double rtol, atol;
};

TEST(Kernels, TranscendentalsMatchDoubleReference) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const UnaryCase cases[] = {
      {&f32_exp_variants(),
       "exp",
       -100.0f,
       89.0f,
       {0.0f, -0.0f, 1e-8f, 88.7f, 88.72f, 89.0f, -87.5f, -103.0f, -104.5f, inf, -inf, nan},
       3e-7,
       1e-44},
      {&f32_log_variants(),
       "log",
       0.0f,
       100.0f,
       {0.0f, -1.0f, 1.0f, 1.0000001f, 0.9999999f, 1e-40f, 1e-45f, 3e38f, inf, nan},
       3e-7,
       1e-7},
      {&f32_tanh_variants(),
       "tanh",
       -12.0f,
       12.0f,
       {0.0f, 1e-6f, -1e-6f, 1e-40f, -1e-45f, 0.2033f, 0.6249f, 0.6251f, 9.0f, -20.0f, inf, -inf, nan},
       2e-7,  // 1.33e-7 (1.82 ulp) measured over every float in [-12, 12]
       1e-30},
      {&f32_sigmoid_variants(),
       "sigmoid",
       -90.0f,
       90.0f,
       {0.0f, -100.0f, 100.0f, inf, -inf, nan},
       4e-7,
       1e-40},
      {&f32_gelu_variants(),
       "gelu",
       -12.0f,
       12.0f,
       {0.0f, 1e-6f, -1e-6f, -5.0f, -9.0f, 30.0f, nan, inf, -inf, -14.9f, -15.0f, -15.1f, 15.0f, -13.5f},
       1e-6,
       1e-38},
  };
  for (const UnaryCase& c : cases) {
    SCOPED_TRACE(c.name);
    const auto reference = c.variants->back().fn;
    for_each_runnable(*c.variants, [&](F32UnaryFn fn) {
      for (std::size_t n : kSizes) {
        auto x = spread(n, c.lo, c.hi, 7);
        for (std::size_t i = 0; i < c.specials.size() && i < n; ++i) x[i * 3 % n] = c.specials[i];
        std::vector<float> want(n), got(n + 1, 7.0f);
        reference(x.data(), want.data(), n);
        fn(x.data(), got.data(), n);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_TRUE(close(got[i], want[i], c.rtol, c.atol)) << "x=" << x[i] << " n=" << n;
        ASSERT_EQ(got[n], 7.0f) << "wrote past the end, n=" << n;
      }
      // A dense sweep of the whole range, beyond what random draws hit.
      std::vector<float> x(20001);
      for (std::size_t i = 0; i < x.size(); ++i)
        x[i] = c.lo + (c.hi - c.lo) * static_cast<float>(i) / 20000.0f;
      std::vector<float> want(x.size()), got(x.size());
      reference(x.data(), want.data(), x.size());
      fn(x.data(), got.data(), x.size());
      for (std::size_t i = 0; i < x.size(); ++i)
        ASSERT_TRUE(close(got[i], want[i], c.rtol, c.atol)) << "x=" << x[i];
    });
  }
}

// GELU, its derivative and tanh where AVX-512 reads them off short-range tables (every lane of a
// vector in |x| < 3.998, math.inl): each interval's edges j/8 and a few floats either side, tiny
// and denormal inputs, the bound itself, and a dense sweep; then the same values with every
// seventh replaced by one past the bound, so vectors mix both paths. Whole-range sweeps (above)
// put few vectors on the table path. Over every float of |x| < 3.998 (not run here: 40 s), the
// AVX-512 kernels measured GELU 1.9e-7 and tanh 1.34e-7 relative, and GELU's derivative 6.9e-8
// absolute.
TEST(Kernels, ShortRangeTablesMatchReferenceAtIntervalEdges) {
  std::vector<float> x;
  for (int j = 0; j <= 32; ++j) {
    float edge = std::min(static_cast<float>(j) / 8.0f, 3.998f);
    for (int k = 0; k < 4; ++k) edge = std::nextafter(edge, 0.0f);
    for (int k = 0; k < 9; ++k, edge = std::nextafter(edge, 4.0f))
      if (edge < 3.998f) x.insert(x.end(), {edge, -edge});
  }
  for (const float tiny : {1e-45f, 1e-38f, 1e-30f, 1e-10f, 3e-8f, 6e-8f, 1e-4f})
    x.insert(x.end(), {tiny, -tiny});
  for (int i = 0; i <= 100000; ++i) x.push_back(-3.998f + 7.996f * static_cast<float>(i) / 100000.0f);
  std::vector<float> mixed = x;
  const float outside[] = {3.998f, -3.998f, 4.0f, -4.0f, 5.5f, -9.0f, 4.0000005f};
  for (std::size_t i = 3; i < mixed.size(); i += 7) mixed[i] = outside[i % std::size(outside)];
  const struct {
    const std::vector<KernelVariant<F32UnaryFn>>* variants;
    const char* name;
    double rtol, atol;  // as in TranscendentalsMatchDoubleReference
  } unary[] = {{&f32_gelu_variants(), "gelu", 1e-6, 1e-38}, {&f32_tanh_variants(), "tanh", 2e-7, 1e-30}};
  const auto backward_ref = f32_gelu_backward_variants().back().fn;
  for (const auto* inputs : {&x, &mixed}) {
    const std::size_t n = inputs->size();
    const std::vector<float> dy(n, 1.0f);
    std::vector<float> want(n), got(n);
    for (const auto& c : unary) {
      c.variants->back().fn(inputs->data(), want.data(), n);
      for_each_runnable(*c.variants, [&](F32UnaryFn fn) {
        fn(inputs->data(), got.data(), n);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_TRUE(close(got[i], want[i], c.rtol, c.atol)) << c.name << " x=" << (*inputs)[i];
      });
    }
    backward_ref(inputs->data(), dy.data(), want.data(), n);
    for_each_runnable(f32_gelu_backward_variants(), [&](F32UnaryBackwardFn fn) {
      fn(inputs->data(), dy.data(), got.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_TRUE(close(got[i], want[i], 1e-6, 1e-7)) << "gelu derivative x=" << (*inputs)[i];
    });
  }
}

// log over every binade of the normal floats (its fast path takes e from the exponent field),
// each sampled across its mantissas, and the denormals (its general path).
TEST(Kernels, LogMatchesReferenceOverEveryExponent) {
  const auto reference = f32_log_variants().back().fn;
  for_each_runnable(f32_log_variants(), [&](F32UnaryFn fn) {
    std::vector<float> x;
    for (int e = -149; e <= 127; ++e)
      for (int j = 0; j < 64; ++j) x.push_back(std::ldexp(1.0f + static_cast<float>(j) / 64.0f, e));
    std::vector<float> want(x.size()), got(x.size());
    reference(x.data(), want.data(), x.size());
    fn(x.data(), got.data(), x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      ASSERT_TRUE(close(got[i], want[i], 3e-7, 1e-7)) << "x=" << x[i];
  });
}

// SwiGLU's gate against the double-precision reference, over the range where sigmoid moves and
// far past it (silu(-90) underflows to -0, silu(90) = 90), with NaN and infinities.
TEST(Kernels, SwigluMatchesDoubleReference) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const auto reference = f32_swiglu_variants().back().fn;
  for_each_runnable(f32_swiglu_variants(), [&](F32BinaryFn fn) {
    for (std::size_t n : kSizes) {
      auto gate = spread(n, -90.0f, 90.0f, 11), up = spread(n, -4.0f, 4.0f, 12);
      const float specials[] = {0.0f, -0.0f, 1e-6f, -20.0f, 20.0f, inf, -inf, nan};
      for (std::size_t i = 0; i < 8 && i < n; ++i) gate[i * 3 % n] = specials[i];
      std::vector<float> want(n), got(n + 1, 7.0f);
      reference(gate.data(), up.data(), want.data(), n);
      fn(gate.data(), up.data(), got.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_TRUE(close(got[i], want[i], 1e-6, 1e-30)) << "gate=" << gate[i] << " up=" << up[i];
      ASSERT_EQ(got[n], 7.0f) << "wrote past the end, n=" << n;
    }
  });
}

// RMSNorm rows (the LLM forward) against the double-precision reference: lengths around the
// vector widths, one row and three (each row's own scale), a large offset (the sum of squares in
// f32), and exact output bounds.
void check_rms_norm_variants() {
  const auto reference = f32_rms_norm_variants().back().fn;
  for_each_runnable(f32_rms_norm_variants(), [&](RmsNormFn fn) {
    for (std::size_t n : kSizes) {
      if (n == 0) continue;
      for (const std::size_t rows : {1, 3})
        for (const float offset : {0.0f, 30.0f}) {
          auto x = spread(rows * n, -3.0f, 3.0f, 21);
          for (std::size_t i = 0; i < x.size(); ++i) x[i] += offset * static_cast<float>(1 + i / n);
          const auto w = spread(n, 0.5f, 1.5f, 22);
          std::vector<float> want(rows * n), got(rows * n + 1, 7.0f);
          reference(x.data(), w.data(), want.data(), rows, n, 1e-5f);
          fn(x.data(), w.data(), got.data(), rows, n, 1e-5f);
          for (std::size_t i = 0; i < rows * n; ++i)
            ASSERT_TRUE(close(got[i], want[i], 2e-6, 1e-7)) << "n=" << n << " rows=" << rows << " i=" << i;
          ASSERT_EQ(got[rows * n], 7.0f) << "wrote past the end, n=" << n;
        }
    }
  });
}
TEST(Kernels, RmsNormMatchesDoubleReference) { check_rms_norm_variants(); }

TEST(Kernels, BackwardKernelsMatchReference) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const struct {
    const std::vector<KernelVariant<F32UnaryBackwardFn>>* variants;
    const char* name;
    float lo, hi;
    double rtol, atol;
  } cases[] = {{&f32_relu_backward_variants(), "relu", -3, 3, 0, 0},
               {&f32_gelu_backward_variants(), "gelu", -9, 9, 1e-6, 1e-7},
               {&f32_sigmoid_backward_variants(), "sigmoid", 0, 1, 1e-6, 1e-7},
               {&f32_tanh_backward_variants(), "tanh", -1, 1, 1e-6, 1e-7}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto reference = c.variants->back().fn;
    for_each_runnable(*c.variants, [&](F32UnaryBackwardFn fn) {
      for (std::size_t n : kSizes) {
        auto saved = spread(n, c.lo, c.hi, 8);
        if (n > 2) saved[1] = 0.0f;  // relu's boundary: no gradient at exactly 0
        // GELU's derivative past its clamp at |x| = 15, at the infinities (limits 0 and 1) and NaN.
        const float specials[] = {-0.75179f, 14.9f, -15.5f, 40.0f, inf, -inf, nan};
        if (std::string_view(c.name) == "gelu" && n > 16)
          for (std::size_t i = 0; i < std::size(specials); ++i) saved[2 + 2 * i] = specials[i];
        const auto dy = spread(n, -2, 2, 9);
        std::vector<float> want(n), got(n);
        reference(saved.data(), dy.data(), want.data(), n);
        fn(saved.data(), dy.data(), got.data(), n);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_TRUE(close(got[i], want[i], c.rtol, c.atol)) << "i=" << i << " n=" << n;
      }
      if (std::string_view(c.name) != "gelu") return;
      // A dense sweep of GELU's derivative over [-16, 16] at dy = 1, its zero near -0.75 and the
      // tails included.
      std::vector<float> x(32001), dy(x.size(), 1.0f), want(x.size()), got(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = -16.0f + 32.0f * static_cast<float>(i) / 32000.0f;
      reference(x.data(), dy.data(), want.data(), x.size());
      fn(x.data(), dy.data(), got.data(), x.size());
      for (std::size_t i = 0; i < x.size(); ++i)
        ASSERT_TRUE(close(got[i], want[i], c.rtol, c.atol)) << "x=" << x[i];
    });
  }
}

TEST(Kernels, ReductionsMatchReference) {
  const auto sum_ref = f32_sum_variants().back().fn;
  for_each_runnable(f32_sum_variants(), [&](F32ReduceFn fn) {
    for (std::size_t n : kSizes) {
      const auto x = random_values(n, 4, false);
      double magnitude = 0;
      for (std::size_t i = 1; i <= n; ++i) magnitude += std::fabs(x[i]);
      EXPECT_NEAR(fn(x.data() + 1, n), sum_ref(x.data() + 1, n), 1e-6 * magnitude + 1e-6) << "n=" << n;
    }
    // Past 4 MB the sum walks four quarters at once; the elements the quarters leave are summed
    // after them. Small integers keep every partial sum exact, so one element missed or counted
    // twice shows.
    const std::size_t big = (std::size_t{4} << 20) / sizeof(float) + 37;
    std::vector<float> x(big);
    long want = 0;
    for (std::size_t i = 0; i < big; ++i) want += static_cast<long>(x[i] = static_cast<float>(i % 7) - 2.0f);
    EXPECT_EQ(fn(x.data(), big), static_cast<float>(want));
  });
  const auto max_ref = f32_max_variants().back().fn;
  for_each_runnable(f32_max_variants(), [&](F32ReduceFn fn) {
    for (std::size_t n : kSizes) {
      const auto x = spread(n, -50, 50, 10);
      EXPECT_EQ(fn(x.data(), n), max_ref(x.data(), n)) << "n=" << n;
    }
  });
  // Past 4 MB the maximum too walks four quarters: the largest value placed in each quarter and
  // in the elements left after them must be found.
  for_each_runnable(f32_max_variants(), [&](F32ReduceFn fn) {
    const std::size_t big = (std::size_t{4} << 20) / sizeof(float) + 37;
    std::vector<float> x(big);
    for (std::size_t i = 0; i < big; ++i) x[i] = static_cast<float>(i % 1021);
    for (const std::size_t at : {std::size_t{5}, big / 4 + 3, big / 2 + 3, 3 * big / 4 + 3, big - 2}) {
      x[at] = 5000.0f + static_cast<float>(at);
      EXPECT_EQ(fn(x.data(), big), x[at]) << "at " << at;
    }
  });
  const auto argmax_ref = f32_argmax_variants().back().fn;
  for_each_runnable(f32_argmax_variants(), [&](F32ArgmaxFn fn) {
    for (std::size_t n : kSizes) {
      if (n == 0) continue;
      auto x = spread(n, -50, 50, 11);
      EXPECT_EQ(fn(x.data(), n), argmax_ref(x.data(), n)) << "n=" << n;
      x[n - 1] = 1000.0f;  // maximum in the tail
      EXPECT_EQ(fn(x.data(), n), n - 1);
      x[n / 2] = 1000.0f;  // a tie: the first one wins
      EXPECT_EQ(fn(x.data(), n), n / 2) << "n=" << n;
    }
  });
  const auto above_ref = f32_indices_above_variants().back().fn;
  for_each_runnable(f32_indices_above_variants(), [&](F32IndicesAboveFn fn) {
    for (std::size_t n : kSizes) {
      auto x = spread(n, -50, 50, 13);
      if (n > 3) x[n / 3] = std::numeric_limits<float>::quiet_NaN();  // never above anything
      for (float threshold : {-100.0f, 0.0f, 20.0f, 49.0f, 100.0f}) {
        std::vector<std::int32_t> got(n + 1, -1), want(n + 1, -1);
        const std::size_t count = fn(x.data(), n, threshold, got.data());
        ASSERT_EQ(count, above_ref(x.data(), n, threshold, want.data())) << "n=" << n << " t=" << threshold;
        EXPECT_EQ(got, want) << "n=" << n << " t=" << threshold;
        std::size_t expected = 0;  // the reference against a plain count
        for (std::size_t i = 0; i < n; ++i) expected += x[i] > threshold;
        EXPECT_EQ(count, expected);
      }
    }
  });
  // NMS's overlap test, against the reference and against a direct IoU in double: random boxes
  // (a few of no area), queries near and far, each hit placed at every position (tail lanes, the
  // first and last block).
  const auto overlaps_ref = box_overlaps_any_variants().back().fn;
  for_each_runnable(box_overlaps_any_variants(), [&](BoxOverlapsAnyFn fn) {
    for (std::size_t n : kSizes) {
      const auto a = spread(n, 0, 100, 17), b = spread(n, 0, 100, 18), w = spread(n, 1, 20, 19),
                 h = spread(n, 1, 20, 20);
      std::vector<float> x1(n), y1(n), x2(n), y2(n), area(n);
      for (std::size_t k = 0; k < n; ++k) {
        x1[k] = a[k], y1[k] = b[k], x2[k] = a[k] + w[k], y2[k] = b[k] + (k % 11 == 5 ? 0.0f : h[k]);
        area[k] = (x2[k] - x1[k]) * (y2[k] - y1[k]);
      }
      const BoxColumns boxes{x1.data(), y1.data(), x2.data(), y2.data(), area.data()};
      auto direct = [&](const float* q, float threshold) {
        for (std::size_t k = 0; k < n; ++k) {
          const double iw = std::min<double>(x2[k], q[2]) - std::max<double>(x1[k], q[0]),
                       ih = std::min<double>(y2[k], q[3]) - std::max<double>(y1[k], q[1]);
          if (iw > 0 && ih > 0 && area[k] > 0 && iw * ih / (area[k] + q[4] - iw * ih) > threshold + 1e-4)
            return true;
        }
        return false;
      };
      for (float threshold : {0.0f, 0.3f, 0.5f, 0.9f}) {
        for (int trial = 0; trial < 20; ++trial) {
          const float qx = static_cast<float>(trial * 7 % 100), qy = static_cast<float>(trial * 13 % 100);
          const float qw = 2.0f + static_cast<float>(trial % 5) * 4.0f;
          const float q[5] = {qx, qy, qx + qw, qy + qw, qw * qw};
          const bool got = fn(boxes, n, q, threshold);
          EXPECT_EQ(got, overlaps_ref(boxes, n, q, threshold)) << "n=" << n << " t=" << threshold;
          if (direct(q, threshold)) {
            EXPECT_TRUE(got) << "n=" << n << " t=" << threshold;
          }
        }
        for (std::size_t at = 0; at < n; ++at) {  // the query equal to box `at`: a hit there only
          if (!(area[at] > 0)) continue;
          const float q[5] = {x1[at], y1[at], x2[at], y2[at], area[at]};
          EXPECT_TRUE(fn(boxes, n, q, threshold)) << "n=" << n << " at=" << at;
          EXPECT_FALSE(fn(boxes, at, q, 1.0f)) << "n=" << n << " at=" << at;  // IoU is never above 1
        }
      }
      const float far[5] = {500, 500, 510, 510, 100};
      EXPECT_FALSE(fn(boxes, n, far, 0.0f)) << "n=" << n;
    }
  });
  const float ones[5] = {1, 1, 1, 1, 1};
  EXPECT_EQ(sum_ref(ones, 5), 5.0f);
}

// Row-wise kernels on non-contiguous rows (ld > cols), checking the gaps stay untouched.
void check_softmax_variants() {
  for (const auto* variants : {&f32_softmax_variants(), &f32_log_softmax_variants()}) {
    const auto reference = variants->back().fn;
    const bool log = variants == &f32_log_softmax_variants();
    SCOPED_TRACE(log ? "log_softmax" : "softmax");
    for_each_runnable(*variants, [&](F32RowwiseFn fn) {
      for (std::size_t cols : {1, 2, 7, 8, 9, 16, 17, 33, 100, 1000, 5000}) {  // 5000: past the stack row
        const std::size_t rows = 3, ld_in = cols + 3, ld_out = cols + 1;
        auto x = spread(rows * ld_in, -20, 20, 12);
        x[0] = 80.0f;  // large logits must not overflow
        // The kernels shift each row by its first vector's maximum and redo a row whose maximum
        // lies far above it: a masked (-inf) first part, and a maximum 130 above the first 16.
        if (cols > 1)
          for (std::size_t j = 0; j < std::min<std::size_t>(cols - 1, 20); ++j) {
            x[ld_in + j] = -std::numeric_limits<float>::infinity();
            if (j < 16) x[2 * ld_in + j] = -100.0f;
          }
        if (cols > 1) x[2 * ld_in + cols - 1] = 30.0f;
        std::vector<float> want(rows * ld_out, -7.0f), got(rows * ld_out, -7.0f);
        reference(x.data(), want.data(), rows, cols, ld_in, ld_out);
        fn(x.data(), got.data(), rows, cols, ld_in, ld_out);
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_TRUE(close(got[i], want[i], log ? 1e-6 : 2e-6, log ? 2e-6 : 1e-12))
              << "cols=" << cols << " i=" << i;
      }
    });
  }
}

void check_cross_entropy_variants() {
  const auto reference = f32_cross_entropy_variants().back().fn;
  for_each_runnable(f32_cross_entropy_variants(), [&](CrossEntropyFn fn) {
    for (std::size_t classes : {1, 2, 10, 17, 1000})
      for (float smoothing : {0.0f, 0.1f}) {
        const std::size_t rows = 4, ld = classes + 2;
        auto logits = spread(rows * ld, -8, 8, 13);
        // A row whose maximum lies 240 above its first vector's (the kernels redo it shifted by
        // its true maximum) and a masked first part.
        if (classes > 1)
          for (std::size_t j = 0; j < std::min<std::size_t>(classes - 1, 16); ++j) {
            logits[ld + j] = -200.0f;
            logits[2 * ld + j] = -1e9f;
          }
        if (classes > 1) logits[ld + classes - 1] = 40.0f;
        std::vector<std::int32_t> labels(rows);
        for (std::size_t r = 0; r < rows; ++r) labels[r] = static_cast<std::int32_t>((r * 7 + 3) % classes);
        std::vector<float> loss_want(rows), loss_got(rows), grad_want(rows * classes),
            grad_got(rows * classes), scratch(classes);
        reference({logits.data(), labels.data(), rows, classes, ld, smoothing, loss_want.data(),
                   grad_want.data(), classes, scratch.data()});
        fn({logits.data(), labels.data(), rows, classes, ld, smoothing, loss_got.data(), grad_got.data(),
            classes, scratch.data()});
        for (std::size_t r = 0; r < rows; ++r)
          ASSERT_TRUE(close(loss_got[r], loss_want[r], 2e-6, 2e-6)) << classes;
        for (std::size_t i = 0; i < grad_want.size(); ++i)
          ASSERT_TRUE(close(grad_got[i], grad_want[i], 2e-6, 1e-7)) << classes << " i=" << i;
        // Loss alone (no gradient buffer) gives the same loss.
        std::vector<float> loss_only(rows);
        fn({logits.data(), labels.data(), rows, classes, ld, smoothing, loss_only.data(), nullptr, classes,
            scratch.data()});
        EXPECT_EQ(loss_only, loss_got);
      }
  });
}

void check_layer_norm_variants() {
  const auto fwd_ref = f32_layer_norm_forward_variants().back().fn;
  const auto bwd_ref = f32_layer_norm_backward_variants().back().fn;
  const auto& fwd_variants = f32_layer_norm_forward_variants();
  const auto& bwd_variants = f32_layer_norm_backward_variants();
  for (std::size_t v = 0; v < fwd_variants.size(); ++v) {
    if (fwd_variants[v].level > kMachineLevel) continue;
    SCOPED_TRACE(fwd_variants[v].name);
    for (std::size_t cols : {1, 7, 8, 17, 64, 100, 768})
      for (bool affine : {false, true}) {
        const std::size_t rows = 5;
        auto x = spread(rows * cols, -3, 3, 14);
        for (auto& t : x) t += 100.0f;  // a large offset: one-pass variance would lose digits
        const auto gamma = spread(cols, 0.5f, 1.5f, 15), beta = spread(cols, -1, 1, 16),
                   dy = spread(rows * cols, -1, 1, 17);
        const float* g = affine ? gamma.data() : nullptr;
        const float* b = affine ? beta.data() : nullptr;
        std::vector<float> y_want(rows * cols), y_got(rows * cols), mean_w(rows), mean_g(rows), rstd_w(rows),
            rstd_g(rows);
        fwd_ref(x.data(), g, b, y_want.data(), mean_w.data(), rstd_w.data(), rows, cols, 1e-5f);
        fwd_variants[v].fn(x.data(), g, b, y_got.data(), mean_g.data(), rstd_g.data(), rows, cols, 1e-5f);
        for (std::size_t i = 0; i < y_want.size(); ++i)
          ASSERT_TRUE(close(y_got[i], y_want[i], 1e-5, 2e-5)) << cols << " i=" << i;
        for (std::size_t r = 0; r < rows; ++r) {
          ASSERT_TRUE(close(mean_g[r], mean_w[r], 1e-6, 0));
          ASSERT_TRUE(close(rstd_g[r], rstd_w[r], 1e-4, 0));
        }
        std::vector<float> dx_w(rows * cols), dx_g(rows * cols), dg_w(cols, 0.5f), dg_g(cols, 0.5f),
            db_w(cols, 0.25f), db_g(cols, 0.25f);
        bwd_ref(x.data(), dy.data(), g, mean_w.data(), rstd_w.data(), dx_w.data(), dg_w.data(), db_w.data(),
                rows, cols);
        bwd_variants[v].fn(x.data(), dy.data(), g, mean_w.data(), rstd_w.data(), dx_g.data(), dg_g.data(),
                           db_g.data(), rows, cols);
        for (std::size_t i = 0; i < dx_w.size(); ++i)
          ASSERT_TRUE(close(dx_g[i], dx_w[i], 1e-4, 1e-4)) << cols << " i=" << i;
        for (std::size_t j = 0; j < cols; ++j) {
          ASSERT_TRUE(close(dg_g[j], dg_w[j], 1e-5, 1e-5)) << "dgamma " << j;
          ASSERT_TRUE(close(db_g[j], db_w[j], 1e-6, 1e-6)) << "dbeta " << j;
        }
      }
  }
}

TEST(Kernels, SoftmaxAndLogSoftmaxMatchReference) { check_softmax_variants(); }
TEST(Kernels, CrossEntropyMatchesReference) { check_cross_entropy_variants(); }
TEST(Kernels, LayerNormMatchesReference) { check_layer_norm_variants(); }

// A row past 4 MB (the sum of the logits for smoothing taken in the exponentials' pass). With
// smoothing 0.5 the loss carries half the row's mean at full weight, so a part of the sum lost
// or counted twice shows at once.
TEST(Kernels, CrossEntropyLongRowMatchesReference) {
  const auto reference = f32_cross_entropy_variants().back().fn;
  const std::size_t classes = (std::size_t{1} << 20) + 37;
  auto logits = spread(classes, 0, 1, 21);
  // A ramp: the quarters' sums differ, so swapping or dropping one changes the mean.
  for (std::size_t i = 0; i < classes; ++i) logits[i] += 8.0f * static_cast<float>(i) / classes;
  const std::int32_t label = 12345;
  std::vector<float> scratch(classes);
  float want = 0, got = 0;
  reference({logits.data(), &label, 1, classes, classes, 0.5f, &want, nullptr, classes, scratch.data()});
  for_each_runnable(f32_cross_entropy_variants(), [&](CrossEntropyFn fn) {
    fn({logits.data(), &label, 1, classes, classes, 0.5f, &got, nullptr, classes, scratch.data()});
    EXPECT_TRUE(close(got, want, 1e-4, 0)) << got << " vs " << want;
  });
}

// The row kernels stream their outputs past g_streaming_store_bytes, row by row (a masked head
// up to the first aligned line when a row starts mid-line: 7 and 17 columns; softmax's rows
// past its stack row do not stream; RMSNorm's likewise). With the
// threshold at 64 bytes every case above takes that path and must still match the reference.
TEST(Kernels, RowKernelsStreamingMatchReference) {
  kernel_table();
  struct LoweredThreshold {
    std::size_t saved = g_streaming_store_bytes;
    LoweredThreshold() { g_streaming_store_bytes = 64; }
    ~LoweredThreshold() { g_streaming_store_bytes = saved; }
  } lowered;
  check_softmax_variants();
  check_cross_entropy_variants();
  check_layer_norm_variants();
  check_rms_norm_variants();
}

TEST(Kernels, OptimizerStepsMatchReference) {
  const SgdParams sgd_cases[] = {{0.1f, 0.0f, 0.0f, 0.0f, false, false},
                                 {0.05f, 0.9f, 0.0f, 1e-4f, false, true},
                                 {0.05f, 0.9f, 0.1f, 1e-4f, true, false}};
  const auto sgd_ref = f32_sgd_step_variants().back().fn;
  for_each_runnable(f32_sgd_step_variants(), [&](SgdStepFn fn) {
    for (const SgdParams& p : sgd_cases)
      for (std::size_t n : kSizes) {
        auto w_want = spread(n, -1, 1, 18), buf_want = spread(n, -1, 1, 19);
        auto w_got = w_want, buf_got = buf_want;
        const auto grad = spread(n, -1, 1, 20);
        for (int step = 0; step < 3; ++step) {
          sgd_ref(w_want.data(), grad.data(), buf_want.data(), n, p);
          fn(w_got.data(), grad.data(), buf_got.data(), n, p);
        }
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(close(w_got[i], w_want[i], 1e-6, 1e-7)) << "n=" << n << " i=" << i;
          ASSERT_TRUE(close(buf_got[i], buf_want[i], 1e-6, 1e-7));
        }
      }
  });
  const auto adam_ref = f32_adam_step_variants().back().fn;
  for_each_runnable(f32_adam_step_variants(), [&](AdamStepFn fn) {
    for (bool decoupled : {false, true})
      for (std::size_t n : kSizes) {
        auto w_want = spread(n, -1, 1, 21), m_want = std::vector<float>(n, 0.0f),
             v_want = std::vector<float>(n, 0.0f);
        auto w_got = w_want, m_got = m_want, v_got = v_want;
        for (std::int64_t step = 1; step <= 10; ++step) {
          const auto grad = spread(n, -1, 1, static_cast<unsigned>(100 + step));
          const AdamParams p{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, decoupled, step};
          adam_ref(w_want.data(), grad.data(), m_want.data(), v_want.data(), n, p);
          fn(w_got.data(), grad.data(), m_got.data(), v_got.data(), n, p);
        }
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(close(w_got[i], w_want[i], 1e-6, 1e-7)) << "n=" << n << " i=" << i;
          ASSERT_TRUE(close(m_got[i], m_want[i], 1e-5, 1e-7));  // m, v ~ 0.1, 1e-3: fma-level rounding
          ASSERT_TRUE(close(v_got[i], v_want[i], 1e-5, 1e-8));
        }
      }
  });
}

// Each tile (14x32 AVX-512, 6x16 AVX2 and portable) against the product of its packed slivers in
// double: full and partial tiles (every row count; columns 1, one vector +- 1, nr - 1, nr), with
// the B sliver's columns past `cols` poisoned (a tile that reads them gets NaN). Entries of C
// outside rows x cols (and columns past the tile, ldc = nr + 4) must stay untouched.
TEST(Kernels, GemmMicrokernelMatchesReference) {
  for_each_runnable(f32_gemm_tile_variants(), [&](const GemmTile& tile) {
    const std::int64_t mr = tile.mr, nr = tile.nr, ldc = nr + 4;
    const int vector = static_cast<int>(nr / 2);
    for (std::int64_t k : {1, 2, 7, 64, 257}) {
      const auto a = spread(static_cast<std::size_t>(mr * k), -1, 1, 30);
      for (int rows = 1; rows <= mr; ++rows)
        for (int cols : {1, vector - 1, vector, vector + 1, static_cast<int>(nr) - 1, static_cast<int>(nr)}) {
          auto b = spread(static_cast<std::size_t>(nr * k), -1, 1, 31);
          for (std::int64_t p = 0; p < k; ++p)
            for (std::int64_t j = cols; j < nr; ++j) b[static_cast<std::size_t>(p * nr + j)] = NAN;
          for (bool accumulate : {false, true}) {
            const auto before = spread(static_cast<std::size_t>(mr * ldc), -1, 1, 32);  // C's prior values
            auto got = before;
            tile.fn({k, a.data(), b.data(), got.data(), ldc, rows, cols, accumulate});
            for (std::int64_t i = 0; i < mr; ++i)
              for (std::int64_t j = 0; j < ldc; ++j) {
                const bool inside = i < rows && j < cols;
                double want = inside && !accumulate ? 0.0 : before[static_cast<std::size_t>(i * ldc + j)];
                if (inside)
                  for (std::int64_t p = 0; p < k; ++p)
                    want += static_cast<double>(a[static_cast<std::size_t>(p * mr + i)]) *
                            b[static_cast<std::size_t>(p * nr + j)];
                ASSERT_NEAR(got[static_cast<std::size_t>(i * ldc + j)], want, 1e-5 * static_cast<double>(k))
                    << "k=" << k << " rows=" << rows << " cols=" << cols << " i=" << i << " j=" << j
                    << " accumulate=" << accumulate;
              }
          }
        }
    }
  });
}

// Each tile's packings against the definition, sliver[p * rows_of_sliver + i] = a[i * lda + p]
// and zero rows past `rows`: A's (mr rows) and a transposed B's (nr rows), over full and partial
// slivers and kc around the AVX-512 transposes' 16 steps; the floats after the sliver must stay
// untouched.
TEST(Kernels, GemmPackMatchesDefinition) {
  for_each_runnable(f32_gemm_tile_variants(), [&](const GemmTile& tile) {
    for (const auto& [pack, height] :
         {std::pair{tile.pack_a, std::int64_t{tile.mr}}, std::pair{tile.pack_b, std::int64_t{tile.nr}}})
      for (std::int64_t kc : {1, 15, 16, 17, 48, 384})
        for (std::int64_t rows : {std::int64_t{1}, height / 2 + 1, height - 1, height}) {
          const std::int64_t lda = kc + 3;
          const auto a = spread(static_cast<std::size_t>(height * lda), -1, 1, 33);
          std::vector<float> sliver(static_cast<std::size_t>(height * kc + 16), 7.0f);
          pack(a.data(), lda, rows, kc, sliver.data());
          for (std::int64_t p = 0; p < kc; ++p)
            for (std::int64_t i = 0; i < height; ++i)
              ASSERT_EQ(sliver[static_cast<std::size_t>(p * height + i)],
                        i < rows ? a[static_cast<std::size_t>(i * lda + p)] : 0.0f)
                  << "height=" << height << " kc=" << kc << " rows=" << rows << " p=" << p << " i=" << i;
          for (std::size_t j = static_cast<std::size_t>(height * kc); j < sliver.size(); ++j)
            ASSERT_EQ(sliver[j], 7.0f) << "written past the sliver, height=" << height << " kc=" << kc;
        }
  });
}

// The weight-rows form: rows of A lda apart (in place), the tile stored transposed; partial
// tiles (rows < 6, cols < 16) must leave the rest of C untouched.
TEST(Kernels, GemmRowsMicrokernelMatchesReference) {
  const auto reference = f32_gemm_rows_6x16_variants().back().fn;
  for_each_runnable(f32_gemm_rows_6x16_variants(), [&](GemmRowsMicrokernelFn fn) {
    for (std::int64_t k : {1, 7, 64, 257}) {
      const std::int64_t lda = k + 3;
      const auto a = spread(static_cast<std::size_t>(6 * lda), -1, 1, 32),
                 b = spread(static_cast<std::size_t>(16 * k), -1, 1, 33);
      for (const auto& [rows, cols] :
           {std::pair{6, 16}, std::pair{1, 16}, std::pair{5, 3}, std::pair{6, 9}}) {
        std::vector<float> want(16 * 8, 0.5f), got(16 * 8, 0.5f);  // ldc 8: entries 6, 7 of each row stay
        reference({k, a.data(), lda, rows, b.data(), want.data(), 8, cols});
        fn({k, a.data(), lda, rows, b.data(), got.data(), 8, cols, a.data(), 1});
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_TRUE(close(got[i], want[i], 1e-5, 1e-5 * static_cast<double>(k)))
              << "k=" << k << " rows=" << rows << " cols=" << cols << " i=" << i;
        // The reference itself, at one entry: row 0 of A against column 0 of B.
        double dot = 0;
        for (std::int64_t p = 0; p < k; ++p) dot += static_cast<double>(a[p]) * b[p * 16];
        ASSERT_NEAR(want[0], dot, 1e-5 * static_cast<double>(k));
        ASSERT_EQ(want[static_cast<std::size_t>(rows)], 0.5f);  // past the rows: untouched
      }
    }
  });
}

TEST(Kernels, RoofProbesCountTheirWork) {
  for (const auto* variants :
       {&f32_fma_probe_variants(), &int8_dot_probe_variants(), &bf16_dot_probe_variants()})
    for_each_runnable(*variants, [&](FmaProbeFn fn) {
      float sink = 0;
      const std::uint64_t ops = fn(1000, &sink);
      EXPECT_EQ(ops % 1000, 0u);
      EXPECT_GE(ops / 1000, 32u);  // at least 16 chains x 2 operations per iteration
      EXPECT_TRUE(std::isfinite(sink));
    });
}

TEST(Dispatch, TablePicksTheBestVariantTheLevelAllows) {
  for (int l = 0; l < kIsaLevelCount; ++l) {
    const auto level = static_cast<IsaLevel>(l);
    const KernelTable table = make_kernel_table(level);
    EXPECT_LE(table.f32_add.level, level);
    for (const auto& variant : f32_add_variants())
      if (variant.level <= level) {
        EXPECT_STREQ(table.f32_add.name, variant.name);
        break;
      }
  }
  EXPECT_STREQ(make_kernel_table(IsaLevel::generic).f32_add.name, "f32_add__ref");
  EXPECT_STREQ(make_kernel_table(IsaLevel::avx2).f32_sum.name, "f32_sum__avx2");
  EXPECT_STREQ(make_kernel_table(IsaLevel::avx512_bf16).f32_relu.name, "f32_relu__avx512");
  EXPECT_EQ(kernel_table().level, runtime().isa.active);
}

TEST(ParallelFor, CoversTheRangeOnceInDisjointPieces) {
  for (std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{100003}}) {
    std::vector<int> hits(n, 0);
    parallel_for(n, 16, 4, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) ++hits[i];
    });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "n=" << n << " i=" << i;
  }
}

}  // namespace
}  // namespace cpudl::kernels
