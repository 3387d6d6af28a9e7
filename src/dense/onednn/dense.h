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
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dense/shapes.h"

namespace cpudl::onednn {

using dense::Activation;
using dense::ActivationLayout;
using dense::ConvEpilogue;
using dense::ConvShape;
using dense::DepthwiseStage;
using dense::MatmulEpilogue;
using dense::MatmulShape;
using dense::PoolKind;
using dense::PoolShape;

std::int64_t blocked_layout_channels();  // 8 or 16, from the kernel level

// oneDNN's matmul primitive (the epilogue fused), and its gemm:jit sgemm (no epilogue but
// accumulate). dense::matmul (dense/matmul/matmul_list.h) chooses among them and the BLAS engines.
void matmul_primitive(const MatmulShape& shape, const float* a, const float* b, float* c,
                      const MatmulEpilogue& epilogue = {});
void matmul_sgemm(const MatmulShape& shape, const float* a, const float* b, float* c, bool accumulate);
// Where the sgemm measured faster than the primitive: large products with no fused epilogue.
bool sgemm_preferred(const MatmulShape& shape, const MatmulEpilogue& epilogue);
// oneDNN's choice between the two (the sgemm for large plain products): for benchmarks and
// reports that name their backend.
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
// Throws the one error that says so (never a silent emulation) when it is false.
void require_bf16_compute();
// The forward takes conv2d_forward's epilogue but the depthwise stage (residual and activation
// applied to the f32 sums).
void conv2d_forward_bf16(const ConvShape& s, const float* src, const float* weights,
                         std::uint64_t weights_version, const float* bias, float* dst,
                         const ConvEpilogue& epilogue);
void conv2d_backward_data_bf16(const ConvShape& s, const float* diff_dst, const float* weights,
                               std::uint64_t weights_version, float* diff_src);
void conv2d_backward_weights_bf16(const ConvShape& s, const float* src, const float* diff_dst,
                                  float* diff_weights, float* diff_bias);
void conv2d_backward_data(const ConvShape& s, const float* diff_dst, const float* weights,
                          std::uint64_t weights_version, float* diff_src);
// Writes (not accumulates) diff_weights in OIHW and, when non-null, diff_bias.
void conv2d_backward_weights(const ConvShape& s, const float* src, const float* diff_dst, float* diff_weights,
                             float* diff_bias);

// Int8 convolution, as a static int8 (QDQ) model's DequantizeLinear -> Conv -> [Add] -> [Relu]
// -> [QuantizeLinear] computes it, on oneDNN's int8 kernels (AMX tiles, AVX512-VNNI; VPMADDUBSW
// below, see int8_convolution_exact): u8 source with one scale and zero point, s8 weights with
// one scale or one per output channel (symmetric), f32 bias; the int32 sums scaled once into
// either f32 (with a residual and an activation) or u8 requantised to the next layer's scale and
// zero point. Weights are reordered once, at construction. Activations NCHW or NHWC (dst NHWC is
// oneDNN's fast one); groups allowed (depthwise).
struct Int8ConvSpec {
  ConvShape shape;
  float src_scale = 1.0f;
  std::int32_t src_zero = 0;         // in [0, 255]; 0 keeps oneDNN's fastest kernels
  std::vector<float> weight_scales;  // 1 or shape.out_channels
  bool u8_output = false;            // else f32
  float dst_scale = 1.0f;            // u8 output: y = clamp(round(v / dst_scale) + dst_zero)
  std::int32_t dst_zero = 0;
  Activation activation = Activation::none;
  float clip_min = 0.0f, clip_max = 6.0f;
  // y = act(conv + bias + residual): an f32 residual for an f32 output, or a uint8 one (its real
  // value residual_scale * (r - residual_zero)) for a uint8 output.
  bool residual = false;
  float residual_scale = 1.0f;
  std::int32_t residual_zero = 0;
  // The source arrives as f32 in shape.layout (NCHW or NHWC), quantised with src_scale/src_zero
  // into an NHWC uint8 buffer the convolution owns by one oneDNN reorder (run_f32).
  bool f32_source = false;
};
// Not reentrant: the f32 source's staging buffer is the object's own, so one caller at a time (an
// inference plan's runs are serialised by its session).
class Int8Convolution {
 public:
  // `weights`: OIHW int8 (grouped: G*O/G x I/G x KH x KW); `bias`: out_channels floats or null.
  Int8Convolution(const Int8ConvSpec& spec, const std::int8_t* weights, const float* bias);
  ~Int8Convolution();
  Int8Convolution(const Int8Convolution&) = delete;
  Int8Convolution& operator=(const Int8Convolution&) = delete;
  // dst: u8 or f32 as the spec says; residual: dst's shape, layout and type, added in place when it
  // is dst itself (copied into dst first otherwise).
  void run(const std::uint8_t* src, void* dst, const void* residual = nullptr);
  void run_f32(const float* src, void* dst, const void* residual = nullptr);  // spec.f32_source
  // oneDNN's implementation, e.g. "brgconv:avx512_core_amx_int8".
  const std::string& implementation() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};
// Whether oneDNN's int8 convolution sums these weights exactly on this CPU: always with VNNI or
// AMX (u8 x s8 summed in int32); below, VPMADDUBSW adds two u8 x s8 products in saturating int16,
// exact only when |w| <= 64 (255 * 64 * 2 < 32767).
bool int8_convolution_exact(std::span<const std::int8_t> weights);

// Max pooling in training keeps the argmax positions in `workspace` (pool2d_workspace_bytes);
// pass null for inference. Backward of max pooling needs the forward's workspace.
std::size_t pool2d_workspace_bytes(const PoolShape& s);
void pool2d_forward(const PoolShape& s, const float* src, float* dst, void* workspace);
// Inference max pooling of uint8 values (quantised activations: the max of quantised numbers is
// the quantised max, so scale and zero point pass through).
void max_pool2d_forward_u8(const PoolShape& s, const std::uint8_t* src, std::uint8_t* dst);
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
