// Every entry of the pooling list (dense/pool/pool_list.h) that runs a shape, forward and
// backward through its own workspace, against the direct loops of dense_reference.h: windows
// with padding, overlap, strides past the kernel, odd maps and channel counts that do not fill a
// vector, in NCHW and channels-last.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>

#include "dense/onednn/dense.h"
#include "dense/pool/pool_list.h"
#include "dense_reference.h"

namespace cpudl::pool {
namespace {

using dense::ActivationLayout;
using dense::PoolKind;
using dense::PoolShape;

std::vector<float> to_layout(const std::vector<float>& x, const PoolShape& s, std::int64_t h, std::int64_t w,
                             bool back) {
  if (s.layout == ActivationLayout::nchw) return x;
  std::vector<float> y(x.size());
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t c = 0; c < s.channels; ++c)
      for (std::int64_t p = 0; p < h * w; ++p) {
        const auto plain = static_cast<std::size_t>((n * s.channels + c) * h * w + p);
        const auto last = static_cast<std::size_t>((n * h * w + p) * s.channels + c);
        if (back)
          y[plain] = x[last];
        else
          y[last] = x[plain];
      }
  return y;
}

TEST(PoolList, EveryEntryThatRunsAShapeMatchesTheReference) {
  struct Case {
    std::int64_t batch, channels, h, w, kernel, stride, pad;
  };
  const Case cases[] = {{2, 6, 28, 28, 2, 2, 0}, {3, 16, 9, 11, 3, 2, 1}, {1, 64, 14, 14, 3, 2, 1},
                        {2, 5, 7, 5, 3, 1, 1},   {2, 3, 8, 8, 2, 3, 0},   {1, 1, 5, 5, 5, 1, 2}};
  std::map<std::string, int> ran;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Case& t : cases)
    for (const PoolKind kind : {PoolKind::max, PoolKind::avg_include_padding, PoolKind::avg_exclude_padding})
      for (const ActivationLayout layout : {ActivationLayout::nchw, ActivationLayout::nhwc}) {
        PoolShape s;
        s.batch = t.batch, s.channels = t.channels, s.height = t.h, s.width = t.w;
        s.kernel_h = s.kernel_w = t.kernel, s.stride_h = s.stride_w = t.stride, s.pad_h = s.pad_w = t.pad;
        s.kind = kind, s.layout = layout;
        std::vector<float> x(static_cast<std::size_t>(t.batch * t.channels * t.h * t.w));
        for (float& v : x) v = dist(gen);  // distinct values: no ties for the argmax
        const std::int64_t oh = s.out_height(), ow = s.out_width();
        std::vector<float> dy(static_cast<std::size_t>(t.batch * t.channels * oh * ow));
        for (float& v : dy) v = dist(gen);
        const auto y_want = reference::pool2d_forward(s, x, nullptr);
        const auto dx_want = reference::pool2d_backward(s, x, dy);
        const auto x_in = to_layout(x, s, t.h, t.w, false), dy_in = to_layout(dy, s, oh, ow, false);
        for (const PoolImpl& impl : pool_impls()) {
          if (!impl.runs(s)) continue;
          SCOPED_TRACE(std::string(impl.name) + " " + dense::describe(s) +
                       (layout == ActivationLayout::nhwc ? " nhwc" : " nchw"));
          const std::size_t bytes = impl.workspace_bytes(s);
          std::unique_ptr<std::uint8_t[]> workspace(bytes ? new std::uint8_t[bytes] : nullptr);
          std::vector<float> y(y_want.size(), NAN), dx(x.size(), NAN);
          impl.forward(s, x_in.data(), y.data(), workspace.get());
          impl.backward(s, dy_in.data(), workspace.get(), dx.data());
          const auto y_got = to_layout(y, s, oh, ow, true), dx_got = to_layout(dx, s, t.h, t.w, true);
          for (std::size_t i = 0; i < y_want.size(); ++i)
            ASSERT_NEAR(y_got[i], y_want[i], 1e-6) << "y at " << i;
          for (std::size_t i = 0; i < dx_want.size(); ++i)
            ASSERT_NEAR(dx_got[i], dx_want[i], 1e-6) << "dx at " << i;
          ++ran[std::string(impl.name)];
        }
      }
  for (const PoolImpl& impl : pool_impls())
    EXPECT_GT(ran[std::string(impl.name)], 0) << impl.name << " never ran";
  PoolShape lenet;
  lenet.batch = 2, lenet.channels = 6, lenet.height = lenet.width = 28, lenet.kernel_h = lenet.kernel_w = 2;
  lenet.stride_h = lenet.stride_w = 2, lenet.layout = ActivationLayout::nhwc;
  EXPECT_EQ(choose_pool_impl(lenet).name, "native_max");
  lenet.kind = PoolKind::avg_exclude_padding;
  EXPECT_EQ(choose_pool_impl(lenet).name, "onednn");
}

}  // namespace
}  // namespace cpudl::pool
