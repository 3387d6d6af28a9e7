// Data-parallel training over MPI (Open MPI from Debian, launched by mpirun): which rank this
// process is, the broadcast of the starting state, gradient averaging, and the checks that keep
// ranks in step (same command, same weights).
//
// Each rank trains on its shard of every global batch, its loss weighed by its share of the batch;
// the gradients are summed over the ranks in buckets (MPI_Iallreduce, launched while backward is
// still running), so that every rank takes the optimiser step the whole batch would give.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cpudl/tensor.h"

namespace cpudl::train {

// The ranks of the job this process belongs to, or nothing outside MPI.
class Communicator {
 public:
  // A communicator when the environment says mpirun started this process with more than one rank
  // (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX ranks); with `required` (--distributed), UsageError
  // when it did not. MPI is initialised once per process and finalised at exit.
  //
  // A watchdog guards every collective below but the epoch barrier: one that waits longer than
  // `timeout_seconds` for the other ranks (a rank hung, stopped or cut off: alive, so mpirun does
  // not see it, while MPI waits for ever) ends this process with one line and exit status 1, and
  // mpirun then ends the job. A rank that dies is mpirun's to see: it ends the job at once.
  static std::unique_ptr<Communicator> open(bool required, double timeout_seconds = 300);
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool leader() const { return rank_ == 0; }

  // Rank 0's contents of every tensor (contiguous) overwrite the others'.
  void broadcast(const std::vector<Tensor>& tensors) const;
  void broadcast(std::uint64_t& value) const;
  // Every parameter's gradient summed over the ranks in place, overlapped with the backward pass.
  // The parameters are grouped into buckets of about `bucket_bytes` (in reverse order, the order
  // backward completes them; a larger gradient is its own bucket and is summed in place, 0 gives
  // every gradient its own), fixed at the first call. Between begin_gradient_sum and
  // finish_gradient_sum, an autograd hook on this thread copies each completed gradient into its
  // bucket, and a full bucket's sum starts at once, buckets strictly in order (MPI matches
  // collectives by order, so every rank must start them in the same one whatever order its
  // backward ran in); finish waits for all of them and copies the sums back. A parameter without
  // a gradient on this rank contributes zeros. Returns the seconds finish waited: the part of the
  // communication that backward did not hide. Without `overlap` every sum starts in finish (the
  // communication's whole time then shows as the wait: what the overlap is measured against).
  void begin_gradient_sum(const std::vector<Tensor>& params, std::int64_t bucket_bytes, bool overlap = true);
  double finish_gradient_sum();
  // The buckets of the last gradient sum (their count), for tests and reports.
  std::size_t gradient_buckets() const;
  // Waits for every rank, without the watchdog: the other ranks wait here while rank 0 evaluates
  // and writes the epoch's checkpoint, which takes as long as the test set is large.
  void epoch_barrier() const;
  // Sums of `values` over the ranks, element-wise, in place.
  void sum(std::vector<double>& values) const;
  void sum(std::span<float> values) const;
  // Each rank's value, in rank order.
  std::vector<std::uint64_t> gather(std::uint64_t value) const;
  // UsageError naming the first setting whose value differs from rank 0's: every rank must run
  // the same command. `settings` are (flag, value) pairs in the same order on every rank.
  void require_same_settings(const std::vector<std::pair<std::string, std::string>>& settings) const;
  // Error when a rank's weights differ from rank 0's (a hash of every parameter's bytes).
  void require_same_weights(const std::vector<Tensor>& params, std::int64_t step) const;

 private:
  Communicator(int rank, int size, double timeout_seconds);
  int rank_ = 0, size_ = 1;
  class Watchdog;  // distributed.cpp: a thread that ends the process when a collective hangs
  std::unique_ptr<Watchdog> watchdog_;
  struct Step;  // the gradient sums in flight (distributed.cpp: it holds MPI's request handles)
  struct Bucket;
  std::unique_ptr<Step> step_;
};

// Called by the CLI after it has printed an error: when this process is a rank of an MPI job still
// running, ends the whole job with `exit_code` (MPI_Abort) instead of returning. The other ranks
// may be waiting in a collective for this one (rank 0's checkpoint failing, a memory limit one
// rank hits), and MPI_Finalize on the way out would wait for them in turn. Returns otherwise.
void end_job_after_error(int exit_code);

// A 64-bit hash of the bytes of the tensors (contiguous), to compare weights across ranks.
std::uint64_t hash_tensors(const std::vector<Tensor>& tensors);

}  // namespace cpudl::train
