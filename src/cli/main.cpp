// cpudl's entry point: parses the command line once, runs one subcommand, and turns every error
// into one line on stderr and an exit code (2 for usage errors, 1 for the rest).
#include <algorithm>
#include <cstdio>
#include <exception>

#include "cli/command.h"
#include "cli/usage_errors.h"
#include "cpudl/error.h"
#include "train/distributed.h"

int main(int argc, char** argv) {
  CLI::App app{"cpudl: train and run neural networks on the CPU you have, at the speed it can do."};
  app.set_version_flag("--version", std::string("cpudl ") + CPUDL_VERSION);
  app.require_subcommand(1, 1);
  cpudl::cli::Action action;
  cpudl::cli::add_doctor_command(app, action);
  cpudl::cli::add_bench_command(app, action);
  cpudl::cli::add_train_command(app, action);
  cpudl::cli::add_eval_command(app, action);
  cpudl::cli::add_predict_command(app, action);
  cpudl::cli::add_run_command(app, action);
  cpudl::cli::add_info_command(app, action);
  cpudl::cli::add_detect_command(app, action);
  cpudl::cli::add_generate_command(app, action);
  cpudl::cli::add_tokenize_command(app, action);
  cpudl::cli::add_detokenize_command(app, action);
  cpudl::cli::add_perplexity_command(app, action);
  cpudl::cli::add_chat_command(app, action);
  cpudl::cli::add_export_command(app, action);
  cpudl::cli::add_quantize_command(app, action);
  cpudl::cli::add_serve_command(app, action);

  // CLI11 reports a misspelt command only as "a subcommand is required": name it instead.
  const auto subcommands = app.get_subcommands([](const CLI::App*) { return true; });
  const bool known = argc > 1 && std::any_of(subcommands.begin(), subcommands.end(),
                                             [&](const CLI::App* sub) { return sub->check_name(argv[1]); });
  if (argc > 1 && argv[1][0] != '-' && !known) return cpudl::cli::report_unknown_command(app, argv[1]);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cpudl::cli::report_parse_error(app, e, argc, argv);
  }

  try {
    return action ? action() : 2;
  } catch (const cpudl::UsageError& e) {
    std::fprintf(stderr, "cpudl: error: %s\n", e.what());
    std::fflush(stderr);
    cpudl::train::end_job_after_error(2);  // under mpirun: the other ranks must not wait for this one
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpudl: error: %s\n", e.what());
    std::fflush(stderr);
    cpudl::train::end_job_after_error(1);
    return 1;
  }
}
