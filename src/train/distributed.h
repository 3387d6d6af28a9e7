// Data-parallel training over MPI (Open MPI from Debian, launched by mpirun): which rank this
// process is, the broadcast of the starting state, gradient averaging, and the checks that keep
// ranks in step (same command, same weights).
//
// Each rank trains on its shard of every global batch; after backward, every gradient is scaled by
// the rank's share of the batch and summed over the ranks in place (MPI_Iallreduce, all gradients
// in flight at once), so that every rank takes the optimiser step the whole batch would give.
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
  static std::unique_ptr<Communicator> open(bool required);
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool leader() const { return rank_ == 0; }

  // Rank 0's contents of every tensor (contiguous) overwrite the others'.
  void broadcast(const std::vector<Tensor>& tensors) const;
  void broadcast(std::uint64_t& value) const;
  // Every parameter's gradient times `scale`, summed over the ranks in place, overlapped with the
  // backward pass: between begin_gradient_sum and finish_gradient_sum, each gradient's sum starts
  // as soon as backward completes it (an autograd hook on this thread), and finish waits for all
  // of them; a parameter without a gradient on this rank contributes zeros. Returns the seconds
  // finish waited: the part of the communication that backward did not hide.
  void begin_gradient_sum(const std::vector<Tensor>& params, float scale);
  double finish_gradient_sum();
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
  Communicator(int rank, int size);
  int rank_ = 0, size_ = 1;
  struct Step;  // the gradient sums in flight (distributed.cpp: it holds MPI's request handles)
  std::unique_ptr<Step> step_;
};

// A 64-bit hash of the bytes of the tensors (contiguous), to compare weights across ranks.
std::uint64_t hash_tensors(const std::vector<Tensor>& tensors);

}  // namespace cpudl::train
