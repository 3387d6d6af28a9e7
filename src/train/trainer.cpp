// The training loop, model files and checkpoints.
#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>

#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/io.h"
#include "cpudl/optim.h"
#include "io/metadata_lists.h"
#include "train/distributed.h"
#include "train/memory_guard.h"

namespace cpudl::train {

volatile std::sig_atomic_t g_stop_signal = 0;

namespace {

using Clock = std::chrono::steady_clock;

// The model a dataset needs: input channels / features and classes from the data.
nn::ModulePtr build_model(const std::string& name, const data::Dataset& d) {
  const Shape& s = d.images.shape();
  if (d.kind == "csv") {
    if (name != "mlp") throw UsageError("--model " + name + ": CSV data needs --model mlp");
    return nn::make_model("mlp", d.classes, s[1], true, /*mlp_inputs=*/s[1]);
  }
  if (name == "simplecnn" || name == "lenet5") {
    if (s[2] != 28 || s[3] != 28)
      throw Error("--model " + name + " takes 28x28 images; the data's images are " + std::to_string(s[2]) +
                  "x" + std::to_string(s[3]));
  }
  return nn::make_model(name, d.classes, s[1], /*cifar_stem=*/s[2] <= 64, s[1] * s[2] * s[3]);
}

std::unique_ptr<optim::Optimizer> build_optimizer(const TrainConfig& c, const std::vector<Tensor>& params) {
  if (c.optimizer == "adam" || c.optimizer == "adamw") {
    optim::AdamOptions o;
    o.lr = c.lr;
    o.decoupled_weight_decay = c.optimizer == "adamw";
    o.weight_decay = c.weight_decay >= 0 ? c.weight_decay : (o.decoupled_weight_decay ? 0.01f : 0.0f);
    return std::make_unique<optim::Adam>(params, o);
  }
  if (c.optimizer == "sgd") {
    optim::SgdOptions o;
    o.lr = c.lr;
    o.momentum = c.momentum;
    o.weight_decay = std::max(0.0f, c.weight_decay);
    return std::make_unique<optim::Sgd>(params, o);
  }
  throw UsageError("--optimizer " + c.optimizer + ": expected adam, adamw or sgd");
}

nn::NamedTensors prefixed(const std::string& prefix, const nn::NamedTensors& t) {
  nn::NamedTensors out;
  for (const auto& [n, v] : t) out.emplace_back(prefix + n, v);
  return out;
}

nn::NamedTensors with_prefix(const nn::NamedTensors& t, const std::string& prefix) {
  nn::NamedTensors out;
  for (const auto& [n, v] : t)
    if (n.rfind(prefix, 0) == 0) out.emplace_back(n.substr(prefix.size()), v);
  return out;
}

// Rows `rows` of a dataset (images and labels), in that order.
data::Dataset subset(const data::Dataset& d, const std::vector<std::int64_t>& rows) {
  data::Dataset s = d;
  Shape shape = d.images.shape();
  shape[0] = static_cast<std::int64_t>(rows.size());
  s.images = Tensor::empty(shape);
  s.labels = Tensor::empty({shape[0]}, DType::i64);
  const std::int64_t sample = d.images.numel() / std::max<std::int64_t>(d.images.size(0), 1);
  const Tensor images = d.images.contiguous(), labels = d.labels.contiguous();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::copy(images.data() + rows[i] * sample, images.data() + (rows[i] + 1) * sample,
              s.images.data() + static_cast<std::int64_t>(i) * sample);
    s.labels.data_as<std::int64_t>()[i] = labels.data_as<std::int64_t>()[rows[i]];
  }
  return s;
}

// The training and test splits: the directory's own, or with --val-split a seeded share of the
// training data held out (the same rows for the same seed, so a resumed run sees the same split).
std::pair<data::Dataset, data::Dataset> load_splits(const TrainConfig& c) {
  data::Dataset train = data::load_dataset(c.data, true);
  if (c.val_split > 0) {
    const std::int64_t n = train.images.size(0);
    const auto held = static_cast<std::int64_t>(std::ceil(c.val_split * static_cast<double>(n)));
    if (held < 1 || held >= n)
      throw UsageError("--val-split " + std::to_string(c.val_split) + " of " + std::to_string(n) +
                       " samples leaves no training or no validation sample");
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(c.seed ^ 0x5eedf00dULL);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::int64_t> kept(order.begin(), order.end() - held), val(order.end() - held, order.end());
    std::sort(kept.begin(), kept.end());
    std::sort(val.begin(), val.end());
    return {subset(train, kept), subset(train, val)};
  }
  if (!data::has_test_split(c.data))
    throw UsageError(
        c.data.string() +
        ": an image folder without test/ or val/: give --val-split 0.1 to hold out a tenth of it");
  const Shape sample(train.images.shape().begin() + 1, train.images.shape().end());
  data::Dataset test = data::load_dataset(c.data, false, sample);
  return {std::move(train), std::move(test)};
}

void check_writable(const std::filesystem::path& path, const char* flag) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UsageError(std::string(flag) + " " + path.string() + " is a directory: give the file to write");
  const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(dir) || ::access(dir.c_str(), W_OK) != 0)
    throw Error(std::string(flag) + " " + path.string() + ": cannot write into " + dir.string());
}

}  // namespace

Evaluation evaluate(nn::Module& model, const data::Dataset& d, std::int64_t classes, std::int64_t batch,
                    std::int64_t keep_worst,
                    const std::function<void(std::int64_t, std::int64_t)>& on_batch) {
  NoGradGuard no_grad;
  model.eval();
  Evaluation e;
  e.confusion.assign(static_cast<std::size_t>(classes),
                     std::vector<std::int64_t>(static_cast<std::size_t>(classes), 0));
  const std::int64_t n = d.images.size(0);
  std::int64_t correct = 0;
  double loss = 0;
  for (std::int64_t i = 0; i < n; i += batch) {
    const Tensor x = d.images.slice(0, i, i + batch), y = d.labels.slice(0, i, i + batch).contiguous();
    const Tensor logits = model.forward(x);
    if (logits.size(1) != classes)
      throw Error("the model has " + std::to_string(logits.size(1)) + " outputs, the data " +
                  std::to_string(classes) + " classes");
    loss += cross_entropy(logits, y).item() * static_cast<double>(x.size(0));
    const Tensor pred = argmax(logits, 1);
    const Tensor z = keep_worst > 0 ? logits.contiguous() : Tensor();
    for (std::int64_t j = 0; j < x.size(0); ++j) {
      const std::int64_t t = y.data_as<std::int64_t>()[j], p = pred.data_as<std::int64_t>()[j];
      correct += t == p;
      ++e.confusion[static_cast<std::size_t>(t)][static_cast<std::size_t>(p)];
      if (keep_worst == 0 || t == p) continue;
      // The sample's cross-entropy and the predicted class's probability, from its logits.
      const float* row = z.data() + j * classes;
      const double top = row[p];
      double sum = 0;
      for (std::int64_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(row[k]) - top);
      const double log_sum = top + std::log(sum);
      e.worst.push_back({i + j, t, p, std::exp(top - log_sum), log_sum - row[t]});
      // Keep the list short: past twice its size, drop all but the worst.
      if (static_cast<std::int64_t>(e.worst.size()) > 2 * keep_worst) {
        std::nth_element(e.worst.begin(), e.worst.begin() + keep_worst, e.worst.end(),
                         [](const Mistake& a, const Mistake& b) { return a.loss > b.loss; });
        e.worst.resize(static_cast<std::size_t>(keep_worst));
      }
    }
    if (on_batch) on_batch(i + x.size(0), n);
  }
  std::sort(e.worst.begin(), e.worst.end(),
            [](const Mistake& a, const Mistake& b) { return a.loss > b.loss; });
  if (static_cast<std::int64_t>(e.worst.size()) > keep_worst)
    e.worst.resize(static_cast<std::size_t>(keep_worst));
  e.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  e.loss = loss / static_cast<double>(n);
  return e;
}

double StepProgress::remaining_seconds() const {
  if (step <= 0) return 0;
  const double left =
      static_cast<double>(steps - step) + static_cast<double>(epochs - epoch) * static_cast<double>(steps);
  return seconds / static_cast<double>(step) * left;
}

std::vector<std::string> class_labels(const std::map<std::string, std::string>& metadata,
                                      std::int64_t classes, const std::string& what) {
  std::vector<std::string> labels;
  if (const auto names = metadata.find("class_names"); names != metadata.end()) {
    try {
      labels = nlohmann::json::parse(names->second).get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception&) {
      throw Error(what + ": metadata class_names is not a JSON array of strings");
    }
    if (static_cast<std::int64_t>(labels.size()) != classes)
      throw Error(what + ": metadata class_names has " + std::to_string(labels.size()) + " names for " +
                  std::to_string(classes) + " classes");
  }
  for (std::int64_t k = static_cast<std::int64_t>(labels.size()); k < classes; ++k)
    labels.push_back(std::to_string(k));
  return labels;
}

ModelFile load_model_file(const std::filesystem::path& path) {
  const io::SafetensorsFile f = io::load_safetensors(path);
  ModelFile m;
  m.metadata = f.metadata;
  auto get = [&](const char* key) {
    const auto it = f.metadata.find(key);
    if (it == f.metadata.end())
      throw Error(path.string() + ": metadata has no '" + key +
                  "' (not a cpudl model file; train one with cpudl train)");
    return it->second;
  };
  const std::string arch = get("architecture");
  for (float v : io::parse_floats(get("input_shape"), path.string() + ": metadata input_shape"))
    m.input_shape.push_back(static_cast<std::int64_t>(v));
  m.classes = static_cast<std::int64_t>(std::stoll(get("classes")));
  m.labels = class_labels(f.metadata, m.classes, path.string());
  m.mean = io::parse_floats(get("normalization_mean"), path.string() + ": metadata normalization_mean");
  m.std = io::parse_floats(get("normalization_std"), path.string() + ": metadata normalization_std");
  if (m.input_shape.empty()) throw Error(path.string() + ": empty input_shape");
  const std::int64_t features = shape_numel(m.input_shape);
  const bool cifar_stem = m.input_shape.size() == 3 && m.input_shape[1] <= 64;
  m.model = nn::make_model(arch, m.classes, m.input_shape[0], cifar_stem, features);
  // A checkpoint holds the model too (its tensors under "model.", beside the optimiser's state):
  // eval, predict and serve take it as they take the model file the run ends with.
  const auto format = f.metadata.find("format");
  const nn::NamedTensors weights = format != f.metadata.end() && format->second == "cpudl-checkpoint-1"
                                       ? with_prefix(f.tensors, "model.")
                                       : f.tensors;
  try {
    m.model->load_state_dict(weights);
  } catch (const Error& e) {
    throw Error(path.string() + ": " + e.what());
  }
  m.model->eval();
  return m;
}

Tensor prepare_image(const Shape& input_shape, const std::vector<float>& mean,
                     const std::vector<float>& stdev, Tensor img, const std::string& what) {
  if (img.dim() == 3 && input_shape.size() == 3 && (img.size(0) == 1 || img.size(0) == 3) &&
      (input_shape[0] == 1 || input_shape[0] == 3))
    img = data::convert_channels(img, input_shape[0]);  // colour into a grey model: luminance; and back
  // Another size is resized to the model's (stretched, as torchvision's Resize((h, w)) does):
  // antialiased bilinear, which keeps a large photo of a digit legible at 28 x 28.
  if (img.dim() == 3 && input_shape.size() == 3 && img.size(0) == input_shape[0] &&
      (img.size(1) != input_shape[1] || img.size(2) != input_shape[2]))
    img = data::resize_image(img, input_shape[1], input_shape[2]);
  if (img.shape() != input_shape)
    throw Error(what + ": image of " + shape_text(img.shape()) +
                " (channels, height, width), the model takes " + shape_text(input_shape));
  Tensor x = Tensor::empty(img.shape());
  const std::int64_t plane = img.size(1) * img.size(2);
  for (std::int64_t c = 0; c < img.size(0); ++c)
    for (std::int64_t i = 0; i < plane; ++i)
      x.data()[c * plane + i] =
          (img.data()[c * plane + i] - mean[static_cast<std::size_t>(c) % mean.size()]) /
          stdev[static_cast<std::size_t>(c) % stdev.size()];
  return x;
}

int run(const TrainConfig& config_in, const Callbacks& callbacks, Summary& summary) {
  TrainConfig c = config_in;
  if (c.epochs < 1) throw UsageError("--epochs must be at least 1");
  if (c.batch < 1) throw UsageError("--batch must be at least 1");
  if (!(c.lr > 0)) throw UsageError("--lr must be positive");
  if (c.out.empty()) throw UsageError("--out FILE is required");
  if (c.lr_schedule != "constant" && c.lr_schedule != "step" && c.lr_schedule != "cosine" &&
      c.lr_schedule != "onecycle")
    throw UsageError("--lr-schedule " + c.lr_schedule + ": expected constant, step, cosine or onecycle");
  if (c.lr_schedule == "onecycle" && c.warmup > 0)
    throw UsageError("--warmup with --lr-schedule onecycle: onecycle warms up by itself (its first 30%)");
  if (c.accumulate < 1 || c.batch % c.accumulate != 0)
    throw UsageError("--accumulate " + std::to_string(c.accumulate) + " does not divide --batch " +
                     std::to_string(c.batch) + " into equal micro-batches");
  if (c.precision != "fp32" && c.precision != "bf16") throw UsageError("--precision must be fp32 or bf16");
  if (!(c.bucket_mb >= 0)) throw UsageError("--bucket-mb must be 0 or more");
  const std::size_t max_memory = c.max_memory.empty() ? 0 : parse_memory_size(c.max_memory, "--max-memory");
  const auto bucket_bytes = static_cast<std::int64_t>(c.bucket_mb * 1024 * 1024);
  // bf16: convolutions and linear layers forward and backward in bf16 as torch.autocast, weights
  // and optimiser state in f32 (no loss scaling: bf16 has f32's exponent range).
  std::optional<Bf16Autocast> autocast;
  if (c.precision == "bf16") {
    try {
      autocast.emplace();
    } catch (const Error& e) {
      throw UsageError(std::string("--precision ") + e.what());
    }
  }
  const std::unique_ptr<Communicator> comm = Communicator::open(c.distributed, c.rank_timeout);
  const bool leader = !comm || comm->leader();
  // Only rank 0 reports and writes files: the other ranks get no callbacks.
  const Callbacks cb = leader ? callbacks : Callbacks{};
  summary.ranks = comm ? comm->size() : 1;
  summary.leader = leader;
  if (comm && c.batch < comm->size())
    throw UsageError("--batch " + std::to_string(c.batch) + " is smaller than the " +
                     std::to_string(comm->size()) +
                     " ranks: each rank needs at least one sample of every batch");
  if (leader) check_writable(c.out, "--out");
  if (c.checkpoint.empty()) c.checkpoint = c.out.string() + ".ckpt";
  if (leader) check_writable(c.checkpoint, "--checkpoint");
  // The checkpoint may be the one resumed from (it is rewritten as the run goes on); the model
  // file may not replace what the run starts from.
  io::require_output_is_not_an_input(c.out, {c.init, c.resume}, "--out");
  io::require_output_is_not_an_input(c.checkpoint, {c.init}, "--checkpoint");

  // Resume: the checkpoint's settings win; an explicit conflicting --model is an error.
  io::SafetensorsFile ckpt;
  int start_epoch = 1;
  std::int64_t start_step = 0, global_step = 0;
  if (!c.resume.empty()) {
    ckpt = io::load_safetensors(c.resume);
    ckpt.metadata.emplace("accumulate", "1");  // checkpoints from before these settings
    ckpt.metadata.emplace("precision", "fp32");
    ckpt.metadata.emplace("val_split", std::to_string(0.0f));
    ckpt.metadata.emplace("lr_schedule", "constant");
    ckpt.metadata.emplace("warmup", "0");
    ckpt.metadata.emplace("lr_step_size", "0");
    ckpt.metadata.emplace("lr_gamma", std::to_string(0.1f));
    const auto& md = ckpt.metadata;
    auto need = [&](const char* key) {
      const auto it = md.find(key);
      if (it == md.end())
        throw Error(c.resume.string() + ": not a cpudl checkpoint (metadata has no '" + key + "')");
      return it->second;
    };
    if (need("format") != "cpudl-checkpoint-1")
      throw Error(c.resume.string() + ": unknown checkpoint format " + need("format"));
    // The checkpoint carries the run's settings: a flag given again must agree with it. Values are
    // compared as the checkpoint wrote them (floats through std::to_string).
    const struct {
      const char* flag;
      const char* key;
      std::string value;
    } settings[] = {{"--model", "architecture", c.model},
                    {"--optimizer", "optimizer", c.optimizer},
                    {"--lr", "lr", std::to_string(c.lr)},
                    {"--momentum", "momentum", std::to_string(c.momentum)},
                    {"--weight-decay", "weight_decay", std::to_string(c.weight_decay)},
                    {"--batch", "batch", std::to_string(c.batch)},
                    {"--seed", "seed", std::to_string(c.seed)},
                    {"--no-shuffle", "shuffle", c.shuffle ? "1" : "0"},
                    {"--accumulate", "accumulate", std::to_string(c.accumulate)},
                    {"--precision", "precision", c.precision},
                    {"--val-split", "val_split", std::to_string(c.val_split)},
                    {"--lr-schedule", "lr_schedule", c.lr_schedule},
                    {"--warmup", "warmup", std::to_string(c.warmup)},
                    {"--lr-step-size", "lr_step_size", std::to_string(c.lr_step_size)},
                    {"--lr-gamma", "lr_gamma", std::to_string(c.lr_gamma)}};
    for (const auto& s : settings)
      if (c.given.count(s.flag) && need(s.key) != s.value)
        throw UsageError(std::string(s.flag) + " " + s.value + " differs from the checkpoint's " +
                         need(s.key) + " (" + c.resume.string() +
                         "): a resumed run keeps its settings; drop the flag");
    c.model = need("architecture");
    c.optimizer = need("optimizer");
    c.lr = std::stof(need("lr"));
    c.momentum = std::stof(need("momentum"));
    c.weight_decay = std::stof(need("weight_decay"));
    c.batch = std::stoll(need("batch"));
    c.seed = std::stoull(need("seed"));
    c.shuffle = need("shuffle") == "1";
    c.accumulate = std::stoll(need("accumulate"));
    c.precision = need("precision");
    c.val_split = std::stof(need("val_split"));
    c.lr_schedule = need("lr_schedule");
    c.warmup = std::stoll(need("warmup"));
    c.lr_step_size = std::stoll(need("lr_step_size"));
    c.lr_gamma = std::stof(need("lr_gamma"));
    start_epoch = std::stoi(need("epoch"));
    start_step = std::stoll(need("step_in_epoch"));
    global_step = std::stoll(need("global_step"));
    // --resume alone runs to the epochs the run was started with (checkpoints written before
    // they were recorded keep the default); --epochs sets a new end.
    if (!c.given.count("--epochs") && md.count("epochs")) c.epochs = std::stoi(md.at("epochs"));
    if (start_epoch > c.epochs)
      throw UsageError(c.resume.string() + " finished epoch " + std::to_string(start_epoch - 1) +
                       " and --epochs is " + std::to_string(c.epochs) +
                       ": nothing is left to train; give --epochs " + std::to_string(start_epoch) +
                       " or more to continue");
  }

  const auto [train_set, test_set] = load_splits(c);
  if (test_set.images.dim() != train_set.images.dim() ||
      test_set.images.numel() / std::max<std::int64_t>(1, test_set.images.size(0)) !=
          train_set.images.numel() / train_set.images.size(0))
    throw Error(c.data.string() + ": test samples are shaped " + shape_text(test_set.images.shape()) +
                ", train samples " + shape_text(train_set.images.shape()));
  manual_seed(c.seed);
  nn::ModulePtr model = build_model(c.model, train_set);
  if (c.checkpoint_activations && !model->checkpoint_activations(true))
    throw UsageError("--checkpoint-activations: " + c.model +
                     " has no layer groups to recompute (resnet18 has: its stem and residual blocks)");
  if (!c.init.empty()) {
    const io::SafetensorsFile init = io::load_safetensors(c.init);
    try {
      model->load_state_dict(init.tensors);
    } catch (const Error& e) {
      throw Error(c.init.string() + ": " + e.what());
    }
    if (cb.info) cb.info("initial weights from " + c.init.string());
  }
  std::unique_ptr<optim::Optimizer> opt = build_optimizer(c, model->parameters());
  if (!c.resume.empty()) {
    try {
      model->load_state_dict(with_prefix(ckpt.tensors, "model."));
      opt->load_state_dict(with_prefix(ckpt.tensors, "optimizer."));
    } catch (const Error& e) {
      throw Error(c.resume.string() + ": " + e.what());
    }
    for (const auto& [n, t] : ckpt.tensors)
      if (n == "rng") default_generator().seed(static_cast<std::uint64_t>(t.data_as<std::int64_t>()[0]));
    if (cb.info)
      cb.info("resumed from " + c.resume.string() + " at epoch " + std::to_string(start_epoch) + ", step " +
              std::to_string(start_step));
  }

  const std::vector<Tensor> params = model->parameters();
  if (comm) {
    // Every rank runs the same command (one line names a differing flag), and starts from rank 0's
    // weights, optimiser state and random state, whatever --init or --resume each one read.
    std::uint64_t labels_hash = hash_tensors({train_set.labels.contiguous()});
    comm->require_same_settings(
        {{"--model", c.model},
         {"--optimizer", c.optimizer},
         {"--lr", std::to_string(c.lr)},
         {"--momentum", std::to_string(c.momentum)},
         {"--weight-decay", std::to_string(c.weight_decay)},
         {"--batch", std::to_string(c.batch)},
         {"--seed", std::to_string(c.seed)},
         {"--no-shuffle", c.shuffle ? "1" : "0"},
         {"--epochs", std::to_string(c.epochs)},
         {"--accumulate", std::to_string(c.accumulate)},
         {"--precision", c.precision},
         {"--bucket-mb", std::to_string(c.bucket_mb)},
         {"--rank-timeout", std::to_string(c.rank_timeout)},
         {"--max-memory", c.max_memory},
         {"--data", std::to_string(train_set.labels.numel()) + ":" + std::to_string(labels_hash)},
         {"--resume", std::to_string(start_epoch) + ":" + std::to_string(start_step)}});
    std::vector<Tensor> state;
    for (const auto& [name, t] : model->state_dict()) state.push_back(t);
    for (const auto& [name, t] : opt->state_dict()) state.push_back(t);
    comm->broadcast(state);
    std::uint64_t rng = default_generator().state();
    comm->broadcast(rng);
    default_generator().seed(rng);
    if (cb.info)
      cb.info("data-parallel on " + std::to_string(comm->size()) +
              " ranks: each takes a shard of every batch of " + std::to_string(c.batch));
  }

  // --max-memory: the micro-batch and checkpointing that fit, from two probe steps; then every
  // allocation is held to it (or to the cgroup's limit), so that the run ends with a message
  // rather than the kernel's OOM kill.
  std::int64_t eval_batch = 1000;
  if (max_memory > 0) {
    const std::int64_t rows = (c.batch + (comm ? comm->size() : 1) - 1) / (comm ? comm->size() : 1);
    const std::int64_t probe_rows = std::min<std::int64_t>({4, rows, train_set.images.size(0)});
    const MemoryPlan plan = plan_memory({*model, train_set.images.slice(0, 0, probe_rows),
                                         train_set.labels.slice(0, 0, probe_rows), c.batch, rows,
                                         c.accumulate, max_memory, c.checkpoint_activations});
    std::uint64_t choice =
        static_cast<std::uint64_t>(plan.accumulate) * 2 + (plan.checkpoint_activations ? 1 : 0);
    if (comm) comm->broadcast(choice);  // rank 0's plan, should the ranks' estimates differ
    c.accumulate = static_cast<std::int64_t>(choice / 2);
    c.checkpoint_activations = (choice & 1) != 0;
    // Evaluation (no graph) in batches of twice the micro-batch: less than a training micro-batch
    // holds with its saved activations and gradients.
    eval_batch = std::min<std::int64_t>(eval_batch, 2 * ((rows + c.accumulate - 1) / c.accumulate));
    if (c.checkpoint_activations) model->checkpoint_activations(true);
    if (cb.info)
      cb.info("--max-memory " + byte_size_text(max_memory) + ": micro-batches of " +
              std::to_string((rows + c.accumulate - 1) / c.accumulate) + " (--accumulate " +
              std::to_string(c.accumulate) + ")" +
              (c.checkpoint_activations ? " with activation checkpointing" : "") + ", estimated peak " +
              byte_size_text(plan.estimated_peak) + " of tensors (" + byte_size_text(plan.fixed_bytes) +
              " fixed, " + byte_size_text(plan.per_sample_bytes) + " per sample)");
  }
  const std::size_t tensor_limit = max_memory > 0 ? max_memory : cgroup_tensor_budget();
  const TensorMemoryLimit limit_scope(tensor_limit);

  const bool images = train_set.images.dim() == 4;
  data::LoaderOptions lo;
  lo.batch = c.batch;
  lo.shuffle = c.shuffle;
  lo.seed = c.seed;
  lo.workers = c.workers;
  if (train_set.kind == "cifar10")
    lo.crop_padding = 4, lo.horizontal_flip = true;  // standard CIFAR augmentation
  data::DataLoader loader(train_set, lo);
  const std::int64_t steps_per_epoch = loader.batches_per_epoch();
  optim::LrSchedule schedule;
  schedule.kind = c.lr_schedule;
  schedule.base_lr = c.lr;
  schedule.steps_per_epoch = steps_per_epoch;
  schedule.total_steps = steps_per_epoch * c.epochs;
  schedule.warmup_steps = c.warmup;
  schedule.step_size_epochs = c.lr_step_size > 0 ? c.lr_step_size : std::max(1, c.epochs / 3);
  schedule.gamma = c.lr_gamma;

  std::map<std::string, std::string> model_metadata = {
      {"architecture", c.model},
      {"classes", std::to_string(train_set.classes)},
      {"dataset", train_set.kind},
      {"normalization_mean", io::join_floats(train_set.mean)},
      {"normalization_std", io::join_floats(train_set.std)},
  };
  if (!train_set.class_names.empty())
    model_metadata["class_names"] = nlohmann::json(train_set.class_names).dump();
  {
    Shape s(train_set.images.shape().begin() + 1, train_set.images.shape().end());
    std::vector<float> f(s.begin(), s.end());
    model_metadata["input_shape"] = io::join_floats(f);
  }
  // The training images' mean brightness in [0, 1] (before normalisation): predict warns when an
  // image's polarity is the opposite (a digit drawn dark on white for a model of MNIST's white on
  // black).
  if (train_set.images.dim() == 4 && train_set.images.size(1) == 1 && !train_set.mean.empty()) {
    double sum = 0;
    const float* p = train_set.images.data();
    for (std::int64_t i = 0; i < train_set.images.numel(); ++i) sum += p[i];
    const double mean = sum / static_cast<double>(std::max<std::int64_t>(train_set.images.numel(), 1));
    model_metadata["pixel_mean"] = std::to_string(mean * train_set.std[0] + train_set.mean[0]);
  }
  (void)images;

  bool checkpoint_announced = false;
  auto write_checkpoint = [&](int epoch, std::int64_t step_in_epoch) {
    nn::NamedTensors tensors = prefixed("model.", model->state_dict());
    const nn::NamedTensors opt_state = prefixed("optimizer.", opt->state_dict());
    tensors.insert(tensors.end(), opt_state.begin(), opt_state.end());
    const auto rng = static_cast<std::int64_t>(default_generator().state());
    tensors.emplace_back("rng", Tensor::from_buffer(&rng, {}, DType::i64));
    std::map<std::string, std::string> md = model_metadata;
    md["format"] = "cpudl-checkpoint-1";
    md["optimizer"] = c.optimizer;
    md["lr"] = std::to_string(c.lr);
    md["momentum"] = std::to_string(c.momentum);
    md["weight_decay"] = std::to_string(c.weight_decay);
    md["batch"] = std::to_string(c.batch);
    md["seed"] = std::to_string(c.seed);
    md["shuffle"] = c.shuffle ? "1" : "0";
    md["accumulate"] = std::to_string(c.accumulate);
    md["precision"] = c.precision;
    md["val_split"] = std::to_string(c.val_split);
    md["lr_schedule"] = c.lr_schedule;
    md["warmup"] = std::to_string(c.warmup);
    md["lr_step_size"] = std::to_string(c.lr_step_size);
    md["lr_gamma"] = std::to_string(c.lr_gamma);
    md["epoch"] = std::to_string(epoch);
    md["epochs"] = std::to_string(c.epochs);
    md["step_in_epoch"] = std::to_string(step_in_epoch);
    md["global_step"] = std::to_string(global_step);
    io::save_safetensors(c.checkpoint, tensors, md);
    if (!checkpoint_announced && cb.info) {  // once: where it is and what it costs on disk
      checkpoint_announced = true;
      std::error_code ec;
      const auto bytes = std::filesystem::file_size(c.checkpoint, ec);
      char size[32];
      std::snprintf(size, sizeof size, "%.1f MB", ec ? 0.0 : static_cast<double>(bytes) / 1e6);
      cb.info("checkpoint " + c.checkpoint.string() + " (" + size +
              (c.keep_checkpoint ? ", kept" : ", removed") + " when the run ends well" +
              (c.keep_checkpoint ? ")" : "; --keep-checkpoint keeps it)"));
    }
  };

  summary.parameters = model->parameter_count();
  summary.model = c.model;
  double total_seconds = 0, total_images = 0;
  for (int epoch = start_epoch; epoch <= c.epochs; ++epoch) {
    const std::int64_t first_step = epoch == start_epoch ? start_step : 0;
    loader.start_epoch(epoch, first_step);
    model->train();
    const auto start = Clock::now();
    double loss_sum = 0, images_seen = 0, communication_wait = 0;
    Tensor x, y;
    for (std::int64_t step = first_step; loader.next(x, y); ++step) {
      if (c.governor != nullptr && c.governor->paused()) {
        // Too hot to go on: the checkpoint first (a machine that shuts down loses nothing), then wait.
        if (leader) write_checkpoint(epoch, step);
        if (cb.info)
          cb.info("paused at a critical temperature: checkpoint " + c.checkpoint.string() +
                  " written; waiting for the CPU to cool");
        c.governor->wait_while_paused();
        if (cb.info) cb.info("resumed");
      }
      // Each step runs on the governor's count of the moment (never changed mid-step).
      const GovernedScope threads(c.governor);
      opt->zero_grad();
      // The rows this process trains on (the batch, or under MPI this rank's shard of it), in
      // --accumulate micro-batches. Each micro-batch's mean loss weighs by its share of the global
      // batch, so that the gradients summed over micro-batches and ranks are those of the batch's
      // mean loss (and so is the loss summed over the ranks).
      const std::int64_t n = x.size(0);
      const std::int64_t begin = comm ? n * comm->rank() / comm->size() : 0;
      const std::int64_t end = comm ? n * (comm->rank() + 1) / comm->size() : n;
      const std::int64_t rows = end - begin;
      const std::int64_t parts = std::clamp<std::int64_t>(rows, 1, c.accumulate);
      double l = 0;
      try {
        for (std::int64_t k = 0; k < parts; ++k) {
          const std::int64_t a = begin + rows * k / parts, b = begin + rows * (k + 1) / parts;
          // Under MPI, the gradients' sums over the ranks start as the last backward completes them.
          if (comm && k == parts - 1) comm->begin_gradient_sum(params, bucket_bytes, c.overlap_allreduce);
          if (b == a) continue;
          const bool whole = a == 0 && b == n;
          Tensor loss =
              cross_entropy(model->forward(whole ? x : x.slice(0, a, b)), whole ? y : y.slice(0, a, b));
          if (!whole) loss = mul(loss, static_cast<float>(b - a) / static_cast<float>(n));
          loss.backward();
          l += loss.item();
        }
      } catch (const MemoryLimitError& e) {
        const std::string k2 = std::to_string(std::min<std::int64_t>(c.accumulate * 2, c.batch));
        throw Error(
            std::string(max_memory > 0 ? "--max-memory" : "the cgroup's memory limit") + ": at epoch " +
            std::to_string(epoch) + ", step " + std::to_string(step + 1) + ", " + e.what() +
            "; --accumulate " + k2 + " or --max-memory " +
            byte_size_text(static_cast<std::size_t>(static_cast<double>(e.needed) * 1.2)) + " would fit; " +
            (std::filesystem::exists(c.checkpoint) ? "the checkpoint " + c.checkpoint.string() + " is intact"
                                                   : std::string("no checkpoint was written yet")));
      }
      bool stop = g_stop_signal != 0;
      if (comm) {
        communication_wait += comm->finish_gradient_sum();
        // The batch's loss, and whether any rank was asked to stop: all ranks stop at the same step.
        std::vector<double> shared{l, stop ? 1.0 : 0.0};
        comm->sum(shared);
        l = shared[0];
        stop = shared[1] > 0;
      }
      const float lr = optim::scheduled_lr(schedule, global_step);
      opt->set_lr(lr);
      opt->step();
      ++global_step;
      if (comm && global_step % std::max<std::int64_t>(c.weight_check_every, 1) == 0)
        comm->require_same_weights(params, global_step);
      if (!std::isfinite(l))
        throw Error("the loss became " + std::to_string(l) + " at epoch " + std::to_string(epoch) +
                    ", step " + std::to_string(step + 1) + ": lower --lr");
      loss_sum += l * static_cast<double>(x.size(0));
      images_seen += static_cast<double>(x.size(0));
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (cb.step)
        cb.step({epoch, c.epochs, step + 1, steps_per_epoch, static_cast<float>(l),
                 images_seen / std::max(seconds, 1e-9), seconds, x.size(0), compute_threads(), lr,
                 global_step});
      if (c.val_every > 0 && global_step % c.val_every == 0 && step + 1 < steps_per_epoch) {
        // Between epochs' ends (the end of one evaluates anyway); rank 0's, like those.
        if (leader) {
          const Evaluation ev = evaluate(*model, test_set, train_set.classes, eval_batch);
          if (cb.validation) cb.validation({epoch, global_step, ev.loss, ev.accuracy});
        }
        model->train();
      }
      if (c.stop_after >= 0 && global_step == c.stop_after) std::raise(SIGTERM);
      if (g_stop_signal) stop = true;
      if (comm && stop && !g_stop_signal) g_stop_signal = SIGTERM;  // another rank's signal
      if (stop) {
        const int signal = g_stop_signal;
        if (leader) write_checkpoint(epoch, step + 1);
        if (cb.info)
          cb.info("stopped by signal " + std::to_string(signal) + ": checkpoint " + c.checkpoint.string() +
                  " (resume with --resume); " + c.out.string() + " not written");
        return 128 + signal;
      }
      if (leader && c.checkpoint_every > 0 && global_step % c.checkpoint_every == 0)
        write_checkpoint(epoch, step + 1);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    total_seconds += seconds;
    total_images += images_seen;
    if (comm) comm->require_same_weights(params, global_step);
    // Evaluation and checkpoints are rank 0's: the others wait at the epoch barrier (which no
    // watchdog guards: evaluation takes as long as the test set is large).
    const GovernedScope evaluation_threads(c.governor);
    const Evaluation ev = leader ? evaluate(*model, test_set, train_set.classes, eval_batch) : Evaluation{};
    if (leader) write_checkpoint(epoch + 1, 0);
    if (comm) comm->epoch_barrier();
    if (cb.epoch)
      cb.epoch({epoch, loss_sum / std::max(images_seen, 1.0), ev.accuracy, ev.loss, seconds,
                images_seen / std::max(seconds, 1e-9), communication_wait, ev.confusion});
    summary.test_accuracy = ev.accuracy;
    ++summary.epochs_run;
  }
  summary.images_per_second = total_images / std::max(total_seconds, 1e-9);
  summary.seconds_per_epoch = total_seconds / std::max(summary.epochs_run, 1);
  summary.peak_memory_bytes = peak_resident_bytes();
  if (leader) {
    io::save_safetensors(c.out, model->state_dict(), model_metadata);
    // The model file is complete: the checkpoint (as large as the model and the optimiser's
    // state, 3x the model with Adam) has done its job.
    std::error_code ec;
    if (c.keep_checkpoint)
      summary.checkpoint_kept = c.checkpoint;
    else
      std::filesystem::remove(c.checkpoint, ec);
  }
  return 0;
}

}  // namespace cpudl::train
