// A real `cpudl serve` for the tests: started as a child process on an ephemeral loopback port
// (the port it prints), spoken to over HTTP, stopped with a signal and its exit code checked.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace cpudl::testing {

// A loopback port nobody listens on now (bound to port 0, read back, closed); -1 if none.
inline int free_port() {
  const int sock = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof addr;
  const bool bound = bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                     getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &size) == 0;
  close(sock);
  return bound ? ntohs(addr.sin_port) : -1;
}

class ServerProcess {
 public:
  // Starts `cpudl serve --port 0 ARGS...` and waits for its `listening on` line (or its exit).
  explicit ServerProcess(std::vector<std::string> args, const std::string& stderr_path)
      : stderr_path_(stderr_path) {
    int out[2];
    if (pipe(out) != 0) return;
    std::vector<std::string> argv = {CPUDL_BINARY, "serve", "--port", "0", "--threads", "2"};
    // The thread governor stays off unless a test asks for it: answers compared with `cpudl
    // generate` must not depend on the load of the machine running the tests.
    if (std::find(args.begin(), args.end(), "--governor") == args.end())
      args.insert(args.end(), {"--governor", "off"});
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn(&pid_, CPUDL_BINARY, &actions, nullptr, raw.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    char line[256];
    if (f && std::fgets(line, sizeof line, f)) {
      const std::string s(line);
      const auto colon = s.rfind(':');
      if (s.rfind("listening on http://", 0) == 0 && colon != std::string::npos)
        port_ = std::stoi(s.substr(colon + 1));
    }
    if (f) std::fclose(f);
  }
  ~ServerProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Sends `signal` and waits (up to `seconds`) for the exit code; -1 when it did not exit.
  int stop(int signal = SIGTERM, double seconds = 20) {
    if (pid_ <= 0) return -1;
    kill(pid_, signal);
    return wait(seconds);
  }
  int wait(double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    while (std::chrono::steady_clock::now() < until) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  std::string err() const {
    std::ifstream in(stderr_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  bool exited_ = false;
  std::string stderr_path_;
};

}  // namespace cpudl::testing
