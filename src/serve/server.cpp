// The HTTP server of `cpudl serve` (server.h): routes, admission, metrics, signals and drain.
#include "serve/server.h"
#include "io/file_kind.h"

#include <httplib.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "llm/chat/chat_template.h"
#include "llm/generation/generation.h"
#include "runtime/block_cache.h"
#include "runtime/compute_thread.h"
#include "runtime/memory_policy.h"
#include "serve/http_connection.h"
#include "serve/metrics.h"
#include "serve/models.h"
#include "serve/page.h"
#include "serve/reuse_pool.h"
#include "serve/tensor_json.h"

namespace cpudl::serve {

namespace {

using nlohmann::json;

// Per request, on the thread that serves it: what the access metrics are labelled with.
struct RequestLabels {
  Clock::time_point start;
  std::string model, endpoint;
  bool routed = false;  // set by the pre-routing handler; httplib answers some (413) before it
};
thread_local RequestLabels t_labels;

// The endpoint label of a path: a fixed set, so that a client cannot grow the metric's series.
std::string endpoint_of(const std::string& path) {
  if (path.rfind("/v2/health", 0) == 0) return "health";
  if (path.size() > 6 && path.compare(path.size() - 6, 6, "/infer") == 0) return "infer";
  if (path.size() > 9 && path.compare(path.size() - 9, 9, "/classify") == 0) return "classify";
  if (path.rfind("/v2/models/", 0) == 0 || path == "/v2" || path == "/v1/models") return "metadata";
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/chat/completions") return "chat_completions";
  if (path == "/tokenize") return "tokenize";
  if (path == "/metrics") return "metrics";
  if (path == "/") return "page";
  return "other";
}

bool openai_style(const std::string& path) { return path.rfind("/v1/", 0) == 0 || path == "/tokenize"; }

void send_error(const httplib::Request& req, httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  json body;
  if (openai_style(req.path)) {
    const char* type = status == 401   ? "authentication_error"
                       : status == 404 ? "not_found_error"
                       : status == 429 ? "rate_limit_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    body = {{"error", {{"message", message}, {"type", type}, {"code", status}}}};
  } else {
    body = {{"error", message}};
  }
  if (status == 429 || status == 503) res.set_header("Retry-After", "1");
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// Equal strings in time that does not depend on where they differ.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<std::size_t>(1, b.size())]);
  return diff == 0;
}

json parse_body(const std::string& body) {
  try {
    json j = json::parse(body);
    if (!j.is_object()) throw RequestError(400, "the body must be a JSON object");
    return j;
  } catch (const json::exception& e) {
    throw RequestError(400, std::string("the body is not valid JSON: ") + e.what());
  }
}

// A field of a JSON request, or `fallback` when absent; RequestError naming it when of the wrong type.
template <class T>
T field(const json& j, const char* name, T fallback) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  try {
    return j[name].get<T>();
  } catch (const json::exception&) {
    throw RequestError(400, std::string(name) + ": wrong type (" + j[name].type_name() + ")");
  }
}

std::vector<std::string> stop_strings(const json& j) {
  if (!j.contains("stop") || j["stop"].is_null()) return {};
  if (j["stop"].is_string()) return {j["stop"].get<std::string>()};
  std::vector<std::string> out;
  if (!j["stop"].is_array()) throw RequestError(400, "stop: expected a string or an array of strings");
  for (const json& s : j["stop"]) {
    if (!s.is_string() || s.get<std::string>().empty())
      throw RequestError(400, "stop: expected non-empty strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

// The tensor of a request's values, borrowing them rather than copying (a ResNet-18 image is
// 600 KB, and a fresh copy is page-faulted in): values parsed from JSON are moved into the
// tensor's owner; binary data is borrowed where it lies in the body (`body` keeps it alive as long
// as the tensor) when on a 64-byte boundary, else copied.
Tensor to_tensor(TensorValues& v, const std::shared_ptr<void>& body) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(v.shape)) * dtype_size(v.dtype);
  const void* data = v.raw.data();
  std::shared_ptr<void> owner = body;
  auto adopt = [&](auto& parsed) {
    auto values = std::make_shared<std::remove_reference_t<decltype(parsed)>>(std::move(parsed));
    data = values->data();
    owner = std::move(values);
  };
  if (v.raw.empty() && v.dtype == DType::f32)
    adopt(v.f32);
  else if (v.raw.empty())
    adopt(v.i64);
  if (reinterpret_cast<std::uintptr_t>(data) % kTensorAlignment == 0)
    return Tensor::from_storage(std::make_shared<Storage>(const_cast<void*>(data), bytes, std::move(owner)),
                                v.shape, v.dtype);
  Tensor t = Tensor::empty(v.shape, v.dtype);
  std::memcpy(t.raw_data(), data, bytes);
  return t;
}

TensorValues values_of(const Tensor& output) {
  const Tensor t = output.contiguous();
  TensorValues v;
  v.dtype = t.dtype();
  v.shape = t.shape();
  if (t.dtype() == DType::f32) {
    v.f32.assign(t.data(), t.data() + t.numel());
  } else if (t.dtype() == DType::i64) {
    v.i64.assign(t.data_as<std::int64_t>(), t.data_as<std::int64_t>() + t.numel());
  } else {
    throw Error("the model's output is " + std::string(dtype_name(t.dtype())) +
                ": only FP32 and INT64 are served");
  }
  return v;
}

class Service {
 public:
  // Models load on the calling thread, which must be `compute`'s (runtime/compute_thread.h).
  Service(const ServeOptions& o, ComputeThread& compute) : options_(o) {
    declare_metrics();
    if (o.governor) {
      GovernorOptions g;
      g.config.max_threads = o.threads > 0 ? o.threads : compute_threads();
      g.log = [](const std::string& line) { std::fprintf(stderr, "cpudl: serve: %s\n", line.c_str()); };
      g.on_sample = [this](const GovernorStatus& status) { record_governor_status(metrics_, status); };
      governor_ = std::make_unique<Governor>(std::move(g));
      record_governor_status(metrics_, governor_->status());
    }
    BatchOptions batch{o.max_batch, o.batch_timeout_ms, o.queue, o.threads, governor_.get(), &compute};
    LlmOptions llm{o.parallel, o.ctx, o.queue, o.threads, governor_.get(), o.repack, &compute};
    for (const std::string& spec : o.models) {
      const auto eq = spec.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
        throw UsageError("--model " + spec + ": expected NAME=PATH");
      const std::string name = spec.substr(0, eq), path = spec.substr(eq + 1);
      for (char c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
          throw UsageError("--model " + spec + ": a name of letters, digits, '-', '_' and '.'");
      if (tensors_.count(name) || llms_.count(name)) throw UsageError("--model " + name + ": given twice");
      if (io::file_kind(path) == io::FileKind::gguf) {  // by content, whatever the name
        auto m = std::make_unique<LanguageModel>(name, path, llm, metrics_);
        metrics_.set("cpudl_model_info", 1, {name, "gguf", m->model().config().weight_type});
        llms_.emplace(name, std::move(m));
      } else {
        auto m = std::make_unique<TensorModel>(name, path, batch, metrics_);
        metrics_.set("cpudl_model_info", 1, {name, m->format(), "fp32"});
        tensors_.emplace(name, std::move(m));
      }
    }
    if (o.models.empty()) throw UsageError("give at least one --model NAME=PATH");
    metrics_.set("cpudl_threads", o.threads > 0 ? o.threads : compute_threads());
  }

  void routes(httplib::Server& svr);
  // --max-body-mb in bytes: httplib answers 413 above it, and body buffers are sized up to it.
  std::size_t max_body_bytes() const { return static_cast<std::size_t>(options_.max_body_mb * 1024 * 1024); }
  std::atomic<bool> draining{false}, cancel_all{false};
  std::atomic<int> inflight{0};
  Metrics& metrics() { return metrics_; }
  // At a critical temperature the governor pauses: new work is shed (503) until it cools.
  bool too_hot() const { return governor_ && governor_->paused(); }

 private:
  void declare_metrics();
  Clock::time_point deadline() const {
    return t_labels.start +
           std::chrono::microseconds(static_cast<std::int64_t>(options_.request_timeout_s * 1e6));
  }
  TensorModel& tensor_model(const std::string& name);
  LanguageModel& language_model(const json& request);
  void completion(const httplib::Request& req, httplib::Response& res, bool chat);

  ServeOptions options_;
  Metrics metrics_;
  std::unique_ptr<Governor> governor_;  // before the models, which hold its address
  // Inference request bodies (reuse_pool.h): as many as are read at once or lent to the tensors
  // of requests waiting for their run (binary data: 32 clients keep 32 out), 64 MiB in all. Before
  // the models: input tensors in their batchers may borrow a body to the end.
  ReusePool<std::string> bodies_{64, std::size_t{64} << 20,
                                 [](const std::string& s) { return s.capacity(); }};
  std::map<std::string, std::unique_ptr<TensorModel>> tensors_;
  std::map<std::string, std::unique_ptr<LanguageModel>> llms_;
  std::atomic<std::uint64_t> ids_{0};
};

void Service::declare_metrics() {
  using T = Metrics::Type;
  metrics_.declare("cpudl_requests_total", T::counter,
                   "HTTP requests answered, by model, endpoint and status code.",
                   {"model", "endpoint", "code"});
  metrics_.declare("cpudl_request_duration_seconds", T::histogram,
                   "Time from a request's arrival to its answer.", {"model"},
                   {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
  metrics_.declare("cpudl_queue_depth", T::gauge, "Requests waiting for a batch or an LLM slot.");
  metrics_.gauge_callback("cpudl_queue_depth", [this] {
    double n = 0;
    for (const auto& [name, m] : tensors_) n += m->waiting();
    for (const auto& [name, m] : llms_) n += m->waiting();
    return n;
  });
  metrics_.declare("cpudl_inflight_requests", T::gauge, "Requests being served now.");
  metrics_.gauge_callback("cpudl_inflight_requests", [this] { return static_cast<double>(inflight.load()); });
  metrics_.declare("cpudl_batch_size", T::histogram,
                   "Samples per run of a tensor model; sequences per forward pass of a language model.",
                   {"model"}, {1, 2, 4, 8, 16, 32, 64, 128});
  metrics_.declare("cpudl_batch_seconds", T::histogram,
                   "Compute time of each run of a tensor model and each forward pass of a language model "
                   "(a request's duration less this is its wait and its transfer).",
                   {"model"}, {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
  metrics_.declare("cpudl_rejected_total", T::counter, "Requests refused before running, by reason.",
                   {"reason"});
  metrics_.declare("cpudl_llm_prompt_tokens_total", T::counter, "Prompt tokens evaluated.", {"model"});
  metrics_.declare("cpudl_llm_generated_tokens_total", T::counter, "Tokens generated.", {"model"});
  metrics_.declare("cpudl_llm_tokens_per_second", T::gauge, "Generation speed of the last finished request.",
                   {"model"});
  metrics_.declare("cpudl_llm_kv_cache_usage_ratio", T::gauge,
                   "KV cache positions in use over those of every slot, at the last finished request.",
                   {"model"});
  metrics_.declare("cpudl_llm_slots_busy", T::gauge, "Sequence slots generating now.", {"model"});
  metrics_.declare("cpudl_threads", T::gauge, "Compute threads per run.");
  metrics_.declare("cpudl_cached_block_bytes", T::gauge,
                   "Freed tensor blocks kept for reuse (part of resident memory; capped at 1/8 of RAM).");
  metrics_.gauge_callback("cpudl_cached_block_bytes",
                          [] { return static_cast<double>(cached_block_bytes()); });
  metrics_.declare("cpudl_model_info", T::gauge, "The models served: always 1.",
                   {"model", "format", "precision"});
  metrics_.declare_process_metrics();
  declare_governor_metrics(metrics_);
}

TensorModel& Service::tensor_model(const std::string& name) {
  t_labels.model = name;
  const auto it = tensors_.find(name);
  if (it != tensors_.end()) return *it->second;
  if (llms_.count(name))
    throw RequestError(400, "model '" + name + "' is a language model: use /v1/completions");
  throw RequestError(404, "no model '" + name + "'");
}

LanguageModel& Service::language_model(const json& request) {
  std::string name = field<std::string>(request, "model", "");
  if (name.empty()) {
    if (llms_.size() != 1) throw RequestError(400, "model: name one of the served language models");
    name = llms_.begin()->first;
  }
  t_labels.model = name;
  const auto it = llms_.find(name);
  if (it != llms_.end()) return *it->second;
  if (tensors_.count(name)) throw RequestError(400, "model '" + name + "' is not a language model");
  throw RequestError(404, "no model '" + name + "'");
}

void Service::completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  const json request = parse_body(req.body);
  LanguageModel& lm = language_model(request);
  const llm::Model& model = lm.model();
  std::string prompt_text;
  if (chat) {
    if (!request.contains("messages") || !request["messages"].is_array() || request["messages"].empty())
      throw RequestError(400, "messages: expected a non-empty array of {role, content}");
    std::vector<llm::ChatMessage> messages;
    for (std::size_t i = 0; i < request["messages"].size(); ++i) {
      const json& m = request["messages"][i];
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
          !m["content"].is_string())
        throw RequestError(
            400, "messages[" + std::to_string(i) + "]: expected {\"role\": string, \"content\": string}");
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    const llm::ChatFormat format =
        llm::detect_chat_format(model.chat_template(), model.config().tokenizer == "llama");
    try {
      prompt_text = llm::format_conversation(format, messages);
    } catch (const Error& e) {
      throw RequestError(400, e.what());
    }
  } else {
    if (!request.contains("prompt")) throw RequestError(400, "prompt: missing");
    const json& p = request["prompt"];
    if (p.is_string())
      prompt_text = p.get<std::string>();
    else if (p.is_array() && p.size() == 1 && p[0].is_string())
      prompt_text = p[0].get<std::string>();
    else
      throw RequestError(400, "prompt: expected a string");
  }
  const std::vector<std::int32_t> prompt = model.tokenize(prompt_text, true);
  if (prompt.empty()) throw RequestError(400, "prompt: empty after tokenization");
  const int n_ctx = lm.n_ctx();
  if (static_cast<int>(prompt.size()) >= n_ctx)
    throw RequestError(400, "the prompt has " + std::to_string(prompt.size()) +
                                " tokens; the context holds " + std::to_string(n_ctx) + " (--ctx)");
  llm::GenerationOptions g;
  const int asked = field<int>(request, chat ? "max_completion_tokens" : "max_tokens",
                               field<int>(request, "max_tokens", chat ? n_ctx : 16));
  if (asked < 0) throw RequestError(400, "max_tokens: must not be negative");
  const int room = n_ctx - static_cast<int>(prompt.size());
  g.max_tokens = std::min(asked, room);
  std::vector<std::string> warnings;
  if (asked > room &&
      !(chat && !request.contains("max_tokens") && !request.contains("max_completion_tokens")))
    warnings.push_back("max_tokens clamped to " + std::to_string(room) + ": the context holds " +
                       std::to_string(n_ctx) + " tokens");
  g.sampling.temperature = field<float>(request, "temperature", 1.0f);
  g.sampling.top_p = field<float>(request, "top_p", 1.0f);
  g.sampling.top_k = field<int>(request, "top_k", 0);
  g.sampling.min_p = field<float>(request, "min_p", 0.0f);
  g.sampling.seed = field<std::uint64_t>(request, "seed", ids_.load());
  if (g.sampling.temperature < 0 || g.sampling.top_p < 0 || g.sampling.top_p > 1 || g.sampling.min_p < 0 ||
      g.sampling.min_p > 1 || g.sampling.top_k < 0)
    throw RequestError(400, "temperature, top_p, top_k, min_p: out of range");
  g.stops = stop_strings(request);
  const bool stream = field<bool>(request, "stream", false);

  auto slot = std::make_shared<LanguageModel::Slot>(lm.acquire(deadline()));
  g.evaluate = [slot = slot.get()](llm::Context& ctx, std::span<const std::int32_t> tokens, bool all_logits) {
    slot->evaluate(ctx, tokens, all_logits);
  };
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++ids_);
  const auto created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const std::string object =
      chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  const std::string name = lm.name();
  auto usage = [prompt](const llm::Generation& out) {
    return json{{"prompt_tokens", prompt.size()},
                {"completion_tokens", out.tokens.size()},
                {"total_tokens", prompt.size() + out.tokens.size()}};
  };
  auto finish = [this, &lm, name, prompt, n_ctx](const llm::Generation& out, int used) {
    metrics_.add("cpudl_llm_prompt_tokens_total", static_cast<double>(prompt.size()), {name});
    metrics_.add("cpudl_llm_generated_tokens_total", static_cast<double>(out.tokens.size()), {name});
    if (!out.tokens.empty())
      metrics_.set("cpudl_llm_tokens_per_second",
                   static_cast<double>(out.tokens.size()) / std::max(out.generation_seconds, 1e-9), {name});
    metrics_.set("cpudl_llm_kv_cache_usage_ratio",
                 static_cast<double>(used) / (static_cast<double>(n_ctx) * lm.parallel()), {name});
  };
  auto choice = [chat](const std::string& text, const char* finish_reason, bool delta) {
    json c = {{"index", 0}};
    if (chat)
      c[delta ? "delta" : "message"] =
          delta ? json{{"content", text}} : json{{"role", "assistant"}, {"content", text}};
    else
      c["text"] = text, c["logprobs"] = nullptr;
    c["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
    return c;
  };
  if (!stream) {
    const llm::Generation out = llm::generate(model, slot->context(), prompt, g,
                                              [this](std::string_view) { return !cancel_all.load(); });
    finish(out, slot->context().n_past());
    slot.reset();
    json body = {{"id", id},
                 {"object", object},
                 {"created", created},
                 {"model", name},
                 {"choices", json::array({choice(out.text, llm::finish_reason_name(out.finish), false)})},
                 {"usage", usage(out)}};
    if (!warnings.empty()) body["warnings"] = warnings;
    res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    return;
  }
  // Server-sent events: one `data:` line per piece of text, the last chunk with the finish reason
  // and usage, then `data: [DONE]`. A client that goes away cancels the generation.
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, slot, prompt, g, id, object, created, name, chat, usage, finish, choice, warnings, &model, &lm](
          std::size_t, httplib::DataSink& sink) mutable {
        auto send = [&sink](const json& j) {
          const std::string line = "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
          return sink.is_writable() && sink.write(line.data(), line.size());
        };
        auto chunk = [&](json c) {
          return json{{"id", id},
                      {"object", object},
                      {"created", created},
                      {"model", name},
                      {"choices", json::array({std::move(c)})}};
        };
        bool open = !chat || send(chunk({{"index", 0},
                                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                                         {"finish_reason", nullptr}}));
        const llm::Generation out =
            llm::generate(model, slot->context(), prompt, g, [&](std::string_view piece) {
              open = open && !cancel_all.load() && send(chunk(choice(std::string(piece), nullptr, true)));
              return open;
            });
        finish(out, slot->context().n_past());
        slot.reset();  // the releaser below holds the last reference: the slot frees when it runs
        if (open) {
          json last = chunk(choice("", llm::finish_reason_name(out.finish), true));
          last["usage"] = usage(out);
          if (!warnings.empty()) last["warnings"] = warnings;
          send(last);
          const std::string done = "data: [DONE]\n\n";
          if (sink.is_writable()) sink.write(done.data(), done.size());
        }
        sink.done();
        return true;
      },
      [slot](bool) mutable { slot.reset(); });
}

void Service::routes(httplib::Server& svr) {
  svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kPage, "text/html; charset=utf-8");
  });
  svr.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"live":true})", "application/json");
  });
  svr.Get("/v2/health/ready", [this](const httplib::Request& req, httplib::Response& res) {
    if (draining) return send_error(req, res, 503, "draining: the server is shutting down");
    res.set_content(R"({"ready":true})", "application/json");
  });
  svr.Get("/v2", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"name", "cpudl"}, {"version", CPUDL_VERSION}, {"extensions", json::array()}}.dump(),
                    "application/json");
  });
  svr.Get(R"(/v2/models/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    t_labels.model = name;
    auto specs = [](const std::vector<TensorSpec>& v) {
      json a = json::array();
      for (const auto& s : v)
        a.push_back({{"name", s.name}, {"datatype", datatype_name(s.dtype)}, {"shape", s.shape}});
      return a;
    };
    if (const auto it = llms_.find(name); it != llms_.end()) {
      res.set_content(json{{"name", name},
                           {"versions", {"1"}},
                           {"platform", "gguf"},
                           {"inputs", json::array()},
                           {"outputs", json::array()}}
                          .dump(),
                      "application/json");
      return;
    }
    TensorModel& m = tensor_model(name);
    res.set_content(json{{"name", name},
                         {"versions", {"1"}},
                         {"platform", m.format() == std::string("onnx") ? "onnx" : "cpudl_safetensors"},
                         {"inputs", specs(m.inputs())},
                         {"outputs", specs(m.outputs())}}
                        .dump(),
                    "application/json");
  });
  svr.Get(R"(/v2/models/([^/]+)/ready)", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    t_labels.model = name;
    if (!tensors_.count(name) && !llms_.count(name)) throw RequestError(404, "no model '" + name + "'");
    if (draining) return send_error(req, res, 503, "draining: the server is shutting down");
    res.set_content(json{{"name", name}, {"ready", true}}.dump(), "application/json");
  });
  svr.Post(R"(/v2/models/([^/]+)/infer)", [this](const httplib::Request& req, httplib::Response& res,
                                                 const httplib::ContentReader& read_body) {
    // The body goes into a buffer reused across requests (reuse_pool.h), sized once from
    // Content-Length with room for the JSON parser to read in place; httplib's own body string
    // grows by doubling, copying and page-faulting each step. Read first, whatever the answer:
    // closing a connection with its body unread makes the kernel reset it, and the client may lose
    // the error. The binary tensor data extension gives the JSON part's length in a header
    // (refused once the body is read).
    std::size_t header_length = kNoBinary;
    const std::string header_value = req.get_header_value("Inference-Header-Content-Length");
    bool header_valid = true;
    if (req.has_header("Inference-Header-Content-Length")) {
      const auto [end, ec] =
          std::from_chars(header_value.data(), header_value.data() + header_value.size(), header_length);
      header_valid = ec == std::errc() && end == header_value.data() + header_value.size();
      if (!header_valid) header_length = kNoBinary;
    }
    // Shared: the tensors made of its binary part borrow it (to_tensor).
    auto body = std::make_shared<ReusePool<std::string>::Lease>(bodies_.take());
    std::string& buffer = **body;
    buffer.clear();
    std::size_t length = 0;
    const std::string declared = req.get_header_value("Content-Length");
    std::from_chars(declared.data(), declared.data() + declared.size(), length);
    buffer.reserve(std::min(length, max_body_bytes()) + kJsonPadding + kTensorAlignment);
    // Blanks before the body (JSON may start with whitespace) put its binary part on a 64-byte
    // boundary, where a tensor may borrow it. reserve() above keeps the buffer from moving.
    const std::size_t lead =
        header_length == kNoBinary
            ? 0
            : (kTensorAlignment -
               (reinterpret_cast<std::uintptr_t>(buffer.data()) + header_length) % kTensorAlignment) %
                  kTensorAlignment;
    buffer.assign(lead, ' ');
    // Straight from the socket into the buffer where the connection allows (http_connection.h);
    // a body over the limit goes through httplib, which answers it 413.
    if (ConnectionStream* stream = body_stream(req); stream && length <= max_body_bytes()) {
      buffer.resize(lead + length);
      if (!stream->read_exact(buffer.data() + lead, length))
        throw RequestError(400, "the body could not be read");
    } else if (!read_body([&](const char* data, std::size_t n) {
                 buffer.append(data, n);
                 return true;
               })) {
      if (res.status == 413) return;  // the error handler writes the message
      throw RequestError(400, "the body could not be read");
    }
    if (!header_valid)
      throw RequestError(
          400, "Inference-Header-Content-Length: expected a byte count, got '" + header_value + "'");
    TensorModel& m = tensor_model(req.matches[1]);
    // A full queue refuses before parsing (the parse of an image's JSON costs what its run does
    // per image).
    m.refuse_if_full();
    TensorModel::Arrival arrival(m);
    InferRequest request = parse_infer_request(std::string_view(buffer).substr(lead), header_length,
                                               m.inputs(), buffer.capacity() - buffer.size());
    std::vector<Tensor> inputs;
    for (TensorValues& v : request.inputs) inputs.push_back(to_tensor(v, body));
    body.reset();  // back to the pool now, unless a tensor borrows it
    std::vector<TensorValues> outputs;
    for (const Tensor& t : m.infer(std::move(inputs), deadline(), &arrival)) outputs.push_back(values_of(t));
    std::vector<std::string> names;
    for (const TensorSpec& s : m.outputs()) names.push_back(s.name);
    InferResponse answer = infer_response(m.name(), names, outputs, request.binary_outputs);
    if (request.binary_outputs) {
      res.set_header("Inference-Header-Content-Length", std::to_string(answer.header_length));
      res.set_content(std::move(answer.body), "application/octet-stream");
    } else {
      res.set_content(std::move(answer.body), "application/json");
    }
  });
  svr.Post(R"(/v1/models/([^/]+)/classify)", [this](const httplib::Request& req, httplib::Response& res) {
    TensorModel& m = tensor_model(req.matches[1]);
    json top = json::array();
    for (const auto& [k, p] : m.classify(req.body, 5, deadline()))
      top.push_back({{"label", m.label(k)}, {"probability", p}});
    res.set_content(json{{"model", m.name()}, {"top", top}}.dump(), "application/json");
  });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    for (const auto& [name, m] : llms_)
      data.push_back({{"id", name}, {"object", "model"}, {"owned_by", "cpudl"}});
    for (const auto& [name, m] : tensors_)
      data.push_back({{"id", name}, {"object", "model"}, {"owned_by", "cpudl"}});
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  });
  svr.Post("/v1/completions",
           [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, false); });
  svr.Post("/v1/chat/completions",
           [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, true); });
  svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    const json request = parse_body(req.body);
    LanguageModel& lm = language_model(request);
    if (!request.contains("content") || !request["content"].is_string())
      throw RequestError(400, "content: expected the text to tokenize");
    const auto ids = lm.model().tokenize(request["content"].get<std::string>(),
                                         field<bool>(request, "add_special", false));
    res.set_content(json{{"tokens", ids}}.dump(), "application/json");
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

}  // namespace

int serve(const ServeOptions& options) {
  (void)runtime();  // its start sets the batch memory policy: the serving one must come after
  use_serving_memory_policy();
  // Signals are taken by one thread (sigwait below), never by a worker: block them before any
  // thread starts, so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (options.queue < 1 || options.max_batch < 1 || options.parallel < 1)
    throw UsageError("--queue, --max-batch and --parallel must be at least 1");
  // This thread runs every computation (runtime/compute_thread.h): it loads the models here, and
  // once the port is bound it runs the batches and passes handed to it while httplib listens on
  // another thread.
  ComputeThread compute;
  Service service(options, compute);  // every model loaded before the port is bound
  HttpServer svr;
  // httplib keeps a thread per open connection (keep-alive), so the pool bounds the clients served
  // at once: at least 256 (idle threads cost little), and above the queues so that a full queue
  // answers 429 without waiting for a thread. (Sized by the queues alone, 64 keep-alive clients
  // against --queue 16 left 15 of them waiting seconds for a thread.)
  const std::size_t pool = static_cast<std::size_t>(
      std::min(1024, std::max(256, options.queue + options.parallel + options.max_batch + 16)));
  svr.new_task_queue = [pool] { return new httplib::ThreadPool(pool); };
  svr.set_payload_max_length(service.max_body_bytes());
  svr.set_keep_alive_timeout(2);
  // httplib closes a connection after 5 requests by default: clients then reconnect every fifth
  // request, and a client that wrote its next request into the closing socket gets a reset.
  svr.set_keep_alive_max_count(1000);
  // A response goes out as two writes (headers, then body): with Nagle's algorithm the body waits
  // for the client's ACK of the headers, which the client delays (40 ms on Linux) while it waits
  // for the body. Measured: a ResNet-18 request answered in 30 ms reached the client after 70.
  svr.set_tcp_nodelay(true);
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which lets a second server bind the
  // same port and silently take half of its connections instead of failing.
  int listening = -1;
  svr.set_socket_options([&listening](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listening = sock;
  });
  svr.set_pre_routing_handler([&service, &options](const httplib::Request& req, httplib::Response& res) {
    // Connection threads run below the compute threads' priority (nice +10, once per thread):
    // under overload the CPU goes to the batches being run, and what waits is reading, parsing
    // and refusing the requests beyond them. (Measured at 4x load with the client on the same
    // two cores: refusals took the machine and admitted throughput fell to a tenth.)
    thread_local const bool lowered = setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10) == 0;
    (void)lowered;
    t_labels = {Clock::now(), "", endpoint_of(req.path), true};
    ++service.inflight;
    // Health and the page (static, no data) need no key.
    if (req.path.rfind("/v2/health", 0) == 0 || req.path == "/")
      return httplib::Server::HandlerResponse::Unhandled;
    if (!options.api_key.empty()) {
      const std::string auth = req.get_header_value("Authorization");
      if (auth.rfind("Bearer ", 0) != 0 || !same_secret(auth.substr(7), options.api_key)) {
        send_error(req, res, 401, "missing or wrong API key (Authorization: Bearer KEY)");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (service.draining && req.path != "/metrics") {
      service.metrics().add("cpudl_rejected_total", 1, {"draining"});
      send_error(req, res, 503, "draining: the server is shutting down");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (service.too_hot() && req.method == "POST") {
      service.metrics().add("cpudl_rejected_total", 1, {"temperature"});
      send_error(req, res, 503, "the CPU is at its critical temperature: work paused until it cools");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const RequestError& e) {
      send_error(req, res, e.status(), e.what());
    } catch (const UsageError& e) {
      send_error(req, res, 400, e.what());
    } catch (const Error& e) {
      send_error(req, res, 400, e.what());
    } catch (const std::exception& e) {
      send_error(req, res, 500, e.what());
    }
  });
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) send_error(req, res, 404, "no endpoint " + req.method + " " + req.path);
    if (res.status == 413) send_error(req, res, 413, "the body is larger than --max-body-mb");
  });
  svr.set_logger([&service](const httplib::Request&, const httplib::Response& res) {
    --service.inflight;
    const double seconds = std::chrono::duration<double>(Clock::now() - t_labels.start).count();
    service.metrics().add("cpudl_requests_total", 1,
                          {t_labels.model, t_labels.endpoint, std::to_string(res.status)});
    if (!t_labels.model.empty())
      service.metrics().observe("cpudl_request_duration_seconds", seconds, {t_labels.model});
  });
  service.routes(svr);

  int port = options.port;
  if (port == 0) {
    port = svr.bind_to_any_port(options.host);
    if (port < 0) throw Error("cannot listen on " + options.host + ": " + std::strerror(errno));
  } else if (!svr.bind_to_port(options.host, port)) {
    throw Error("cannot listen on " + options.host + ":" + std::to_string(port) + ": " +
                (errno == EADDRINUSE ? std::string("the port is in use") : std::strerror(errno)));
  }
  std::printf("listening on http://%s:%d\n", options.host.c_str(), port);
  std::fflush(stdout);

  std::thread waiter([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    std::fprintf(stderr, "cpudl: serve: %s: draining (readiness 503), %d requests in flight\n",
                 signal == SIGTERM ? "SIGTERM" : "SIGINT", service.inflight.load());
    service.draining = true;
    const auto until =
        Clock::now() + std::chrono::microseconds(static_cast<std::int64_t>(options.drain_timeout_s * 1e6));
    while (service.inflight.load() > 0 && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (service.inflight.load() > 0) {
      std::fprintf(stderr,
                   "cpudl: serve: %d requests still running after --drain-timeout-s; cancelling them\n",
                   service.inflight.load());
      service.cancel_all = true;
    }
    svr.stop();
  });
  // httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into Debian's
  // library): 64 clients connecting at once overflowed the accept queue (TcpExtListenOverflows
  // 189 in an 8 s wrk run), and the connections the kernel dropped half-open came back to wrk
  // as read errors (43 in that run) instead of answers. Listening again on the bound socket
  // raises the backlog to the system's limit.
  if (listening >= 0) ::listen(listening, SOMAXCONN);
  bool ok = false;
  std::thread listener([&] {
    ok = svr.listen_after_bind();
    compute.stop();
  });
  compute.work_until_stopped();
  listener.join();
  waiter.join();
  if (!ok && !service.draining) throw Error("the server stopped unexpectedly");
  std::fprintf(stderr, "cpudl: serve: stopped\n");
  return 0;
}

}  // namespace cpudl::serve
