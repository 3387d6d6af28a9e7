// How subcommands plug into the CLI: each file adds its CLI11 subcommand and the action to run.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "runtime/governor.h"
#include "train/trainer.h"

namespace cpudl::cli {

// --threads T: one definition for every subcommand that computes (1 to 4096; not given = the
// usable physical cores). Registered once here so that its name, range and help cannot drift.
CLI::Option* add_threads_option(CLI::App* app, int& threads);
// Makes a given --threads the process default (commands that run one session: train, eval, run,
// bench model), warning once when it is above the usable cores. 0 (not given) keeps the default.
void use_threads(int threads);

// --max-loop-iterations N (run, info, detect): InferenceOptions::max_loop_iterations, the bound
// on an ONNX Loop's iterations (1 to 10^9; default 10,000).
CLI::Option* add_max_loop_iterations_option(CLI::App* app, std::int64_t& iterations);

// --bind cores|none (train, run, generate, chat): pins the calling thread's compute pool as
// plan_placement says and prints where (call after use_threads); "none" does nothing.
CLI::Option* add_bind_option(CLI::App* app, std::string& mode);
void apply_bind(const std::string& mode);

// --governor on|off, for the commands that run for a while (train, run, generate, chat, serve).
// Not given (""), CPUDL_GOVERNOR decides, else on.
CLI::Option* add_governor_option(CLI::App* app, std::string& mode);
bool governor_wanted(const std::string& flag);

// --no-repack (generate, chat, perplexity, bench llm, serve): load GGUF models without the panels
// made at load (llama.cpp's flag; llm::ModelLoadOptions). Not given: CPUDL_LLM_REPACK=off does it.
CLI::Option* add_no_repack_flag(CLI::App* app, bool& no_repack);
bool repack_wanted(bool no_repack);
// The governor of runtime/governor.h, logging to stderr, with `ceiling` threads at most (0: the
// count in effect; call after use_threads); nullptr for "off". `on_sample` feeds metrics.
std::unique_ptr<Governor> start_governor(const std::string& mode, int ceiling = 0,
                                         std::function<void(const GovernorStatus&)> on_sample = {});

// Under CPUDL_PROFILE=1: the eager engine's time per op (ops.h: op_profile()) to stderr, per
// step when `steps` > 0; % of peak when `roof_gflops` > 0.
void print_op_profile(std::int64_t steps, double roof_gflops);
// One line of a span's counters (IPC, cache and branch misses, context switches), or why the
// hardware ones are unavailable.
std::string counter_summary(const CounterReading& counters);

// Set by the subcommand that was parsed; returns the process exit code.
using Action = std::function<int()>;

void add_doctor_command(CLI::App& app, Action& action);
void add_bench_command(CLI::App& app, Action& action);
void add_bench_model_command(CLI::App& bench, Action& action);  // `cpudl bench model`
void add_train_command(CLI::App& app, Action& action);
void add_eval_command(CLI::App& app, Action& action);
void add_predict_command(CLI::App& app, Action& action);
void add_run_command(CLI::App& app, Action& action);
void add_info_command(CLI::App& app, Action& action);
// `cpudl info MODEL.gguf` (llm_info.cpp): info's answer for a language model.
int run_llm_info(const std::string& path, bool json);
void add_generate_command(CLI::App& app, Action& action);
void add_tokenize_command(CLI::App& app, Action& action);
void add_detokenize_command(CLI::App& app, Action& action);
void add_perplexity_command(CLI::App& app, Action& action);
void add_chat_command(CLI::App& app, Action& action);
void add_quantize_command(CLI::App& app, Action& action);
void add_bench_llm_command(CLI::App& bench, Action& action);        // `cpudl bench llm`
void add_bench_allreduce_command(CLI::App& bench, Action& action);  // `cpudl bench allreduce`
void add_serve_command(CLI::App& app, Action& action);
void add_detect_command(CLI::App& app, Action& action);
void add_export_command(CLI::App& app, Action& action);

// A model file as an ONNX file to load (run, info, quantize): an ONNX file itself, or for a model
// cpudl train wrote (or its checkpoint, told by content) its export (export.cpp) in a temporary
// file, removed with this object.
class OnnxInput {
 public:
  explicit OnnxInput(const std::string& model);
  ~OnnxInput();
  OnnxInput(const OnnxInput&) = delete;
  OnnxInput& operator=(const OnnxInput&) = delete;
  const std::string& path() const { return path_; }
  bool exported() const { return exported_; }

 private:
  std::string path_;
  bool exported_ = false;
};

// `cpudl quantize` on an ONNX model (quantize_onnx.cpp); quantize.cpp parses the flags.
// Calibration and report inputs taken from a dataset directory (a cpudl model's --calib DATA_DIR),
// already normalised as the model's training data was, with the report's labels.
struct QuantizeDataset {
  std::vector<std::pair<std::string, Tensor>> calib, eval;
  Tensor labels;                          // [rows of eval] i64
  std::string calib_source, eval_source;  // what the report calls them
};

struct QuantizeOnnxOptions {
  std::string input, output, mode, calib, eval, labels, observer = "minmax";
  std::optional<QuantizeDataset> dataset;  // set: instead of the .npy inputs of calib/eval/labels
  std::int64_t calib_samples = 256;
  std::string
      shown_input;  // what reports call the input (a cpudl model's name, not its export's); empty: input
  double max_weight_error = 0.02, percentile = 99.99;
  bool reduce_range = false;
  int threads = 0;
  bool json = false;
};
int run_quantize_onnx(const QuantizeOnnxOptions& o);

}  // namespace cpudl::cli
