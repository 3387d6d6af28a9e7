// Every ONNX operator the runtime executes, once: the loader checks models against this list (and
// names every node outside it), the op registry (ops/*.cpp) must define each one.
#pragma once

// A table, rows of operators: kept out of clang-format, which (version 14) reflows X-macro lists
// differently on every pass.
// clang-format off
#define CPUDL_ONNX_OPS(X)                                                                            \
  X(Conv) X(ConvTranspose) X(Gemm) X(MatMul) X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(Sqrt) X(Relu)      \
  X(LeakyRelu) X(Clip) X(Sigmoid) X(Tanh) X(Erf) X(Gelu) X(Softmax) X(LogSoftmax) X(MaxPool)         \
  X(AveragePool) X(GlobalAveragePool) X(BatchNormalization) X(LayerNormalization) X(Flatten)         \
  X(Reshape) X(Transpose) X(Squeeze) X(Unsqueeze) X(Concat) X(Split) X(Slice) X(Gather) X(Shape)     \
  X(Constant) X(ConstantOfShape) X(ReduceMean) X(Identity) X(Dropout) X(Cast) X(Where) X(Expand)     \
  X(Equal) X(Neg) X(Exp) X(Log) X(Pad) X(QuantizeLinear) X(DequantizeLinear) X(DynamicQuantizeLinear) \
  X(MatMulInteger) X(ReduceSum) X(ReduceMax) X(ReduceMin) X(ReduceProd) X(ArgMax) X(ArgMin) X(Greater)     \
  X(Less) X(GreaterOrEqual) X(LessOrEqual) X(Ceil) X(Floor) X(HardSigmoid) X(HardSwish) X(Tile) X(Range)   \
  X(Resize) X(NonZero) X(NonMaxSuppression) X(TopK) X(If) X(Loop) X(Max) X(Min) X(Mod) X(And) X(Or) X(Xor) X(Not)   \
  X(Reciprocal) X(Abs) X(GatherND) X(ScatterElements) X(ScatterND) X(RoiAlign)
// clang-format on

namespace cpudl::infer {
// The runtime's own operators: the optimiser writes them into graphs (they are never read from a
// file); their build functions sit beside the ONNX operators'. Spelled only here.
inline constexpr char kConvDepthwiseOp[] = "cpudl.ConvDepthwise";  // 1x1 conv + depthwise 3x3 (optimizer.h)
inline constexpr char kInt8MatMulOp[] = "cpudl.Int8MatMul";        // a QDQ MatMul/Gemm on int8 kernels
inline constexpr char kInt8ConvOp[] = "cpudl.Int8Conv";            // a QDQ Conv on int8 kernels
inline constexpr char kReorderOp[] = "cpudl.Reorder";              // activation layout change

// The opsets whose operator definitions the runtime follows (PyTorch 1.13 exports 7 to 17).
inline constexpr long kMinOpset = 11, kMaxOpset = 17;
bool is_supported_op(const char* op);
}  // namespace cpudl::infer
