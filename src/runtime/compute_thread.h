// The one thread that runs the computations of a process whose work comes from several threads
// (cpudl serve: a batcher per tensor model, a stepper per language model, the model loading).
// libgomp keeps a pool of threads for every thread that opens a parallel region, and once its pools
// together hold more threads than the machine has CPUs, a thread waiting at a barrier spins about
// a thousand times instead of about 300,000 before it sleeps in the kernel: every barrier of every
// operator then costs a sleep and a wake. With the model loaded on the main thread and batches run
// on a batcher thread, ResNet-18's compute threads slept some 250 times a second under load and a
// tenth of the two CPUs stayed idle (docs/BENCHMARKS.md, "Serving"). Every parallel region of such
// a process therefore runs on this one thread: the others hand it their work and wait.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>

namespace cpudl {

class ComputeThread {
 public:
  // The constructing thread is the compute thread: it runs work handed to it while in
  // work_until_stopped(), and its own calls to run() at any time.
  ComputeThread() : owner_(std::this_thread::get_id()) {}
  ComputeThread(const ComputeThread&) = delete;
  ComputeThread& operator=(const ComputeThread&) = delete;

  // fn() on the compute thread, its result or exception passed back; inline when called there, or
  // when the compute thread has stopped taking work (a server shutting down).
  template <class Fn>
  std::invoke_result_t<Fn&> run(Fn&& fn) {
    using Result = std::invoke_result_t<Fn&>;
    if (std::this_thread::get_id() == owner_) return fn();
    std::packaged_task<Result()> task([&fn]() -> Result { return fn(); });
    std::future<Result> result = task.get_future();
    if (!hand_over([&task] { task(); })) return fn();
    return result.get();
  }

  // fn() handed over without waiting for it: its result or exception comes through the future. It
  // runs after the work handed before it (a batcher hands the next batch while one runs, and the
  // compute thread starts it without a gap). Runs at once on the compute thread or once stopped.
  template <class Fn>
  std::future<std::invoke_result_t<Fn&>> submit(Fn fn) {
    using Result = std::invoke_result_t<Fn&>;
    auto task = std::make_shared<std::packaged_task<Result()>>(std::move(fn));
    std::future<Result> result = task->get_future();
    if (std::this_thread::get_id() == owner_ || !hand_over([task] { (*task)(); })) (*task)();
    return result;
  }

  // On the compute thread: runs handed work, in order, until stop(); what was handed before stop()
  // still runs.
  void work_until_stopped();
  void stop();

 private:
  bool hand_over(std::function<void()> job);

  std::thread::id owner_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopped_ = false;
};

}  // namespace cpudl
