// 1x1 convolutions as GEMMs over pixels, channels-last (PointwiseTileArgs in kernel_types.h;
// the driver is dense/conv/pointwise_conv.h). A tile is up to 6 pixels x 64 output columns: each
// pixel's k channels are read where they lie (a strided layer's pixels are 2 C apart, its
// gradient's rows scattered) and broadcast one at a time against the 64-column weight panel,
// k x 64 floats that stay in L1 while the pixels stream past. Written for ResNet's 1x1/2
// shortcuts, where oneDNN 2.6 spent as long on the gather and the zeros of the skipped pixels as
// on the product (layer2's backward-data pass at 42% of the fp32 roof, docs/BENCHMARKS.md).
#pragma once

#include <type_traits>

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

// tile(std::integral_constant<int, rows>{}) for rows 1 to kPointwiseMaxRows: the ISA variants'
// tiles are templates on their row count; 0 calls nothing.
template <class Tile>
void for_row_count(int rows, Tile&& tile) {
  switch (rows) {
    case 6:
      return tile(std::integral_constant<int, 6>{});
    case 5:
      return tile(std::integral_constant<int, 5>{});
    case 4:
      return tile(std::integral_constant<int, 4>{});
    case 3:
      return tile(std::integral_constant<int, 3>{});
    case 2:
      return tile(std::integral_constant<int, 2>{});
    case 1:
      return tile(std::integral_constant<int, 1>{});
    default:
      return;
  }
}

#define CPUDL_DECLARE_POINTWISE(isa) void f32_pointwise_tile__##isa(const PointwiseTileArgs& args);
CPUDL_DECLARE_POINTWISE(ref)
CPUDL_DECLARE_POINTWISE(avx2)
CPUDL_DECLARE_POINTWISE(avx512)
#undef CPUDL_DECLARE_POINTWISE

}  // namespace cpudl::kernels
