// `cpudl train`: trains a zoo model on a data directory; progress on a terminal, plain lines
// otherwise, or JSON lines; checkpoints on SIGINT/SIGTERM and resumes to the same result.
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/progress.h"
#include "cli/train_monitor.h"
#include "cli/usage_errors.h"
#include "cpudl/error.h"
#include "cpudl/io.h"
#include "cpudl/ops.h"
#include "cpudl/runtime.h"
#include "train/trainer.h"

namespace cpudl::cli {
namespace {

struct TrainOptions {
  train::TrainConfig config;
  int threads = 0;
  std::string governor;  // --governor; empty: CPUDL_GOVERNOR or on
  std::string bind = "none";
  std::int64_t log_every = 0;
  bool json = false, no_shuffle = false;
  std::string out, data, init, resume, checkpoint;
  int metrics_port = -1;  // -1: none
  std::string report, log_csv;
};

// --log-csv: one row per step, per --val-every evaluation and per epoch, flushed as written (a
// log read while the run goes on, or after a crash), appended to when the run is resumed.
class CsvLog {
 public:
  CsvLog(const std::string& path, bool append) {
    if (path.empty()) return;
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw UsageError("--log-csv " + path + " is a directory: give the file to write");
    const bool fresh =
        !append || !std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0;
    file_ = std::fopen(path.c_str(), fresh ? "w" : "a");
    if (!file_) throw Error("--log-csv " + path + ": cannot write (" + std::strerror(errno) + ")");
    if (fresh) row("kind,epoch,step,global_step,loss,lr,images_per_second,seconds,test_loss,test_accuracy");
  }
  ~CsvLog() {
    if (file_) std::fclose(file_);
  }
  CsvLog(const CsvLog&) = delete;
  CsvLog& operator=(const CsvLog&) = delete;
  void step(const train::StepProgress& p) {
    if (!file_) return;
    char line[256];
    std::snprintf(line, sizeof line, "step,%d,%lld,%lld,%.7g,%.7g,%.1f,%.4f,,", p.epoch,
                  static_cast<long long>(p.step), static_cast<long long>(p.global_step), p.loss, p.lr,
                  p.images_per_second, p.seconds);
    row(line);
  }
  void validation(const train::ValidationReport& v) {
    if (!file_) return;
    char line[256];
    std::snprintf(line, sizeof line, "val,%d,,%lld,,,,,%.7g,%.7g", v.epoch,
                  static_cast<long long>(v.global_step), v.test_loss, v.test_accuracy);
    row(line);
  }
  void epoch(const train::EpochReport& e) {
    if (!file_) return;
    char line[256];
    std::snprintf(line, sizeof line, "epoch,%d,,,%.7g,,%.1f,%.4f,%.7g,%.7g", e.epoch, e.loss,
                  e.images_per_second, e.seconds, e.test_loss, e.test_accuracy);
    row(line);
  }

 private:
  void row(const char* text) {
    std::fprintf(file_, "%s\n", text);
    std::fflush(file_);
  }
  std::FILE* file_ = nullptr;
};

void on_signal(int signal) { train::g_stop_signal = signal; }

int run_train(TrainOptions& o) {
  // --threads sizes the pool: set before anything starts the runtime.
  use_threads(o.threads);
  (void)runtime();
  apply_bind(o.bind);
  train::TrainConfig& c = o.config;
  c.data = o.data, c.out = o.out, c.init = o.init, c.resume = o.resume, c.checkpoint = o.checkpoint;
  c.shuffle = !o.no_shuffle;
  // A measurement switch (docs/DISTRIBUTED.md), read here once and passed on as a value.
  if (const char* v = std::getenv("CPUDL_OVERLAP_ALLREDUCE"); v && std::string(v) == "0")
    c.overlap_allreduce = false;
  if (o.data.empty()) throw UsageError("--data DIR is required");

  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  CsvLog csv(o.log_csv, !o.resume.empty());           // before any work: a run must not end unable to log
  const bool profile_asked = op_profiling_enabled();  // CPUDL_PROFILE=1: the table on stderr
  if (!o.report.empty()) {  // checked before any work: a run must not end unable to write it
    check_report_path(o.report);
    enable_op_profile(true);  // the report's time per op
  }
  // Metrics and the report's history; the port is bound here, before training starts.
  std::unique_ptr<TrainMonitor> monitor;
  if (o.metrics_port >= 0 || !o.report.empty()) {
    monitor = std::make_unique<TrainMonitor>(o.metrics_port, c.lr);
    if (monitor->port())
      std::fprintf(stderr, "cpudl: metrics on http://127.0.0.1:%d/metrics\n", *monitor->port());
  }

  const bool tty = !o.json && stderr_is_terminal();
  double last_draw = -1;
  train::Callbacks cb;
  cb.info = [&](const std::string& text) {
    if (o.json)
      std::printf("%s\n", nlohmann::ordered_json{{"event", "info"}, {"message", text}}.dump().c_str());
    else
      std::fprintf(stderr, "%s%s\n", tty ? "\r\033[K" : "", text.c_str());
    std::fflush(stdout);
  };
  cb.validation = [&](const train::ValidationReport& v) {
    csv.validation(v);
    if (o.json)
      std::printf("%s\n", nlohmann::ordered_json{{"validation", true},
                                                 {"epoch", v.epoch},
                                                 {"global_step", v.global_step},
                                                 {"test_loss", v.test_loss},
                                                 {"test_accuracy", v.test_accuracy}}
                              .dump()
                              .c_str());
    else
      std::printf("%sepoch %d, step %lld: test loss %.4f, test accuracy %.2f%%\n", tty ? "\r\033[K" : "",
                  v.epoch, static_cast<long long>(v.global_step), v.test_loss, 100 * v.test_accuracy);
    std::fflush(stdout);
  };
  cb.step = [&](const train::StepProgress& p) {
    csv.step(p);
    if (monitor) monitor->step(p);
    if (o.log_every > 0 && p.step % o.log_every == 0) {
      if (o.json)
        std::printf(
            "%s\n",
            nlohmann::ordered_json{{"epoch", p.epoch}, {"step", p.step}, {"loss", p.loss}}.dump().c_str());
      else
        std::printf("%sepoch %d step %lld/%lld: loss %.6f\n", tty ? "\r\033[K" : "", p.epoch,
                    static_cast<long long>(p.step), static_cast<long long>(p.steps), p.loss);
      std::fflush(stdout);
    }
    if (!tty || (p.seconds - last_draw < 0.1 && p.step != p.steps)) return;
    last_draw = p.seconds;
    const int width = 30, filled = static_cast<int>(width * p.step / std::max<std::int64_t>(p.steps, 1));
    const double eta = p.remaining_seconds();
    std::fprintf(stderr, "\r\033[Kepoch %d/%d [%.*s%*s] %lld/%lld  %.0f img/s  loss %.4f  ETA %s", p.epoch,
                 p.epochs, filled, "==============================", width - filled, "",
                 static_cast<long long>(p.step), static_cast<long long>(p.steps), p.images_per_second, p.loss,
                 eta_text(eta).c_str());
    std::fflush(stderr);
  };
  // Under CPUDL_PROFILE=1, each epoch's counters (training and its evaluation) on stderr.
  CounterReading epoch_counters = profile_asked ? read_thread_counters() : CounterReading{};
  cb.epoch = [&](const train::EpochReport& e) {
    csv.epoch(e);
    if (monitor) monitor->epoch(e);
    if (profile_asked) {
      const CounterReading now = read_thread_counters();
      std::fprintf(stderr, "%scpudl: epoch %d counters: %s\n", tty ? "\r\033[K" : "", e.epoch,
                   counter_summary(now - epoch_counters).c_str());
      epoch_counters = now;
    }
    if (o.json) {
      nlohmann::ordered_json j{{"epoch", e.epoch},         {"loss", e.loss},
                               {"test_loss", e.test_loss}, {"test_accuracy", e.test_accuracy},
                               {"seconds", e.seconds},     {"images_per_second", e.images_per_second}};
      if (e.allreduce_wait_seconds > 0) j["allreduce_wait_seconds"] = e.allreduce_wait_seconds;
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%sepoch %d: loss %.4f, test loss %.4f, test accuracy %.2f%%, %.1f s, %.0f images/s\n",
                  tty ? "\r\033[K" : "", e.epoch, e.loss, e.test_loss, 100 * e.test_accuracy, e.seconds,
                  e.images_per_second);
    }
    std::fflush(stdout);
  };
  const std::unique_ptr<Governor> governor =
      start_governor(o.governor, 0, [&monitor](const GovernorStatus& status) {
        if (monitor) monitor->governor(status);
      });
  if (governor && monitor) monitor->governor(governor->status());  // the metrics before the first sample
  c.governor = governor.get();
  train::Summary s;
  const int code = train::run(c, cb, s);
  if (code != 0 || !s.leader) return code;  // under MPI, rank 0 reports for all
  if (!o.report.empty()) {
    if (governor) monitor->governor(governor->status());  // decisions of the last second too
    io::write_file_atomically(
        o.report, training_report_html({s.model + " on " + o.data, s, monitor.get(), op_profile()}));
  }
  if (o.json) {
    std::printf("%s\n", nlohmann::ordered_json{{"summary", true},
                                               {"model", s.model},
                                               {"epochs", s.epochs_run},
                                               {"test_accuracy", s.test_accuracy},
                                               {"images_per_second", s.images_per_second},
                                               {"seconds_per_epoch", s.seconds_per_epoch},
                                               {"peak_memory_bytes", s.peak_memory_bytes},
                                               {"parameters", s.parameters},
                                               {"threads", compute_threads()},
                                               {"ranks", s.ranks},
                                               {"out", o.out},
                                               {"checkpoint", s.checkpoint_kept.string()}}
                            .dump()
                            .c_str());
  } else {
    std::printf(
        "trained %s (%lld parameters) on %s%d threads: %.2f s/epoch, %.0f images/s, test accuracy %.2f%%, "
        "peak memory %.1f MiB\n"
        "saved %s\n",
        s.model.c_str(), static_cast<long long>(s.parameters),
        s.ranks > 1 ? (std::to_string(s.ranks) + " ranks x ").c_str() : "", compute_threads(),
        s.seconds_per_epoch, s.images_per_second, 100 * s.test_accuracy,
        static_cast<double>(s.peak_memory_bytes) / (1 << 20), o.out.c_str());
    if (!s.checkpoint_kept.empty()) std::printf("kept the checkpoint %s\n", s.checkpoint_kept.c_str());
  }
  if (profile_asked) print_op_profile(0, 0.0);  // training and evaluation passes together
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* t =
      app.add_subcommand("train", "Train a zoo model (defaults: the PyTorch CPU tutorial's settings)");
  t->add_option("--model", o->config.model, "simplecnn, lenet5, mlp or resnet18 (default simplecnn)")
      ->check(CLI::IsMember({"simplecnn", "lenet5", "mlp", "resnet18"}));
  t->add_option(
      "--data", o->data,
      "Directory with MNIST IDX files, CIFAR-10 batches, train.csv/test.csv, or images in class folders "
      "(CLASS/*.png|jpg, torchvision's ImageFolder; train/ and test/ or val/ above them, or --val-split)");
  t->add_option(
       "--lr-schedule", o->config.lr_schedule,
       "constant (default), step (x --lr-gamma every --lr-step-size epochs), cosine (to 0 over the run, per "
       "step) or onecycle (PyTorch's OneCycleLR with max_lr --lr)")
      ->check(CLI::IsMember({"constant", "step", "cosine", "onecycle"}));
  t->add_option("--warmup", o->config.warmup,
                "Steps of linear warm-up from 0 to --lr (constant, step, cosine)")
      ->check(in_range(0, 1 << 30));
  t->add_option("--lr-step-size", o->config.lr_step_size,
                "Epochs between --lr-schedule step's decays (default: a third of the run)")
      ->check(in_range(1, 100000));
  t->add_option("--lr-gamma", o->config.lr_gamma, "Factor of each step decay (default 0.1)")
      ->check(in_range(0.0, 1.0));
  t->add_option("--val-every", o->config.val_every, "Also evaluate on the test split every N steps")
      ->check(in_range(1, 1 << 30));
  t->add_option("--log-csv", o->log_csv,
                "Write one CSV row per step, evaluation and epoch (kind, epoch, step, global_step, loss, lr, "
                "images_per_second, seconds, test_loss, test_accuracy)");
  t->add_option("--val-split", o->config.val_split,
                "Hold out this share of the training data as the test split (default 0: the data's own)")
      ->check(in_range(0.0, 0.9));
  t->add_option("--epochs", o->config.epochs, "Epochs (default 5)")->check(in_range(1, 100000));
  t->add_option("--batch", o->config.batch, "Batch size (default 256)")->check(in_range(1, 1 << 20));
  t->add_option("--optimizer", o->config.optimizer, "adam, adamw or sgd (default adam)")
      ->check(CLI::IsMember({"adam", "adamw", "sgd"}));
  t->add_option("--lr", o->config.lr, "Learning rate (default 1e-3)")->check(positive_number());
  t->add_option("--momentum", o->config.momentum, "SGD momentum (default 0)")->check(in_range(0.0, 1.0));
  t->add_option("--weight-decay", o->config.weight_decay, "Weight decay (default 0; AdamW 0.01)")
      ->check(in_range(0.0, 1.0));
  t->add_option("--workers", o->config.workers,
                "Data-loading threads (default 1: a batch is gathered far faster than it trains, and more "
                "would compete with the compute threads)")
      ->check(in_range(1, 64));
  add_threads_option(t, o->threads);
  add_governor_option(t, o->governor);
  add_bind_option(t, o->bind);
  t->add_option("--metrics-port", o->metrics_port,
                "Serve Prometheus metrics of the run (loss, images/s, step time, governor) on "
                "http://127.0.0.1:P/metrics while it trains (0: any free port, printed)")
      ->check(in_range(0, 65535));
  t->add_option("--report", o->report,
                "Write one self-contained HTML page at the end: loss and accuracy, images/s with the "
                "governor's decisions, the confusion matrix, time per op, the machine");
  t->add_option("--seed", o->config.seed, "Seed for initialisation and shuffling (default 0)");
  t->add_option("--out", o->out, "Model file to write (safetensors)");
  t->add_option("--init", o->init,
                "Start from the weights of this safetensors file (e.g. exported from PyTorch)");
  t->add_flag("--no-shuffle", o->no_shuffle, "Keep the training data in file order");
  t->add_option("--resume", o->resume, "Continue from a checkpoint");
  t->add_option("--checkpoint", o->checkpoint, "Checkpoint file (default: --out with .ckpt appended)");
  t->add_flag("--keep-checkpoint", o->config.keep_checkpoint,
              "Keep the checkpoint after a successful run (default: removed once the model is saved)");
  t->add_option("--checkpoint-every", o->config.checkpoint_every, "Also checkpoint every N steps")
      ->check(non_negative_number());
  t->add_option("--stop-after", o->config.stop_after, "Testing: act as if SIGTERM arrived after N steps")
      ->group("");
  t->add_option("--log-every", o->log_every, "Also report the loss every N steps")
      ->check(non_negative_number());
  t->add_flag("--json", o->json, "One JSON object per epoch and a final summary, on stdout");
  t->add_option("--accumulate", o->config.accumulate,
                "Gradient accumulation: K micro-batches of batch/K, one optimiser step (default 1)")
      ->check(in_range(1, 1 << 20));
  t->add_option(
       "--precision", o->config.precision,
       "fp32 (default) or bf16: convolutions and linear layers in bf16 as torch.autocast, weights f32")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  t->add_flag("--checkpoint-activations", o->config.checkpoint_activations,
              "Keep only each residual block's input and recompute its activations in backward: less memory "
              "for a second forward (resnet18)");
  t->add_option(
      "--max-memory", o->config.max_memory,
      "Keep the run's tensors under this size (2G, 800M): picks --accumulate and activation "
      "checkpointing that fit, and ends the run with a message, not an OOM kill, if a step exceeds it");
  t->add_option("--bucket-mb", o->config.bucket_mb,
                "Data-parallel: sum gradients over the ranks in buckets of this many MiB, 0 for one sum per "
                "gradient (default 4)")
      ->check(in_range(0.0, 1024.0));
  t->add_option("--rank-timeout", o->config.rank_timeout,
                "Data-parallel: end the job when a rank waits this many seconds for the others within a step "
                "(a rank hung or cut off; 0: wait for ever; default 300)")
      ->check(in_range(0.0, 1e6));
  t->add_flag("--distributed", o->config.distributed,
              "Data-parallel over MPI (on by itself under mpirun with several ranks; this makes it an error "
              "elsewhere). --batch stays the global batch");
  t->callback([&action, o, t] {
    // Which settings were given, so that a resumed run can tell a repeated flag from a default.
    for (const char* flag : {"--model", "--epochs", "--batch", "--optimizer", "--lr", "--momentum",
                             "--weight-decay", "--seed", "--no-shuffle", "--accumulate", "--precision",
                             "--val-split", "--lr-schedule", "--warmup", "--lr-step-size", "--lr-gamma"})
      if (t->count(flag) > 0) o->config.given.insert(flag);
    action = [o] { return run_train(*o); };
  });
}

}  // namespace cpudl::cli
