// The served models (models.h): the dynamic batcher of tensor models, the slots of LLMs.
#include "serve/models.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cpudl/autograd.h"
#include "cpudl/data.h"
#include "cpudl/error.h"
#include "cpudl/ops.h"
#include "cpudl/runtime.h"
#include "io/file_kind.h"
#include "train/exported_classifier.h"

namespace cpudl::serve {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::int64_t rows_of(const std::vector<Tensor>& inputs) {
  return inputs.empty() || inputs[0].dim() == 0 ? 1 : inputs[0].size(0);
}

// Requests whose inputs agree in everything but the first dimension run in one batch.
bool same_sample_shape(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].dtype() != b[i].dtype() || a[i].dim() != b[i].dim() || a[i].dim() == 0) return false;
    for (std::int64_t d = 1; d < a[i].dim(); ++d)
      if (a[i].size(d) != b[i].size(d)) return false;
  }
  return true;
}

// The tensors stacked along their first dimension (any dtype: rows are copied as bytes).
Tensor stack_rows(const std::vector<Tensor>& parts) {
  Shape shape = parts[0].shape();
  shape[0] = 0;
  for (const Tensor& p : parts) shape[0] += p.size(0);
  Tensor out = Tensor::empty(shape, parts[0].dtype());
  auto* dst = static_cast<std::byte*>(out.raw_data());
  for (const Tensor& p : parts) {
    const Tensor c = p.contiguous();
    const std::size_t bytes = static_cast<std::size_t>(c.numel()) * dtype_size(c.dtype());
    std::memcpy(dst, c.raw_data(), bytes);
    dst += bytes;
  }
  return out;
}

// Rows [first, first + count) of t as a tensor of its own.
Tensor take_rows(const Tensor& t, std::int64_t first, std::int64_t count) {
  Shape shape = t.shape();
  const std::int64_t row = t.numel() / std::max<std::int64_t>(1, shape[0]);
  shape[0] = count;
  Tensor out = Tensor::empty(shape, t.dtype());
  const Tensor c = t.contiguous();
  const std::size_t size = dtype_size(t.dtype());
  std::memcpy(out.raw_data(),
              static_cast<const std::byte*>(c.raw_data()) + first * row * static_cast<std::int64_t>(size),
              static_cast<std::size_t>(count * row) * size);
  return out;
}

TensorSpec spec_of(const ModelValue& v) { return {v.name, v.dtype, v.shape}; }

// An ONNX file cpudl export wrote of an image classifier ([batch, C, H, W] input): classify takes
// it as it takes the cpudl model (train/exported_classifier.h reads its metadata).
std::optional<TensorModel::ImageInput> exported_image_input(const InferenceSession& s,
                                                            const std::string& file) {
  if (!train::is_exported_classifier(s) || s.inputs().size() != 1) return std::nullopt;
  const ModelValue& in = s.inputs()[0];
  if (in.dtype != DType::f32 || in.shape.size() != 4 || in.shape[1] <= 0 || in.shape[2] <= 0 ||
      in.shape[3] <= 0)
    return std::nullopt;
  const train::ModelFile m = train::exported_classifier_info(s, file);
  return TensorModel::ImageInput{m.input_shape, m.mean, m.std, m.labels};
}

}  // namespace

TensorModel::TensorModel(std::string name, const std::filesystem::path& path, const BatchOptions& options,
                         Metrics& metrics)
    : name_(std::move(name)), options_(options), metrics_(metrics) {
  const std::string file = path.string();
  if (std::error_code ec; !std::filesystem::is_regular_file(path, ec))
    throw Error(file + ": cannot open (" +
                (std::filesystem::exists(path, ec) ? "not a regular file" : "No such file or directory") +
                ")");
  const io::FileKind kind = io::file_kind(path);  // by content: a checkpoint or a renamed file serves too
  if (kind == io::FileKind::onnx || (kind == io::FileKind::unknown && ends_with(file, ".onnx"))) {
    InferenceOptions o;
    o.threads = options.governor != nullptr ? 0 : options.threads;  // governed: the caller's scope
    onnx_.emplace(path, o);
    for (const auto& v : onnx_->inputs()) inputs_.push_back(spec_of(v));
    for (const auto& v : onnx_->outputs()) outputs_.push_back(spec_of(v));
    image_input_ = exported_image_input(*onnx_, file);
    warm_up();
  } else if (kind == io::FileKind::safetensors) {
    own_.emplace(train::load_model_file(path));
    Shape in = {-1};
    in.insert(in.end(), own_->input_shape.begin(), own_->input_shape.end());
    inputs_ = {{"input", DType::f32, in}};
    outputs_ = {{"output", DType::f32, {-1, own_->classes}}};
    image_input_ = ImageInput{own_->input_shape, own_->mean, own_->std, own_->labels};
  } else {
    const std::string what = io::file_kind_description(kind);
    throw Error(file + ": " + (what.empty() ? "not" : what + ", not") +
                " an ONNX, cpudl (safetensors) or GGUF model");
  }
  worker_ = std::thread([this] { work(); });
}

// The session keeps one plan per input shape (its arena and its prepared weights), made on first
// use. Made under load, the five batch sizes the batcher pads to appeared one by one and resident
// memory grew for a minute (ResNet-18: 1.5 -> 2.3 GB between the first and last 10 s); made here,
// at start, the server's memory is what it will stay at before the first request is admitted.
void TensorModel::warm_up() {
  if (!batches()) return;
  for (const TensorSpec& s : inputs_)
    for (std::size_t d = 1; d < s.shape.size(); ++d)
      if (s.shape[d] < 0) return;  // other free dimensions: shapes unknown until requests come
  for (std::int64_t b = 1;; b *= 2) {
    const std::int64_t rows = std::min<std::int64_t>(b, options_.max_batch);
    std::vector<Tensor> zeros;
    for (const TensorSpec& s : inputs_) {
      Shape shape = s.shape;
      shape[0] = rows;
      zeros.push_back(Tensor::zeros(shape, s.dtype));
    }
    run(zeros, false);
    if (rows == options_.max_batch) break;
  }
}

TensorModel::~TensorModel() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

bool TensorModel::batches() const {
  for (const TensorSpec& s : inputs_)
    if (s.shape.empty() || s.shape[0] >= 0) return false;
  return options_.max_batch > 1;
}

void TensorModel::refuse_if_full() const {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<int>(queue_.size()) < options_.queue) return;
  }
  metrics_.add("cpudl_rejected_total", 1, {"queue_full"});
  throw RequestError(429, "model '" + name_ + "': " + std::to_string(options_.queue) +
                              " requests already wait (--queue); retry later");
}

int TensorModel::waiting() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(queue_.size());
}

std::vector<Tensor> TensorModel::run(const std::vector<Tensor>& inputs, bool timed) {
  const auto start = Clock::now();
  // The governor's count of the moment, between batches (never mid-run).
  const ThreadScope scope(options_.governor != nullptr ? options_.governor->threads() : options_.threads);
  std::vector<Tensor> outputs;
  if (onnx_) {
    outputs = onnx_->run(inputs);
  } else {
    NoGradGuard no_grad;
    outputs = {own_->model->forward(inputs[0])};
  }
  if (timed)
    metrics_.observe("cpudl_batch_seconds", std::chrono::duration<double>(Clock::now() - start).count(),
                     {name_});
  return outputs;
}

// The batcher's loop. While a batch runs, the next one is taken as soon as a full one waits: its
// rows are stacked meanwhile and it queues on the compute thread, which starts it the moment the
// running one ends, and the running one's answers go out while it runs. (Taken after the running
// one was answered, the compute threads stood idle for the 2 ms of answering, forming and
// stacking between ResNet-18 batches of 90.) A batch that is not full is formed, as before, once
// nothing runs: it may wait up to --batch-timeout-ms for requests on their way.
void TensorModel::work() {
  std::optional<Running> running;
  for (;;) {
    std::vector<std::shared_ptr<Request>> batch;
    std::int64_t rows = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (running) {
        wake_.wait(lock, [&] { return stopping_ || finished_ >= running->number || full_batch_waiting(); });
        if (stopping_ || !full_batch_waiting()) {
          lock.unlock();
          answer(*running);
          running.reset();
          continue;
        }
      }
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      batch.push_back(queue_.front());
      queue_.pop_front();
      rows = batch[0]->rows;
      if (batches()) {
        const auto until = Clock::now() + std::chrono::microseconds(
                                              static_cast<std::int64_t>(options_.batch_timeout_ms * 1000));
        for (;;) {
          for (auto it = queue_.begin(); it != queue_.end() && rows < options_.max_batch;) {
            if (rows + (*it)->rows <= options_.max_batch &&
                same_sample_shape((*it)->inputs, batch[0]->inputs)) {
              rows += (*it)->rows;
              batch.push_back(*it);
              it = queue_.erase(it);
            } else {
              ++it;
            }
          }
          if (rows >= options_.max_batch || stopping_ || arriving_ == 0 || Clock::now() >= until) break;
          wake_.wait_until(lock, until);
        }
      }
    }
    metrics_.observe("cpudl_batch_size", static_cast<double>(rows), {name_});
    Running next = start(std::move(batch), rows);
    if (running) answer(*running);  // while `next` runs
    running = std::move(next);
  }
}

bool TensorModel::full_batch_waiting() const {
  if (!batches() || queue_.empty()) return false;
  std::int64_t rows = 0;
  for (const auto& r : queue_)
    if (same_sample_shape(r->inputs, queue_.front()->inputs) && (rows += r->rows) >= options_.max_batch)
      return true;
  return false;
}

TensorModel::Running TensorModel::start(std::vector<std::shared_ptr<Request>> batch, std::int64_t rows) {
  Running r;
  r.batch = std::move(batch);
  std::vector<Tensor> inputs;
  try {
    if (r.batch.size() == 1 && (!batches() || rows >= options_.max_batch || (rows & (rows - 1)) == 0)) {
      inputs = r.batch[0]->inputs;
    } else {
      // The batch is padded with zero rows up to a power of two (at most --max-batch): the
      // session compiles and keeps one plan per input shape -- its arena and its transformed
      // weights, hundreds of MB for ResNet-18 -- so every batch size from 1 to 16 would keep 16
      // plans (measured: resident memory 0.3 -> 3.4 GB in a minute of load); buckets keep five.
      r.padded = 1;
      while (r.padded < rows) r.padded *= 2;
      r.padded = std::max(rows, std::min<std::int64_t>(r.padded, options_.max_batch));
      for (std::size_t i = 0; i < r.batch[0]->inputs.size(); ++i) {
        std::vector<Tensor> parts;
        for (const auto& q : r.batch) parts.push_back(q->inputs[i]);
        if (r.padded > rows) {
          Shape pad_shape = parts[0].shape();
          pad_shape[0] = r.padded - rows;
          parts.push_back(Tensor::zeros(pad_shape, parts[0].dtype()));
        }
        inputs.push_back(stack_rows(parts));
      }
    }
  } catch (...) {
    std::promise<std::vector<Tensor>> failed;
    failed.set_exception(std::current_exception());
    r.outputs = failed.get_future();
    return r;
  }
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    r.number = ++started_;
  }
  auto job = [this, inputs = std::move(inputs)] {
    // Counted done even when it throws: the batcher waits for it to answer.
    struct Done {
      TensorModel* m;
      ~Done() {
        {
          const std::lock_guard<std::mutex> lock(m->mutex_);
          ++m->finished_;
        }
        m->wake_.notify_all();
      }
    } done{this};
    return run(inputs);
  };
  if (options_.compute != nullptr) {
    r.outputs = options_.compute->submit(std::move(job));
  } else {
    std::packaged_task<std::vector<Tensor>()> task(std::move(job));
    r.outputs = task.get_future();
    task();
  }
  return r;
}

void TensorModel::answer(Running& r) {
  try {
    const std::vector<Tensor> outputs = r.outputs.get();
    if (r.padded == 0) {
      r.batch[0]->result.set_value(outputs);
      return;
    }
    std::int64_t first = 0;
    for (const auto& q : r.batch) {
      std::vector<Tensor> mine;
      for (const Tensor& o : outputs)
        mine.push_back(o.dim() > 0 && o.size(0) == r.padded ? take_rows(o, first, q->rows) : o);
      first += q->rows;
      q->result.set_value(std::move(mine));
    }
  } catch (...) {
    for (const auto& q : r.batch) {
      try {
        q->result.set_exception(std::current_exception());
      } catch (const std::future_error&) {  // already answered
      }
    }
  }
}

void TensorModel::Arrival::done() {
  if (!model_) return;
  {
    const std::lock_guard<std::mutex> lock(model_->mutex_);
    --model_->arriving_;
  }
  model_->wake_.notify_all();
  model_ = nullptr;
}

std::vector<Tensor> TensorModel::infer(std::vector<Tensor> inputs, Clock::time_point deadline,
                                       Arrival* arrival) {
  auto request = std::make_shared<Request>();
  request->rows = rows_of(inputs);
  request->inputs = std::move(inputs);
  std::future<std::vector<Tensor>> result = request->result.get_future();
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (arrival && arrival->model_ == this) {  // in the queue (or refused) as this lock is let go
      --arriving_;
      arrival->model_ = nullptr;
    }
    if (static_cast<int>(queue_.size()) >= options_.queue) {
      metrics_.add("cpudl_rejected_total", 1, {"queue_full"});
      throw RequestError(429, "model '" + name_ + "': " + std::to_string(options_.queue) +
                                  " requests already wait (--queue); retry later");
    }
    queue_.push_back(request);
  }
  wake_.notify_one();
  if (result.wait_until(deadline) == std::future_status::timeout) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = std::find(queue_.begin(), queue_.end(), request);
    if (it != queue_.end()) queue_.erase(it);  // not started: never runs
    metrics_.add("cpudl_rejected_total", 1, {"deadline"});
    throw RequestError(504,
                       "model '" + name_ + "': no answer within the request timeout (--request-timeout-s)");
  }
  try {
    return result.get();
  } catch (const RequestError&) {
    throw;
  } catch (const Error& e) {
    throw RequestError(400, e.what());
  }
}

std::vector<std::pair<int, float>> TensorModel::classify(const std::string& image, int top,
                                                         Clock::time_point deadline) {
  if (!image_input_)
    throw RequestError(400,
                       "model '" + name_ +
                           "' is an ONNX file that does not say how its images are normalised (cpudl export "
                           "writes it in metadata_props): send tensors to /v2/models/" +
                           name_ + "/infer");
  Arrival arrival(*this);
  Tensor x;
  try {
    x = train::prepare_image(image_input_->shape, image_input_->mean, image_input_->stdev,
                             data::decode_image(image, "the body"), "the body");
  } catch (const Error& e) {
    throw RequestError(400, e.what());
  }
  const std::vector<Tensor> out = infer({x.unsqueeze(0)}, deadline, &arrival);
  const Tensor probs = softmax(out[0], 1);
  std::vector<std::pair<int, float>> ranked;
  for (int k = 0; k < probs.size(1); ++k) ranked.emplace_back(k, probs.at({0, k}));
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  ranked.resize(static_cast<std::size_t>(std::min<int>(top, static_cast<int>(ranked.size()))));
  return ranked;
}

LanguageModel::LanguageModel(std::string name, const std::filesystem::path& path, const LlmOptions& options,
                             Metrics& metrics)
    : name_(std::move(name)),
      options_(options),
      metrics_(metrics),
      model_(llm::Model::load(path, {options.repack})) {
  const int parallel = std::max(1, options.parallel);
  llm::ContextOptions c;
  c.n_ctx = options.ctx;
  c.threads = options.threads > 0 ? options.threads : compute_threads();  // one pass at a time uses them all
  for (int i = 0; i < parallel; ++i) contexts_.push_back(std::make_unique<llm::Context>(model_, c));
  for (int i = parallel; i-- > 0;) free_.push_back(static_cast<std::size_t>(i));
  stepper_ = std::thread([this] { step(); });
}

LanguageModel::~LanguageModel() {
  {
    const std::lock_guard<std::mutex> lock(step_mutex_);
    stopping_ = true;
  }
  step_wake_.notify_all();
  stepper_.join();
}

LanguageModel::Slot::~Slot() {
  if (!owner_) return;
  int busy = 0;
  {
    const std::lock_guard<std::mutex> lock(owner_->mutex_);
    owner_->free_.push_back(index_);
    busy = static_cast<int>(owner_->contexts_.size() - owner_->free_.size());
  }
  --owner_->generating_;
  owner_->metrics_.set("cpudl_llm_slots_busy", busy, {owner_->name_});
  owner_->freed_.notify_one();
  {
    // The stepper may be waiting for this slot to join a pass: it no longer will.
    const std::lock_guard<std::mutex> lock(owner_->step_mutex_);
  }
  owner_->step_wake_.notify_all();
}

LanguageModel::Slot LanguageModel::acquire(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (free_.empty() && waiting_ >= options_.queue) {
    metrics_.add("cpudl_rejected_total", 1, {"queue_full"});
    throw RequestError(429, "model '" + name_ + "': every slot is busy and " +
                                std::to_string(options_.queue) +
                                " requests already wait (--parallel, --queue); retry later");
  }
  ++waiting_;
  const bool got = freed_.wait_until(lock, deadline, [&] { return !free_.empty(); });
  --waiting_;
  if (!got) {
    metrics_.add("cpudl_rejected_total", 1, {"deadline"});
    throw RequestError(
        504, "model '" + name_ + "': no slot freed within the request timeout (--request-timeout-s)");
  }
  const std::size_t index = free_.back();
  free_.pop_back();
  metrics_.set("cpudl_llm_slots_busy", static_cast<double>(contexts_.size() - free_.size()), {name_});
  contexts_[index]->reset();
  ++generating_;
  return Slot(*this, index);
}

void LanguageModel::evaluate(llm::Context& ctx, std::span<const std::int32_t> tokens, bool all_logits) {
  Evaluation e{&ctx, tokens, all_logits, false, nullptr};
  std::unique_lock<std::mutex> lock(step_mutex_);
  pending_.push_back(&e);
  step_wake_.notify_all();
  step_done_.wait(lock, [&] { return e.done; });
  if (e.error) std::rethrow_exception(e.error);
}

// The stepper's loop. A pass starts when every held slot has its tokens waiting, or kGather after
// the first arrived: the others are sampling their next token or writing it to their client,
// which takes well under a millisecond, so waiting for them costs less than the pass they would
// otherwise run alone. Each pass takes waiting evaluations in arrival order while their tokens
// fit one batch; a prompt that needs every position's logits, or more tokens than a batch, runs
// alone (Context::eval splits it).
void LanguageModel::step() {
  constexpr auto kGather = std::chrono::milliseconds(2);
  const auto batch = static_cast<std::size_t>(llm::ContextOptions{}.batch);
  std::unique_lock<std::mutex> lock(step_mutex_);
  for (;;) {
    step_wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping, nothing left
    step_wake_.wait_until(lock, Clock::now() + kGather, [&] {
      return stopping_ || static_cast<int>(pending_.size()) >= generating_.load();
    });
    std::vector<Evaluation*> round;
    std::size_t tokens = 0;
    for (auto it = pending_.begin(); it != pending_.end();) {
      Evaluation* e = *it;
      const bool alone = e->all_logits || e->tokens.size() > batch;
      if (!round.empty() && (alone || tokens + e->tokens.size() > batch)) {
        ++it;
        continue;
      }
      round.push_back(e);
      tokens += e->tokens.size();
      it = pending_.erase(it);
      if (alone) break;
    }
    lock.unlock();
    if (options_.governor != nullptr)  // the governor's count of the moment, between passes
      for (const auto& context : contexts_) context->set_threads(options_.governor->threads());
    auto pass = [&] {
      const auto start = Clock::now();
      run(round);
      metrics_.observe("cpudl_batch_seconds", std::chrono::duration<double>(Clock::now() - start).count(),
                       {name_});
    };
    if (options_.compute != nullptr)
      options_.compute->run(pass);
    else
      pass();
    metrics_.observe("cpudl_batch_size", static_cast<double>(round.size()), {name_});
    lock.lock();
    for (Evaluation* e : round) e->done = true;
    step_done_.notify_all();
  }
}

void LanguageModel::run(const std::vector<Evaluation*>& round) {
  auto one = [](Evaluation* e) {
    try {
      e->ctx->eval(e->tokens, e->all_logits);
    } catch (...) {
      e->error = std::current_exception();
    }
  };
  if (round.size() == 1) return one(round[0]);
  std::vector<llm::Context::SequenceTokens> sequences;
  for (Evaluation* e : round) sequences.push_back({e->ctx, e->tokens});
  try {
    llm::Context::eval_batch(sequences);
  } catch (const Error&) {
    // eval_batch checks every sequence before it runs any: one bad request (a context overflow)
    // must fail alone, so each runs by itself and keeps its own error.
    for (Evaluation* e : round) one(e);
  }
}

int LanguageModel::n_ctx() const { return contexts_.front()->n_ctx(); }

int LanguageModel::waiting() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return waiting_;
}

}  // namespace cpudl::serve
