// What `cpudl doctor --json` prints and `cpudl.doctor()` returns: the machine, what cpudl does on
// it (ISA level, threads, kernels, BLAS) and what slows it down, as one JSON object.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "cpudl/runtime.h"

namespace cpudl {

// With `peaks`, also the measured roofs and each installed BLAS's SGEMM speed.
nlohmann::ordered_json doctor_json(const Runtime& rt, const std::optional<MeasuredPeaks>& peaks);

}  // namespace cpudl
