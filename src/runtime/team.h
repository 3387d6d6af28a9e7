// A pass whose steps are too short to fork and join the pool for each one: one OpenMP parallel
// region for the whole pass, its threads meeting at a spinning barrier between steps (as ggml's
// thread pool does). A token of LLM generation is ~60 matrix-vector products of 10-70 us each
// on two threads; a parallel region costs each of them the wake of the sleeping worker and two
// futex calls at its barrier (~2.7 us from the call to the last thread's start, measured), and
// each step's other work (a norm, RoPE, the KV store) ran on one thread between regions.
//
// Code written against Workers runs either way: as a member of a Team inside one region
// (run_as_team: every LLM forward pass) or forked (every split a parallel_for of its own: one
// thread, or a caller already inside a parallel region).
#pragma once

#include <omp.h>

#include <atomic>
#include <cstddef>
#include <exception>
#include <utility>

#include "runtime/parallel.h"

namespace cpudl {

// The threads of one parallel region and the barrier they meet at.
class Team {
 public:
  explicit Team(int size) { set_size(size); }
  int size() const { return size_; }
  void set_size(int size);  // before any member's first barrier
  // Returns once every member has arrived, or at once after abort().
  void barrier();
  // A member that failed lets the others through every barrier from now on; what they then
  // compute is thrown away (run_as_team rethrows the failure).
  void abort() { aborted_.store(true, std::memory_order_release); }

 private:
  int size_ = 1;
  int spins_ = 0;  // PAUSEs before a waiting member yields its CPU
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<unsigned> generation_{0};
  alignas(64) std::atomic<bool> aborted_{false};
};

class Workers {
 public:
  // Every split forks and joins the pool over `threads` (parallel_for).
  explicit Workers(int threads) : threads_(threads) {}
  // Member `index` of `team`, inside its parallel region.
  Workers(Team& team, int index) : threads_(team.size()), team_(&team), index_(index) {}

  int threads() const { return threads_; }
  bool in_team() const { return team_ != nullptr; }

  // fn() on one thread; every thread sees what it wrote when once() returns.
  template <class Fn>
  void once(Fn&& fn) {
    if (team_ == nullptr || index_ == 0) fn();
    if (team_ != nullptr) team_->barrier();
  }

  // fn(begin, end) over the ranges parallel_for gives (n, grain, threads()): the same ranges
  // either way, so a result does not depend on how the pass runs.
  template <class Fn>
  void split(std::size_t n, std::size_t grain, Fn&& fn) {
    if (team_ == nullptr) {
      parallel_for(n, grain, threads_, static_cast<Fn&&>(fn));
      return;
    }
    const int chunks = parallel_chunks(n, grain, threads_);
    if (index_ < chunks) {
      const auto t = static_cast<std::size_t>(index_), count = static_cast<std::size_t>(chunks);
      const std::size_t begin = n * t / count, end = n * (t + 1) / count;
      if (begin < end) fn(begin, end);
    }
    team_->barrier();
  }

 private:
  int threads_;
  Team* team_ = nullptr;
  int index_ = 0;
};

// fn(workers) on every thread of one parallel region of `threads`, as members of one team; or
// once, forked, where a team cannot form (one thread, or already inside a parallel region). An
// exception on any member ends the pass and is rethrown here.
template <class Fn>
void run_as_team(int threads, Fn&& fn) {
  if (threads <= 1 || omp_in_parallel()) {
    Workers forked(threads);
    fn(forked);
    return;
  }
  std::exception_ptr failure;
  Team team(threads);
#pragma omp parallel num_threads(threads)
  {
    // The runtime may give fewer threads than asked; the single's implicit barrier publishes it.
#pragma omp single
    team.set_size(omp_get_num_threads());
    Workers me(team, omp_get_thread_num());
    try {
      fn(me);
    } catch (...) {
#pragma omp critical(cpudl_team_failure)
      if (!failure) failure = std::current_exception();
      team.abort();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace cpudl
