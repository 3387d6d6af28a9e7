// A roof probed just before a measurement and just after it, averaged, with the hypervisor's steal
// over the same span (StealMeter). The host's speed drifts over seconds to minutes: with one roof
// per run, measured at its start, single rows read above 100% (oneDNN's 512^3 SGEMM against a roof
// probed a minute earlier), so each row is judged against its own neighbourhood. Used by `cpudl bench gemm`
// and `bench conv` (src/cli/bench.cpp) and by the kernel suite (bench/kernels_bench.cpp).
#pragma once

#include <functional>
#include <optional>
#include <utility>

#include "cpudl/runtime.h"

namespace cpudl::bench {

class RoofAround {
 public:
  // `probe` returns the roof (GOP/s, GB/s); it runs now and again in finish().
  RoofAround(std::function<double()> probe, int threads)
      : probe_(std::move(probe)), threads_(threads), steal_(threads), before_(probe_()) {}
  struct Result {
    double roof;
    std::optional<double> steal_share;  // nullopt where /proc/stat cannot be read
  };
  // After the measurement.
  Result finish() const { return {(before_ + probe_()) / 2, steal_.share()}; }
  int threads() const { return threads_; }

 private:
  std::function<double()> probe_;
  int threads_;
  StealMeter steal_;
  double before_;
};

// A compute roof (GOP/s) on `threads` threads, each probe about `seconds` long.
inline RoofAround compute_roof_around(ComputeRoof roof, int threads, double seconds) {
  return RoofAround([=] { return measure_compute_roof(roof, threads, seconds).gops; }, threads);
}

}  // namespace cpudl::bench
