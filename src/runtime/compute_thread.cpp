// The hand-over queue of the compute thread (runtime/compute_thread.h).
#include "runtime/compute_thread.h"

namespace cpudl {

bool ComputeThread::hand_over(std::function<void()> job) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return false;
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
  return true;
}

void ComputeThread::work_until_stopped() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopped_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopped, and everything handed over has run
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();  // a packaged_task: its exception goes to the waiting caller
    lock.lock();
  }
}

void ComputeThread::stop() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
  }
  wake_.notify_all();
}

}  // namespace cpudl
