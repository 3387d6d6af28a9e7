// Prometheus metrics in the text exposition format (version 0.0.4), written by hand: Debian 12
// packages no C++ Prometheus client, and what a server needs -- counters, gauges and histograms
// with labels, rendered on scrape -- is a page of code. Names and label sets are fixed by the
// caller when a family is declared; `promtool check metrics` is run on the output by the tests.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/governor.h"

namespace cpudl::serve {

class Metrics {
 public:
  enum class Type { counter, gauge, histogram };

  // Declares a family once (before it is used); histograms take their upper bounds, ascending.
  void declare(const std::string& name, Type type, const std::string& help,
               std::vector<std::string> label_names = {}, std::vector<double> buckets = {});
  // label_values in the order of the family's label names.
  void add(const std::string& name, double value, const std::vector<std::string>& label_values = {});
  void set(const std::string& name, double value, const std::vector<std::string>& label_values = {});
  void observe(const std::string& name, double value, const std::vector<std::string>& label_values = {});
  // A gauge read at every scrape (queue depth, resident memory).
  void gauge_callback(const std::string& name, std::function<double()> read);
  // The current value of a counter or gauge series (0 when absent): for tests and the page.
  double value(const std::string& name, const std::vector<std::string>& label_values = {}) const;

  std::string render() const;

  // The process_* metrics Prometheus's client libraries export (resident memory, CPU seconds,
  // open file descriptors, start time), read from /proc at each scrape.
  void declare_process_metrics();

 private:
  struct Series {
    double value = 0;                   // counter, gauge
    std::vector<double> bucket_counts;  // histogram: per bucket (not cumulative)
    double sum = 0, count = 0;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<std::string> label_names;
    std::vector<double> buckets;
    std::map<std::vector<std::string>, Series> series;
    std::function<double()> read;
  };
  Family& family(const std::string& name, Type type);
  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
  std::vector<std::string> order_;  // declaration order, as rendered
};

// The thread governor's families (cpudl_governor_threads, cpudl_governor_decisions_total{reason},
// cpudl_cpu_pressure_ratio, cpudl_cpu_throttled_seconds_total, cpudl_temperature_celsius{zone}),
// shared by serve and train --metrics-port so that one dashboard reads both.
void declare_governor_metrics(Metrics& metrics);
void record_governor_status(Metrics& metrics, const GovernorStatus& status);

}  // namespace cpudl::serve
