// Data-parallel training over MPI (distributed.h). Open MPI's own handling covers a rank that
// dies: mpirun sees the lost process and ends every other rank, which would otherwise wait in a
// collective for ever.
#include "train/distributed.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "cpudl/autograd.h"
#include "cpudl/error.h"

namespace cpudl::train {
namespace {

int environment_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"})
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
  return 0;
}

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(std::string("MPI ") + what + ": " + std::string(text, static_cast<std::size_t>(length)));
}

// Initialised once per process; finalised at exit (after the last collective).
void initialise_mpi() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) return;
  int provided = 0;
  // FUNNELED: only the thread that initialised MPI calls it; the OpenMP workers never do.
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
  // Errors come back as codes (thrown as Error with MPI's text) instead of aborting silently.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::atexit([] {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!finalised) MPI_Finalize();
  });
}

void require_contiguous(const Tensor& t, const char* what) {
  if (!t.is_contiguous()) throw Error(std::string("distributed training: a non-contiguous ") + what);
}

}  // namespace

struct Communicator::Step {
  std::vector<Tensor> params;
  std::unordered_map<const TensorImpl*, std::size_t> index;  // parameter -> its slot
  std::vector<bool> started;
  std::vector<MPI_Request> requests;
  float scale = 1;

  void start(std::size_t i, Tensor grad) {
    require_contiguous(grad, "gradient");
    float* d = grad.data();
    const std::int64_t n = grad.numel();
    if (n > std::numeric_limits<int>::max())
      throw Error("distributed training: a gradient of over 2^31 elements");
    for (std::int64_t j = 0; j < n; ++j) d[j] *= scale;
    started[i] = true;
    check(MPI_Iallreduce(MPI_IN_PLACE, d, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                         &requests[i]),
          "allreduce");
    // Open MPI moves non-blocking collectives forward inside MPI calls: each new gradient also
    // advances the ones already in flight.
    int done = 0;
    check(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
          "allreduce");
  }
};

Communicator::Communicator(int rank, int size) : rank_(rank), size_(size) {}
Communicator::~Communicator() { autograd::set_gradient_ready_hook({}); }

void Communicator::begin_gradient_sum(const std::vector<Tensor>& params, float scale) {
  if (!step_) {
    step_ = std::make_unique<Step>();
    step_->params = params;
    for (std::size_t i = 0; i < params.size(); ++i) step_->index[params[i].impl().get()] = i;
  }
  Step& s = *step_;
  s.scale = scale;
  s.started.assign(params.size(), false);
  s.requests.assign(params.size(), MPI_REQUEST_NULL);
  // CPUDL_OVERLAP_ALLREDUCE=0 starts every sum after backward instead: the communication's whole
  // time then shows as the wait, what the overlap is measured against.
  static const bool overlap = [] {
    const char* v = std::getenv("CPUDL_OVERLAP_ALLREDUCE");
    return !(v && std::string(v) == "0");
  }();
  if (!overlap) return;
  autograd::set_gradient_ready_hook([&s](const Tensor& leaf) {
    const auto it = s.index.find(leaf.impl().get());
    if (it != s.index.end() && !s.started[it->second]) s.start(it->second, leaf.grad());
  });
}

double Communicator::finish_gradient_sum() {
  autograd::set_gradient_ready_hook({});
  Step& s = *step_;
  // Parameters this rank's backward did not reach (an empty shard, an unused layer) add zeros.
  for (std::size_t i = 0; i < s.params.size(); ++i)
    if (!s.started[i]) {
      Tensor g = s.params[i].grad();
      if (!g.defined()) {
        g = Tensor::zeros(s.params[i].shape());
        s.params[i].set_grad(g);
      }
      s.start(i, g);
    }
  const auto start = std::chrono::steady_clock::now();
  check(MPI_Waitall(static_cast<int>(s.requests.size()), s.requests.data(), MPI_STATUSES_IGNORE),
        "allreduce");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::unique_ptr<Communicator> Communicator::open(bool required) {
  const int ranks = environment_ranks();
  if (ranks < 1) {
    if (required)
      throw UsageError(
          "--distributed: this process was not started by mpirun (no OMPI_COMM_WORLD_SIZE, PMI_SIZE or "
          "PMIX_SIZE in the environment); run: mpirun -np N cpudl train ...");
    return nullptr;
  }
  if (ranks == 1 && !required) return nullptr;
  initialise_mpi();
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::unique_ptr<Communicator>(new Communicator(rank, size));
}

void Communicator::broadcast(const std::vector<Tensor>& tensors) const {
  for (const Tensor& t : tensors) {
    require_contiguous(t, "tensor to broadcast");
    const std::size_t bytes = static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype());
    char* p = static_cast<char*>(t.raw_data());
    for (std::size_t done = 0; done < bytes;) {  // counts are ints: large tensors go in pieces
      const std::size_t piece = std::min<std::size_t>(bytes - done, std::numeric_limits<int>::max());
      check(MPI_Bcast(p + done, static_cast<int>(piece), MPI_BYTE, 0, MPI_COMM_WORLD), "broadcast");
      done += piece;
    }
    t.bump_version();
  }
}

void Communicator::broadcast(std::uint64_t& value) const {
  check(MPI_Bcast(&value, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD), "broadcast");
}

void Communicator::sum(std::span<float> values) const {
  for (std::size_t done = 0; done < values.size();) {
    const std::size_t piece = std::min<std::size_t>(values.size() - done, std::numeric_limits<int>::max());
    check(MPI_Allreduce(MPI_IN_PLACE, values.data() + done, static_cast<int>(piece), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD),
          "allreduce");
    done += piece;
  }
}

void Communicator::sum(std::vector<double>& values) const {
  check(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD),
        "allreduce");
}

std::vector<std::uint64_t> Communicator::gather(std::uint64_t value) const {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size_));
  check(MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), "allgather");
  return all;
}

void Communicator::require_same_settings(
    const std::vector<std::pair<std::string, std::string>>& settings) const {
  // One hash per setting, gathered: every rank learns which setting differs, and on which rank.
  for (const auto& [flag, value] : settings) {
    std::uint64_t h = 1469598103934665603ull;
    for (const unsigned char ch : value) h = (h ^ ch) * 1099511628211ull;
    const std::vector<std::uint64_t> all = gather(h);
    for (int r = 1; r < size_; ++r)
      if (all[static_cast<std::size_t>(r)] != all[0])
        throw UsageError("rank " + std::to_string(r) + " was started with a different " + flag +
                         " than rank 0: every rank must run the same command");
  }
}

void Communicator::require_same_weights(const std::vector<Tensor>& params, std::int64_t step) const {
  const std::vector<std::uint64_t> all = gather(hash_tensors(params));
  for (int r = 1; r < size_; ++r)
    if (all[static_cast<std::size_t>(r)] != all[0])
      throw Error("after step " + std::to_string(step) + ", rank " + std::to_string(r) +
                  "'s weights differ from rank 0's: the ranks diverged (different libraries or CPUs?); "
                  "the last checkpoint is intact");
}

std::uint64_t hash_tensors(const std::vector<Tensor>& tensors) {
  std::uint64_t h = 0x9E3779B97F4A7C15ull;
  for (const Tensor& t : tensors) {
    require_contiguous(t, "tensor to hash");
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    const std::size_t bytes = static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype());
    std::size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {  // a multiply-xorshift per word: fast enough for every step
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);
      h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
      h ^= h >> 31;
    }
    for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  }
  return h;
}

}  // namespace cpudl::train
