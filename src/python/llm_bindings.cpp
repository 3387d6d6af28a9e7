// cpudl.llm.Model in Python, shaped like llama-cpp-python's Llama: tokenize, detokenize, generate
// (whole text, or streamed pieces from a generator) and chat completions, over the loop that
// `cpudl generate` and `cpudl serve` run (llm::generate). Generation releases the GIL and stops
// cleanly on Ctrl-C.
#include <pybind11/stl.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "cpudl/error.h"
#include "cpudl/llm.h"
#include "llm/chat/chat_template.h"
#include "llm/generation/generation.h"
#include "python/bindings.h"

namespace cpudl::python {
namespace {

struct Completion {
  std::string text;
  std::vector<std::int32_t> token_ids;
  std::string finish_reason;
  std::int64_t prompt_tokens = 0;
};

struct Request {
  std::vector<std::int32_t> prompt;
  llm::GenerationOptions options;
};

// Bytes that end inside a UTF-8 character are held back until the character is complete, so a
// streamed piece is always valid text.
std::size_t complete_utf8_prefix(const std::string& s) {
  std::size_t i = s.size(), back = 0;
  while (i > 0 && back < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i, ++back;
  if (i == 0) return s.size();
  const auto lead = static_cast<unsigned char>(s[i - 1]);
  const std::size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return need > back + 1 ? i - 1 : s.size();
}

class PyModel {
 public:
  PyModel(const std::filesystem::path& path, int n_ctx, const py::object& threads,
          const std::string& cache_type, int batch)
      : path_(path.string()) {
    llm::ContextOptions o;
    o.cache_type = llm::parse_cache_type(cache_type);
    o.threads = threads.is_none() ? 0 : threads.cast<int>();
    o.batch = batch;
    {
      py::gil_scoped_release release;
      model_ = std::make_unique<llm::Model>(llm::Model::load(path));
    }
    // 0: 2048, or the model's context length when it is shorter (llama-cpp-python's habit of a
    // fixed default, without refusing small models)
    const int trained = model_->config().context_length;
    if (n_ctx < 0 || (trained > 0 && n_ctx > trained))
      throw py::value_error("n_ctx " + std::to_string(n_ctx) + " is outside 1.." + std::to_string(trained) +
                            ", the context length " + path_ + " was trained for");
    o.n_ctx = n_ctx > 0 ? n_ctx : (trained > 0 ? std::min(2048, trained) : 2048);
    py::gil_scoped_release release;
    ctx_ = std::make_unique<llm::Context>(*model_, o);
  }

  std::vector<std::int32_t> tokenize(const std::string& text, bool add_bos, bool special) const {
    return model_->tokenize(text, add_bos, special);
  }
  py::str detokenize(const std::vector<std::int32_t>& ids) const {
    for (const std::int32_t id : ids)
      if (id < 0 || id >= model_->config().vocab)
        throw py::value_error("detokenize: id " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(model_->config().vocab));
    return utf8_text(model_->detokenize(ids));
  }

  Request request(const py::object& prompt, int max_tokens, float temperature, int top_k, float top_p,
                  float min_p, float repeat_penalty, const py::object& seed,
                  const std::vector<std::string>& stop, bool add_bos) {
    Request r;
    if (py::isinstance<py::str>(prompt))
      r.prompt = model_->tokenize(prompt.cast<std::string>(), add_bos);
    else
      r.prompt = prompt.cast<std::vector<std::int32_t>>();
    if (r.prompt.empty()) throw py::value_error("generate: the prompt is empty");
    for (const std::int32_t t : r.prompt)
      if (t < 0 || t >= model_->config().vocab)
        throw py::value_error("generate: token id " + std::to_string(t) + " is outside the vocabulary of " +
                              std::to_string(model_->config().vocab));
    if (static_cast<int>(r.prompt.size()) >= ctx_->n_ctx())
      throw py::value_error("generate: the prompt has " + std::to_string(r.prompt.size()) +
                            " tokens, and the context holds " + std::to_string(ctx_->n_ctx()) + " (n_ctx)");
    if (max_tokens < 0) throw py::value_error("generate: max_tokens must be >= 0");
    if (temperature < 0) throw py::value_error("generate: temperature must be >= 0");
    r.options.max_tokens = max_tokens;
    r.options.sampling.temperature = temperature;
    r.options.sampling.top_k = top_k;
    r.options.sampling.top_p = top_p;
    r.options.sampling.min_p = min_p;
    r.options.sampling.repeat_penalty = repeat_penalty;
    r.options.sampling.seed = seed.is_none() ? std::random_device{}() : seed.cast<std::uint64_t>();
    r.options.stops = stop;
    return r;
  }

  // Runs one generation on the model's context (one at a time: the context is one sequence).
  Completion run(const Request& r, const llm::TextSink& sink) {
    std::lock_guard lock(mutex_);
    ctx_->reset();
    const llm::Generation g = llm::generate(*model_, *ctx_, r.prompt, r.options, sink);
    return {g.text, g.tokens, llm::finish_reason_name(g.finish), static_cast<std::int64_t>(r.prompt.size())};
  }

  Completion generate(const Request& r) {
    bool interrupted = false;
    Completion c;
    {
      py::gil_scoped_release release;
      c = run(r, [&](std::string_view) {
        py::gil_scoped_acquire gil;  // a token takes milliseconds; checking for Ctrl-C costs microseconds
        interrupted = PyErr_CheckSignals() != 0;
        return !interrupted;
      });
    }
    if (interrupted) throw py::error_already_set();
    return c;
  }

  std::string format_chat(const std::vector<std::map<std::string, std::string>>& messages) const {
    std::vector<llm::ChatMessage> turns;
    for (std::size_t i = 0; i < messages.size(); ++i) {
      const auto& message = messages[i];
      const auto role = message.find("role"), content = message.find("content");
      if (role == message.end() || content == message.end())
        throw py::value_error("create_chat_completion: message " + std::to_string(i) +
                              " needs 'role' and 'content'");
      turns.push_back({role->second, content->second});
    }
    const bool spm = model_->config().tokenizer == "llama";
    return llm::format_conversation(llm::detect_chat_format(model_->chat_template(), spm), turns);
  }

  const llm::ModelConfig& config() const { return model_->config(); }
  int n_ctx() const { return ctx_->n_ctx(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<llm::Model> model_;
  std::unique_ptr<llm::Context> ctx_;
  std::mutex mutex_;
};

// generate(..., stream=True): the generation runs on its own thread and hands pieces over; the
// iterator waits with the GIL released and checks for Ctrl-C while it waits. Dropping the iterator
// early cancels the generation.
class Stream {
 public:
  Stream(std::shared_ptr<PyModel> model, Request request) : model_(std::move(model)) {
    worker_ = std::thread([this, request = std::move(request)] {
      try {
        Completion c = model_->run(request, [this](std::string_view piece) {
          std::lock_guard lock(mutex_);
          pending_ += piece;
          const std::size_t ready = complete_utf8_prefix(pending_);
          if (ready > 0) {
            pieces_.push_back(pending_.substr(0, ready));
            pending_.erase(0, ready);
            ready_.notify_one();
          }
          return !cancel_;
        });
        std::lock_guard lock(mutex_);
        if (!pending_.empty()) pieces_.push_back(std::exchange(pending_, {}));
        result_ = std::move(c);
      } catch (...) {
        std::lock_guard lock(mutex_);
        error_ = std::current_exception();
      }
      std::lock_guard lock(mutex_);
      done_ = true;
      ready_.notify_one();
    });
  }
  ~Stream() { stop(); }

  py::str next() {
    std::string piece;
    for (;;) {
      {
        py::gil_scoped_release release;
        std::unique_lock lock(mutex_);
        ready_.wait_for(lock, std::chrono::milliseconds(50), [&] { return !pieces_.empty() || done_; });
        if (!pieces_.empty()) {
          piece = std::move(pieces_.front());
          pieces_.pop_front();
          break;
        }
        if (done_) {
          if (error_) std::rethrow_exception(error_);
          throw py::stop_iteration();
        }
      }
      if (PyErr_CheckSignals() != 0) {
        stop();
        throw py::error_already_set();
      }
    }
    return utf8_text(piece);
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      cancel_ = true;
    }
    if (worker_.joinable()) {
      py::gil_scoped_release release;
      worker_.join();
    }
  }

  const Completion& result() const { return result_; }

 private:
  std::shared_ptr<PyModel> model_;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::string> pieces_;
  std::string pending_;
  bool done_ = false, cancel_ = false;
  std::exception_ptr error_;
  Completion result_;
};

}  // namespace

void bind_llm(py::module_& m) {
  py::class_<Completion>(m, "Completion", "A finished generation: text, token ids, why it stopped.")
      .def_property_readonly("text", [](const Completion& c) { return utf8_text(c.text); })
      .def_readonly("token_ids", &Completion::token_ids)
      .def_readonly("finish_reason", &Completion::finish_reason)
      .def_readonly("prompt_tokens", &Completion::prompt_tokens);

  py::class_<Stream, std::shared_ptr<Stream>>(m, "_Stream")
      .def("__iter__", [](const py::object& self) { return self; })
      .def("__next__", &Stream::next)
      .def("close", &Stream::stop)
      .def_property_readonly("result", &Stream::result);

  py::class_<PyModel, std::shared_ptr<PyModel>>(m, "_LlmModel")
      .def(py::init<const std::filesystem::path&, int, const py::object&, const std::string&, int>(),
           py::arg("path"), py::arg("n_ctx") = 0, py::arg("threads") = py::none(),
           py::arg("cache_type") = "f16", py::arg("batch") = 256)
      .def("tokenize", &PyModel::tokenize, py::arg("text"), py::arg("add_bos") = true,
           py::arg("special") = true)
      .def("detokenize", &PyModel::detokenize, py::arg("ids"))
      .def("_request", &PyModel::request, py::arg("prompt"), py::arg("max_tokens"), py::arg("temperature"),
           py::arg("top_k"), py::arg("top_p"), py::arg("min_p"), py::arg("repeat_penalty"), py::arg("seed"),
           py::arg("stop"), py::arg("add_bos"))
      .def("_generate", &PyModel::generate)
      .def("_stream", [](const std::shared_ptr<PyModel>& self,
                         Request r) { return std::make_shared<Stream>(self, std::move(r)); })
      .def("_format_chat", &PyModel::format_chat)
      .def_property_readonly("n_ctx", &PyModel::n_ctx)
      .def_property_readonly("path", &PyModel::path)
      .def_property_readonly("metadata", [](const PyModel& p) {
        const llm::ModelConfig& c = p.config();
        py::dict d;
        d["architecture"] = c.architecture, d["name"] = c.name, d["weight_type"] = c.weight_type;
        d["vocab"] = c.vocab, d["dim"] = c.dim, d["layers"] = c.layers, d["heads"] = c.heads;
        d["kv_heads"] = c.kv_heads, d["context_length"] = c.context_length, d["parameters"] = c.parameters;
        return d;
      });
  py::class_<Request>(m, "_Request");
}

}  // namespace cpudl::python
