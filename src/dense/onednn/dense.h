// Dense compute through oneDNN on caller-owned f32 buffers: matmul, linear (inner product),
// 2-D convolution, pooling and batch normalisation, forward and backward. Each call looks its
// primitive up in an LRU (primitive_cache.h); nothing is created in a steady loop.
//
// Layouts: matrices row-major; activations NCHW (PyTorch's default) or NHWC (channels-last,
// which oneDNN's fastest convolutions read directly); conv weights OIHW (groups: G*O/G x I/G x
// KH x KW, as PyTorch stores them), reordered once into oneDNN's blocked layout and kept while
// the caller's `weights_version` stays the same.
#pragma once

#include <cstdint>
#include <optional>

namespace cpudl::onednn {

// clip: min(max(x, clip_min), clip_max), as ONNX Clip and ReLU6 (MobileNet) need.
enum class Activation : int { none = 0, relu = 1, clip = 2 };
// blocked: oneDNN's nChw8c (AVX2) or nChw16c (AVX-512) -- channels in blocks of
// blocked_layout_channels(), each block's H x W plane stored with the block innermost. It is what
// oneDNN's direct convolutions compute in; it needs channels divisible by the block.
enum class ActivationLayout : int { nchw = 0, nhwc = 1, blocked = 2 };
std::int64_t blocked_layout_channels();  // 8 or 16, from the kernel level

// C[b] = op(A[b]) * op(B[b]) (+ bias[n]) (+ C[b] when accumulate), then the activation.
// A is m x k (k x m when transpose_a), B is k x n (n x k when transpose_b); batch >= 1 with
// contiguous batches.
struct MatmulShape {
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
};
struct MatmulEpilogue {
  const float* bias = nullptr;  // length n, or null
  Activation activation = Activation::none;
  bool accumulate = false;                 // C += result (oneDNN's sum post-op)
  float clip_min = 0.0f, clip_max = 6.0f;  // Activation::clip's bounds
};
// The engine CPUDL_BLAS selects (oneDNN by default).
void matmul(const MatmulShape& shape, const float* a, const float* b, float* c,
            const MatmulEpilogue& epilogue = {});
// oneDNN's matmul whatever CPUDL_BLAS says: for benchmarks and reports that name their backend.
void matmul_onednn(const MatmulShape& shape, const float* a, const float* b, float* c,
                   const MatmulEpilogue& epilogue = {});

// matmul computing in bf16, as torch.autocast runs matmuls and linear layers: A and B rounded to
// bf16 (nearest even), products accumulated and C written in f32, the epilogue as matmul's;
// oneDNN's AMX or AVX512-BF16 kernels (bf16_compute_available()). Always oneDNN.
// `b_version`, for B holding weights: 0 rounds B on every call; otherwise its bf16 copy is kept
// while (pointer, version) is unchanged, as the convolutions' blocked weights are.
void matmul_bf16(const MatmulShape& shape, const float* a, const float* b, float* c,
                 const MatmulEpilogue& epilogue = {}, std::uint64_t b_version = 0);

// Linear layer, PyTorch's convention: y[n x out] = x[n x in] W[out x in]^T + b. With bf16, the
// three products run on matmul_bf16 (the bias gradient stays f32), the forward keeping the
// weights' bf16 copy under `weights_version` (matmul_bf16's b_version).
struct LinearShape {
  std::int64_t batch = 0, in = 0, out = 0;
  bool bf16 = false;
};
void linear_forward(const LinearShape& s, const float* x, const float* weight, const float* bias, float* y,
                    Activation activation = Activation::none, std::uint64_t weights_version = 0);
void linear_backward_data(const LinearShape& s, const float* dy, const float* weight, float* dx);
// Writes (not accumulates) dW and, when non-null, db.
void linear_backward_weights(const LinearShape& s, const float* x, const float* dy, float* dweight,
                             float* dbias);

struct ConvShape {
  std::int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  std::int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  std::int64_t groups = 1;
  ActivationLayout layout = ActivationLayout::nchw;
  // The output's layout when it differs from the input's (forward only): a first layer with 3
  // input channels reads NCHW and writes blocked.
  std::optional<ActivationLayout> dst_layout;
  std::int64_t out_height() const {
    return (height + 2 * pad_h - dilation_h * (kernel_h - 1) - 1) / stride_h + 1;
  }
  std::int64_t out_width() const {
    return (width + 2 * pad_w - dilation_w * (kernel_w - 1) - 1) / stride_w + 1;
  }
  // Multiply-adds x 2 of the forward pass (padded taps included).
  double flops() const;
  void validate() const;  // throws Error naming the bad field
};
// A depthwise 3x3 convolution (one group per channel, padding 1, stride 1 or 2) that oneDNN runs
// inside a 1x1 convolution's kernel: each tile of the pointwise output is consumed by the
// depthwise stage while it is in cache and never written to memory. MobileNet's inverted residual
// blocks (expand 1x1 -> depthwise 3x3) save their widest tensors' round trip this way: measured
// here at batch 16, 16->96 channels at 112x112 then stride 2 went from 16.6 to 7.3 ms.
struct DepthwiseStage {
  std::int64_t stride = 1;
  const float* weights = nullptr;  // channels x 1 x 3 x 3, as PyTorch stores them
  const float* bias = nullptr;     // channels, or null
  Activation activation = Activation::none;
  float clip_min = 0.0f, clip_max = 6.0f;
  // Output size of an input side of `size` pixels.
  std::int64_t out_size(std::int64_t size) const { return (size - 1) / stride + 1; }
};
struct ConvEpilogue {
  Activation activation = Activation::none;
  const float* residual = nullptr;         // dst = act(conv + bias + residual); residual has dst's shape
  float clip_min = 0.0f, clip_max = 6.0f;  // Activation::clip's bounds
  // Applied after the activation; dst is then the depthwise stage's output. Needs a 1x1, stride-1,
  // unpadded, ungrouped convolution in the blocked layout and no residual; the depthwise weights
  // are cached under the same `weights_version` as the convolution's.
  const DepthwiseStage* depthwise = nullptr;
};
// Whether oneDNN has a kernel for the 1x1 convolution `s` with a depthwise stage of `stride`
// fused (a fused-kernel probe: false where only an unfused path exists).
bool depthwise_fusion_supported(const ConvShape& s, std::int64_t stride);
// `weights_version`: 0 = reorder the weights on every call; otherwise the blocked copy is reused
// while (weights pointer, version) is unchanged: bump it whenever the weights change.
void conv2d_forward(const ConvShape& s, const float* src, const float* weights, std::uint64_t weights_version,
                    const float* bias, float* dst, const ConvEpilogue& epilogue = {});
// The convolution's three passes computing in bf16, as torch.autocast(dtype=torch.bfloat16) runs
// them: every f32 operand (source, weights, output gradient) rounded to bf16 (nearest even),
// products accumulated and every result (output, input gradient, weight and bias gradients)
// written in f32; the forward's activation fused; NCHW or NHWC activations. On AMX or AVX512-BF16
// CPUs oneDNN's bf16 kernels run them (ResNet-18's 3x3 128-channel layer on AMX: 2.1 TFLOP/s on
// one core against 209 GFLOP/s in f32); bf16_compute_available() says whether this CPU has them.
bool bf16_compute_available();
void conv2d_forward_bf16(const ConvShape& s, const float* src, const float* weights,
                         std::uint64_t weights_version, const float* bias, float* dst, Activation activation);
void conv2d_backward_data_bf16(const ConvShape& s, const float* diff_dst, const float* weights,
                               std::uint64_t weights_version, float* diff_src);
void conv2d_backward_weights_bf16(const ConvShape& s, const float* src, const float* diff_dst,
                                  float* diff_weights, float* diff_bias);
void conv2d_backward_data(const ConvShape& s, const float* diff_dst, const float* weights,
                          std::uint64_t weights_version, float* diff_src);
// Writes (not accumulates) diff_weights in OIHW and, when non-null, diff_bias.
void conv2d_backward_weights(const ConvShape& s, const float* src, const float* diff_dst, float* diff_weights,
                             float* diff_bias);

enum class PoolKind : int { max = 0, avg_include_padding = 1, avg_exclude_padding = 2 };
struct PoolShape {
  std::int64_t batch = 0, channels = 0, height = 0, width = 0;
  std::int64_t kernel_h = 0, kernel_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  PoolKind kind = PoolKind::max;
  ActivationLayout layout = ActivationLayout::nchw;
  std::int64_t out_height() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::int64_t out_width() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
  void validate() const;
};
// Max pooling in training keeps the argmax positions in `workspace` (pool2d_workspace_bytes);
// pass null for inference. Backward of max pooling needs the forward's workspace.
std::size_t pool2d_workspace_bytes(const PoolShape& s);
void pool2d_forward(const PoolShape& s, const float* src, float* dst, void* workspace);
void pool2d_backward(const PoolShape& s, const float* diff_dst, const void* workspace, float* diff_src);

// Batch normalisation over N, H, W per channel. Training computes the batch mean and the biased
// variance (divided by N*H*W, as the normalisation uses); inference uses the given statistics.
struct BatchNormShape {
  std::int64_t batch = 0, channels = 0, height = 1, width = 1;
  ActivationLayout layout = ActivationLayout::nchw;
  float epsilon = 1e-5f;
};
// relu_workspace: null, or batch_norm_relu_workspace_bytes(s) bytes to fuse the ReLU that follows
// (y = max(bn(x), 0)): oneDNN records its mask there for the backward pass, in the same pass
// over memory. ResNet's conv -> bn -> relu saves a read and a write of the activation each way.
std::size_t batch_norm_relu_workspace_bytes(const BatchNormShape& s);
void batch_norm_forward_training(const BatchNormShape& s, const float* src, const float* scale,
                                 const float* shift, float* dst, float* mean, float* variance,
                                 void* relu_workspace = nullptr);
void batch_norm_forward_inference(const BatchNormShape& s, const float* src, const float* scale,
                                  const float* shift, const float* mean, const float* variance, float* dst,
                                  Activation activation = Activation::none);
// oneDNN 2.6 lists the shift among the backward pass's inputs, so it is passed too. The forward's
// relu_workspace when it fused the ReLU (diff_dst is then the gradient of the ReLU's output).
void batch_norm_backward(const BatchNormShape& s, const float* src, const float* diff_dst, const float* scale,
                         const float* shift, const float* mean, const float* variance, float* diff_src,
                         float* diff_scale, float* diff_shift, const void* relu_workspace = nullptr);

}  // namespace cpudl::onednn
