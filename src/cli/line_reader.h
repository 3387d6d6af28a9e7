// Lines typed by a user: at a terminal with line editing and history (libedit, emacs keys,
// arrows; the history kept in a file across sessions), otherwise plain lines from stdin (a pipe,
// a file), so scripts and tests feed `cpudl chat` as before.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cpudl::cli {

class LineReader {
 public:
  // `history_file`: where the history is read from and saved to (empty: this session only).
  LineReader(std::string prompt, std::string history_file);
  ~LineReader();  // saves the history
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line without its newline; nullopt at end of input (Ctrl-D) or when a signal
  // interrupted the read (Ctrl-C at the prompt).
  std::optional<std::string> read();
  bool editing() const { return editing_; }

 private:
  std::string prompt_, history_file_;
  bool editing_;
  std::vector<std::string> added_;  // this session's lines, appended to the file at the end
};

// $XDG_STATE_HOME/cpudl/chat_history, else ~/.local/state/cpudl/chat_history (empty without HOME).
std::string default_chat_history_file();

}  // namespace cpudl::cli
