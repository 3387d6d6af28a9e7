// `cpudl generate`, `tokenize`, `chat`, `quantize` and `bench llm` end to end, on the generated
// tiny models: outputs checked against the NumPy reference and the tokenizer, and every kind of
// bad input answered with one line and a non-zero exit.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_sandbox.h"
#include "cpudl/io.h"
#include "llm/gguf/gguf.h"

namespace cpudl {
namespace {

using testing::CliSandbox;
using testing::slurp;
const std::string kDir = CPUDL_LLM_FIXTURES_DIR;

std::string token_list(const std::string& model) {
  std::ifstream in(kDir + "/" + model + ".tokens");
  std::string ids, id;
  while (in >> id) ids += (ids.empty() ? "" : ",") + id;
  return ids;
}

class LlmCli : public CliSandbox {};

TEST_F(LlmCli, DumpLogitsMatchesTheReference) {
  const auto r = run("generate -m " + kDir + "/tiny-llama-f32.gguf --tokens " + token_list("tiny-llama") +
                     " -n 0 --cache-type f32 --dump-logits " + path("logits.npy"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Tensor got = io::load_npy(path("logits.npy"));
  const Tensor want = io::load_npy(kDir + "/tiny-llama-f32.logits.npy");
  ASSERT_EQ(got.shape(), want.shape());
  double err = 0, norm = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    err += (got.data()[i] - want.data()[i]) * static_cast<double>(got.data()[i] - want.data()[i]);
    norm += static_cast<double>(want.data()[i]) * want.data()[i];
  }
  EXPECT_LT(std::sqrt(err / norm), 1e-4);
}

TEST_F(LlmCli, GreedyGenerationIsReproducibleAndReportsJson) {
  const std::string cmd =
      "generate -m " + kDir + "/tiny-qwen2-q8_0.gguf -p 'def main():' -n 12 --temp 0 --json";
  const auto a = run(cmd), b = run(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto j = nlohmann::json::parse(a.out);
  EXPECT_EQ(j["tokens"], 12);
  EXPECT_EQ(j["token_ids"].size(), 12u);
  EXPECT_GT(j["prompt_tokens"].get<int>(), 1);
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0);
  EXPECT_GT(j["prompt_tokens_per_second"].get<double>(), 0);
  EXPECT_EQ(nlohmann::json::parse(b.out)["token_ids"], j["token_ids"]);
  // The streamed text is the detokenized ids, and sampling with a seed is reproducible too.
  const auto s1 = run("generate -m " + kDir +
                      "/tiny-llama-q4_0.gguf -p Hello -n 8 --seed 5 --temp 1.5 --top-k 0 --min-p 0");
  const auto s2 = run("generate -m " + kDir +
                      "/tiny-llama-q4_0.gguf -p Hello -n 8 --seed 5 --temp 1.5 --top-k 0 --min-p 0");
  ASSERT_EQ(s1.exit_code, 0) << s1.err;
  EXPECT_EQ(s1.out, s2.out);
  EXPECT_NE(s1.err.find("generated 8 tokens"), std::string::npos) << s1.err;
}

TEST_F(LlmCli, StopStringEndsGenerationWithoutPrintingIt) {
  const auto full = run("generate -m " + kDir + "/tiny-llama-q8_0.gguf -p Hi -n 16 --temp 0 --json");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const std::string text = nlohmann::json::parse(full.out)["text"];
  ASSERT_GT(text.size(), 6u);
  const std::string stop = text.substr(text.size() / 2, 3);
  const auto cut =
      run("generate -m " + kDir + "/tiny-llama-q8_0.gguf -p Hi -n 16 --temp 0 --json --stop '" + stop + "'");
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  const std::string cut_text = nlohmann::json::parse(cut.out)["text"];
  EXPECT_EQ(cut_text, text.substr(0, text.find(stop)));
  EXPECT_EQ(nlohmann::json::parse(cut.out)["stop_reason"], "stop");
  EXPECT_EQ(nlohmann::json::parse(full.out)["stop_reason"], "length");
}

// The stop reason "eos": a logit bias that makes the end token certain ends at once, and
// --ignore-eos forbids it so the budget is spent. Bad biases are usage errors.
TEST_F(LlmCli, EndTokenStopsAndLogitBiasSteers) {
  const std::string file = kDir + "/tiny-llama-q8_0.gguf";
  const std::string eos = std::to_string(llm::GgufFile::open(file).get_int("tokenizer.ggml.eos_token_id"));
  const std::string m = " -m " + file + " -p Hi -n 12 --temp 0 --json";
  const auto ended = run("generate" + m + " --logit-bias " + eos + "+1000");
  ASSERT_EQ(ended.exit_code, 0) << ended.err;
  auto j = nlohmann::json::parse(ended.out);
  EXPECT_EQ(j["stop_reason"], "eos");
  EXPECT_EQ(j["tokens"], 0);  // the end token is not part of the reply
  EXPECT_EQ(j["text"], "");
  const auto ignored = run("generate" + m + " -l " + eos + "+1000 --ignore-eos");
  ASSERT_EQ(ignored.exit_code, 0) << ignored.err;
  j = nlohmann::json::parse(ignored.out);
  EXPECT_EQ(j["stop_reason"], "length");
  EXPECT_EQ(j["tokens"], 12);
  // A bias steers greedy decoding: forbid the first greedy token and another one comes first.
  const auto plain = nlohmann::json::parse(run("generate" + m).out);
  const int first = plain["token_ids"][0];
  const auto steered = run("generate" + m + " --logit-bias " + std::to_string(first) + "-inf");
  ASSERT_EQ(steered.exit_code, 0) << steered.err;
  EXPECT_NE(nlohmann::json::parse(steered.out)["token_ids"][0], first);
  for (const std::string bad : {"abc", "5", "5*2", "99999999+1", "-3+1", "5+x"}) {
    const auto r = run("generate" + m + " --logit-bias " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find("--logit-bias " + bad), std::string::npos) << r.err;
  }
}

// llama.cpp's habits: -f FILE (- for stdin), -c, -s, --temperature, tokenize --json, detokenize,
// and the stop reason "context" when the context fills before the budget.
TEST_F(LlmCli, LlamaCppFlagsAndTokenTools) {
  const std::string m = " -m " + kDir + "/tiny-llama-q8_0.gguf";
  std::ofstream(path("prompt.txt")) << "Once upon a time";
  const auto inline_prompt = run("generate" + m + " -p 'Once upon a time' -n 6 --temp 0 --json"),
             from_file = run("generate" + m + " -f " + path("prompt.txt") + " -n 6 --temp 0 --json"),
             from_stdin = run("generate" + m + " -f - -n 6 --temp 0 --json < " + path("prompt.txt"));
  ASSERT_EQ(inline_prompt.exit_code, 0) << inline_prompt.err;
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  ASSERT_EQ(from_stdin.exit_code, 0) << from_stdin.err;
  const auto want = nlohmann::json::parse(inline_prompt.out);
  EXPECT_EQ(nlohmann::json::parse(from_file.out)["token_ids"], want["token_ids"]);
  EXPECT_EQ(nlohmann::json::parse(from_stdin.out)["token_ids"], want["token_ids"]);
  EXPECT_EQ(nlohmann::json::parse(from_file.out)["prompt_tokens"], want["prompt_tokens"]);
  EXPECT_EQ(run("generate" + m + " -p hi -f " + path("prompt.txt")).exit_code, 2);  // two prompts

  // The short names and aliases are the long flags: same sampled text.
  const std::string q4 = " -m " + kDir + "/tiny-llama-q4_0.gguf -p Hello -n 8 --top-k 0 --min-p 0 --top-p 1";
  const auto long_names = run("generate" + q4 + " --seed 5 --temp 50 --ctx 64"),
             short_names = run("generate" + q4 + " -s 5 --temperature 50 -c 64"),
             other_seed = run("generate" + q4 + " -s 6 --temperature 50 -c 64");
  ASSERT_EQ(short_names.exit_code, 0) << short_names.err;
  EXPECT_EQ(short_names.out, long_names.out);
  EXPECT_NE(other_seed.out, long_names.out);  // -s reaches the sampler

  // A context of 8 fills before 100 tokens: the reason says so.
  const auto full = run("generate" + m + " -p hi -n 100 -c 8 --temp 0 --json");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const auto j = nlohmann::json::parse(full.out);
  EXPECT_EQ(j["stop_reason"], "context");
  EXPECT_EQ(j["prompt_tokens"].get<int>() + j["tokens"].get<int>(),
            9);  // the last sampled token is not evaluated

  // tokenize --json: Llama 2's ids with the bytes each stands for; detokenize inverts tokenize.
  const auto pieces = run("tokenize --json" + m + " 'Hello world'");
  ASSERT_EQ(pieces.exit_code, 0) << pieces.err;
  EXPECT_EQ(nlohmann::json::parse(pieces.out),
            nlohmann::json::parse(
                R"([{"id":1,"piece":""},{"id":15043,"piece":" Hello"},{"id":3186,"piece":" world"}])"));
  std::ofstream(path("text.txt")) << "The tokenizer's round trip, with punctuation: 42!";
  const auto ids = run("tokenize" + m + " --no-bos -f " + path("text.txt"));
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  const std::string spaced = ids.out.substr(0, ids.out.find('\n'));
  const auto back = run("detokenize" + m + " " + spaced);
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out, "The tokenizer's round trip, with punctuation: 42!\n");
  std::string commas = spaced;
  std::replace(commas.begin(), commas.end(), ' ', ',');
  EXPECT_EQ(run("detokenize" + m + " " + commas).out, back.out);
  EXPECT_EQ(run("detokenize" + m + " 1,x").exit_code, 2);
  EXPECT_EQ(run("detokenize" + m + " 32000").exit_code, 2);  // one past the vocabulary
}

// perplexity over the fixture's tokens in one chunk: llama.cpp's scoring (the chunk's second half)
// of the NumPy reference's float64 logits, and a text in several chunks.
TEST_F(LlmCli, PerplexityScoresTheSecondHalfOfEachChunkAsTheReferenceDoes) {
  const std::string ids = token_list("tiny-llama");
  const std::size_t n = static_cast<std::size_t>(std::count(ids.begin(), ids.end(), ',') + 1);
  const auto r = run("perplexity --json -m " + kDir + "/tiny-llama-f32.gguf --cache-type f32 --tokens " +
                     ids + " -c " + std::to_string(n));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const Tensor logits = io::load_npy(kDir + "/tiny-llama-f32.logits.npy");  // [n, vocab]: NumPy, in float64
  std::vector<std::int64_t> tokens;
  std::stringstream ss(ids);
  for (std::string t; std::getline(ss, t, ',');) tokens.push_back(std::stoll(t));
  const std::int64_t vocab = logits.size(1);
  double nll = 0;
  int scored = 0;
  for (std::size_t i = n / 2; i + 1 < n; ++i) {
    const float* row = logits.data() + static_cast<std::int64_t>(i) * vocab;
    double top = row[0], sum = 0;
    for (std::int64_t v = 0; v < vocab; ++v) top = std::max(top, static_cast<double>(row[v]));
    for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - top);
    nll += std::log(sum) + top - row[tokens[i + 1]];
    ++scored;
  }
  EXPECT_EQ(j["scored"], scored);
  EXPECT_NEAR(j["mean_nll"].get<double>(), nll / scored, 1e-3 * std::fabs(nll / scored));
  EXPECT_EQ(j["ctx"], n);

  std::string text;
  for (int i = 0; i < 40; ++i) text += "The quick brown fox jumps over the lazy dog. ";
  std::ofstream(path("text.txt")) << text;
  const auto t =
      run("perplexity --json -m " + kDir + "/tiny-llama-q8_0.gguf -f " + path("text.txt") + " -c 64");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const auto k = nlohmann::json::parse(t.out);
  EXPECT_EQ(k["chunks"].size(), k["tokens"].get<std::size_t>() / 64);
  EXPECT_EQ(k["scored"], k["chunks"].size() * 31);  // tokens 33..63 of each chunk
  EXPECT_NEAR(k["ppl"].get<double>(), std::exp(k["mean_nll"].get<double>()), 1e-9 * k["ppl"].get<double>());
  EXPECT_EQ(k["chunks"].back(), k["ppl"]);
  const auto short_text = run("perplexity -m " + kDir + "/tiny-llama-q8_0.gguf --tokens 1,2,3 -c 64");
  EXPECT_EQ(short_text.exit_code, 2);
  EXPECT_NE(short_text.err.find("do not fill one chunk"), std::string::npos) << short_text.err;
}

TEST_F(LlmCli, TokenizePrintsTheLlama2Ids) {
  const auto r = run("tokenize -m " + kDir + "/tiny-llama-f16.gguf 'Hello world'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1 15043 3186\n");  // BOS, "▁Hello", "▁world" in Llama 2's vocabulary
}

TEST_F(LlmCli, ChatAnswersEachLineWithTheModelsTemplate) {
  std::ofstream(path("in.txt")) << "Hello\nHow are you?\n";
  const auto r = run("chat -m " + kDir + "/tiny-qwen2-q4_0.gguf -n 4 --temp 0 < " + path("in.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("chatml template"), std::string::npos) << r.err;  // byte-level BPE without a template
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
}

// /reset forgets (the same greedy reply again), /save writes the conversation, /help and unknown
// commands answer on stderr; a full context drops the oldest exchanges and the chat goes on.
TEST_F(LlmCli, ChatCommandsAndContextShift) {
  const std::string m = " -m " + kDir + "/tiny-qwen2-q4_0.gguf --temp 0";
  std::ofstream(path("in.txt")) << "Hello\n/help\n/save " << path("conv.json") << "\n/reset\nHello\n/bogus\n";
  const auto r = run("chat" + m + " -n 6 < " + path("in.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream out(r.out);
  std::string first, second;
  std::getline(out, first);
  std::getline(out, second);
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(first, second) << "after /reset the same message gets the same greedy reply";
  EXPECT_NE(r.err.find("/reset (forget the conversation)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown command /bogus"), std::string::npos) << r.err;
  const auto saved = nlohmann::json::parse(slurp(path("conv.json")))["messages"];
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0]["role"], "user");
  EXPECT_EQ(saved[0]["content"], "Hello");
  EXPECT_EQ(saved[1]["role"], "assistant");
  EXPECT_EQ(saved[1]["content"], first);

  // A context of 64 tokens holds two or three exchanges: the chat answers all six lines.
  std::ofstream(path("long.txt")) << "one two three four five\nsix seven eight nine ten\neleven twelve\n"
                                     "thirteen fourteen\nfifteen\nsixteen\n"
                                  << std::string(300, 'x') << "\nseventeen\n";
  const auto shifted = run("chat" + m + " -n 20 -c 64 < " + path("long.txt"));
  ASSERT_EQ(shifted.exit_code, 0) << shifted.err;
  EXPECT_EQ(std::count(shifted.out.begin(), shifted.out.end(), '\n'), 7)
      << shifted.out;  // 8 lines, one too long
  EXPECT_NE(shifted.err.find("was full: dropped the"), std::string::npos) << shifted.err;
  EXPECT_NE(shifted.err.find("the whole context of 64"), std::string::npos) << shifted.err;
}

// Ctrl-C while a reply is written stops that reply (the real SIGINT handler: --interrupt-after
// raises the signal after N tokens); the next message is still answered, in full.
TEST_F(LlmCli, CtrlCStopsOnlyTheCurrentReply) {
  const std::string m = " -m " + kDir + "/tiny-llama-q8_0.gguf --temp 0 --repeat-penalty 1 -n 40";
  std::ofstream(path("in.txt")) << "Hello\nHello\n";
  const auto plain = run("chat" + m + " < " + path("in.txt"));
  const auto stopped = run("chat" + m + " --interrupt-after 5 < " + path("in.txt"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_NE(stopped.err.find("cpudl: reply stopped (Ctrl-C)"), std::string::npos) << stopped.err;
  std::istringstream a(plain.out), b(stopped.out);
  std::string a1, b1, b2;
  std::getline(a, a1);
  std::getline(b, b1);
  std::getline(b, b2);
  EXPECT_LT(b1.size(), a1.size());             // the first reply was cut short ...
  EXPECT_EQ(a1.compare(0, b1.size(), b1), 0);  // ... after its first tokens
  EXPECT_FALSE(b2.empty()) << "the next message was answered";
}

// ||got - want|| / ||want|| over two logits arrays of the same size.
double relative_l2(const Tensor& got, const Tensor& want) {
  double err = 0, norm = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    err += (got.data()[i] - want.data()[i]) * static_cast<double>(got.data()[i] - want.data()[i]);
    norm += static_cast<double>(want.data()[i]) * want.data()[i];
  }
  return std::sqrt(err / norm);
}

TEST_F(LlmCli, QuantizeWritesAModelThatStillAgreesWithTheReference) {
  for (const char* type : {"q8_0", "q4_k", "q6_k", "f16", "bf16"}) {
    SCOPED_TRACE(type);
    const auto q = run("quantize " + kDir + "/tiny-llama-f32.gguf " + path("m.gguf") + " --type " + type);
    ASSERT_EQ(q.exit_code, 0) << q.err;
    const llm::GgufFile f = llm::GgufFile::open(path("m.gguf"));
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
    const auto r = run("generate -m " + path("m.gguf") + " --tokens " + token_list("tiny-llama") +
                       " -n 0 --dump-logits " + path("l.npy"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // 4-bit weights move the logits most: still well correlated with the float model's.
    EXPECT_LT(relative_l2(io::load_npy(path("l.npy")), io::load_npy(kDir + "/tiny-llama-f32.logits.npy")),
              std::string(type) == "q4_k" ? 0.25 : 0.06);
  }
}

// --type q4_k_m is llama.cpp's mix: Q6_K for the output matrix and, in the first and last eighth of
// the layers and every third between, the attention values and down projections; Q4_K elsewhere.
// Two layers: layer 1 (>= 7/8 of 2) takes the Q6_K ones, layer 0 does not.
TEST_F(LlmCli, QuantizeQ4_K_MMixesQ6_KIntoTheTensorsLlamaCppGivesIt) {
  const auto q = run("quantize " + kDir + "/tiny-qwen2-f32.gguf " + path("m.gguf") + " --type q4_k_m");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const llm::GgufFile f = llm::GgufFile::open(path("m.gguf"));
  EXPECT_EQ(f.get_int("general.file_type"), 15);
  const auto type = [&](const char* name) {
    const llm::GgufTensor* t = f.find_tensor(name);
    return t ? t->type : GgmlType::f32;
  };
  EXPECT_EQ(type("output.weight"), GgmlType::q6_k);
  EXPECT_EQ(type("token_embd.weight"), GgmlType::q4_k);
  EXPECT_EQ(type("blk.0.attn_v.weight"), GgmlType::q4_k);
  EXPECT_EQ(type("blk.0.ffn_down.weight"), GgmlType::q4_k);
  EXPECT_EQ(type("blk.1.attn_v.weight"), GgmlType::q6_k);
  EXPECT_EQ(type("blk.1.ffn_down.weight"), GgmlType::q6_k);
  EXPECT_EQ(type("blk.1.attn_q.weight"), GgmlType::q4_k);
  EXPECT_EQ(type("blk.1.ffn_up.weight"), GgmlType::q4_k);
  const auto r = run("generate -m " + path("m.gguf") + " --tokens " + token_list("tiny-qwen2") +
                     " -n 0 --dump-logits " + path("l.npy"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(relative_l2(io::load_npy(path("l.npy")), io::load_npy(kDir + "/tiny-qwen2-f32.logits.npy")),
            0.25);
  // The prompt over the Q4_K panels (VNNI CPUs: Q8_K activations, q4_kx16_q8_k_gemm) against the
  // float path over the mapped rows (--no-repack): only the activations' 8-bit rounding between
  // them (about 1% of the logits), where a wrong panel product would be as far off as the weights.
  const auto u = run("generate -m " + path("m.gguf") + " --tokens " + token_list("tiny-qwen2") +
                     " -n 0 --no-repack --dump-logits " + path("u.npy"));
  ASSERT_EQ(u.exit_code, 0) << u.err;
  EXPECT_LT(relative_l2(io::load_npy(path("l.npy")), io::load_npy(path("u.npy"))), 0.03);
}

// No command writes over one of its inputs: `quantize m.gguf ./m.gguf` once replaced a 78 MB model
// with its 12 MB quantisation. The same file is found by device and inode, so another spelling, a
// hard link or a symbolic link does not hide it; the input is untouched and the exit is 2.
TEST_F(LlmCli, NoCommandWritesOverItsInput) {
  std::filesystem::copy_file(kDir + "/tiny-llama-f32.gguf", path("m.gguf"));
  std::filesystem::create_hard_link(path("m.gguf"), path("hard.gguf"));
  std::filesystem::create_symlink(path("m.gguf"), path("soft.gguf"));
  io::save_npy(path("x.npy"), Tensor::zeros({1, 1, 28, 28}));
  const std::string model = io::read_file(path("m.gguf")), input = io::read_file(path("x.npy"));
  const std::string lenet = std::string(CPUDL_FIXTURES_DIR) + "/../onnx/lenet5_opset17.onnx";
  for (const std::string& command : {
           "quantize " + path("m.gguf") + " " + dir.string() + "/./m.gguf --type q4_0",
           "quantize " + path("m.gguf") + " " + path("hard.gguf") + " --type q8_0",
           "quantize " + path("soft.gguf") + " " + path("m.gguf") + " --type q8_0",
           "generate -m " + path("m.gguf") + " --tokens 1,2 -n 0 --dump-logits " + path("hard.gguf"),
           "run " + lenet + " --input " + path("x.npy") + " --output " + path("x.npy"),
           "train --model lenet5 --data " + path("nowhere") + " --init " + path("m.gguf") + " --out " +
               path("soft.gguf"),
       }) {
    SCOPED_TRACE(command);
    const auto r = run(command);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("is the same file as the input"), std::string::npos) << r.err;
    EXPECT_EQ(io::read_file(path("m.gguf")), model);
    EXPECT_EQ(io::read_file(path("x.npy")), input);
  }
}

TEST_F(LlmCli, BenchLlmReportsRatesAndBandwidthShare) {
  const auto r =
      run("bench llm -m " + kDir + "/tiny-llama-q4_0.gguf --prompt 16 --gen 8 --repetitions 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["prompt_tokens_per_second"].get<double>(), 0);
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0);
  EXPECT_GT(j["pct_bandwidth"].get<double>(), 0);
  EXPECT_EQ(j["weight_type"], "Q4_0");
  // Several sequences at once: an aggregate rate, and a count out of range is a usage error.
  const auto p = run("bench llm -m " + kDir +
                     "/tiny-llama-q4_0.gguf --prompt 0 --gen 4 --parallel 3 --repetitions 1 --json");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto k = nlohmann::json::parse(p.out);
  EXPECT_EQ(k["parallel"], 3);
  EXPECT_GT(k["tokens_per_second"].get<double>(), 0);
  EXPECT_EQ(run("bench llm -m " + kDir + "/tiny-llama-q4_0.gguf --parallel 0").exit_code, 2);
}

// --no-repack (llama.cpp's flag) and CPUDL_LLM_REPACK=off load the model without the panels made
// at load: none of their memory, and the same greedy text from the mapped rows.
TEST_F(LlmCli, NoRepackKeepsOnlyTheMapping) {
  const std::string m = " -m " + kDir + "/tiny-llama-q8_0.gguf";
  const auto packed = run("bench llm" + m + " --prompt 16 --gen 2 --repetitions 1 --json"),
             flag = run("bench llm" + m + " --prompt 16 --gen 2 --repetitions 1 --json --no-repack"),
             env =
                 run("bench llm" + m + " --prompt 16 --gen 2 --repetitions 1 --json", "CPUDL_LLM_REPACK=off");
  ASSERT_EQ(flag.exit_code, 0) << flag.err;
  ASSERT_EQ(env.exit_code, 0) << env.err;
  EXPECT_EQ(nlohmann::json::parse(flag.out)["repacked_bytes"], 0);
  EXPECT_EQ(nlohmann::json::parse(env.out)["repacked_bytes"], 0);
  if (nlohmann::json::parse(packed.out)["repacked_bytes"].get<std::uint64_t>() == 0)
    std::printf("repacking makes no panels on this CPU (no AVX512-VNNI or AMX): only the flag is checked\n");
  const auto a = run("generate" + m + " -p 'Once upon a time' -n 8 --temp 0 --json"),
             b = run("generate" + m + " -p 'Once upon a time' -n 8 --temp 0 --json --no-repack");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["token_ids"], nlohmann::json::parse(b.out)["token_ids"]);
  const auto bad = run("generate" + m + " -p hi -n 1", "CPUDL_LLM_REPACK=maybe");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("CPUDL_LLM_REPACK=maybe: expected on or off"), std::string::npos) << bad.err;
}

// `cpudl info MODEL.gguf` states what loading costs: the KV cache by the model's shape (K and V,
// layers x KV heads x head dim values a token), the tensors as the file holds them, and the
// panels repacking would make -- the bytes `bench llm` then reports as allocated.
TEST_F(LlmCli, InfoStatesWhatLoadingAGgufModelTakes) {
  for (const std::string type : {"q4_0", "q8_0", "f32"}) {
    SCOPED_TRACE(type);
    const std::string m = kDir + "/tiny-llama-" + type + ".gguf";
    const auto r = run("info " + m + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["format"], "gguf");
    const std::uint64_t per_token = 2ull * j["layers"].get<std::uint64_t>() *
                                    j["kv_heads"].get<std::uint64_t>() * j["head_dim"].get<std::uint64_t>();
    EXPECT_EQ(j["kv_cache"]["f16"]["bytes_per_token"], per_token * 2);
    EXPECT_EQ(j["kv_cache"]["f32"]["bytes_per_token"], per_token * 4);
    EXPECT_EQ(j["kv_cache"]["q8_0"]["bytes_per_token"], per_token / 32 * 34);
    std::uint64_t tensors = 0;
    for (const auto& [name, use] : j["tensor_types"].items()) tensors += use["bytes"].get<std::uint64_t>();
    EXPECT_GT(tensors, j["file_bytes"].get<std::uint64_t>() / 2);  // the rest: metadata, the vocabulary
    EXPECT_LE(tensors, j["file_bytes"].get<std::uint64_t>());
    const std::string upper = type == "f32" ? "F32" : type == "q4_0" ? "Q4_0" : "Q8_0";
    EXPECT_TRUE(j["tensor_types"].contains(upper)) << r.out;
    const auto bench = run("bench llm -m " + m + " --prompt 4 --gen 1 --repetitions 1 --json");
    ASSERT_EQ(bench.exit_code, 0) << bench.err;
    EXPECT_EQ(j["repack_bytes"], nlohmann::json::parse(bench.out)["repacked_bytes"]);
    const auto text = run("info " + m);
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_NE(text.out.find("KV cache at"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("repacked at load on this CPU: "), std::string::npos) << text.out;
  }
}

// Lists, as llama-bench takes them: one row per threads x test, the mean and standard deviation of
// the repetitions' rates.
TEST_F(LlmCli, BenchLlmListsGiveOneRowPerThreadsAndTest) {
  const auto r = run("bench llm -m " + kDir +
                     "/tiny-llama-q4_0.gguf --prompt 8,16 --gen 4,0 -t 1,2 --repetitions 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 6u);  // (pp8, pp16, tg4) x (1, 2 threads); gen 0 is no test
  const std::vector<std::pair<int, std::string>> want = {{1, "pp8"}, {1, "pp16"}, {1, "tg4"},
                                                         {2, "pp8"}, {2, "pp16"}, {2, "tg4"}};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i]["threads"], want[i].first);
    EXPECT_EQ(rows[i]["test"], want[i].second);
    const auto samples = rows[i]["samples"].get<std::vector<double>>();
    ASSERT_EQ(samples.size(), 3u);
    double mean = 0, ss = 0;
    for (double v : samples) mean += v / 3;
    for (double v : samples) ss += (v - mean) * (v - mean);
    EXPECT_NEAR(rows[i]["tokens_per_second"].get<double>(), mean, 1e-9 * mean);
    EXPECT_NEAR(rows[i]["stddev"].get<double>(), std::sqrt(ss / 2), 1e-9 * mean);
  }
  const auto table =
      run("bench llm -m " + kDir + "/tiny-llama-q4_0.gguf --prompt 8 --gen 4,8 --repetitions 1");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("| model | size | params | threads | test | t/s |"), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find(" | tg8 | "), std::string::npos) << table.out;
  EXPECT_EQ(run("bench llm -m " + kDir + "/tiny-llama-q4_0.gguf --prompt 8,x").exit_code, 2);
  EXPECT_EQ(run("bench llm -m " + kDir + "/tiny-llama-q4_0.gguf -t 1,0").exit_code, 2);
}

TEST_F(LlmCli, BadInputsGetOneClearLine) {
  const std::string m = kDir + "/tiny-llama-q8_0.gguf";
  struct Case {
    std::string args, message;
    int code;
  };
  // A truncated copy, and a file that is not GGUF at all.
  const std::string bytes = testing::slurp(m);
  std::ofstream(path("cut.gguf"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  std::ofstream(path("text.gguf")) << "not a model\n";
  const Case cases[] = {
      {"generate -m " + path("cut.gguf") + " -p hi", "runs past the end of the data section", 1},
      {"info " + path("cut.gguf"), "runs past the end of the data section", 1},
      {"generate -m " + path("text.gguf") + " -p hi", "not a GGUF file", 1},
      {"generate -m " + path("missing.gguf") + " -p hi", "cannot open", 1},
      {"generate -m " + m + " --tokens 1,99999999", "outside the vocabulary", 2},
      {"generate -m " + m + " --tokens 1,x", "is not a token id", 2},
      {"generate -m " + m + " -p hi --tokens 1", "exactly one of them", 2},
      {"generate -m " + m + " -p 'a b c d e f g h' --ctx 4", "more than the context of 4", 2},
      {"generate -m " + m + " -p hi --cache-type q4", "--cache-type 'q4'", 2},
      {"generate -m " + m + " -p hi --ctx 100000", "exceeds the model's context length", 2},
      {"quantize " + m + " " + path("o.gguf") + " --type q3", "--type 'q3'", 2},
      {"quantize model.onnx " + path("o.gguf") + " --type q8_0", "--type is for GGUF models", 2},
      {"quantize " + path("missing.safetensors") + " " + path("o.gguf") + " --type q8_0", "cannot open", 1},
      {"generate -p hi", "--model is required", 2},
      {"generate -m " + std::string(CPUDL_LLM_VOCAB_DIR) + "/ggml-vocab-falcon.gguf -p hi",
       "architecture 'falcon' is not supported", 1},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const auto r = run(c.args);
    EXPECT_EQ(r.exit_code, c.code);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos);
  }
  EXPECT_FALSE(std::filesystem::exists(path("o.gguf")));
}

TEST_F(LlmCli, MissingTensorAndWrongShapeAreNamed) {
  // Rewrite the tiny model without one tensor, and with one tensor of the wrong shape.
  const llm::GgufFile f = llm::GgufFile::open(kDir + "/tiny-llama-f32.gguf");
  std::vector<llm::GgufWriterValue> meta;
  for (const auto& [k, v] : f.metadata()) meta.push_back({k, v});
  std::vector<llm::GgufWriterTensor> without, reshaped;
  for (const auto& t : f.tensors()) {
    if (t.name != "blk.1.ffn_up.weight") without.push_back({t.name, t.type, t.dims, {t.data, t.bytes}});
    auto dims = t.dims;
    if (t.name == "blk.0.attn_k.weight") std::swap(dims[0], dims[1]);
    reshaped.push_back({t.name, t.type, dims, {t.data, t.bytes}});
  }
  llm::write_gguf(path("without.gguf"), meta, without);
  llm::write_gguf(path("reshaped.gguf"), meta, reshaped);
  auto r = run("generate -m " + path("without.gguf") + " -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tensor 'blk.1.ffn_up.weight' is missing"), std::string::npos) << r.err;
  r = run("generate -m " + path("reshaped.gguf") + " -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tensor 'blk.0.attn_k.weight' has GGUF shape [128, 256], expected [256, 128]"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace cpudl
