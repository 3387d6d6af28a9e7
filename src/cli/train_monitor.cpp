// --metrics-port and the history behind --report (train_monitor.h).
#include "cli/train_monitor.h"

#include "cpudl/runtime.h"

namespace cpudl::cli {

TrainMonitor::TrainMonitor(int metrics_port, double lr) : start_(steady_seconds()), lr_(lr) {
  using T = serve::Metrics::Type;
  metrics_.declare("cpudl_train_step_seconds", T::histogram,
                   "Time of one training step (forward, backward, update).", {},
                   {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
  metrics_.declare("cpudl_train_steps_total", T::counter, "Training steps taken.");
  metrics_.declare("cpudl_train_images_per_second", T::gauge, "Samples per second of the last step.");
  metrics_.declare("cpudl_train_loss", T::gauge, "Loss of the last step.");
  metrics_.declare("cpudl_train_learning_rate", T::gauge, "Learning rate of the last step.");
  metrics_.declare("cpudl_train_epoch", T::gauge, "The epoch being trained (from 1).");
  metrics_.declare("cpudl_train_test_accuracy", T::gauge, "Test accuracy after the last epoch.");
  metrics_.declare(
      "cpudl_train_pct_peak", T::gauge,
      "The last step's FLOP/s (three times its forward's) as a percentage of the measured fp32 roof.");
  metrics_.declare("cpudl_train_allreduce_wait_seconds_total", T::counter,
                   "Data-parallel: time spent waiting for gradient sums after backward.");
  metrics_.declare("cpudl_train_tensor_bytes", T::gauge, "Bytes of tensor storage alive now.");
  metrics_.gauge_callback("cpudl_train_tensor_bytes",
                          [] { return static_cast<double>(live_tensor_bytes()); });
  metrics_.declare_process_metrics();
  serve::declare_governor_metrics(metrics_);
  metrics_.set("cpudl_train_learning_rate", lr_);
  if (metrics_port >= 0)
    endpoint_ =
        std::make_unique<serve::MetricsEndpoint>(metrics_, "127.0.0.1", metrics_port, "--metrics-port");
  // The roof %-of-peak is judged against: the FMA probe on the run's threads, a fifth of a second.
  roof_gflops_ = measure_compute_roof(ComputeRoof::fp32_fma, compute_threads(), 0.2).gops;
  reset_forward_flops();
  start_ = steady_seconds();  // the run's clock starts with the governor's, after the probe
}

std::optional<int> TrainMonitor::port() const {
  return endpoint_ ? std::optional<int>(endpoint_->port()) : std::nullopt;
}

double TrainMonitor::now() const { return steady_seconds() - start_; }

void TrainMonitor::step(const train::StepProgress& p) {
  // StepProgress times are since the epoch's start.
  const double step_seconds = p.epoch == last_epoch_ ? p.seconds - last_step_seconds_ : p.seconds;
  last_epoch_ = p.epoch;
  last_step_seconds_ = p.seconds;
  // The forward FLOPs this thread ran since the last step: a step costs three forwards.
  const double flops = 3 * forward_flops();
  reset_forward_flops();
  const double rate = step_seconds > 0 ? static_cast<double>(p.images) / step_seconds : 0;
  metrics_.observe("cpudl_train_step_seconds", step_seconds);
  metrics_.add("cpudl_train_steps_total", 1);
  metrics_.set("cpudl_train_images_per_second", rate);
  metrics_.set("cpudl_train_loss", p.loss);
  metrics_.set("cpudl_train_epoch", p.epoch);
  if (roof_gflops_ > 0 && step_seconds > 0)
    metrics_.set("cpudl_train_pct_peak", 100 * flops / step_seconds / 1e9 / roof_gflops_);
  const std::lock_guard<std::mutex> lock(mutex_);
  steps_.push_back({now(), p.epoch, p.step, p.loss, step_seconds, rate, p.images, p.threads});
}

void TrainMonitor::epoch(const train::EpochReport& e) {
  reset_forward_flops();  // evaluation's forwards are not the next step's
  metrics_.set("cpudl_train_test_accuracy", e.test_accuracy);
  if (e.allreduce_wait_seconds > 0)
    metrics_.add("cpudl_train_allreduce_wait_seconds_total", e.allreduce_wait_seconds);
  const std::lock_guard<std::mutex> lock(mutex_);
  epochs_.push_back({now(), e});
}

void TrainMonitor::governor(const GovernorStatus& s) {
  serve::record_governor_status(metrics_, s);
  const std::lock_guard<std::mutex> lock(mutex_);
  events_ = s.events;
}

std::vector<StepRecord> TrainMonitor::steps() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return steps_;
}
std::vector<EpochRecord> TrainMonitor::epochs() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return epochs_;
}
std::vector<GovernorEvent> TrainMonitor::governor_events() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

}  // namespace cpudl::cli
