// The one oneDNN engine and stream of the process, configured from cpudl's runtime (ISA cap,
// thread pool), and the counters that keep dense compute honest (primitive creations, reorders).
#pragma once

#include <atomic>
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

namespace cpudl::onednn {

dnnl::engine& engine();
dnnl::stream& stream();

// "2.6.3 (cpu runtime: OpenMP)".
std::string version();

// Counters for tests and `CPUDL_VERBOSE`: a steady training loop creates no primitive and runs
// no activation reorder.
struct Counters {
  std::atomic<std::uint64_t> primitives_created{0};
  std::atomic<std::uint64_t> cache_hits{0};
  std::atomic<std::uint64_t> cache_evictions{0};
  std::atomic<std::uint64_t> reorders{0};
};
Counters& counters();

// Runs a reorder between two memories and counts it.
void reorder(const dnnl::memory& from, const dnnl::memory& to);

}  // namespace cpudl::onednn
