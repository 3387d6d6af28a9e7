// The training loop behind `cpudl train`: data, model, optimiser, per-epoch evaluation, model
// files with their metadata, and checkpoints that make an interrupted run resumable to the same
// result. Output (progress bars, JSON) is the caller's: it receives callbacks.
#pragma once

#include <atomic>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "cpudl/data.h"
#include "cpudl/nn.h"
#include "runtime/governor.h"

namespace cpudl::train {

struct TrainConfig {
  std::string model = "simplecnn";
  // The flags passed explicitly ("--model", "--lr", ...): on --resume, a setting the checkpoint
  // holds may be repeated but not changed (--epochs excepted: it extends or ends the run).
  std::set<std::string> given;
  std::filesystem::path data, out, init, resume, checkpoint;
  int epochs = 5;
  std::int64_t batch = 256;
  std::string optimizer = "adam";
  float lr = 1e-3f, momentum = 0.0f;
  float weight_decay = -1.0f;  // < 0: the optimiser's default (0, or 0.01 for AdamW)
  std::uint64_t seed = 0;
  bool shuffle = true;
  std::int64_t checkpoint_every = 0;  // steps; 0 = only at epoch ends and on signals
  bool keep_checkpoint = false;       // false: removed once the model file is written
  float val_split = 0;                // > 0: this share of the training data held out as the test split
  // The learning rate per step (optim::LrSchedule): constant, step, cosine or onecycle, with a
  // linear warm-up over `warmup` steps (not for onecycle); step: x lr_gamma every lr_step_size
  // epochs (0: a third of the run).
  std::string lr_schedule = "constant";
  std::int64_t warmup = 0, lr_step_size = 0;
  float lr_gamma = 0.1f;
  std::int64_t val_every = 0;    // > 0: also evaluate on the test split every this many steps
  int workers = 1;               // data-loading threads
  std::int64_t stop_after = -1;  // testing: raise SIGTERM after this many steps
  // Data-parallel over MPI: on whenever mpirun started more than one rank; `distributed` demands
  // it (an error outside MPI). `batch` stays the global batch, each rank taking a shard of it.
  bool distributed = false;
  std::int64_t accumulate = 1;          // micro-batches per optimiser step (gradient accumulation)
  std::string precision = "fp32";       // or "bf16": autocast for convolutions and linear layers
  bool checkpoint_activations = false;  // recompute the model's segments in backward (nn::Module)
  // Ceiling for the run's tensors ("2G"; empty: none but the cgroup's): the micro-batch and
  // checkpointing are chosen to fit it before the first step (memory_guard.h).
  std::string max_memory;
  std::int64_t weight_check_every = 100;  // steps between comparisons of the ranks' weights
  // Data-parallel: gradients are summed in buckets of about this many MiB (0: one sum per
  // gradient). docs/DISTRIBUTED.md has the measurement behind the default.
  double bucket_mb = 4;
  // Data-parallel: start the sums while backward runs (false: after it, to measure the overlap;
  // the CLI sets it from CPUDL_OVERLAP_ALLREDUCE=0).
  bool overlap_allreduce = true;
  // Data-parallel: seconds a rank waits for the others in a step's collective before it ends the
  // job (a rank hung or cut off); 0 waits for ever.
  double rank_timeout = 300;
  // Sets each step's thread count and pauses the run at a critical temperature (after writing the
  // checkpoint); nullptr: the count in effect, fixed.
  const Governor* governor = nullptr;
};

struct StepProgress {
  int epoch, epochs;
  std::int64_t step, steps;  // within the epoch
  float loss;
  double images_per_second, seconds;  // over the epoch so far
  std::int64_t images;                // this step's batch
  int threads;                        // what the step ran on
  float lr = 0;                       // the step's learning rate
  std::int64_t global_step = 0;       // steps of the run so far, this one included

  // The whole run's time left: this epoch's steps and every later epoch's, at this epoch's pace.
  double remaining_seconds() const;
};

// A --val-every evaluation, between epochs' ends.
struct ValidationReport {
  int epoch;
  std::int64_t global_step;
  double test_loss, test_accuracy;
};

struct EpochReport {
  int epoch;
  double loss, test_accuracy, test_loss, seconds, images_per_second;
  // Data-parallel: seconds the epoch waited for gradient sums after backward (what the overlap did
  // not hide); 0 on one process.
  double allreduce_wait_seconds = 0;
  std::vector<std::vector<std::int64_t>> confusion;  // [true][predicted] on the test split
};

struct Summary {
  std::string model;  // the architecture trained (a resumed checkpoint's, not the --model default)
  double test_accuracy = 0, images_per_second = 0, seconds_per_epoch = 0;
  std::int64_t peak_memory_bytes = 0, parameters = 0;
  int epochs_run = 0;
  int ranks = 1;                          // MPI ranks that trained together
  bool leader = true;                     // this process reports and writes files (rank 0)
  std::filesystem::path checkpoint_kept;  // empty: none left behind
};

struct Callbacks {
  std::function<void(const std::string&)> info;  // one-line notes (resume, checkpoint written)
  std::function<void(const StepProgress&)> step;
  std::function<void(const EpochReport&)> epoch;
  std::function<void(const ValidationReport&)> validation;
};

// Set by SIGINT/SIGTERM handlers: the loop checkpoints at the next step boundary and returns.
extern volatile std::sig_atomic_t g_stop_signal;

// Runs training. Returns 0, or 128 + signal number when stopped by a signal (after writing the
// checkpoint and without writing the model file). Throws Error / UsageError on bad input.
int run(const TrainConfig& config, const Callbacks& callbacks, Summary& summary);

// Model files: safetensors with the state dict and metadata naming the architecture and input
// normalisation, so eval and predict need nothing else.
struct ModelFile {
  nn::ModulePtr model;
  std::map<std::string, std::string> metadata;
  std::vector<float> mean, std;
  Shape input_shape;  // per sample, e.g. [1, 28, 28]
  std::int64_t classes = 10;
  // The class names an image-folder model was trained on (metadata class_names); else "0", "1", ...
  std::vector<std::string> labels;
};
ModelFile load_model_file(const std::filesystem::path& path);
// The names of the classes: metadata class_names (a JSON array of `classes` strings), else "0",
// "1", ...; Error naming `what` when malformed.
std::vector<std::string> class_labels(const std::map<std::string, std::string>& metadata,
                                      std::int64_t classes, const std::string& what);
// An image ([C, H, W] in [0, 1], data::read_image) as the model's input sample: colour turned to
// grey (luminance) for a grey model, then normalised by the file's mean and std. Error naming
// `what` when its shape is not the model's.
Tensor prepare_image(const Shape& input_shape, const std::vector<float>& mean,
                     const std::vector<float>& stdev, Tensor image, const std::string& what);
inline Tensor prepare_image(const ModelFile& m, Tensor image, const std::string& what) {
  return prepare_image(m.input_shape, m.mean, m.std, std::move(image), what);
}

// Evaluation of a model on a dataset (eval mode, no graph): accuracy, mean loss, confusion matrix.
struct Mistake {
  std::int64_t index, label, predicted;
  double probability, loss;  // of the predicted class; the sample's cross-entropy
};
struct Evaluation {
  double accuracy = 0, loss = 0;
  std::vector<std::vector<std::int64_t>> confusion;  // [true][predicted]
  std::vector<Mistake> worst;  // the misclassified samples of highest loss, highest first
};
// `keep_worst`: how many of the worst-classified samples to keep (0: none); `on_batch`, when
// given, hears the samples done after each batch (a progress bar).
Evaluation evaluate(nn::Module& model, const data::Dataset& data, std::int64_t classes,
                    std::int64_t batch = 1000, std::int64_t keep_worst = 0,
                    const std::function<void(std::int64_t done, std::int64_t total)>& on_batch = {});

}  // namespace cpudl::train
