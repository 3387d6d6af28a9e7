// What `cpudl train` shows about a run while and after it runs: Prometheus metrics on
// --metrics-port, and the history that --report draws (steps, epochs, governor decisions, the
// final confusion matrix). The trainer's callbacks feed it; it prints nothing itself.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/governor.h"
#include "serve/metrics.h"
#include "serve/metrics_endpoint.h"
#include "train/trainer.h"

namespace cpudl::cli {

struct StepRecord {
  double seconds;  // since the run started
  int epoch;
  std::int64_t step;
  float loss;
  double step_seconds, images_per_second;  // this step alone
  std::int64_t images;                     // the step's batch (the last of an epoch may be short)
  int threads;
};

struct EpochRecord {
  double seconds;  // since the run started, at the epoch's end
  train::EpochReport report;
};

class TrainMonitor {
 public:
  // metrics_port: -1 for no endpoint, 0 for any free port. Binds before returning (a port in use
  // is an Error before training starts). `lr` is the run's learning rate.
  TrainMonitor(int metrics_port, double lr);
  std::optional<int> port() const;

  void step(const train::StepProgress& p);
  void epoch(const train::EpochReport& e);
  void governor(const GovernorStatus& s);  // from the governor's thread

  std::vector<StepRecord> steps() const;
  std::vector<EpochRecord> epochs() const;
  std::vector<GovernorEvent> governor_events() const;
  double roof_gflops() const { return roof_gflops_; }

 private:
  double now() const;

  serve::Metrics metrics_;
  std::unique_ptr<serve::MetricsEndpoint> endpoint_;
  double start_, roof_gflops_ = 0, lr_;
  double last_step_seconds_ = 0;  // the epoch-relative time of the previous step
  int last_epoch_ = -1;
  mutable std::mutex mutex_;
  std::vector<StepRecord> steps_;
  std::vector<EpochRecord> epochs_;
  std::vector<GovernorEvent> events_;
};

// `cpudl train --report FILE.html`: one self-contained page (inline SVG, no network fetch).
struct ReportInput {
  std::string title;  // "lenet5 on data/mnist"
  train::Summary summary;
  const TrainMonitor* monitor;
  std::vector<OpTime> ops;  // the run's per-op times (collected while --report is given)
};
std::string training_report_html(const ReportInput& input);

// A --report path that cannot be written is refused before the work starts: a directory is a
// UsageError, a directory that does not exist or is not writable an Error.
void check_report_path(const std::string& path);

// `cpudl eval --report FILE.html`: the confusion matrix and the worst-classified samples, drawn.
std::string evaluation_report_html(const std::string& title, const data::Dataset& data,
                                   const train::Evaluation& evaluation);

}  // namespace cpudl::cli
