// `cpudl generate` (text from a GGUF model, streamed), `cpudl tokenize` and `cpudl chat`.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "cli/line_reader.h"
#include "cli/usage_errors.h"
#include "cpudl/error.h"
#include "cpudl/io.h"
#include "cpudl/llm.h"
#include "cpudl/runtime.h"
#include "llm/chat/chat_template.h"
#include "llm/generation/generation.h"
#include "llm/generation/perplexity.h"

namespace cpudl::cli {
namespace {

struct SamplingFlags {
  float temperature = 0.8f, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f;
  int top_k = 40, repeat_last_n = 64;
  std::uint64_t seed = 0;
  std::vector<std::string> logit_bias;  // llama.cpp's TOKEN_ID(+|-)BIAS
  bool ignore_eos = false;
  llm::SamplerOptions options(const llm::Model& model) const;
};

// --logit-bias 15043+1.5, 15043-1 or 2-inf (llama.cpp's spelling), checked against the model's
// vocabulary; --ignore-eos forbids every end-of-generation token as llama.cpp's flag does.
llm::SamplerOptions SamplingFlags::options(const llm::Model& model) const {
  llm::SamplerOptions s{temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed};
  const int vocab = model.config().vocab;
  for (const std::string& item : logit_bias) {
    const std::size_t sign = item.find_first_of("+-", 1);
    std::size_t used = 0;
    long long token = -1;
    float bias = 0;
    try {
      token = std::stoll(item.substr(0, sign), &used);
      if (used != sign) throw std::invalid_argument("id");
      const std::string value = item.substr(sign + 1);
      bias = value == "inf" ? INFINITY : std::stof(value, &used);
      if (value != "inf" && used != value.size()) throw std::invalid_argument("bias");
    } catch (const std::exception&) {
      throw UsageError("--logit-bias " + item +
                       ": expected TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1, 2-inf)");
    }
    if (token < 0 || token >= vocab)
      throw UsageError("--logit-bias " + item + ": token " + std::to_string(token) +
                       " is outside the model's vocabulary of " + std::to_string(vocab));
    s.logit_bias.emplace_back(static_cast<std::int32_t>(token), item[sign] == '-' ? -bias : bias);
  }
  if (ignore_eos)
    for (std::int32_t t = 0; t < vocab; ++t)
      if (model.is_end_of_generation(t)) s.logit_bias.emplace_back(t, -INFINITY);
  return s;
}

struct ModelFlags {
  std::string model;
  int threads = 0, ctx = 0;
  std::string cache_type = "f16";
  std::string governor;  // --governor; empty: CPUDL_GOVERNOR or on
  std::string bind = "none";
  bool no_repack = false;
  llm::ModelLoadOptions load_options() const { return {repack_wanted(no_repack)}; }
};

void add_model_flags(CLI::App* c, ModelFlags& m) {
  c->add_option("-m,--model", m.model, "Model file (.gguf)")->required();
  add_threads_option(c, m.threads);
  add_governor_option(c, m.governor);
  add_bind_option(c, m.bind);
  c->add_option("-c,--ctx,--ctx-size", m.ctx, "Context length (default: the model's, at most 4096)")
      ->check(in_range(1, 1 << 24));
  c->add_option("--cache-type", m.cache_type, "KV cache type: f16 (default), f32 or q8_0");
  add_no_repack_flag(c, m.no_repack);
}

void add_sampling_flags(CLI::App* c, SamplingFlags& s) {
  c->add_option("--temp,--temperature", s.temperature, "Temperature (0: greedy; default 0.8)")
      ->check(in_range(0.0, 100.0));
  c->add_option("--top-k", s.top_k, "Keep the K most likely tokens (0: off; default 40)")
      ->check(in_range(0, 1 << 24));
  c->add_option("--top-p", s.top_p, "Nucleus sampling threshold (1: off; default 0.95)")
      ->check(in_range(0.0, 1.0));
  c->add_option("--min-p", s.min_p, "Drop tokens below min-p times the top probability (default 0.05)")
      ->check(in_range(0.0, 1.0));
  c->add_option("--repeat-penalty", s.repeat_penalty, "Penalty for recent tokens (1: off; default 1)")
      ->check(in_range(0.0, 100.0));
  c->add_option("--repeat-last-n", s.repeat_last_n, "How many recent tokens the penalty covers (default 64)")
      ->check(in_range(0, 1 << 24));
  c->add_option("-s,--seed", s.seed, "Random seed (default 0)");
  c->add_option("-l,--logit-bias", s.logit_bias,
                "Add BIAS to a token's logit: TOKEN_ID+BIAS or TOKEN_ID-BIAS, -inf forbids it (repeatable)");
  c->add_flag("--ignore-eos", s.ignore_eos, "Never end at an end-of-generation token");
}

llm::ContextOptions context_options(const ModelFlags& m) {
  return {m.ctx, llm::parse_cache_type(m.cache_type), m.threads, 256};
}

std::vector<std::int32_t> parse_token_list(const std::string& list, const std::string& what = "--tokens") {
  std::vector<std::int32_t> ids;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX)
      throw UsageError(what + ": '" + item +
                       "' is not a token id (expected comma-separated non-negative integers)");
    ids.push_back(static_cast<std::int32_t>(v));
  }
  if (ids.empty()) throw UsageError(what + ": no token ids");
  return ids;
}

struct GenerateOptions {
  ModelFlags model;
  SamplingFlags sampling;
  std::string prompt, file, tokens, dump_logits;
  std::vector<std::string> stops;
  int n = 128;
  bool json = false, no_bos = false;
};

// -f FILE: the text of a file, or of standard input for "-" (llama.cpp's habit).
std::string read_prompt_file(const std::string& file) {
  if (file == "-") {
    std::ostringstream text;
    text << std::cin.rdbuf();
    return text.str();
  }
  return io::read_file(file);
}

int run_generate(GenerateOptions o) {
  if (!o.prompt.empty() + !o.file.empty() + !o.tokens.empty() != 1)
    throw UsageError(
        "give the prompt as -p TEXT, -f FILE (- for standard input) or --tokens ID,ID,... (exactly one of "
        "them)");
  if (!o.file.empty()) {
    o.prompt = read_prompt_file(o.file);
    if (o.prompt.empty()) throw UsageError("-f " + o.file + ": the prompt file is empty");
  }
  io::require_output_is_not_an_input(o.dump_logits, {o.model.model}, "--dump-logits");
  const llm::Model model = llm::Model::load(o.model.model, o.model.load_options());
  llm::Context ctx(model, context_options(o.model));
  const std::vector<std::int32_t> prompt =
      o.tokens.empty() ? model.tokenize(o.prompt, !o.no_bos) : parse_token_list(o.tokens);
  if (prompt.empty()) throw UsageError("the prompt is empty after tokenization");
  for (const std::int32_t t : prompt)
    if (t >= model.config().vocab)
      throw UsageError("--tokens: id " + std::to_string(t) + " is outside the vocabulary of " +
                       std::to_string(model.config().vocab));
  if (static_cast<int>(prompt.size()) > ctx.n_ctx())
    throw UsageError("the prompt has " + std::to_string(prompt.size()) +
                     " tokens, more than the context of " + std::to_string(ctx.n_ctx()) + " (--ctx)");
  const bool dump = !o.dump_logits.empty();
  llm::GenerationOptions options;
  options.max_tokens = o.n;
  options.sampling = o.sampling.options(model);
  options.stops = o.stops;
  options.all_prompt_logits = dump;
  const auto dump_logits = [&](const llm::Context& c) {
    if (!dump) return;
    const auto vocab = static_cast<std::int64_t>(c.vocab_size());
    Tensor logits = Tensor::empty({static_cast<std::int64_t>(prompt.size()), vocab});
    for (std::size_t i = 0; i < prompt.size(); ++i)
      std::copy(c.logits(i), c.logits(i) + vocab, logits.data() + static_cast<std::int64_t>(i) * vocab);
    io::save_npy(o.dump_logits, logits);
  };
  // The count for the next token: what the governor says now (the context's count is the ceiling).
  const std::unique_ptr<Governor> governor = start_governor(o.model.governor, o.model.threads);
  const auto print = [&](std::string_view s) {
    if (governor) ctx.set_threads(governor->threads());
    if (!o.json) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  const llm::Generation g = llm::generate(model, ctx, prompt, options, print, dump_logits);
  const double prompt_seconds = g.prompt_seconds, gen_seconds = g.generation_seconds;
  const std::vector<std::int32_t>& generated = g.tokens;
  const std::string& text = g.text;
  if (o.json) {
    nlohmann::json j;
    j["prompt_tokens"] = prompt.size();
    j["tokens"] = generated.size();
    j["token_ids"] = generated;
    j["text"] = text;
    j["stop_reason"] = llm::stop_reason_name(g);
    j["prompt_tokens_per_second"] = static_cast<double>(prompt.size()) / std::max(prompt_seconds, 1e-9);
    j["tokens_per_second"] =
        generated.empty() ? 0.0 : static_cast<double>(generated.size()) / std::max(gen_seconds, 1e-9);
    // Invalid UTF-8 (a token can end inside a character) is replaced rather than refused.
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    std::fprintf(
        stderr, "cpudl: prompt %zu tokens, %.1f tokens/s; generated %zu tokens, %.1f tokens/s\n",
        prompt.size(), static_cast<double>(prompt.size()) / std::max(prompt_seconds, 1e-9), generated.size(),
        generated.empty() ? 0.0 : static_cast<double>(generated.size()) / std::max(gen_seconds, 1e-9));
  }
  return 0;
}

struct TokenizeOptions {
  std::string model, text, file;
  bool no_bos = false, json = false;
};

int run_tokenize(TokenizeOptions o) {
  if (o.text.empty() == o.file.empty())
    throw UsageError(
        "give the text as an argument or as -f FILE (- for standard input), exactly one of them");
  if (!o.file.empty()) o.text = read_prompt_file(o.file);
  const llm::Model model = llm::Model::load(o.model, {false});  // tokenizer only: no panels
  const auto ids = model.tokenize(o.text, !o.no_bos);
  if (o.json) {  // each token with the bytes it stands for (a piece can end inside a character)
    nlohmann::json all = nlohmann::json::array();
    for (const auto id : ids) all.push_back({{"id", id}, {"piece", model.token_text(id)}});
    std::printf("%s\n", all.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::string line;
  for (const auto id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
  std::printf("%s\n", line.c_str());
  return 0;
}

struct PerplexityOptions {
  ModelFlags model;
  std::string file, tokens;
  bool json = false;
};

int run_perplexity(PerplexityOptions o) {
  if (o.file.empty() == o.tokens.empty())
    throw UsageError(
        "give the text as -f FILE (- for standard input) or its ids as --tokens ID,ID,... (exactly one)");
  const llm::Model model = llm::Model::load(o.model.model, o.model.load_options());
  // llama.cpp's default context for perplexity, within the model's own
  if (o.model.ctx == 0) o.model.ctx = std::min(512, static_cast<int>(model.config().context_length));
  llm::Context ctx(model, context_options(o.model));
  const bool from_text = !o.file.empty();
  const std::vector<std::int32_t> tokens =
      from_text ? model.tokenize(read_prompt_file(o.file), true, false) : parse_token_list(o.tokens);
  for (const std::int32_t t : tokens)
    if (t >= model.config().vocab)
      throw UsageError("--tokens: id " + std::to_string(t) + " is outside the vocabulary of " +
                       std::to_string(model.config().vocab));
  const auto start = std::chrono::steady_clock::now();
  const llm::Perplexity p = llm::perplexity(
      model, ctx, tokens, ctx.n_ctx(), from_text, [&](std::size_t c, std::size_t chunks, double ppl) {
        if (o.json) return;
        std::fprintf(stderr, "%s[%zu/%zu]%.6g", c == 0 ? "" : ",", c + 1, chunks, ppl);
        if (c + 1 == chunks) std::fprintf(stderr, "\n");
      });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (o.json) {
    std::printf("%s\n", nlohmann::ordered_json{{"ppl", p.ppl},
                                               {"ppl_error", p.ppl_error},
                                               {"mean_nll", p.mean_nll},
                                               {"tokens", tokens.size()},
                                               {"scored", p.scored},
                                               {"ctx", ctx.n_ctx()},
                                               {"chunks", p.running},
                                               {"seconds", seconds}}
                            .dump()
                            .c_str());
  } else {
    std::printf("Final estimate: PPL = %.6g +/- %.4g (%lld tokens scored in %zu chunks of %d, %.1f s)\n",
                p.ppl, p.ppl_error, static_cast<long long>(p.scored), p.running.size(), ctx.n_ctx(), seconds);
  }
  return 0;
}

struct DetokenizeOptions {
  std::string model;
  std::vector<std::string> ids;
};

// Token ids, as `tokenize` prints them (spaces) or comma-separated, back to text.
int run_detokenize(const DetokenizeOptions& o) {
  std::string list;
  for (const std::string& item : o.ids) list += (list.empty() ? "" : ",") + item;
  std::replace(list.begin(), list.end(), ' ', ',');
  const std::vector<std::int32_t> ids = parse_token_list(list, "detokenize");
  const llm::Model model = llm::Model::load(o.model, {false});  // tokenizer only: no panels
  for (const std::int32_t id : ids)
    if (id >= model.config().vocab)
      throw UsageError("detokenize: id " + std::to_string(id) + " is outside the vocabulary of " +
                       std::to_string(model.config().vocab));
  const std::string text = model.detokenize(ids);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
  return 0;
}

struct ChatOptions {
  ModelFlags model;
  SamplingFlags sampling;
  std::string system, format, history;
  bool no_history = false;
  int n = 512;
  int interrupt_after = 0;  // testing: raise SIGINT after this many tokens of the first reply
};

volatile std::sig_atomic_t g_chat_interrupted = 0;
void on_chat_interrupt(int) { g_chat_interrupted = 1; }

const char* const kChatHelp =
    "commands: /help (this list), /reset (forget the conversation), /save FILE (the conversation as JSON); "
    "Ctrl-C stops the reply being written, Ctrl-D (end of input) ends the chat";

int run_chat(const ChatOptions& o) {
  const llm::Model model = llm::Model::load(o.model.model, o.model.load_options());
  llm::Context ctx(model, context_options(o.model));
  const bool spm = model.config().tokenizer == "llama";
  const llm::ChatFormat format = o.format.empty() ? llm::detect_chat_format(model.chat_template(), spm)
                                                  : llm::parse_chat_format(o.format);
  std::fprintf(stderr, "cpudl: chat with %s (%s template); /help for commands, end with Ctrl-D\n",
               model.config().name.c_str(), llm::chat_format_name(format));
  llm::Sampler sampler(o.sampling.options(model));
  const std::unique_ptr<Governor> governor = start_governor(o.model.governor, o.model.threads);
  // Ctrl-C while a reply is written stops that reply only; at the prompt it ends the read (the
  // handler does not restart it), so it ends the chat as end of input does.
  struct sigaction action {};
  action.sa_handler = on_chat_interrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);

  std::vector<llm::ChatMessage> messages;  // the conversation, for /save and to rebuild the context
  if (!o.system.empty()) messages.push_back({"system", o.system});
  std::vector<std::int32_t> history;
  bool first = true;
  const auto forget = [&] {
    messages.resize(o.system.empty() ? 0 : 1);
    ctx.reset();
    history.clear();
    first = true;
  };
  LineReader reader("> ", o.no_history ? "" : o.history.empty() ? default_chat_history_file() : o.history);
  for (std::optional<std::string> typed; (typed = reader.read());) {
    const std::string& line = *typed;
    if (line.empty()) continue;
    if (line[0] == '/') {
      const std::string command = line.substr(0, line.find(' '));
      const std::string argument = line.find(' ') == std::string::npos ? "" : line.substr(line.find(' ') + 1);
      if (command == "/help") {
        std::fprintf(stderr, "%s\n", kChatHelp);
      } else if (command == "/reset") {
        forget();
        std::fprintf(stderr, "cpudl: conversation forgotten\n");
      } else if (command == "/save" && !argument.empty()) {
        nlohmann::json all = nlohmann::json::array();
        for (const auto& m : messages) all.push_back({{"role", m.role}, {"content", m.content}});
        try {
          io::write_file_atomically(argument, nlohmann::json{{"messages", all}}.dump(1) + "\n");
          std::fprintf(stderr, "cpudl: saved %zu messages to %s\n", messages.size(), argument.c_str());
        } catch (const Error& e) {
          std::fprintf(stderr, "cpudl: error: %s\n", e.what());
        }
      } else {
        std::fprintf(stderr, "cpudl: unknown command %s; %s\n", line.c_str(), kChatHelp);
      }
      continue;
    }
    messages.push_back({"user", line});
    std::vector<std::int32_t> turn =
        model.tokenize(llm::format_user_turn(format, o.system, line, first), first);
    // Room for the turn and a reply: when the context cannot hold them, the oldest exchanges go
    // (the system prompt stays) until the conversation takes at most half of it, and the context
    // is rebuilt from what remains, as llama.cpp's context shift keeps a chat going.
    const int room = std::min(o.n, ctx.n_ctx() / 4);
    if (ctx.n_past() + static_cast<int>(turn.size()) + room >= ctx.n_ctx()) {
      std::size_t dropped = 0;
      std::vector<std::int32_t> rebuilt;
      for (;;) {
        rebuilt = model.tokenize(llm::format_conversation(format, messages), true);
        const std::size_t oldest = o.system.empty() ? 0 : 1;
        if (static_cast<int>(rebuilt.size()) <= ctx.n_ctx() / 2 || messages.size() <= oldest + 1) break;
        messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(oldest));  // the oldest user message
        if (messages.size() > oldest + 1 && messages[oldest].role == "assistant")
          messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(oldest));  // and its reply
        ++dropped;
      }
      if (static_cast<int>(rebuilt.size()) + 1 >= ctx.n_ctx()) {
        messages.pop_back();
        std::fprintf(stderr,
                     "cpudl: that message takes %zu tokens, the whole context of %d (--ctx to enlarge)\n",
                     rebuilt.size(), ctx.n_ctx());
        continue;
      }
      std::fprintf(stderr, "cpudl: the context of %d tokens was full: dropped the %zu oldest exchange%s\n",
                   ctx.n_ctx(), dropped, dropped == 1 ? "" : "s");
      ctx.reset();
      history.clear();
      turn = std::move(rebuilt);
    }
    first = false;
    ctx.eval(turn);
    history.insert(history.end(), turn.begin(), turn.end());
    bool ended = false;
    std::string reply;
    g_chat_interrupted = 0;
    for (int i = 0; i < o.n && ctx.n_past() < ctx.n_ctx() && !g_chat_interrupted; ++i) {
      const std::int32_t next = sampler.sample(ctx.logits(), ctx.vocab_size(), history);
      history.push_back(next);
      if (governor) ctx.set_threads(governor->threads());
      ctx.eval(std::span(&next, 1));  // keeps the cache in step with the history, end token included
      if (model.is_end_of_generation(next)) {
        ended = true;
        break;
      }
      if (o.interrupt_after > 0 && i + 1 == o.interrupt_after && messages.size() <= 2) std::raise(SIGINT);
      const std::string piece = model.token_text(next);
      reply += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (g_chat_interrupted) std::fprintf(stderr, "\ncpudl: reply stopped (Ctrl-C)\n");
    g_chat_interrupted = 0;
    std::printf("\n");
    std::fflush(stdout);
    messages.push_back({"assistant", reply});
    if (!ended) {  // cut short: close the reply in the history as the template expects
      const auto close = model.tokenize(llm::format_assistant_end(format), false);
      if (ctx.n_past() + static_cast<int>(close.size()) < ctx.n_ctx()) ctx.eval(close);
    }
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* g = app.add_subcommand("generate", "Generate text with a Llama-family GGUF model");
  add_model_flags(g, o->model);
  g->add_option("-p,--prompt", o->prompt, "Prompt text");
  g->add_option("-f,--file", o->file, "Prompt from this file (- reads standard input)");
  g->add_option("--tokens", o->tokens, "Prompt as token ids, comma-separated (instead of -p)");
  g->add_option("-n,--n-predict", o->n, "Tokens to generate (default 128)")->check(in_range(0, 1 << 24));
  add_sampling_flags(g, o->sampling);
  g->add_option("--stop", o->stops, "Stop when the output contains this text (repeatable)");
  g->add_option("--dump-logits", o->dump_logits,
                "Write the logits of every prompt position to this .npy file");
  g->add_flag("--no-bos", o->no_bos, "Do not add the BOS token to the prompt");
  g->add_flag("--json", o->json, "One JSON object at the end instead of streamed text");
  g->callback([&action, o] {
    action = [o] {
      use_threads(o->model.threads);  // 0: the default
      apply_bind(o->model.bind);
      return run_generate(*o);
    };
  });
}

void add_tokenize_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* t =
      app.add_subcommand("tokenize", "Print the token ids of a text, with a GGUF model's tokenizer");
  t->add_option("-m,--model", o->model, "Model file (.gguf)")->required();
  t->add_option("text", o->text, "Text to tokenize (or -f)");
  t->add_option("-f,--file", o->file, "Tokenize this file's text (- reads standard input)");
  t->add_flag("--no-bos", o->no_bos, "Do not add the BOS token");
  t->add_flag("--json", o->json, "One JSON array of {id, piece} (the bytes each token stands for)");
  t->callback([&action, o] { action = [o] { return run_tokenize(*o); }; });
}

void add_perplexity_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<PerplexityOptions>();
  CLI::App* p = app.add_subcommand(
      "perplexity", "Perplexity of a text under a GGUF model, computed as llama.cpp's perplexity tool does");
  add_model_flags(p, o->model);
  p->add_option("-f,--file", o->file, "The text (- reads standard input)");
  p->add_option("--tokens", o->tokens,
                "The text as token ids, comma-separated (instead of -f; no BOS put in)");
  p->add_flag("--json", o->json,
              "One JSON object: ppl, ppl_error, mean_nll, tokens, scored, ctx, chunks, seconds");
  p->callback([&action, o] {
    action = [o] {
      use_threads(o->model.threads);
      apply_bind(o->model.bind);
      return run_perplexity(*o);
    };
  });
}

void add_detokenize_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<DetokenizeOptions>();
  CLI::App* d =
      app.add_subcommand("detokenize", "Print the text of token ids, with a GGUF model's tokenizer");
  d->add_option("-m,--model", o->model, "Model file (.gguf)")->required();
  d->add_option("ids", o->ids, "Token ids, space- or comma-separated (as tokenize prints them)")->required();
  d->callback([&action, o] { action = [o] { return run_detokenize(*o); }; });
}

void add_chat_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* c =
      app.add_subcommand("chat", "Interactive chat with a GGUF model (one message per line on stdin)");
  add_model_flags(c, o->model);
  add_sampling_flags(c, o->sampling);
  c->add_option("--system", o->system, "System prompt");
  c->add_option("--template", o->format,
                "Chat format: chatml, llama2, llama3 or phi3 (default: from the model)");
  c->add_option(
      "--history", o->history,
      "At a terminal, keep the typed lines in this file (default ~/.local/state/cpudl/chat_history)");
  c->add_flag("--no-history", o->no_history, "Keep no history file");
  c->add_option("--interrupt-after", o->interrupt_after,
                "Testing: act as if Ctrl-C came after N tokens of the first reply")
      ->check(in_range(1, 1 << 24));
  c->add_option("-n,--n-predict", o->n, "At most this many tokens per reply (default 512)")
      ->check(in_range(1, 1 << 24));
  c->callback([&action, o] {
    action = [o] {
      use_threads(o->model.threads);  // 0: the default
      apply_bind(o->model.bind);
      return run_chat(*o);
    };
  });
}

}  // namespace cpudl::cli
