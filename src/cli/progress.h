// One line of progress on stderr for commands that run longer than a second (eval, quantize,
// doctor --measure, bench, train): drawn only when stderr is a terminal, first after half a
// second (a quick command shows nothing), redrawn at most ten times a second and erased at the
// end, so piped output and logs stay clean and the result lines print where the bar was.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace cpudl::cli {

// Whether stderr is a terminal: the bar's condition (and for train, whether lines erase it).
bool stderr_is_terminal();

// "1m05s" or "2h03m".
std::string eta_text(double seconds);

class Progress {
 public:
  // `total` units of work (0: unknown, no bar or ETA); `enabled` false draws nothing (--json).
  Progress(std::string label, std::int64_t total, bool enabled = true);
  ~Progress();  // erases the line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `done` units finished; `detail` follows the count (a layer's name, a probe's).
  void update(std::int64_t done, const std::string& detail = "");
  void set_total(std::int64_t total) { total_ = total; }
  // Erases the line now (before printing a result); later updates draw again.
  void clear();

 private:
  std::string label_;
  std::int64_t total_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace cpudl::cli
