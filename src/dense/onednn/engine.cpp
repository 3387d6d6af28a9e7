// oneDNN set-up: capped to cpudl's active ISA level, so CPUDL_ISA governs oneDNN's JIT too.
#include "dense/onednn/engine.h"

#include "dense/onednn/dense.h"

#include <omp.h>

#include "cpudl/error.h"
#include "cpudl/runtime.h"

namespace cpudl::onednn {
namespace {

dnnl::cpu_isa onednn_isa(IsaLevel level) {
  switch (level) {
    case IsaLevel::generic:
      return dnnl::cpu_isa::sse41;
    case IsaLevel::avx2:
      return dnnl::cpu_isa::avx2;
    case IsaLevel::avx512:
      return dnnl::cpu_isa::avx512_core;
    case IsaLevel::avx512_vnni:
      return dnnl::cpu_isa::avx512_core_vnni;
    case IsaLevel::avx512_bf16:
      return dnnl::cpu_isa::avx512_core_bf16;
    case IsaLevel::amx:
      return dnnl::cpu_isa::avx512_core_amx;
  }
  return dnnl::cpu_isa::all;
}

struct State {
  dnnl::engine engine;
  dnnl::stream stream;
  State() {
    const Runtime& rt = runtime();  // sizes the OpenMP pool oneDNN runs on
    if (rt.isa.active < rt.isa.detected) dnnl::set_max_cpu_isa(onednn_isa(rt.isa.active));
    engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
    stream = dnnl::stream(engine);
  }
};

State& state() {
  static State s;
  return s;
}

}  // namespace

dnnl::engine& engine() { return state().engine; }

// oneDNN runs at most cpudl's active level (above), so the level says which block its direct
// convolutions use: 16 floats (one ZMM register) from AVX-512 on, 8 (one YMM) below.
std::int64_t blocked_layout_channels() { return runtime().isa.active >= IsaLevel::avx512 ? 16 : 8; }
dnnl::stream& stream() { return state().stream; }

std::string version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         (v->cpu_runtime == DNNL_RUNTIME_OMP ? " (OpenMP)" : " (other CPU runtime)");
}

Counters& counters() {
  static Counters c;
  return c;
}

void reorder(const dnnl::memory& from, const dnnl::memory& to) {
  const ThreadScope openmp(0);
  dnnl::reorder(from, to).execute(stream(), const_cast<dnnl::memory&>(from), const_cast<dnnl::memory&>(to));
  stream().wait();
  counters().reorders.fetch_add(1, std::memory_order_relaxed);
}

bool bf16_compute_available() { return runtime().isa.active >= IsaLevel::avx512_bf16; }

void require_bf16_compute() {
  if (!bf16_compute_available())
    throw Error("bf16: this CPU has neither AVX512-BF16 nor AMX (or CPUDL_ISA caps them); use fp32");
}

}  // namespace cpudl::onednn
