// Readable command-line errors (usage_errors.h). CLI11 parses; this file only words what it found.
#include "cli/usage_errors.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cpudl/error.h"

namespace cpudl::cli {
namespace {

std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", v);
  return text;
}

// The value as a number, or an error message naming it.
std::optional<double> parse_number(const std::string& value) {
  if (value.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(value.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || std::isnan(v)) return std::nullopt;
  return v;
}

// Every name the command takes: "--epochs", "-t", "--help".
std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
    for (const std::string& n : opt->get_snames()) names.push_back("-" + n);
  }
  return names;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

const CLI::App* find_subcommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (sub->check_name(name)) return sub;
  return nullptr;
}

// "cpudl bench gemm": the command's words, its parents' first.
std::string command_path(const CLI::App* app) {
  std::string path;
  for (; app && app->get_parent(); app = app->get_parent()) path = " " + app->get_name() + path;
  return "cpudl" + path;
}

void print_top_usage(const CLI::App& app) {
  std::fprintf(stderr, "Usage: cpudl [--help] [--version] <command> [options]\nCommands:");
  for (const std::string& name : subcommand_names(app)) std::fprintf(stderr, " %s", name.c_str());
  std::fprintf(stderr, "\nRun 'cpudl <command> --help' for a command's options.\n");
}

// The "Usage:" line of the command's own help, with cpudl for the program's path.
void print_usage(const CLI::App* app) {
  if (!app->get_parent()) return print_top_usage(*app);
  const std::string help = const_cast<CLI::App*>(app)->help();
  const std::string path = command_path(app);
  const auto at = help.find("Usage: ");
  if (at != std::string::npos) {
    std::string line = help.substr(at, help.find('\n', at) - at);
    // CLI11 starts the line with argv[0] as typed ("./build/cpudl train"): say "cpudl train".
    if (const auto name = line.find(" " + app->get_name() + " "); name != std::string::npos)
      line = "Usage: " + path + line.substr(name + 1 + app->get_name().size());
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fprintf(stderr, "Run '%s --help' for its options.\n", path.c_str());
}

}  // namespace

CLI::Validator in_range(double lo, double hi, bool whole) {
  const std::string bounds = number_text(lo) + ".." + number_text(hi);
  return CLI::Validator(
      [=](std::string& value) -> std::string {
        const std::optional<double> v = parse_number(value);
        if (!v)
          return value + " is not a number (expected " + (whole ? "a whole number " : "") + "in " + bounds +
                 ")";
        if (whole && *v != std::floor(*v))
          return value + " is not a whole number (expected one in " + bounds + ")";
        if (*v < lo || *v > hi) return value + " is outside " + bounds;
        return {};
      },
      "in " + bounds);
}

std::vector<std::int64_t> parse_int_list(const std::string& text, const char* flag, std::int64_t lowest,
                                         std::int64_t highest) {
  std::vector<std::int64_t> out;
  std::size_t at = 0;
  for (;;) {
    const std::size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || v < lowest || v > highest)
      throw UsageError(
          std::string(flag) + " " + text + ": expected a comma-separated list of " +
          (lowest == 1 ? std::string("positive integers") : "integers from " + std::to_string(lowest)) +
          (highest < (std::int64_t{1} << 40) ? " up to " + std::to_string(highest) : ""));
    out.push_back(v);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const std::optional<double> v = parse_number(value);
        if (!v) return value + " is not a number (expected a positive one)";
        if (!(*v > 0)) return value + " is not positive (expected a number above 0)";
        return {};
      },
      "> 0");
}

CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const std::optional<double> v = parse_number(value);
        if (!v) return value + " is not a number (expected one at or above 0)";
        if (*v < 0) return value + " is negative (expected a number at or above 0)";
        return {};
      },
      ">= 0");
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  // Optimal string alignment: three rows of the dynamic programme suffice.
  std::vector<std::size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        current[j] = std::min(current[j], before[j - 2] + 1);
    }
    before.swap(previous);
    previous.swap(current);
  }
  return previous[b.size()];
}

std::optional<std::string> nearest(const std::string& word, const std::vector<std::string>& candidates) {
  // Dashes are not letters the user got wrong: "-epochs" is as near "--epochs" as "--epochs" is.
  const auto bare = [](const std::string& s) {
    return s.substr(std::min(s.find_first_not_of('-'), s.size()));
  };
  const std::string w = bare(word);
  if (w.size() < 3) return std::nullopt;  // "-c": any one-letter flag is one edit away
  const std::size_t limit = std::min<std::size_t>((w.size() + 2) / 3, 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const std::string b = bare(c);
    // A prefix of a longer name is what was meant more often than not ("--thread", "--check").
    const std::size_t d =
        b.size() > w.size() && b.compare(0, w.size(), w) == 0 && w.size() >= 3 ? 1 : edit_distance(w, b);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

int report_parse_error(CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
  // The command the words name: subcommands come first ("bench gemm --sizes ...").
  const CLI::App* command = &app;
  int first_argument = 1;
  for (; first_argument < argc; ++first_argument) {
    const CLI::App* sub = find_subcommand(*command, argv[first_argument]);
    if (!sub) break;
    command = sub;
  }
  const std::string who = command->get_parent() ? command_path(command).substr(6) + ": " : "";
  std::string message = e.what();
  const std::vector<std::string> subcommands = subcommand_names(*command);
  if (!subcommands.empty() && command->get_parent() && first_argument < argc &&
      argv[first_argument][0] != '-') {
    // "bench gemmm": a word where a subcommand goes
    message = "unknown command '" + std::string(argv[first_argument]) + "'";
    if (const auto near = nearest(argv[first_argument], subcommands))
      message += " (did you mean " + *near + "?)";
  } else if (!subcommands.empty() && message.find("subcommand is required") != std::string::npos) {
    message = command->get_parent() ? "give a command:" : "no command given";  // the usage lists them
    if (command->get_parent())
      for (const std::string& name : subcommands) message += " " + name;
  } else if (dynamic_cast<const CLI::ExtrasError*>(&e) || dynamic_cast<const CLI::RequiredError*>(&e)) {
    // A misspelt flag is left over (ExtrasError) or leaves a required one missing (RequiredError):
    // name the first option the command does not have.
    const std::vector<std::string> names = option_names(*command);
    bool unknown_option = false;
    for (int i = first_argument; i < argc && !unknown_option; ++i) {
      const std::string arg = argv[i];
      if (arg == "--") break;
      if (arg.size() < 2 || arg[0] != '-' || parse_number(arg)) continue;  // "-3" is a value
      const std::string name = arg.substr(0, arg.find('='));
      if (std::find(names.begin(), names.end(), name) != names.end()) continue;
      unknown_option = true;
      message = "unknown option " + name;
      if (const auto near = nearest(name, names)) message += " (did you mean " + *near + "?)";
    }
    for (const char* prefix :
         {"The following arguments were not expected: ", "The following argument was not expected: "})
      if (!unknown_option && message.rfind(prefix, 0) == 0)  // a word too many
        message = "unexpected argument " + message.substr(std::string(prefix).size());
    if (!unknown_option && dynamic_cast<const CLI::RequiredError*>(&e)) {
      // "model is required": a positional named in capitals, as the usage line shows it
      for (const CLI::Option* opt : command->get_options()) {
        if (!opt->get_positional() || message != opt->get_name() + " is required") continue;
        std::string upper = opt->get_name();
        std::transform(upper.begin(), upper.end(), upper.begin(),
                       [](unsigned char c) { return std::toupper(c); });
        message = "missing " + upper + " (" + opt->get_description() + ")";
      }
    }
  } else if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) &&
             message.find(" required ") != std::string::npos &&
             message.find(" missing") != std::string::npos) {
    message = message.substr(0, message.find(':')) + " needs a value";
  }
  std::fprintf(stderr, "cpudl: error: %s%s\n", who.c_str(), message.c_str());
  print_usage(command);
  return 2;
}

int report_unknown_command(const CLI::App& app, const std::string& word) {
  std::string message = "cpudl: error: unknown command '" + word + "'";
  if (const auto near = nearest(word, subcommand_names(app))) message += " (did you mean " + *near + "?)";
  std::fprintf(stderr, "%s\n", message.c_str());
  print_top_usage(app);
  return 2;
}

}  // namespace cpudl::cli
