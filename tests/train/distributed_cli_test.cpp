// `mpirun -np 2 cpudl train`: real Open MPI ranks (mpirun from openmpi-bin) training on shards of
// each global batch land on the weights of one process; mismatched commands and a missing mpirun
// are refused with one line.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_sandbox.h"
#include "cpudl/io.h"
#include "named_tensors.h"

namespace {

const std::string kTiny = std::string(CPUDL_FIXTURES_DIR) + "/../golden/mnist_tiny";

using Result = cpudl::testing::CliResult;
using cpudl::testing::worst_relative_difference;

bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

class DistributedCli : public cpudl::testing::CliSandbox {
 protected:
  // mpirun with `ranks` copies of one command, or the MPMD form "A : B" when `args` holds ':'.
  Result mpirun(int ranks, const std::string& args) {
    const std::string command =
        "env -u CPUDL_ISA -u CPUDL_PROFILE -u CPUDL_VERBOSE OMPI_ALLOW_RUN_AS_ROOT=1 "
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 timeout 120 mpirun -np " +
        std::to_string(ranks) + " " + args + " >" + path("out.txt") + " 2>" + path("err.txt");
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, cpudl::testing::slurp(path("out.txt")),
            cpudl::testing::slurp(path("err.txt"))};
  }
  std::string train_args(const std::string& out, const std::string& extra = "--epochs 1") {
    return std::string(CPUDL_BINARY) + " train --model simplecnn --data " + kTiny + " --init " + kTiny +
           "/simplecnn_init.safetensors --no-shuffle --batch 32 --threads 1 --json --out " + out + " " +
           extra;
  }
};

TEST_F(DistributedCli, TwoRanksLandOnTheWeightsOfOneProcess) {
  if (!have_mpirun())
    GTEST_SKIP() << "mpirun is not installed (openmpi-bin; scripts/install-deps.sh installs it)";
  const Result single =
      run("train --model simplecnn --data " + kTiny + " --init " + kTiny +
          "/simplecnn_init.safetensors --no-shuffle --batch 32 --epochs 1 --threads 1 --out " +
          path("single.safetensors"));
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const Result two = mpirun(2, train_args(path("two.safetensors")));
  ASSERT_EQ(two.exit_code, 0) << two.err << two.out;
  // 20 Adam steps of 32 images, each rank on 16 of them: within 1e-4 of one process (one process
  // on 1 and 2 threads already differs by about 3e-5).
  EXPECT_LT(worst_relative_difference(path("single.safetensors"), path("two.safetensors")), 1e-4);
  // Only rank 0 reports: one summary, which counts the ranks.
  int summaries = 0;
  std::istringstream lines(two.out);
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("summary")) {
      ++summaries;
      EXPECT_EQ(j["ranks"], 2);
    }
  }
  EXPECT_EQ(summaries, 1) << two.out;
  EXPECT_TRUE(std::filesystem::exists(path("two.safetensors.ckpt")));
}

TEST_F(DistributedCli, ALostRankEndsTheJobAndTheCheckpointResumes) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  // Two ranks train for long; once a checkpoint exists, rank 1 is killed (SIGKILL). mpirun must end
  // rank 0 too, promptly, naming the lost rank; the checkpoint must load, and --resume on one
  // process must finish the run.
  const std::string out = path("k.safetensors"), ckpt = out + ".ckpt";
  const std::string script =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
      "timeout 120 mpirun -np 2 " +
      train_args(out, "--epochs 400 --checkpoint-every 3") + " >" + path("out.txt") + " 2>" +
      path("err.txt") +
      " & job=$!\n"
      "for i in $(seq 600); do [ -f " +
      ckpt +
      " ] && break; sleep 0.1; done\n"
      "for p in $(pgrep -f 'train --model simplecnn.*" +
      out +
      "'); do\n"
      "  tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && kill -9 $p\n"
      "done\n"
      "start=$(date +%s%N); wait $job; code=$?; end=$(date +%s%N)\n"
      "echo $code $(( (end - start) / 1000000 )) > " +
      path("result.txt") + "\n";
  std::ofstream(path("kill.sh")) << script;
  ASSERT_EQ(std::system(("bash " + path("kill.sh")).c_str()), 0);
  std::istringstream result(cpudl::testing::slurp(path("result.txt")));
  int code = 0, milliseconds = 0;
  result >> code >> milliseconds;
  const std::string err = cpudl::testing::slurp(path("err.txt"));
  EXPECT_NE(code, 0) << err;
  EXPECT_NE(code, 124) << "the job hung until timeout killed it";
  EXPECT_LT(milliseconds, 10000) << err;
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(out));
  ASSERT_NO_THROW(cpudl::io::load_safetensors(ckpt));
  const Result resumed =
      run("train --data " + kTiny + " --resume " + ckpt + " --epochs 1 --out " + out + " --threads 1");
  // the checkpoint may already be past epoch 1: either it finishes or it says why it cannot
  if (resumed.exit_code == 0)
    EXPECT_TRUE(std::filesystem::exists(out));
  else
    EXPECT_NE(resumed.err.find("nothing is left to train"), std::string::npos) << resumed.err;
}

TEST_F(DistributedCli, RanksStartedWithDifferentFlagsAreRefused) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  const Result r = mpirun(1, train_args(path("a.safetensors"), "--epochs 1 --lr 0.001") + " : -np 1 " +
                                 train_args(path("a.safetensors"), "--epochs 1 --lr 0.002"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rank 1 was started with a different --lr than rank 0"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("a.safetensors")));
}

TEST_F(DistributedCli, MoreRanksThanSamplesInABatchIsAUsageError) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  const Result r = mpirun(2, std::string(CPUDL_BINARY) + " train --data " + kTiny +
                                 " --batch 1 --threads 1 --out " + path("b.safetensors"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--batch 1 is smaller than the 2 ranks"), std::string::npos) << r.err;
}

TEST_F(DistributedCli, DistributedOutsideMpiIsAUsageError) {
  const Result r = run("train --data " + kTiny + " --distributed --out " + path("c.safetensors"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not started by mpirun"), std::string::npos) << r.err;
}

}  // namespace
