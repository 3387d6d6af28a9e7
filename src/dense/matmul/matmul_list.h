// Which engine runs a matrix product: an ordered list like the convolutions'
// (dense/conv/conv_list.h), walked by every matmul of the ops, the linear layers' backward
// passes and the ONNX runtime's Gemm and MatMul. oneDNN's gemm:jit sgemm takes large products
// without a fused epilogue, its matmul primitive the rest; cpudl's native SGEMM, OpenBLAS and BLIS
// (dense/blas/) run when CPUDL_BLAS names them, the epilogue applied after the product (CBLAS has
// none). CPUDL_VERBOSE=1 prints `matmul <shape> -> <entry>` once per shape.
#pragma once

#include <span>
#include <string_view>

#include "dense/shapes.h"

namespace cpudl::dense {

struct MatmulImpl {
  std::string_view name;
  bool (*runs)(const MatmulShape&, const MatmulEpilogue&);
  bool (*prefers)(const MatmulShape&, const MatmulEpilogue&);
  void (*run)(const MatmulShape&, const float* a, const float* b, float* c, const MatmulEpilogue&);
};

std::span<const MatmulImpl> matmul_impls();
// CPUDL_BLAS's engine when it names one other than oneDNN (an error naming the Debian package
// when that library is missing), else the first entry that runs and prefers the product.
const MatmulImpl& choose_matmul_impl(const MatmulShape& s, const MatmulEpilogue& e);

// C[b] = op(A[b]) * op(B[b]) (+ bias) (+ C when accumulating), then the activation: on the entry
// choose_matmul_impl picks.
void matmul(const MatmulShape& shape, const float* a, const float* b, float* c,
            const MatmulEpilogue& epilogue = {});

}  // namespace cpudl::dense
