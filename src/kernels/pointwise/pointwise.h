// 1x1 convolutions as GEMMs over pixels, channels-last (PointwiseTileArgs in kernel_types.h;
// the driver is conv/pointwise_conv.h). A tile is up to 6 pixels x 64 output columns: each
// pixel's k channels are read where they lie (a strided layer's pixels are 2 C apart, its
// gradient's rows scattered) and broadcast one at a time against the 64-column weight panel,
// k x 64 floats that stay in L1 while the pixels stream past. Written for ResNet's 1x1/2
// shortcuts, where oneDNN 2.6 spent as long on the gather and the zeros of the skipped pixels as
// on the product (layer2's backward-data pass at 42% of the fp32 roof, docs/BENCHMARKS.md).
#pragma once

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

#define CPUDL_DECLARE_POINTWISE(isa) void f32_pointwise_tile__##isa(const PointwiseTileArgs& args);
CPUDL_DECLARE_POINTWISE(ref)
CPUDL_DECLARE_POINTWISE(avx2)
CPUDL_DECLARE_POINTWISE(avx512)
#undef CPUDL_DECLARE_POINTWISE

}  // namespace cpudl::kernels
