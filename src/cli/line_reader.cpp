// libedit through its readline-compatible API: the few calls needed (readline, add_history), BSD
// licensed where GNU readline would make the binary GPL. The history file is one entry per line,
// kept to the last kHistoryLines, rewritten atomically (libedit's own write_history writes in
// place and in its own encoding).
#include "cli/line_reader.h"

#include <editline/readline.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cpudl/error.h"
#include "cpudl/io.h"

namespace cpudl::cli {
namespace {

constexpr std::size_t kHistoryLines = 1000;

std::vector<std::string> read_history_file(const std::string& file) {
  std::vector<std::string> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace

std::string default_chat_history_file() {
  if (const char* state = std::getenv("XDG_STATE_HOME"); state && *state)
    return std::string(state) + "/cpudl/chat_history";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.local/state/cpudl/chat_history";
  return {};
}

LineReader::LineReader(std::string prompt, std::string history_file)
    : prompt_(std::move(prompt)),
      history_file_(std::move(history_file)),
      editing_(isatty(STDIN_FILENO) && isatty(STDERR_FILENO)) {
  if (!editing_) return;
  rl_instream = stdin;
  rl_outstream = stderr;  // the prompt goes where cpudl's messages go; stdout carries the replies
  // libedit's own SIGINT handler re-sends the signal to the whole process group; chat's handler
  // (no SA_RESTART) already ends the read, and libedit restores the terminal as it returns.
  rl_catch_signals = 0;
  using_history();
  if (!history_file_.empty())
    for (const std::string& line : read_history_file(history_file_)) add_history(line.c_str());
}

LineReader::~LineReader() {
  if (!editing_) return;
  clear_history();  // libedit's copies
  if (history_file_.empty() || added_.empty()) return;
  std::vector<std::string> lines = read_history_file(history_file_);  // another session may have added some
  lines.insert(lines.end(), added_.begin(), added_.end());
  if (lines.size() > kHistoryLines) lines.erase(lines.begin(), lines.end() - kHistoryLines);
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  try {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(history_file_).parent_path(), ec);
    io::write_file_atomically(history_file_, text);
  } catch (const Error& e) {
    std::fprintf(stderr, "cpudl: warning: the chat history was not saved: %s\n", e.what());
  }
}

std::optional<std::string> LineReader::read() {
  if (!editing_) {
    std::fputs(prompt_.c_str(), stderr);
    std::string line;
    if (!std::getline(std::cin, line)) return std::nullopt;
    return line;
  }
  char* raw = readline(prompt_.c_str());
  if (raw == nullptr) {  // Ctrl-D or Ctrl-C: what follows starts on a line of its own
    std::fputc('\n', stderr);
    return std::nullopt;
  }
  std::string line(raw);
  std::free(raw);
  if (!line.empty() && line.find('\n') == std::string::npos) {
    add_history(line.c_str());
    added_.push_back(line);
  }
  return line;
}

}  // namespace cpudl::cli
