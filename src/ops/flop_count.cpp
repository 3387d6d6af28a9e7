// The forward FLOP count of ops.h: per thread, so concurrent models do not mix their counts.
#include "cpudl/ops.h"
#include "ops/op_helpers.h"

namespace cpudl {
namespace {
thread_local double t_forward_flops = 0;
}

void count_forward_flops(double flops) { t_forward_flops += flops; }
double forward_flops() { return t_forward_flops; }
void reset_forward_flops() { t_forward_flops = 0; }

}  // namespace cpudl
