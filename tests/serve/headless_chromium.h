// A page opened in a real headless Chromium, driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: JSON messages ended by a NUL byte, read from fd 3 and written to fd 4;
// no WebSocket needed). It waits in real time for a condition the page reaches, then reads the
// page, and each run has a profile of its own. `--dump-dom --virtual-time-budget` did the same on
// Chromium's virtual clock, which now and then dumped a page mid-answer. (Three runs of it in a
// row hung on a CI machine: the server had deadlocked -- the page's /metrics scrape against its
// chat taking a slot, see serve/metrics.cpp's render -- which this harness then showed at once,
// as a page that never got its answer while the server no longer answered /metrics.)
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace cpudl::testing {

class HeadlessChromium {
 public:
  // Starts Chromium on `url` with a profile of its own in `profile_dir` (created by Chromium) and
  // its log in `log_path`. `ok()` says whether it started and a page target was attached.
  HeadlessChromium(const std::string& url, const std::string& profile_dir, const std::string& log_path) {
    signal(SIGPIPE, SIG_IGN);  // a Chromium that died is an error from write(), not the test's end
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) return;
    std::vector<std::string> argv = {"chromium",
                                     "--headless",
                                     "--no-sandbox",
                                     "--disable-gpu",
                                     "--no-first-run",
                                     "--remote-debugging-pipe",
                                     "--user-data-dir=" + profile_dir,
                                     url};
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // Moved above 4 first, so that the dup2 onto 3 cannot close the other end before its own.
    const int in = fcntl(to[0], F_DUPFD_CLOEXEC, 10), out = fcntl(from[1], F_DUPFD_CLOEXEC, 10);
    posix_spawn_file_actions_adddup2(&actions, in, 3);
    posix_spawn_file_actions_adddup2(&actions, out, 4);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);  // its helpers die with it
    posix_spawnattr_setpgroup(&attributes, 0);
    if (posix_spawnp(&pid_, "chromium", &actions, &attributes, raw.data(), environ) != 0) pid_ = -1;
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    for (int fd : {to[0], from[1], in, out}) close(fd);
    write_ = to[1];
    read_ = from[0];
    if (pid_ <= 0) return;
    const auto targets = call("Target.getTargets", nlohmann::json::object());
    for (const auto& t : targets["targetInfos"])
      if (t["type"] == "page") {
        session_ = call("Target.attachToTarget", {{"targetId", t["targetId"]}, {"flatten", true}})
                       .value("sessionId", "");
        break;
      }
  }
  ~HeadlessChromium() {
    if (write_ >= 0) close(write_);
    if (read_ >= 0) close(read_);
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  HeadlessChromium(const HeadlessChromium&) = delete;
  HeadlessChromium& operator=(const HeadlessChromium&) = delete;

  bool ok() const { return !session_.empty(); }
  const std::string& error() const { return error_; }

  // The value of a JavaScript expression in the page (a string, number or boolean as JSON), or
  // null with error() set.
  nlohmann::json evaluate(const std::string& expression) {
    const auto r = call("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}}, session_);
    if (r.contains("exceptionDetails")) error_ = r["exceptionDetails"].dump();
    return r.contains("result") ? r["result"].value("value", nlohmann::json()) : nlohmann::json();
  }

  // Polls `expression` every 100 ms until it is true; false when `seconds` pass first.
  bool wait_until(const std::string& expression, double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < until && error_.empty()) {
      if (evaluate(expression) == true) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (error_.empty())
      error_ = "timed out after " + std::to_string(seconds) + " s waiting for " + expression;
    return false;
  }

 private:
  // Sends one DevTools command and returns its result; the events in between are dropped.
  nlohmann::json call(const std::string& method, const nlohmann::json& params,
                      const std::string& session = "") {
    if (!error_.empty()) return {};
    nlohmann::json message = {{"id", ++id_}, {"method", method}, {"params", params}};
    if (!session.empty()) message["sessionId"] = session;
    const std::string text = message.dump() + '\0';
    if (::write(write_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      error_ = "could not write to Chromium's DevTools pipe";
      return {};
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      for (std::size_t end; (end = buffer_.find('\0')) != std::string::npos;) {
        const auto reply = nlohmann::json::parse(buffer_.substr(0, end), nullptr, false);
        buffer_.erase(0, end + 1);
        if (reply.is_object() && reply.value("id", 0) == id_) {
          if (reply.contains("error")) error_ = method + ": " + reply["error"].dump();
          return reply.value("result", nlohmann::json::object());
        }
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      pollfd p{read_, POLLIN, 0};
      char chunk[65536];
      const ssize_t n = left.count() > 0 && poll(&p, 1, static_cast<int>(left.count())) > 0
                            ? ::read(read_, chunk, sizeof chunk)
                            : -1;
      if (n <= 0) {
        error_ = method + ": no answer from Chromium";
        return {};
      }
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int write_ = -1, read_ = -1, id_ = 0;
  std::string session_, buffer_, error_;
};

}  // namespace cpudl::testing
