// serve/metrics.h: a scrape calls its gauges' callbacks with the registry unlocked, so a component
// that updates a metric while holding its own lock cannot deadlock with a scrape whose callback
// waits for that lock (LanguageModel::acquire against LanguageModel::waiting hung a server).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

#include "serve/metrics.h"

namespace {

using cpudl::serve::Metrics;

TEST(Metrics, AScrapeAndAnUpdateUnderAnotherLockDoNotDeadlock) {
  Metrics metrics;
  metrics.declare("busy", Metrics::Type::gauge, "Slots busy.");
  metrics.declare("waiting", Metrics::Type::gauge, "Requests waiting.");
  std::mutex component;  // what the callback reads is guarded by the component's own lock
  std::mutex step;
  std::condition_variable cv;
  bool in_callback = false;
  metrics.gauge_callback("waiting", [&] {
    {
      const std::lock_guard<std::mutex> lock(step);
      in_callback = true;
    }
    cv.notify_all();
    const std::lock_guard<std::mutex> lock(component);
    return 3.0;
  });
  // The component takes its lock, waits until the scrape is inside the callback, then updates a
  // metric while still holding it.
  std::thread updater([&] {
    const std::lock_guard<std::mutex> held(component);
    std::unique_lock<std::mutex> lock(step);
    cv.wait(lock, [&] { return in_callback; });
    lock.unlock();
    metrics.set("busy", 1);
  });
  auto scrape = std::async(std::launch::async, [&] { return metrics.render(); });
  if (scrape.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    std::fprintf(stderr,
                 "Metrics::render and Metrics::set deadlocked (the scrape held the registry's lock)\n");
    std::_Exit(1);  // the deadlocked threads cannot be joined
  }
  updater.join();
  const std::string text = scrape.get();
  EXPECT_NE(text.find("waiting 3\n"), std::string::npos) << text;
  EXPECT_EQ(metrics.value("busy"), 1);
}

}  // namespace
