#include "cli/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace cpudl::cli {

bool stderr_is_terminal() { return isatty(STDERR_FILENO) != 0; }

std::string eta_text(double seconds) {
  char b[32];
  seconds = std::max(seconds, 0.0);
  if (seconds >= 3600)
    std::snprintf(b, sizeof b, "%dh%02dm", static_cast<int>(seconds / 3600),
                  static_cast<int>(seconds / 60) % 60);
  else
    std::snprintf(b, sizeof b, "%dm%02ds", static_cast<int>(seconds / 60), static_cast<int>(seconds) % 60);
  return b;
}

Progress::Progress(std::string label, std::int64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled && stderr_is_terminal()),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() { clear(); }

void Progress::update(std::int64_t done, const std::string& detail) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < 0.5 || (drawn_ && now - last_draw_ < std::chrono::milliseconds(100))) return;
  last_draw_ = now;
  drawn_ = true;
  std::string line = label_;
  if (total_ > 0) {
    const std::int64_t shown = std::clamp<std::int64_t>(done, 0, total_);
    const int width = 24, filled = static_cast<int>(width * shown / total_);
    line += " [" + std::string(static_cast<std::size_t>(filled), '=') +
            std::string(static_cast<std::size_t>(width - filled), ' ') + "] " + std::to_string(shown) + "/" +
            std::to_string(total_);
  }
  if (!detail.empty()) line += "  " + detail;
  if (total_ > 0 && done > 0 && done < total_)
    line += "  ETA " + eta_text(elapsed / static_cast<double>(done) * static_cast<double>(total_ - done));
  // One terminal line at most: a wrapped line could not be erased by "\r\033[K".
  winsize size{};
  const std::size_t columns =
      ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 1 ? size.ws_col : 80;
  if (line.size() >= columns) line.resize(columns - 1);
  line = "\r\033[K" + line;
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

void Progress::clear() {
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace cpudl::cli
