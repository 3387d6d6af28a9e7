// `cpudl serve`: the flags of the HTTP server (serve/server.h).
#include "cli/command.h"
#include "cli/usage_errors.h"
#include "cpudl/runtime.h"
#include "serve/server.h"

namespace cpudl::cli {

void add_serve_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<serve::ServeOptions>();
  auto governor = std::make_shared<std::string>();
  auto no_repack = std::make_shared<bool>(false);
  CLI::App* s = app.add_subcommand(
      "serve", "Serve ONNX, cpudl and GGUF models over HTTP (KServe v2, OpenAI API, Prometheus metrics)");
  s->add_option("--model", o->models, "NAME=PATH of an .onnx, .safetensors or .gguf model (repeatable)")
      ->required();
  s->add_option("--host", o->host, "Address to listen on (default 127.0.0.1: this machine only)");
  s->add_option("--port", o->port, "Port (default 8080; 0: any free port, printed)")
      ->check(in_range(0, 65535));
  add_threads_option(s, o->threads);
  add_governor_option(s, *governor);
  add_no_repack_flag(s, *no_repack);
  s->add_option("--max-batch", o->max_batch, "Samples per run of a tensor model (default 16)")
      ->check(in_range(1, 4096));
  s->add_option("--batch-timeout-ms", o->batch_timeout_ms,
                "How long a batch waits for requests still being parsed (default 2)")
      ->check(in_range(0.0, 10000.0));
  s->add_option("--queue", o->queue, "Requests that may wait per model; more get 429 (default 64)")
      ->check(in_range(1, 100000));
  s->add_option("--parallel", o->parallel, "Generations a language model runs at once (default 1)")
      ->check(in_range(1, 256));
  s->add_option("--ctx", o->ctx, "Context length of each generation (default: the model's, at most 4096)")
      ->check(in_range(1, 1 << 24));
  s->add_option("--api-key", o->api_key, "Require Authorization: Bearer KEY (health endpoints excepted)");
  s->add_option("--max-body-mb", o->max_body_mb, "Largest request body; larger get 413 (default 16)")
      ->check(in_range(0.001, 4096.0));
  s->add_option("--request-timeout-s", o->request_timeout_s,
                "Longest wait for a batch or a slot; then 504 (default 60)")
      ->check(in_range(0.001, 86400.0));
  s->add_option("--drain-timeout-s", o->drain_timeout_s,
                "On SIGTERM/SIGINT, how long requests in flight may finish (default 30)")
      ->check(in_range(0.0, 86400.0));
  s->callback([&action, o, governor, no_repack] {
    action = [o, governor, no_repack] {
      o->governor = governor_wanted(*governor);
      o->repack = repack_wanted(*no_repack);
      if (o->threads > 0) check_thread_request(o->threads, "--threads");
      return serve::serve(*o);
    };
  });
}

}  // namespace cpudl::cli
