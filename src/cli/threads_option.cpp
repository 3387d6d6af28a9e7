// The --threads flag, shared by every subcommand that computes.
#include "cli/command.h"
#include "cpudl/runtime.h"

namespace cpudl::cli {

CLI::Option* add_threads_option(CLI::App* app, int& threads) {
  return app->add_option("-t,--threads", threads, "Compute threads (default: usable physical cores)")
      ->check(CLI::Range(1, 4096));
}

void use_threads(int threads) {
  if (threads <= 0) return;
  check_thread_request(threads, "--threads");
  set_default_threads(threads);
}

}  // namespace cpudl::cli
