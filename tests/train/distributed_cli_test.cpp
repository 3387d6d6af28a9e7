// `mpirun -np 2 cpudl train`: real Open MPI ranks (mpirun from openmpi-bin) training on shards of
// each global batch land on the weights of one process; mismatched commands and a missing mpirun
// are refused with one line.
#include <gtest/gtest.h>

#include <chrono>
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

// What became of a job signalled mid-run (DistributedCli::signal_rank_one).
struct Interrupted {
  int code = -1;
  long milliseconds = -1;
  std::string err;
};

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
  // A long two-rank run whose rank 1 receives `signal` once the first checkpoint exists: the job's
  // exit code, the milliseconds from the signal to the job's end, and its stderr.
  Interrupted signal_rank_one(const std::string& out, const std::string& signal, const std::string& args) {
    const std::string script =
        "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
        "timeout 120 mpirun -np 2 " +
        args + " >" + path("out.txt") + " 2>" + path("err.txt") +
        " & job=$!\n"
        "for i in $(seq 600); do [ -f " +
        out +
        ".ckpt ] && break; sleep 0.1; done\n"
        "for p in $(pgrep -f 'train --model simplecnn.*" +
        out +
        "'); do\n"
        "  tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && kill -" +
        signal +
        " $p\n"
        "done\n"
        "start=$(date +%s%N); wait $job; code=$?; end=$(date +%s%N)\n"
        "echo $code $(( (end - start) / 1000000 )) > " +
        path("result.txt") + "\n";
    std::ofstream(path("signal.sh")) << script;
    Interrupted r;
    if (std::system(("bash " + path("signal.sh")).c_str()) != 0) return r;
    std::istringstream result(cpudl::testing::slurp(path("result.txt")));
    result >> r.code >> r.milliseconds;
    r.err = cpudl::testing::slurp(path("err.txt"));
    return r;
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
  EXPECT_FALSE(std::filesystem::exists(path("two.safetensors.ckpt"))) << "removed once the model is saved";
}

TEST_F(DistributedCli, EveryBucketSizeAndRankCountGivesTheSameWeights) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  const Result single =
      run("train --model simplecnn --data " + kTiny + " --init " + kTiny +
          "/simplecnn_init.safetensors --no-shuffle --batch 32 --epochs 1 --threads 1 --out " +
          path("single.safetensors"));
  ASSERT_EQ(single.exit_code, 0) << single.err;
  // One sum per gradient; buckets of 50 KiB (several gradients each, the 0.8 MB of fc1's weight
  // alone in place); three ranks on shards of 10 and 11 rows.
  for (const auto& [ranks, flags] :
       std::vector<std::pair<int, std::string>>{{2, "--bucket-mb 0"}, {3, "--bucket-mb 0.05"}}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks, " + flags);
    const Result r = mpirun(ranks, train_args(path("dp.safetensors"), "--epochs 1 " + flags));
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    EXPECT_LT(worst_relative_difference(path("single.safetensors"), path("dp.safetensors")), 1e-4);
  }
}

// Two network namespaces joined by a veth pair: two "hosts" on one machine, each with its own
// address, that reach each other only over TCP. Made and removed by the test (it needs
// CAP_NET_ADMIN: root, as in CI's containers); names carry the process id so runs never collide.
class TwoHosts {
 public:
  explicit TwoHosts(const std::string& dir) {
    const std::string id = std::to_string(getpid() % 100000);
    a_ = "cpudl-a" + id;
    b_ = "cpudl-b" + id;
    subnet_ = "10.231." + std::to_string(getpid() % 250 + 1);
    const std::string va = "cda" + id;
    vb_ = "cdb" + id;
    const std::string& vb = vb_;
    const std::string setup =
        "ip netns add " + a_ + " && ip netns add " + b_ + " && ip link add " + va + " type veth peer name " +
        vb + " && ip link set " + va + " netns " + a_ + " && ip link set " + vb + " netns " + b_ +
        " && ip -n " + a_ + " addr add " + host_a() + "/24 dev " + va + " && ip -n " + b_ + " addr add " +
        host_b() + "/24 dev " + vb + " && ip -n " + a_ + " link set " + va + " up && ip -n " + b_ +
        " link set " + vb + " up && ip -n " + a_ + " link set lo up && ip -n " + b_ + " link set lo up";
    ok_ = std::system(("(" + setup + ") >/dev/null 2>&1").c_str()) == 0;
    // mpirun starts the remote rank's daemon through this "ssh": into the other namespace.
    agent_ = dir + "/netns-agent.sh";
    std::ofstream(agent_) << "#!/bin/sh\nhost=$1; shift\ncase $host in\n  " << host_a() << ") ns=" << a_
                          << " ;;\n  " << host_b() << ") ns=" << b_
                          << " ;;\n  *) echo \"netns-agent: unknown host $host\" >&2; exit 1 ;;\nesac\n"
                          << "exec ip netns exec $ns sh -c \"$*\"\n";
    std::filesystem::permissions(agent_, std::filesystem::perms::owner_all);
    hostfile_ = dir + "/hosts";
    std::ofstream(hostfile_) << host_a() << " slots=1\n" << host_b() << " slots=1\n";
  }
  ~TwoHosts() {
    // Removing a namespace removes its end of the veth pair, and with it the pair.
    (void)std::system(("ip netns del " + a_ + " 2>/dev/null; ip netns del " + b_ + " 2>/dev/null").c_str());
  }
  bool ok() const { return ok_; }
  // Bytes host b received over the veth pair: the traffic went between the namespaces.
  std::int64_t received_by_b(const std::string& scratch) const {
    (void)std::system(("ip netns exec " + b_ + " cat /sys/class/net/" + vb_ + "/statistics/rx_bytes >" +
                       scratch + " 2>/dev/null")
                          .c_str());
    const std::string text = cpudl::testing::slurp(scratch);
    return text.empty() ? -1 : std::stoll(text);
  }
  std::string host_a() const { return subnet_ + ".1"; }
  std::string host_b() const { return subnet_ + ".2"; }
  // mpirun in namespace a with one rank per host, MPI's traffic (its daemons' and the ranks')
  // on the veth subnet over TCP only. --bind-to none: each host would bind its rank to core 0, the
  // same core. mpi_yield_when_idle: a rank spinning in MPI on a 2-core machine starves the
  // softirq that delivers the other's packets until the next timer tick (8 ms per message).
  std::string mpirun() const {
    const std::string net = subnet_ + ".0/24";
    return "ip netns exec " + a_ + " mpirun -np 2 --hostfile " + hostfile_ + " --mca plm_rsh_agent " +
           agent_ + " --mca btl tcp,self --mca btl_tcp_if_include " + net + " --mca oob_tcp_if_include " +
           net + " --mca mpi_yield_when_idle 1 --bind-to none";
  }

 private:
  std::string a_, b_, vb_, subnet_, agent_, hostfile_;
  bool ok_ = false;
};

TEST_F(DistributedCli, TwoHostsOverTcpLandOnTheWeightsOfOneProcess) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  if (std::system("command -v ip >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "ip (iproute2) is not installed: scripts/install-deps.sh installs it";
  const TwoHosts hosts(dir.string());
  if (!hosts.ok())
    GTEST_SKIP() << "cannot create network namespaces here (needs root or CAP_NET_ADMIN): the two-host "
                    "test runs where it can (make test-distributed)";
  const Result single =
      run("train --model simplecnn --data " + kTiny + " --init " + kTiny +
          "/simplecnn_init.safetensors --no-shuffle --batch 32 --epochs 1 --threads 1 --out " +
          path("single.safetensors"));
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const std::string command =
      "env -u CPUDL_ISA -u CPUDL_PROFILE -u CPUDL_VERBOSE OMPI_ALLOW_RUN_AS_ROOT=1 "
      "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 " +
      hosts.mpirun() + " " + train_args(path("tcp.safetensors")) + " >" + path("out.txt") + " 2>" +
      path("err.txt");
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << cpudl::testing::slurp(path("err.txt")) << cpudl::testing::slurp(path("out.txt"));
  EXPECT_NE(cpudl::testing::slurp(path("out.txt")).find("\"ranks\":2"), std::string::npos);
  EXPECT_LT(worst_relative_difference(path("single.safetensors"), path("tcp.safetensors")), 1e-4);
  // 20 sums of simplecnn's 0.9 MB of gradients: rank 1's share of them arrived over the veth.
  EXPECT_GT(hosts.received_by_b(path("rx.txt")), 10'000'000);
}

TEST_F(DistributedCli, ALostRankEndsTheJobAndTheCheckpointResumes) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  // Two ranks train for long; once a checkpoint exists, rank 1 is killed (SIGKILL). mpirun must end
  // rank 0 too, promptly, naming the lost rank; the checkpoint must load, and --resume on one
  // process must finish the run.
  const std::string out = path("k.safetensors"), ckpt = out + ".ckpt";
  const Interrupted r = signal_rank_one(out, "KILL", train_args(out, "--epochs 400 --checkpoint-every 3"));
  EXPECT_NE(r.code, 0) << r.err;
  EXPECT_NE(r.code, 124) << "the job hung until timeout killed it";
  EXPECT_LT(r.milliseconds, 10000) << r.err;
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
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

TEST_F(DistributedCli, AHungRankEndsTheJobThroughTheWatchdog) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  // Rank 1 is stopped (SIGSTOP): alive, so mpirun sees nothing, and rank 0 would wait in the step's
  // gradient sum for ever. With --rank-timeout 2, rank 0's watchdog must end the job, naming the
  // wait, within a few seconds of the stop.
  const std::string out = path("h.safetensors");
  const Interrupted r =
      signal_rank_one(out, "STOP", train_args(out, "--epochs 400 --checkpoint-every 3 --rank-timeout 2"));
  EXPECT_NE(r.code, 0) << r.err;
  EXPECT_NE(r.code, 124) << "the job hung until timeout killed it";
  EXPECT_LT(r.milliseconds, 10000) << r.err;
  EXPECT_NE(r.err.find("rank 0 waited 2 s for the other ranks in"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  ASSERT_NO_THROW(cpudl::io::load_safetensors(out + ".ckpt"));
}

TEST_F(DistributedCli, RanksStartedWithDifferentFlagsAreRefused) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  const Result r = mpirun(1, train_args(path("a.safetensors"), "--epochs 1 --lr 0.001") + " : -np 1 " +
                                 train_args(path("a.safetensors"), "--epochs 1 --lr 0.002"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rank 1 was started with a different --lr than rank 0"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("a.safetensors")));
}

TEST_F(DistributedCli, AnErrorOnOneRankEndsTheWholeJob) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  // Only rank 0 writes checkpoints, so only rank 0 finds the directory missing; rank 1 goes on to
  // the first collective. Rank 0's error must end the job at once, not leave rank 1 waiting there
  // until its watchdog (300 s) or MPI_Finalize waiting for rank 1.
  const auto start = std::chrono::steady_clock::now();
  const Result r =
      mpirun(2, train_args(path("e.safetensors"), "--epochs 1 --checkpoint " + path("missing/e.ckpt")));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "the job hung until timeout killed it";
  EXPECT_LT(seconds, 30.0) << r.err;
  EXPECT_NE(r.err.find("cpudl: error: --checkpoint"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("e.safetensors")));
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
