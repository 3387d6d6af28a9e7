// Data-parallel training over MPI (distributed.h). Open MPI's own handling covers a rank that
// dies: mpirun sees the lost process and ends every other rank, which would otherwise wait in a
// collective for ever. A rank that hangs but lives is the watchdog's.
#include "train/distributed.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
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

constexpr std::uint64_t kHashSeed = 0x9E3779B97F4A7C15ull;

// Continues hash `h` over `bytes`: a multiply-xorshift per 8-byte word, fast enough to run over
// every weight at every check (weights and settings alike).
std::uint64_t hash_bytes(std::uint64_t h, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

void require_contiguous(const Tensor& t, const char* what) {
  if (!t.is_contiguous()) throw Error(std::string("distributed training: a non-contiguous ") + what);
}

}  // namespace

// A group of gradients summed by one MPI_Iallreduce: one large gradient in place, or several
// copied into one buffer (a message per small gradient would pay the latency each time).
struct Communicator::Bucket {
  std::vector<std::size_t> members;   // parameter indices
  std::vector<std::int64_t> offsets;  // of each member in `buffer`
  std::int64_t numel = 0;
  std::vector<float> buffer;  // empty for a single member: its gradient is summed in place
  std::vector<Tensor> grads;  // this step's gradient of each member
  std::size_t ready = 0;
  MPI_Request request = MPI_REQUEST_NULL;

  float* data() { return buffer.empty() ? grads[0].data() : buffer.data(); }
};

// A thread that watches the collective in progress: armed by a Watch around each blocking MPI
// call, it ends the process when one outlasts the timeout. std::_Exit from this thread: MPI may
// not be called here (MPI_THREAD_FUNNELED), the main thread is stuck inside MPI, and exiting
// non-zero without MPI_Finalize is what makes mpirun end the other ranks.
class Communicator::Watchdog {
 public:
  Watchdog(int rank, double timeout_seconds) : rank_(rank), timeout_(timeout_seconds) {
    thread_ = std::thread([this] { watch(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      quit_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void arm(const char* what) {
    std::lock_guard<std::mutex> lock(mutex_);
    what_ = what;
    since_ = std::chrono::steady_clock::now();
    armed_ = true;
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
  }
  // Arms the watchdog (when there is one) for the scope of one blocking collective.
  class Scope {
   public:
    Scope(Watchdog* dog, const char* what) : dog_(dog) {
      if (dog_) dog_->arm(what);
    }
    ~Scope() {
      if (dog_) dog_->disarm();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog* dog_;
  };

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!quit_) {
      wake_.wait_for(lock, std::chrono::milliseconds(200));
      if (!armed_) continue;
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
      if (waited < timeout_) continue;
      std::fprintf(stderr,
                   "cpudl train: rank %d waited %.0f s for the other ranks in %s: a rank stopped responding "
                   "(hung, stopped or cut off from the network); ending the job (--rank-timeout %g; the last "
                   "checkpoint is intact)\n",
                   rank_, waited, what_, timeout_);
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  int rank_;
  double timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool armed_ = false, quit_ = false;
  const char* what_ = "";
  std::chrono::steady_clock::time_point since_;
  std::thread thread_;
};

struct Communicator::Step {
  std::vector<Tensor> params;
  std::unordered_map<const TensorImpl*, std::size_t> index;  // parameter -> its slot
  std::vector<std::pair<std::size_t, std::size_t>> slot;     // parameter -> (bucket, member)
  std::vector<Bucket> buckets;
  std::vector<bool> ready;
  std::size_t launched = 0;  // buckets started, in order

  Step(const std::vector<Tensor>& ps, std::int64_t bucket_bytes) : params(ps), slot(ps.size()) {
    const std::int64_t cap = std::max<std::int64_t>(bucket_bytes / 4, 0);
    for (std::size_t k = ps.size(); k-- > 0;) {  // reverse: the order backward completes them
      index[ps[k].impl().get()] = k;
      const std::int64_t n = ps[k].numel();
      if (n > std::numeric_limits<int>::max())
        throw Error("distributed training: a gradient of over 2^31 elements");
      if (buckets.empty() || buckets.back().numel + n > cap) buckets.emplace_back();
      Bucket& b = buckets.back();
      slot[k] = {buckets.size() - 1, b.members.size()};
      b.members.push_back(k);
      b.offsets.push_back(b.numel);
      b.numel += n;
    }
    for (Bucket& b : buckets) {
      if (b.members.size() > 1) b.buffer.resize(static_cast<std::size_t>(b.numel));
      b.grads.resize(b.members.size());
    }
  }

  void reset() {
    ready.assign(params.size(), false);
    for (Bucket& b : buckets) b.ready = 0;
    launched = 0;
  }

  void gradient_ready(std::size_t k, Tensor grad) {
    require_contiguous(grad, "gradient");
    ready[k] = true;
    const auto [bi, m] = slot[k];
    Bucket& b = buckets[bi];
    b.grads[m] = grad;
    if (!b.buffer.empty())
      std::memcpy(b.buffer.data() + b.offsets[m], grad.data(), static_cast<std::size_t>(grad.numel()) * 4);
    ++b.ready;
    while (launched < buckets.size() && buckets[launched].ready == buckets[launched].members.size()) {
      Bucket& next = buckets[launched++];
      check(MPI_Iallreduce(MPI_IN_PLACE, next.data(), static_cast<int>(next.numel), MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD, &next.request),
            "allreduce");
    }
    // Open MPI moves non-blocking collectives forward inside MPI calls: each gradient completed
    // also advances the sums already in flight.
    for (std::size_t i = 0; i < launched; ++i) {
      int done = 0;
      check(MPI_Test(&buckets[i].request, &done, MPI_STATUS_IGNORE), "allreduce");
    }
  }
};

Communicator::Communicator(int rank, int size, double timeout_seconds)
    : rank_(rank),
      size_(size),
      watchdog_(timeout_seconds > 0 ? std::make_unique<Watchdog>(rank, timeout_seconds) : nullptr) {}
Communicator::~Communicator() { autograd::set_gradient_ready_hook({}); }

void Communicator::begin_gradient_sum(const std::vector<Tensor>& params, std::int64_t bucket_bytes,
                                      bool overlap) {
  if (!step_) step_ = std::make_unique<Step>(params, bucket_bytes);
  Step& s = *step_;
  s.reset();
  if (!overlap) return;  // every sum starts in finish_gradient_sum
  autograd::set_gradient_ready_hook([&s](const Tensor& leaf) {
    const auto it = s.index.find(leaf.impl().get());
    if (it != s.index.end() && !s.ready[it->second]) s.gradient_ready(it->second, leaf.grad());
  });
}

double Communicator::finish_gradient_sum() {
  autograd::set_gradient_ready_hook({});
  Step& s = *step_;
  // Parameters this rank's backward did not reach (an empty shard, an unused layer) add zeros;
  // bucket by bucket, so that the sums start in the same order on every rank.
  for (const Bucket& b : s.buckets)
    for (const std::size_t k : b.members)
      if (!s.ready[k]) {
        Tensor g = s.params[k].grad();
        if (!g.defined()) {
          g = Tensor::zeros(s.params[k].shape());
          s.params[k].set_grad(g);
        }
        s.gradient_ready(k, g);
      }
  const auto start = std::chrono::steady_clock::now();
  {
    const Watchdog::Scope watch(watchdog_.get(), "the gradient sum");
    for (Bucket& b : s.buckets) check(MPI_Wait(&b.request, MPI_STATUS_IGNORE), "allreduce");
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (Bucket& b : s.buckets) {
    if (!b.buffer.empty())
      for (std::size_t m = 0; m < b.members.size(); ++m)
        std::memcpy(b.grads[m].data(), b.buffer.data() + b.offsets[m],
                    static_cast<std::size_t>(b.grads[m].numel()) * 4);
    for (Tensor& g : b.grads) {
      g.bump_version();
      g = Tensor();
    }
  }
  return waited;
}

std::size_t Communicator::gradient_buckets() const { return step_ ? step_->buckets.size() : 0; }

std::unique_ptr<Communicator> Communicator::open(bool required, double timeout_seconds) {
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
  return std::unique_ptr<Communicator>(new Communicator(rank, size, timeout_seconds));
}

void Communicator::broadcast(const std::vector<Tensor>& tensors) const {
  for (const Tensor& t : tensors) {
    require_contiguous(t, "tensor to broadcast");
    const std::size_t bytes = static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype());
    char* p = static_cast<char*>(t.raw_data());
    for (std::size_t done = 0; done < bytes;) {  // counts are ints: large tensors go in pieces
      const std::size_t piece = std::min<std::size_t>(bytes - done, std::numeric_limits<int>::max());
      const Watchdog::Scope watch(watchdog_.get(), "the broadcast of rank 0's state");
      check(MPI_Bcast(p + done, static_cast<int>(piece), MPI_BYTE, 0, MPI_COMM_WORLD), "broadcast");
      done += piece;
    }
    t.bump_version();
  }
}

void Communicator::broadcast(std::uint64_t& value) const {
  const Watchdog::Scope watch(watchdog_.get(), "the broadcast of rank 0's state");
  check(MPI_Bcast(&value, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD), "broadcast");
}

void Communicator::epoch_barrier() const { check(MPI_Barrier(MPI_COMM_WORLD), "barrier"); }

void Communicator::sum(std::span<float> values) const {
  const Watchdog::Scope watch(watchdog_.get(), "a sum");
  for (std::size_t done = 0; done < values.size();) {
    const std::size_t piece = std::min<std::size_t>(values.size() - done, std::numeric_limits<int>::max());
    check(MPI_Allreduce(MPI_IN_PLACE, values.data() + done, static_cast<int>(piece), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD),
          "allreduce");
    done += piece;
  }
}

void Communicator::sum(std::vector<double>& values) const {
  const Watchdog::Scope watch(watchdog_.get(), "the sum of the step's loss");
  check(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD),
        "allreduce");
}

std::vector<std::uint64_t> Communicator::gather(std::uint64_t value) const {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size_));
  const Watchdog::Scope watch(watchdog_.get(), "the comparison of settings or weights");
  check(MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), "allgather");
  return all;
}

void Communicator::require_same_settings(
    const std::vector<std::pair<std::string, std::string>>& settings) const {
  // One hash per setting, gathered: every rank learns which setting differs, and on which rank.
  for (const auto& [flag, value] : settings) {
    const std::vector<std::uint64_t> all = gather(hash_bytes(kHashSeed, value.data(), value.size()));
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

void end_job_after_error(int exit_code) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (!initialised || finalised) return;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

std::uint64_t hash_tensors(const std::vector<Tensor>& tensors) {
  std::uint64_t h = kHashSeed;
  for (const Tensor& t : tensors) {
    require_contiguous(t, "tensor to hash");
    h = hash_bytes(h, t.raw_data(), static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()));
  }
  return h;
}

}  // namespace cpudl::train
