// C++ heap allocations made while running a function (see allocation_counter.cpp).
#pragma once

#include <functional>

namespace cpudl::testing {
struct AllocationCount {
  long ours = 0;    // from cpudl, the standard library, anything but oneDNN
  long onednn = 0;  // from inside libdnnl (its per-execute argument map)
};
// Not thread-safe with respect to other counting: one counted region at a time.
AllocationCount count_allocations(const std::function<void()>& fn);
}  // namespace cpudl::testing
