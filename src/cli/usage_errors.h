// How the command line says what is wrong with it: validators whose messages read as sentences
// ("--epochs: 0 is outside 1..100000", where CLI11's Range printed DBL_MAX in full for a positive
// number), and the one line printed for a parse error: the subcommand it belongs to, the nearest
// option or command name for a misspelt one ("did you mean --epochs?"), and that subcommand's usage.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace cpudl::cli {

// The value must be a number in [lo, hi] (a whole one when `whole`).
CLI::Validator in_range(double lo, double hi, bool whole);
template <class T>
CLI::Validator in_range(T lo, T hi) {
  return in_range(static_cast<double>(lo), static_cast<double>(hi), std::is_integral_v<T>);
}
CLI::Validator positive_number();  // > 0
// A comma-separated list of integers in [lowest, highest] ("64,512"): UsageError naming `flag`.
std::vector<std::int64_t> parse_int_list(const std::string& text, const char* flag, std::int64_t lowest = 1,
                                         std::int64_t highest = std::int64_t{1} << 40);
CLI::Validator non_negative_number();  // >= 0

// Optimal string alignment distance (insertions, deletions, substitutions, adjacent swaps).
std::size_t edit_distance(const std::string& a, const std::string& b);
// The candidate nearest `word`, if it is near enough to be what was meant: a longer name it begins
// ("--thread"), or one at most a third of its length away, rounded up (1 to 3 edits). Dashes do not
// count, and words under 3 letters get no suggestion.
std::optional<std::string> nearest(const std::string& word, const std::vector<std::string>& candidates);

// Prints the error for a failed parse of argv (one line, then the usage of the subcommand it was
// in) to stderr and returns the exit code: 0 for --help/--version (printed by CLI11), else 2.
int report_parse_error(CLI::App& app, const CLI::ParseError& e, int argc, char** argv);
// For a first argument that names no command: the error, a suggestion, and the usage; returns 2.
int report_unknown_command(const CLI::App& app, const std::string& word);

}  // namespace cpudl::cli
