// The cpudl binary end to end: exit codes, usage on bad input, and the doctor report.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <map>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cpudl/runtime.h"

namespace {

struct Result {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `env_prefix cpudl args` through the shell, capturing stdout and stderr separately.
Result run(const std::string& args, const std::string& env_prefix = "") {
  // ctest runs tests in parallel processes: name the capture files after test and process.
  const std::string stem = ::testing::TempDir() + "/cpudl_cli_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                           std::to_string(getpid());
  const std::string out = stem + ".out", err = stem + ".err";
  const std::string command = "env -u CPUDL_ISA -u CPUDL_THREADS -u OMP_NUM_THREADS " + env_prefix + " " +
                              CPUDL_BINARY + " " + args + " >" + out + " 2>" + err;
  const int status = std::system(command.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  return r;
}

TEST(Cli, UnknownSubcommandPrintsUsageAndExits2) {
  const Result r = run("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("Usage: cpudl"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("frobnicate"), std::string::npos) << r.err;
}

TEST(Cli, NoSubcommandExits2) { EXPECT_EQ(run("").exit_code, 2); }

TEST(Cli, UnknownFlagExits2) {
  const Result r = run("doctor --jsn");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--jsn"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Usage: cpudl"), std::string::npos) << r.err;
}

TEST(Cli, HelpAndVersionExit0) {
  EXPECT_EQ(run("--help").exit_code, 0);
  const Result v = run("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.out.find("cpudl "), std::string::npos);
}

// OpenBLAS picks its kernel from CPU models it knows, and Debian 12's 0.3.21 took this machine
// (Emerald Rapids) for a Prescott: unless OPENBLAS_CORETYPE is set, cpudl sets it from the ISA
// level it runs at before loading the library. The user's setting wins, and a slow one is warned
// about with the remedy.
TEST(Cli, OpenBlasRunsTheKernelFamilyOfTheIsaLevel) {
  const auto doctor = [](const std::string& env) {
    return nlohmann::json::parse(run("doctor --json", "-u OPENBLAS_CORETYPE " + env).out);
  };
  const auto d = doctor("");
  if (d["blas"]["libraries"]["openblas"].is_null()) GTEST_SKIP() << "OpenBLAS is not installed";
  const std::string library = d["blas"]["libraries"]["openblas"];
  if (library.find("cannot load") != std::string::npos) GTEST_SKIP() << library;
  const std::string level = d["level"];
  const std::string want = level.starts_with("avx512_bf16") || level == "amx" ? "Cooperlake"
                           : level.starts_with("avx512")                      ? "SkylakeX"
                           : level == "avx2"                                  ? "Haswell"
                                                                              : "";
  if (want.empty()) GTEST_SKIP() << "below AVX2: OpenBLAS's own choice";
  EXPECT_NE(library.find("kernel " + want + " by OPENBLAS_CORETYPE=" + want + " from cpudl"),
            std::string::npos)
      << library;
  const std::string capped = doctor("CPUDL_ISA=avx2")["blas"]["libraries"]["openblas"];
  EXPECT_NE(capped.find("kernel Haswell by OPENBLAS_CORETYPE=Haswell from cpudl"), std::string::npos)
      << capped;
  if (level.starts_with("avx512") || level == "amx") {
    const auto forced = doctor("OPENBLAS_CORETYPE=Prescott");
    const std::string text = forced["blas"]["libraries"]["openblas"];
    EXPECT_NE(text.find("kernel Prescott"), std::string::npos) << text;
    EXPECT_EQ(text.find("from cpudl"), std::string::npos) << text;
    EXPECT_NE(forced["warnings"].dump().find("OPENBLAS_CORETYPE for cpudl to set " + want), std::string::npos)
        << forced["warnings"].dump();
  }
}

TEST(Cli, DoctorJsonMatchesTheRuntime) {
  const Result r = run("doctor --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const cpudl::Runtime& rt = cpudl::runtime();
  EXPECT_EQ(j["level"], std::string(cpudl::isa_level_name(rt.isa.detected)));
  for (int f = 0; f < cpudl::kCpuFeatureCount; ++f) {
    const std::string name(cpudl::cpu_feature_name(static_cast<cpudl::CpuFeature>(f)));
    ASSERT_TRUE(j["isa"].contains(name)) << name;
    EXPECT_EQ(j["isa"][name].get<bool>(), rt.cpu.usable[f]) << name;
  }
  for (const char* key :
       {"cpu", "cores", "caches", "numa_nodes", "memory", "cgroup", "affinity", "os_state", "detected_level",
        "level_reason", "threads", "threads_reason", "kernels", "warnings", "blas"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["cores"]["logical"].get<std::size_t>(), rt.system.online_cpus.size());
  EXPECT_FALSE(j.contains("measured"));
}

TEST(Cli, CpudlIsaCapsTheLevelAndTheKernels) {
  const Result r = run("doctor --json", "CPUDL_ISA=generic");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["level"], "generic");
  EXPECT_EQ(j["kernels"]["f32_add"], "f32_add__ref");
  if (cpudl::runtime().isa.detected >= cpudl::IsaLevel::avx2) {
    const auto avx2 = nlohmann::json::parse(run("doctor --json", "CPUDL_ISA=avx2").out);
    EXPECT_EQ(avx2["level"], "avx2");
    EXPECT_EQ(avx2["kernels"]["f32_add"], "f32_add__avx2");
  }
}

TEST(Cli, UnsupportedOrUnknownIsaIsAClearUsageError) {
  const Result unknown = run("doctor", "CPUDL_ISA=sse9");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("CPUDL_ISA=sse9: unknown level"), std::string::npos) << unknown.err;
  if (cpudl::runtime().isa.detected < cpudl::IsaLevel::amx) {
    const Result above = run("doctor", "CPUDL_ISA=amx");
    EXPECT_EQ(above.exit_code, 2);  // an error, never SIGILL
    EXPECT_NE(above.err.find("this CPU cannot run it"), std::string::npos) << above.err;
  }
}

TEST(Cli, BadThreadCountIsAUsageError) {
  const Result r = run("doctor", "CPUDL_THREADS=lots");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("CPUDL_THREADS=lots"), std::string::npos) << r.err;
}

// --threads is defined once for every command that computes: the same flags, range and help;
// 0 and negatives are usage errors naming the flag; above the usable cores runs, with a warning.
TEST(Cli, ThreadsFlagIsTheSameForEveryCommand) {
  for (const char* command :
       {"train", "eval", "predict", "run", "quantize", "generate", "chat", "bench model", "bench llm"}) {
    const Result help = run(std::string(command) + " --help");
    EXPECT_EQ(help.exit_code, 0) << command;
    EXPECT_NE(help.out.find("-t,--threads"), std::string::npos) << command << ": " << help.out;
    EXPECT_NE(help.out.find("Compute threads (default: usable physical cores)"), std::string::npos)
        << command;
  }
  const std::string lenet = std::string(CPUDL_FIXTURES_DIR) + "/../onnx/lenet5_opset17.onnx";
  for (const char* bad : {"0", "-3", "abc"}) {
    const Result r = run("run " + lenet + " --bench 1 --threads " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find("--threads"), std::string::npos) << bad << ": " << r.err;
  }
  const Result one = run("run " + lenet + " --bench 2 -t 1 --json");
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("\"threads\":1"), std::string::npos) << one.out;
  const int above = cpudl::runtime().threads.usable_cores + 1;
  const Result many = run("run " + lenet + " --bench 2 --json --threads " + std::to_string(above));
  EXPECT_EQ(many.exit_code, 0) << many.err;
  EXPECT_NE(many.out.find("\"threads\":" + std::to_string(above)), std::string::npos) << many.out;
  EXPECT_NE(many.err.find("warning: --threads " + std::to_string(above) + " is above the"), std::string::npos)
      << many.err;
}

// Defects a new user met (issue 43): a directory where a file belongs was answered with a raw
// library message (basic_filebuf::underflow) or found only after training; a bad thread list
// printed a table header before failing. Each is now one line, before any output or work.
TEST(Cli, DirectoriesAndBadListsFailInOneLineBeforeAnyOutput) {
  const std::string dir = ::testing::TempDir();
  const Result info = run("info " + dir);
  EXPECT_EQ(info.exit_code, 1);
  EXPECT_NE(info.err.find("is a directory, expected a file"), std::string::npos) << info.err;
  EXPECT_EQ(info.err.find("basic_filebuf"), std::string::npos) << info.err;
  for (const char* command : {"bench peak --threads 0", "bench gemm --threads 1,x", "bench conv --threads -1",
                              "bench gemm --threads 1 --sizes 0"}) {
    const Result r = run(command);
    EXPECT_EQ(r.exit_code, 2) << command;
    EXPECT_EQ(r.out, "") << command;
    EXPECT_NE(r.err.find("expected a comma-separated list of positive integers"), std::string::npos) << r.err;
  }
  const Result train = run("train --model lenet5 --data " + dir + " --out " + dir);
  EXPECT_EQ(train.exit_code, 2);
  EXPECT_NE(train.err.find("is a directory: give the file to write"), std::string::npos) << train.err;
}

TEST(Cli, DoctorTextReport) {
  const Result r = run("doctor", "CPUDL_THREADS=64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Kernel level"), std::string::npos);
  EXPECT_NE(r.out.find("CPUDL_THREADS=64 exceeds"), std::string::npos) << r.out;
}

TEST(Cli, DoctorMeasureReportsPositiveRoofs) {
  const Result r = run("doctor --json --measure");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto m = nlohmann::json::parse(r.out)["measured"];
  EXPECT_GT(m["fp32_gflops_one_core"].get<double>(), 0.5);
  EXPECT_GE(m["fp32_gflops_all_cores"].get<double>(), 0.5);
  EXPECT_GT(m["bandwidth_gbs_one_core"].get<double>(), 0.1);
  ASSERT_TRUE(m["steal_pct"].is_number());  // Linux has /proc/stat
  EXPECT_GE(m["steal_pct"].get<double>(), 0.0);
  EXPECT_LE(m["steal_pct"].get<double>(), 100.0);
  EXPECT_GT(m["matmul"]["gflops"]["onednn"].get<double>(), 0.5);
  EXPECT_FALSE(m["matmul"]["fastest"].get<std::string>().empty());
}

// Other processes on the CPUs leave no steal: doctor --measure tells them by the CPU time its probes
// got, and warns instead of printing halved roofs as the machine's (issue 43).
TEST(Cli, DoctorMeasureWarnsWhenOtherProcessesTakeTheCpus) {
  const std::string pids =
      std::filesystem::temp_directory_path() / ("cpudl_hogs_" + std::to_string(getpid()));
  // Twice as many busy loops as the probes' threads: the probes get about a third of their time.
  ASSERT_EQ(std::system(("for i in 1 2 3 4; do timeout 120 sh -c 'while :; do :; done' & echo $! >> " + pids +
                         "; done")
                            .c_str()),
            0);
  const Result r = run("doctor --json --measure", "CPUDL_THREADS=2");
  std::ifstream in(pids);
  for (int pid; in >> pid;) kill(pid, SIGTERM);
  std::filesystem::remove(pids);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j["measured"]["cpu_share_pct"].is_number()) << r.out;
  EXPECT_LT(j["measured"]["cpu_share_pct"].get<double>(), 80.0);
  EXPECT_TRUE(j["measured"]["load_average"].is_number());
  bool warned = false;
  for (const auto& w : j["warnings"])
    warned |=
        w.get<std::string>().find("other processes competed for the CPUs during --measure: the probes ran") !=
        std::string::npos;
  EXPECT_TRUE(warned) << j["warnings"].dump();
}

TEST(Cli, CompetitionWarningIsForOtherProcessesNotSteal) {
  cpudl::MeasuredPeaks p;
  p.threads = 2;
  EXPECT_EQ(cpudl::competition_warning(p), "");  // no process clock: nothing said
  p.cpu_share = 0.96;
  p.steal_share = 0.0;
  EXPECT_EQ(cpudl::competition_warning(p), "");  // an idle machine
  p.cpu_share = 0.55;
  p.steal_share = 0.42;
  EXPECT_EQ(cpudl::competition_warning(p), "");  // the hypervisor took it: steal's own line says so
  p.steal_share = 0.05;
  p.load_average = 4.25;
  EXPECT_EQ(
      cpudl::competition_warning(p),
      "other processes competed for the CPUs during --measure: the probes ran 55% of 2 threads' time "
      "(hypervisor steal 5%, load average 4.25 before): the measured roofs read low; measure on an idle "
      "machine");
}

TEST(Cli, MissingBlasLibraryNamesThePackage) {
  const Result r = run("bench gemm --sizes 64 --threads 1 --backends openblas --min-time 0.001",
                       "CPUDL_BLAS_LIBRARY=/nonexistent/libopenblas.so.0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot load /nonexistent/libopenblas.so.0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("install the Debian package libopenblas0-openmp"), std::string::npos) << r.err;
  const Result matmul =
      run("bench gemm --sizes 64 --threads 1 --backends onednn --min-time 0.001", "CPUDL_BLAS=blas9");
  EXPECT_EQ(matmul.exit_code, 2);
}

TEST(Cli, BenchGemmAndConvEmitOneJsonRecordPerMeasurement) {
  const Result gemm = run("bench gemm --json --sizes 64 --threads 1 --backends onednn --min-time 0.001");
  ASSERT_EQ(gemm.exit_code, 0) << gemm.err;
  std::istringstream lines(gemm.out);
  int records = 0;
  for (std::string line; std::getline(lines, line); ++records) {
    const auto j = nlohmann::json::parse(line);
    for (const char* key : {"op", "backend", "m", "n", "k", "threads", "gflops", "pct_peak", "steal_pct"})
      EXPECT_TRUE(j.contains(key)) << key << " in " << line;
    EXPECT_GT(j["gflops"].get<double>(), 0.0);
  }
  EXPECT_EQ(records, 6);  // one square size + five layer shapes, one backend, one thread count
  const Result conv = run("bench conv --json --model lenet5 --batch 2 --threads 1 --min-time 0.001");
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  std::istringstream conv_lines(conv.out);
  records = 0;
  std::map<std::string, int> chosen;  // layer, pass and layout -> rows marked as the list's choice
  for (std::string line; std::getline(conv_lines, line); ++records) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["model"], "lenet5");
    EXPECT_GT(j["pct_peak"].get<double>(), 0.0);
    EXPECT_FALSE(j["implementation"].get<std::string>().empty());
    chosen[j["layer"].get<std::string>() + " " + j["op"].get<std::string>() + " " +
           j["layout"].get<std::string>()] += j["chosen"].get<bool>();
  }
  EXPECT_GE(records, 6);  // two layers x three passes, each on every implementation that runs it
  EXPECT_EQ(chosen.size(), 6u);
  for (const auto& [key, n] : chosen) EXPECT_EQ(n, 1) << key;
  // CPUDL_BLAS must not relabel the bench's explicit onednn row (it reroutes only library matmuls).
  const Result relabel =
      run("bench gemm --json --sizes 64 --threads 1 --backends onednn --min-time 0.001", "CPUDL_BLAS=native");
  ASSERT_EQ(relabel.exit_code, 0) << relabel.err;
  EXPECT_EQ(nlohmann::json::parse(relabel.out.substr(0, relabel.out.find('\n')))["backend"], "onednn");
  EXPECT_EQ(run("bench conv --model vgg").exit_code, 2);
  EXPECT_EQ(run("bench gemm --sizes 0").exit_code, 2);
}

TEST(Cli, BenchModelCountsTheNetworksFlops) {
  const Result r = run("bench model --model lenet5 --batch 8 --train --steps 2 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"model", "mode", "batch", "threads", "images_per_second", "ms_per_step",
                          "gflop_per_step", "gflops", "peak_gflops", "pct_peak", "peak_memory_bytes"})
    EXPECT_TRUE(j.contains(key)) << key;
  // resnet18's 11M weights with their gradients and Adam's two moments alone take 180 MB
  const Result big = run("bench model --model resnet18 --batch 2 --train --steps 1 --threads 1 --json");
  ASSERT_EQ(big.exit_code, 0) << big.err;
  const auto b = nlohmann::json::parse(big.out);
  EXPECT_GT(b["peak_memory_bytes"].get<double>(), 180e6);
  EXPECT_GT(b["peak_memory_bytes"].get<double>(), j["peak_memory_bytes"].get<double>());
  // LeNet-5's multiply-adds per image, layer by layer: conv1 6x28x28x25, conv2 16x10x10x150,
  // fc 400x120 + 120x84 + 84x10 = 416,520; x2 FLOPs, x8 images, x3 for a training step.
  EXPECT_NEAR(j["gflop_per_step"].get<double>(), 416520.0 * 2 * 8 * 3 / 1e9, 1e-9);
  EXPECT_EQ(j["mode"], "train");
  EXPECT_GT(j["images_per_second"].get<double>(), 0.0);
  EXPECT_EQ(run("bench model --model vgg").exit_code, 2);
  EXPECT_EQ(run("bench model --model lenet5 --image-size 32").exit_code, 2);
  EXPECT_EQ(run("bench model --model lenet5 --precision fp16").exit_code, 2);
}

// --precision bf16 runs inference and training under bf16 autocast where the CPU has it,
// and says so clearly where it has not (CPUDL_ISA=avx512 caps the kernels below AVX512-BF16).
TEST(Cli, BenchModelBf16) {
  const Result capped =
      run("bench model --model resnet18 --batch 2 --steps 1 --precision bf16", "CPUDL_ISA=avx512");
  EXPECT_NE(capped.exit_code, 0);
  EXPECT_NE(capped.err.find("neither AVX512-BF16 nor AMX"), std::string::npos) << capped.err;
  const Result r =
      run("bench model --model resnet18 --batch 2 --steps 1 --threads 1 --precision bf16 --json");
  if (r.exit_code != 0 && r.err.find("neither AVX512-BF16 nor AMX") != std::string::npos)
    GTEST_SKIP() << "this CPU has no bf16 kernels";
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["precision"], "bf16");
  EXPECT_EQ(j["mode"], "inference");
  EXPECT_GT(j["images_per_second"].get<double>(), 0.0);
  const Result train = run(
      "bench model --model resnet18 --batch 2 --steps 1 --threads 1 --train --optimizer sgd --precision bf16 "
      "--json");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const auto t = nlohmann::json::parse(train.out);
  EXPECT_EQ(t["precision"], "bf16");
  EXPECT_EQ(t["mode"], "train");
  EXPECT_GT(t["images_per_second"].get<double>(), 0.0);
}

// --checkpoint-activations: the same step's work (the GFLOP count is the plain step's: the
// recomputation is overhead, not work) for resnet18; a usage error where it cannot apply.
TEST(Cli, BenchModelCheckpointActivations) {
  const std::string common = "bench model --model resnet18 --batch 2 --steps 1 --threads 1 --train --json";
  const Result plain = run(common);
  const Result ckpt = run(common + " --checkpoint-activations");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(ckpt.exit_code, 0) << ckpt.err;
  const auto p = nlohmann::json::parse(plain.out), c = nlohmann::json::parse(ckpt.out);
  EXPECT_EQ(p["checkpoint_activations"], false);
  EXPECT_EQ(c["checkpoint_activations"], true);
  EXPECT_DOUBLE_EQ(p["gflop_per_step"].get<double>(), c["gflop_per_step"].get<double>());
  EXPECT_GT(c["peak_memory_bytes"].get<double>(), 0.0);
  const Result small = run("bench model --model simplecnn --train --steps 1 --checkpoint-activations");
  EXPECT_EQ(small.exit_code, 2);
  EXPECT_NE(small.err.find("simplecnn has no layer groups to recompute"), std::string::npos) << small.err;
  EXPECT_EQ(run("bench model --model resnet18 --steps 1 --checkpoint-activations").exit_code, 2);
}

}  // namespace
