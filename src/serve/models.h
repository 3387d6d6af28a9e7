// The models a server holds, loaded once at start: tensor models (ONNX files and cpudl's own
// .safetensors models) behind a dynamic batcher, and GGUF language models with a fixed number of
// sequence slots. Both bound what may wait: a full queue refuses at once (429), never stalls.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cpudl/inference.h"
#include "cpudl/llm.h"
#include "runtime/compute_thread.h"
#include "serve/metrics.h"
#include "serve/tensor_json.h"
#include "train/trainer.h"

namespace cpudl::serve {

using Clock = std::chrono::steady_clock;

struct BatchOptions {
  int max_batch = 16;                  // samples per run
  double batch_timeout_ms = 2;         // how long the first request of a batch waits for company
  int queue = 64;                      // requests waiting per model, beyond which 429
  int threads = 0;                     // compute threads of each run (0: the process default)
  const Governor* governor = nullptr;  // when set, each run takes its count (threads is the ceiling)
  ComputeThread* compute = nullptr;    // when set, runs go to it (runtime/compute_thread.h says why)
};

// One .onnx or .safetensors model. Requests for it are gathered into batches along the first
// dimension (up to max_batch samples, or batch_timeout_ms after the first arrived), run once on
// the model's own worker thread, and the outputs split back: a client sees only its own rows.
class TensorModel {
 public:
  TensorModel(std::string name, const std::filesystem::path& path, const BatchOptions& options,
              Metrics& metrics);
  ~TensorModel();

  const std::string& name() const { return name_; }
  const char* format() const { return onnx_ ? "onnx" : "safetensors"; }
  const std::vector<TensorSpec>& inputs() const { return inputs_; }
  const std::vector<TensorSpec>& outputs() const { return outputs_; }
  bool batches() const;  // whether the first dimension is free (otherwise one request per run)

  // A request for this model on its way to the queue (its body being parsed): a batch waits for
  // its company only while some are (up to batch_timeout_ms), so a lone request runs at once.
  class Arrival {
   public:
    explicit Arrival(TensorModel& m) : model_(&m) { ++m.arriving_; }
    Arrival(const Arrival&) = delete;
    ~Arrival() { done(); }
    void done();  // queued, or refused: idempotent

   private:
    friend class TensorModel;
    TensorModel* model_;
  };

  // Runs `inputs` (parse_infer_request's) in the next batch. RequestError 429 when the queue is
  // full, 504 when the deadline passes first (the rows are then dropped when their batch ends).
  std::vector<Tensor> infer(std::vector<Tensor> inputs, Clock::time_point deadline,
                            Arrival* arrival = nullptr);
  // One image sample's shape and normalisation: a cpudl model's, or an ONNX file's that cpudl
  // export wrote (metadata_props).
  struct ImageInput {
    Shape shape;  // [C, H, W]
    std::vector<float> mean, stdev;
    std::vector<std::string> labels;  // class names (an image folder's), else empty: the index
  };
  // What classify calls class k.
  std::string label(int k) const {
    return image_input_ && k < static_cast<int>(image_input_->labels.size())
               ? image_input_->labels[static_cast<std::size_t>(k)]
               : std::to_string(k);
  }
  // The top classes for an image file's bytes (as `cpudl predict`) of a cpudl model or an ONNX
  // file cpudl export wrote: 400 for other ONNX models, whose preprocessing the file does not say,
  // and for a body that is not an image.
  std::vector<std::pair<int, float>> classify(const std::string& image, int top, Clock::time_point deadline);
  int waiting() const;
  // RequestError 429 when as many requests wait as --queue allows.
  void refuse_if_full() const;

 private:
  struct Request {
    std::vector<Tensor> inputs;
    std::int64_t rows = 1;
    std::promise<std::vector<Tensor>> result;
  };
  // A batch handed to the compute thread and not yet answered.
  struct Running {
    std::vector<std::shared_ptr<Request>> batch;
    std::int64_t padded = 0;   // its rows with the zero padding; 0: the one request's own inputs
    std::uint64_t number = 0;  // the how-manieth started (finished_ counts those done)
    std::future<std::vector<Tensor>> outputs;
  };
  void work();
  bool full_batch_waiting() const;  // under mutex_
  Running start(std::vector<std::shared_ptr<Request>> batch, std::int64_t rows);
  void answer(Running& r);
  void warm_up();  // a plan for every padded batch size, at start
  // Called on the compute thread only (the warm-up at load, the batches through start()); `timed`:
  // into cpudl_batch_seconds (the warm-up's runs are not).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, bool timed = true);

  std::string name_;
  BatchOptions options_;
  Metrics& metrics_;
  std::optional<InferenceSession> onnx_;
  std::optional<train::ModelFile> own_;
  std::optional<ImageInput> image_input_;  // what classify needs; none for a plain ONNX file
  std::vector<TensorSpec> inputs_, outputs_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Request>> queue_;
  int arriving_ = 0;                          // Arrivals not yet done (under mutex_)
  std::uint64_t started_ = 0, finished_ = 0;  // batches handed to the compute thread, and done (under mutex_)
  bool stopping_ = false;
  std::thread worker_;
};

struct LlmOptions {
  int parallel = 1;  // sequence slots: generations that run at once
  int ctx = 0;       // context per slot (0: the model's, at most 4096)
  int queue = 64;    // requests waiting for a slot, beyond which 429
  int threads = 0;   // compute threads of the model's forward passes (0: the process default)
  const Governor* governor = nullptr;  // when set, each pass takes its count (threads is the ceiling)
  bool repack = true;                  // llm::ModelLoadOptions::repack
  ComputeThread* compute = nullptr;    // when set, passes go to it (runtime/compute_thread.h says why)
};

// A GGUF model with `parallel` contexts. A request holds one slot (its context, reset) for its
// whole generation. The slots' evaluations are batched continuously: each one's prompt or next
// token waits for the model's stepper thread, which runs every waiting slot's tokens in one
// forward pass (llm::Context::eval_batch), so concurrent streams share each read of the weights
// instead of taking turns on the cores.
class LanguageModel {
 public:
  LanguageModel(std::string name, const std::filesystem::path& path, const LlmOptions& options,
                Metrics& metrics);
  ~LanguageModel();

  class Slot {
   public:
    Slot(LanguageModel& owner, std::size_t index) : owner_(&owner), index_(index) {}
    Slot(Slot&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)), index_(other.index_) {}
    Slot(const Slot&) = delete;
    ~Slot();
    llm::Context& context() const { return *owner_->contexts_[index_]; }
    // llm::GenerationOptions::evaluate for this slot: its tokens go through the stepper.
    void evaluate(llm::Context& ctx, std::span<const std::int32_t> tokens, bool all_logits) const {
      owner_->evaluate(ctx, tokens, all_logits);
    }

   private:
    LanguageModel* owner_;
    std::size_t index_;
  };
  // A free slot: waits its turn; RequestError 429 when `queue` requests already wait, 504 when the
  // deadline passes first.
  Slot acquire(Clock::time_point deadline);

  const std::string& name() const { return name_; }
  const llm::Model& model() const { return model_; }
  int n_ctx() const;
  int parallel() const { return static_cast<int>(contexts_.size()); }
  int waiting() const;

 private:
  // One slot's tokens waiting for a forward pass.
  struct Evaluation {
    llm::Context* ctx;
    std::span<const std::int32_t> tokens;
    bool all_logits;
    bool done = false;
    std::exception_ptr error;
  };
  void evaluate(llm::Context& ctx, std::span<const std::int32_t> tokens, bool all_logits);
  void step();
  static void run(const std::vector<Evaluation*>& round);

  std::string name_;
  LlmOptions options_;
  Metrics& metrics_;
  llm::Model model_;
  std::vector<std::unique_ptr<llm::Context>> contexts_;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::size_t> free_;
  int waiting_ = 0;
  // The stepper: evaluations wait in pending_ (under step_mutex_) for the next pass.
  std::mutex step_mutex_;
  std::condition_variable step_wake_, step_done_;
  std::vector<Evaluation*> pending_;
  std::atomic<int> generating_{0};  // slots held: the pass waits briefly for each of them
  bool stopping_ = false;
  std::thread stepper_;
};

}  // namespace cpudl::serve
