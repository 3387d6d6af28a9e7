// A temporary directory per test and a way to run the cpudl binary in it, capturing its exit
// code, stdout and stderr: the fixture of the end-to-end CLI tests.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cpudl::testing {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

// One exchange with a program on a terminal: once its output shows `expect` (after the previous
// step's match), `send` is typed; with `line_editor`, only once the program has also put the
// terminal in raw mode and waits in read(2) (a line editor waiting for a key): typed before, keys
// would be taken as a cooked line, and a Ctrl-C could come between two reads.
struct TerminalStep {
  std::string expect, send;
  bool line_editor = false;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CliSandbox : public ::testing::Test {
 protected:
  // ctest runs tests in parallel processes: name the directory after test and process.
  std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      ("cpudl_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
       std::to_string(getpid()));
  void SetUp() override { std::filesystem::create_directories(dir); }
  void TearDown() override { std::filesystem::remove_all(dir); }
  // `env`: extra VAR=value assignments, space-separated. The thread governor is off (results that
  // tests compare across runs must not depend on the load of the machine) unless `env` turns it on.
  static std::string command_line(const std::string& args, const std::string& env) {
    return "env -u CPUDL_ISA -u CPUDL_PROFILE -u CPUDL_CONV_IMPL -u CPUDL_VERBOSE CPUDL_THREADS=2 "
           "CPUDL_GOVERNOR=off " +
           env + " " + std::string(CPUDL_BINARY) + " " + args;
  }
  CliResult run(const std::string& args, const std::string& env = "") {
    const std::string command =
        command_line(args, env) + " >" + (dir / "out.txt").string() + " 2>" + (dir / "err.txt").string();
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir / "out.txt"), slurp(dir / "err.txt")};
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }

  // Whether the process's main thread waits in read(2) (x86-64 syscall 0): a line editor between
  // keys. A key typed while it is still busy with the last one is fine, but a signal (Ctrl-C)
  // sent then would not interrupt the read it has yet to start.
  static bool blocked_in_read(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/syscall");
    std::string number;
    return in >> number && number == "0";
  }

  // Runs cpudl on a real pseudo-terminal (stdin, stdout and stderr all on it, TERM=xterm, 100
  // columns), typing each step's `send` once its `expect` shows: what a user at a terminal sees
  // (progress bars, line editing) comes back in `out`, as the terminal got it ("\r\n" line ends).
  // A run past `timeout_seconds` is killed (exit code -1).
  CliResult run_on_terminal(const std::string& args, const std::vector<TerminalStep>& steps = {},
                            const std::string& env = "", int timeout_seconds = 120) {
    const std::string command = "exec " + command_line(args, "TERM=xterm " + env);
    winsize size{};
    size.ws_row = 40, size.ws_col = 100;
    int terminal = -1;
    const pid_t pid = forkpty(&terminal, nullptr, nullptr, &size);
    if (pid < 0) return {-1, "forkpty failed", ""};
    if (pid == 0) {
      if (chdir(dir.c_str()) != 0) _exit(126);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    CliResult result;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
    std::size_t step = 0, from = 0;
    bool killed = false;
    for (;;) {
      pollfd p{terminal, POLLIN, 0};
      if (poll(&p, 1, 100) > 0) {
        char buffer[4096];
        const ssize_t n = read(terminal, buffer, sizeof buffer);
        if (n <= 0) break;  // EIO: the program closed the terminal
        result.out.append(buffer, static_cast<std::size_t>(n));
      }
      while (step < steps.size()) {
        const std::size_t at = result.out.find(steps[step].expect, from);
        if (at == std::string::npos) break;
        termios mode{};  // Linux: the master reports the terminal's (the slave's) settings
        if (steps[step].line_editor &&
            (tcgetattr(terminal, &mode) != 0 || (mode.c_lflag & ICANON) || !blocked_in_read(pid)))
          break;
        from = at + steps[step].expect.size();
        if (write(terminal, steps[step].send.data(), steps[step].send.size()) < 0) break;
        ++step;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        killed = true;
        break;
      }
    }
    close(terminal);
    int status = 0;
    waitpid(pid, &status, 0);
    result.exit_code = !killed && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
  }
};

}  // namespace cpudl::testing
