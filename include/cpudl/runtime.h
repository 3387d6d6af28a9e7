// What cpudl knows about the machine: CPU features (CPUID + XGETBV), topology, memory, cgroup
// limits, and the decisions it derives from them (kernel ISA level, thread count). Probed once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cpudl {

// ---------------------------------------------------------------------------------------------
// Instruction-set features, named as Linux's /proc/cpuinfo names them.
// X(name, leaf, subleaf, register, bit, os_state)
#define CPUDL_CPU_FEATURES(X)           \
  X(sse4_2, 1, 0, ecx, 20, sse)         \
  X(avx, 1, 0, ecx, 28, avx)            \
  X(avx2, 7, 0, ebx, 5, avx)            \
  X(fma, 1, 0, ecx, 12, avx)            \
  X(f16c, 1, 0, ecx, 29, avx)           \
  X(avx_vnni, 7, 1, eax, 4, avx)        \
  X(avx512f, 7, 0, ebx, 16, avx512)     \
  X(avx512cd, 7, 0, ebx, 28, avx512)    \
  X(avx512bw, 7, 0, ebx, 30, avx512)    \
  X(avx512dq, 7, 0, ebx, 17, avx512)    \
  X(avx512vl, 7, 0, ebx, 31, avx512)    \
  X(avx512_vnni, 7, 0, ecx, 11, avx512) \
  X(avx512_bf16, 7, 1, eax, 5, avx512)  \
  X(avx512_fp16, 7, 0, edx, 23, avx512) \
  X(avx512vbmi, 7, 0, ecx, 1, avx512)   \
  X(amx_tile, 7, 0, edx, 24, amx)       \
  X(amx_bf16, 7, 0, edx, 22, amx)       \
  X(amx_int8, 7, 0, edx, 25, amx)

enum class CpuFeature : int {
#define CPUDL_ENUM_FEATURE(name, ...) name,
  CPUDL_CPU_FEATURES(CPUDL_ENUM_FEATURE)
#undef CPUDL_ENUM_FEATURE
      count
};
inline constexpr int kCpuFeatureCount = static_cast<int>(CpuFeature::count);

std::string_view cpu_feature_name(CpuFeature feature);

// Register state the OS must have enabled (XCR0) before a feature may be used.
struct OsState {
  bool xsave = false;           // CPUID.1:ECX.OSXSAVE: XGETBV may be executed
  bool avx = false;             // XCR0 bits 1-2 (SSE, YMM)
  bool avx512 = false;          // XCR0 bits 5-7 (opmask, ZMM_Hi256, Hi16_ZMM)
  bool amx = false;             // XCR0 bits 17-18 (XTILECFG, XTILEDATA)
  bool amx_permission = false;  // Linux arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) granted
};

struct CpuFeatures {
  std::string vendor;      // "GenuineIntel", "AuthenticAMD", ...
  std::string model_name;  // brand string, trimmed
  int family = 0, model = 0, stepping = 0;
  std::string hypervisor;              // hypervisor vendor signature; empty on bare metal
  bool cpuid[kCpuFeatureCount] = {};   // what CPUID advertises
  bool usable[kCpuFeatureCount] = {};  // advertised and its register state enabled by the OS
  OsState os;

  bool has(CpuFeature f) const { return usable[static_cast<int>(f)]; }
};

// Executes CPUID/XGETBV on this CPU (and asks Linux for AMX permission when AMX is advertised).
CpuFeatures probe_cpu_features();

// ---------------------------------------------------------------------------------------------
// Kernel ISA levels. Each level requires everything below it, so "the best level" is one value.
#define CPUDL_ISA_LEVELS(X) X(generic) X(avx2) X(avx512) X(avx512_vnni) X(avx512_bf16) X(amx)

enum class IsaLevel : int {
#define CPUDL_ENUM_LEVEL(name) name,
  CPUDL_ISA_LEVELS(CPUDL_ENUM_LEVEL)
#undef CPUDL_ENUM_LEVEL
};
inline constexpr int kIsaLevelCount = static_cast<int>(IsaLevel::amx) + 1;

std::string_view isa_level_name(IsaLevel level);
std::optional<IsaLevel> parse_isa_level(std::string_view name);
// Features a level adds on top of the level below it.
std::vector<CpuFeature> isa_level_features(IsaLevel level);
// Highest level whose features are all usable.
IsaLevel best_isa_level(const CpuFeatures& cpu);

struct IsaChoice {
  IsaLevel detected = IsaLevel::generic;  // best the CPU and OS allow
  IsaLevel active = IsaLevel::generic;    // what the kernels use (detected, or capped)
  std::string reason;
};
// `requested` is the value of CPUDL_ISA, if set. A level the CPU lacks, or an unknown name,
// throws UsageError naming the missing features; it never leads to an illegal instruction.
IsaChoice choose_isa_level(const CpuFeatures& cpu, std::optional<std::string> requested);

// ---------------------------------------------------------------------------------------------
// Topology, memory and limits, read from sysfs/procfs under `root` ("/" on a live system; tests
// point it at fixture trees). Anything that cannot be read is std::nullopt / empty: "unknown".
struct NumaNode {
  int id = 0;
  std::vector<int> cpus;
  std::optional<std::uint64_t> memory_bytes;
};

struct CgroupCpuLimit {
  std::string version;         // "v2", "v1", or "none" when no cgroup CPU controller is found
  std::optional<double> cpus;  // quota / period; nullopt = unlimited or unknown
  std::string path;            // the file the limit was read from
};

struct SystemInfo {
  std::vector<int> online_cpus;       // logical CPUs online
  std::optional<int> physical_cores;  // distinct (package, core) pairs among online CPUs
  std::optional<int> sockets;
  std::optional<std::uint64_t> l1d_bytes, l2_bytes, l3_bytes;  // per instance, as cpu0 sees them
  std::vector<NumaNode> numa_nodes;
  std::optional<std::uint64_t> mem_total_bytes, mem_available_bytes;
  std::optional<std::uint64_t> cgroup_memory_limit_bytes;
  CgroupCpuLimit cgroup_cpu;
  std::vector<int> affinity;                 // Cpus_allowed_list of this process
  std::optional<int> usable_physical_cores;  // physical cores with at least one allowed CPU
  std::optional<std::string> frequency_governor;
  std::optional<std::uint64_t> thermal_throttle_events;  // summed over CPUs (Intel only)
  // Each physical core's online CPUs (its hardware threads), cores ordered by package and core id;
  // empty when the topology cannot be read.
  std::vector<std::vector<int>> core_cpus;
};

SystemInfo read_system_info(const std::filesystem::path& root = "/");

// CPU time since boot from /proc/stat under `root`: clock ticks summed over the CPUs. `steal` is
// the time a guest's vCPUs were ready to run while the hypervisor ran other work (0 on bare metal).
struct CpuTimes {
  std::uint64_t total = 0, steal = 0;
  int cpus = 0;            // the per-CPU lines
  std::uint64_t idle = 0;  // idle and iowait ticks: time no task wanted a CPU
};
std::optional<CpuTimes> read_cpu_times(const std::filesystem::path& root = "/");
// /proc/stat's text; nullopt when its "cpu" line is missing or malformed.
std::optional<CpuTimes> parse_proc_stat(std::string_view text);
// /proc/<pid>/stat's fields, [i] being proc(5)'s field i + 1: [0] the pid, [1] the command name
// (which may hold spaces and parentheses: it ends at the line's last ')'), [13] utime, [14]
// stime, [21] starttime. Just the pid and an empty name when the text has no ')'.
std::vector<std::string> process_stat_fields(std::string_view text);
// The share of `busy` CPUs' time between two readings that the hypervisor took: the stolen ticks
// over busy / cpus of all the ticks, in [0, 1]; 0 when no tick passed.
double steal_share(const CpuTimes& before, const CpuTimes& after, int busy);
// Steal over a span of work on `busy_threads` threads, from construction to share().
class StealMeter {
 public:
  explicit StealMeter(int busy_threads);
  std::optional<double> share() const;  // nullopt where /proc/stat cannot be read

 private:
  int busy_;
  std::optional<CpuTimes> start_;
};

// Parses a Linux cpulist ("0-3,8,10-11"). Throws Error on malformed input.
std::vector<int> parse_cpu_list(std::string_view text);
// Parses a sysfs cache size ("32K", "1024K", "32M"). nullopt when malformed.
std::optional<std::uint64_t> parse_cache_size(std::string_view text);
// This process's peak resident memory so far, in bytes (getrusage's maxrss).
std::int64_t peak_resident_bytes();
// A size for people: "23.5 GiB", "1.0 MiB", "32 KiB" (binary units), in doctor's report and in
// memory messages alike.
std::string byte_size_text(std::uint64_t bytes);
// The bytes of tensor storage alive now and at most since the last reset (requested sizes, cache
// or not): what activations, weights and optimiser state take, without the process's code.
std::size_t live_tensor_bytes();
std::size_t peak_tensor_bytes();
void reset_peak_tensor_bytes();
// A ceiling for live tensor bytes (0: none). An allocation that would pass it throws
// MemoryLimitError on the thread that asked (never inside an OpenMP parallel region, where a
// throw cannot leave: such an allocation, always a kernel's small scratch, is let through).
void set_tensor_memory_limit(std::size_t bytes);
std::size_t tensor_memory_limit();

// ---------------------------------------------------------------------------------------------
// Threads: one compute pool (OpenMP). Environment look-ups go through a function so that tests
// can supply their own.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;
EnvLookup process_environment();

struct ThreadPlan {
  int threads = 1;
  int usable_cores = 1;  // min(physical cores, affinity, cgroup quota)
  std::string reason;
};
// CPUDL_THREADS, then OMP_NUM_THREADS, override the default. A malformed value is a UsageError.
ThreadPlan plan_threads(const SystemInfo& system, const EnvLookup& env);

// --bind cores: one physical core per compute thread, the cores of one NUMA node before the
// next's, SMT siblings only after every core has a thread, within the affinity mask.
struct Placement {
  std::vector<int> cpus;   // thread -> the CPU it is pinned to
  std::vector<int> nodes;  // thread -> its NUMA node
  std::string text;        // "node 0: threads 0-1 on CPUs 0-1; node 1: thread 2 on CPU 4"
};
Placement plan_placement(const SystemInfo& system, int threads);
// Pins the calling thread's OpenMP pool as planned: threads 1.. to their CPU each, the calling
// thread to its node's allowed CPUs (the threads it starts later inherit its mask). Returns the
// CPU each thread runs on afterwards; Error naming the thread when the kernel refuses.
std::vector<int> bind_compute_threads(const Placement& placement, const SystemInfo& system);

// Things that slow people down, one line each.
std::vector<std::string> performance_warnings(const CpuFeatures& cpu, const SystemInfo& system,
                                              const ThreadPlan& threads, const EnvLookup& env);

// ---------------------------------------------------------------------------------------------
// The process-wide runtime: probed once, on first use, then read as constants.
struct Runtime {
  CpuFeatures cpu;
  SystemInfo system;
  IsaChoice isa;
  ThreadPlan threads;
};
// Throws UsageError on a bad CPUDL_ISA / CPUDL_THREADS / OMP_NUM_THREADS (and keeps throwing it).
// Its ThreadPlan is the machine's default; the count work runs on is compute_threads().
const Runtime& runtime();

// ---------------------------------------------------------------------------------------------
// The compute thread count is a value, not process state read back from the environment: a
// server or a Python program may run several sessions at once, each with its own count.
//
// The count in effect on the calling thread: the innermost ThreadScope's, else the process
// default (set_default_threads, else runtime().threads). Every parallel region sizes itself by it.
int compute_threads();
// The process default, for threads with no ThreadScope (the CLI's --threads, cpudl.set_threads).
// Throws UsageError outside [1, 4096]. Call it before starting work on other threads.
void set_default_threads(int threads);
// Runs the calling thread's work on `threads` threads until destroyed (0: keep the count in
// effect). It also sets OpenMP's count for the thread (only it, set_default_threads and the
// runtime's start do), so oneDNN, whose primitives read that count, follows the same value.
// Scopes nest; a scope belongs to the thread that made it.
class ThreadScope {
 public:
  explicit ThreadScope(int threads);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int previous_scope_;
  int previous_openmp_;
};
// A --threads value: UsageError naming `what` outside [1, 4096]; a one-line warning on stderr
// (once per process) above the usable cores, where threads only wait for each other.
void check_thread_request(int threads, const char* what);

// ---------------------------------------------------------------------------------------------
// Profiling of the eager engine (src/runtime/op_profile.cpp): FLOPs and time per op.
// Multiply-adds x 2 of the dense ops (conv2d, linear, matmul) that this thread's forward calls
// ran since the last reset: what `cpudl bench model` divides by time. A training step costs about
// three times its forward pass (the backward computes the input and the weight gradients).
double forward_flops();
void reset_forward_flops();

// Where a training step's time goes, per op: each op's forward, each autograd node's backward
// (FLOPs counted for forward only: the dense ops' backward is about twice their forward) and the
// optimiser step. Collected when CPUDL_PROFILE=1 or after enable_op_profile(true).
// Counters of the compute threads over a span of work (perf_event_open; src/runtime/perf_counters.h).
// `hardware` is false where the CPU, VM or kernel exposes none (counters_unavailable_reason says
// why); the scheduler's counts are read apart, `software` false when those are refused too.
struct CounterReading {
  bool hardware = false, software = false;
  double cycles = 0, instructions = 0, cache_references = 0, cache_misses = 0, branch_misses = 0;
  double context_switches = 0, task_seconds = 0;  // software: switches, CPU time of the threads
  CounterReading& operator+=(const CounterReading& o);
  CounterReading operator-(const CounterReading& o) const;
};
// Opens the counters on the compute pool's threads (first call) and reads them.
CounterReading read_thread_counters();
std::string counters_unavailable_reason();  // "" when the hardware counters work

struct OpTime {
  std::string op, phase;  // phase: forward, backward or optimizer
  std::int64_t calls = 0;
  double seconds = 0, flops = 0;
  CounterReading counters;  // with CPUDL_PROFILE=1, what the op's calls cost in counters
};
void enable_op_profile(bool on);
bool op_profiling_enabled();
std::vector<OpTime> op_profile();  // most time first
void reset_op_profile();

// Whether CPUDL_VERBOSE asks for kernel-choice logging (to stderr).
bool verbose();
// An optimisation's off switch (CPUDL_WINOGRAD, CPUDL_FUSE_DEPTHWISE): on unless the variable
// is "0". Read when called; callers keep the answer.
bool switched_on(const char* variable);

// ---------------------------------------------------------------------------------------------
// Roofs measured on this machine: what speed claims are judged against.
struct MeasuredPeaks {
  int threads = 1;
  double fp32_gflops_one_core = 0, fp32_gflops_all_cores = 0;
  double bandwidth_gbs_one_core = 0, bandwidth_gbs_all_cores = 0;  // read bandwidth
  std::string fma_kernel, bandwidth_kernel;
  // The share of the probing threads' time the hypervisor took (StealMeter), the larger of the
  // one-core and all-threads phases; nullopt where /proc/stat cannot be read. A roof measured under
  // steal is low.
  std::optional<double> steal_share;
  // The share of the all-threads phase's `threads` x wall time this process spent on a CPU: near 1
  // on an idle machine; well below it (and above what steal explains) when other processes took
  // the CPUs, and the roofs read low. nullopt where the process clock cannot be read.
  std::optional<double> cpu_share;
  std::optional<double> load_average;  // /proc/loadavg's one-minute figure, before the probes
};
// A warning when other processes competed for the CPUs during measure_peaks (its cpu_share falls
// short by more than the steal explains); empty otherwise.
std::string competition_warning(const MeasuredPeaks& peaks);
// Takes about `seconds` in total (split between the FMA and bandwidth probes). `on_probe`, when
// given, hears each of the four probes start (its index, 4, its name): a progress bar.
MeasuredPeaks measure_peaks(
    double seconds = 1.5, const std::function<void(int probe, int probes, const char* name)>& on_probe = {});

// One compute roof on `threads` threads, measured for about `seconds` with the active level's
// probe. `native` is false when the level has no instruction for it (the scalar reference ran).
enum class ComputeRoof { fp32_fma, int8_dot, bf16_dot };
struct RoofMeasurement {
  double gops = 0;  // billions of operations per second (multiply and add counted apart)
  std::string kernel;
  bool native = true;
};
RoofMeasurement measure_compute_roof(ComputeRoof roof, int threads, double seconds);
// Memory read bandwidth in GB/s on `threads` threads.
double measure_read_bandwidth(int threads, double seconds);

// The same probe, its buffer (far beyond the last-level cache, first touched by the threads that
// read it) allocated once, for benchmarks that measure the roof next to each of their rows.
class ReadBandwidthProbe {
 public:
  explicit ReadBandwidthProbe(int threads);
  ~ReadBandwidthProbe();
  ReadBandwidthProbe(const ReadBandwidthProbe&) = delete;
  ReadBandwidthProbe& operator=(const ReadBandwidthProbe&) = delete;
  // The best of passes over the buffer for about `seconds` (at least `min_passes`), in GB/s; 0
  // when the buffer could not be allocated.
  double measure(double seconds, int min_passes = 2);

 private:
  int threads_;
  std::size_t floats_ = 0;
  float* data_ = nullptr;
};

}  // namespace cpudl
