// The Llama-family forward pass against the float64 NumPy reference of
// scripts/gen-llm-fixtures.py (Hugging Face conventions, un-permuted Q/K weights): llama and
// qwen2, every weight type and KV-cache type, whole prompts and token by token.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <latch>
#include <thread>

#include "cpudl/error.h"
#include "cpudl/io.h"
#include "cpudl/llm.h"
#include "kernels/dispatch.h"
#include "llm/gguf/gguf.h"

namespace cpudl::llm {
namespace {

const std::filesystem::path kDir = CPUDL_LLM_FIXTURES_DIR;

std::vector<std::int32_t> prompt_tokens(const std::string& model) {
  std::ifstream in(kDir / (model + ".tokens"));
  std::vector<std::int32_t> ids;
  for (std::int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

// Largest relative L2 error over positions: |cpudl - ref| / |ref| per row.
double worst_relative_error(const Context& ctx, const float* ref, std::size_t rows) {
  const auto vocab = static_cast<std::size_t>(ctx.vocab_size());
  double worst = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* got = ctx.logits(r);
    const float* want = ref + r * vocab;
    double err = 0, norm = 0;
    for (std::size_t i = 0; i < vocab; ++i) {
      err += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
      norm += static_cast<double>(want[i]) * want[i];
    }
    worst = std::max(worst, std::sqrt(err / norm));
  }
  return worst;
}

struct Case {
  const char* model;
  const char* type;
  CacheType cache;
  double tolerance;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  static const char* const kCache[] = {"f32", "f16", "q8_0"};
  return std::string(info.param.model).substr(5) + "_" + info.param.type + "_cache_" +
         kCache[static_cast<int>(info.param.cache)];
}

class LlmReference : public ::testing::TestWithParam<Case> {};

TEST_P(LlmReference, PromptLogitsMatchTheNumPyReference) {
  const Case c = GetParam();
  const Model model = Model::load(kDir / (std::string(c.model) + "-" + c.type + ".gguf"));
  const Tensor ref = io::load_npy(kDir / (std::string(c.model) + "-" + c.type + ".logits.npy"));
  const auto tokens = prompt_tokens(c.model);
  ASSERT_EQ(ref.shape()[0], static_cast<std::int64_t>(tokens.size()));
  ASSERT_EQ(ref.shape()[1], model.config().vocab);
  // The whole prompt in one batch, and split in uneven batches (5 tokens at a time).
  for (int batch : {256, 5}) {
    Context ctx(model, {.n_ctx = 64, .cache_type = c.cache, .threads = 2, .batch = batch});
    ctx.eval(tokens, /*all_logits=*/true);
    EXPECT_LT(worst_relative_error(ctx, ref.data(), tokens.size()), c.tolerance) << "batch " << batch;
  }
  // Token by token through the cache, on one thread and as a team of two (runtime/team.h): the
  // last position's logits agree too.
  for (const int threads : {1, 2}) {
    Context ctx(model, {.n_ctx = 64, .cache_type = c.cache, .threads = threads});
    for (std::int32_t t : tokens) ctx.eval(std::span(&t, 1));
    const float* last = ref.data() + (tokens.size() - 1) * static_cast<std::size_t>(ref.shape()[1]);
    EXPECT_LT(worst_relative_error(ctx, last, 1), c.tolerance) << "token by token, threads " << threads;
  }

  // Three sequences out of step through eval_batch (a server's concurrent generations): each
  // starts from its own prefix, then every pass takes two tokens of the first (a prompt chunk
  // beside single tokens) and one of the others, at different positions of their own caches.
  // After every pass, each context's logits are the reference's at its last position.
  const auto vocab = static_cast<std::size_t>(ref.shape()[1]);
  std::vector<std::unique_ptr<Context>> seqs;
  const std::size_t prefix[] = {1, 3, 6}, step[] = {2, 1, 1};
  for (const std::size_t n : prefix) {
    seqs.push_back(
        std::make_unique<Context>(model, ContextOptions{.n_ctx = 64, .cache_type = c.cache, .threads = 2}));
    seqs.back()->eval(std::span(tokens).first(n));
  }
  for (int pass = 0;; ++pass) {
    std::vector<Context::SequenceTokens> batch;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const auto done = static_cast<std::size_t>(seqs[i]->n_past());
      if (done < tokens.size())
        batch.push_back(
            {seqs[i].get(), std::span(tokens).subspan(done, std::min(step[i], tokens.size() - done))});
    }
    if (batch.empty()) break;
    Context::eval_batch(batch);
    for (const Context::SequenceTokens& q : batch) {
      const auto at = static_cast<std::size_t>(q.context->n_past()) - 1;
      EXPECT_LT(worst_relative_error(*q.context, ref.data() + at * vocab, 1), c.tolerance)
          << "eval_batch pass " << pass << ", position " << at;
    }
  }
}

// Two contexts on one model, at once, each on its own thread count (a server's slots, a Python
// thread pool). OpenMP keeps worker threads per calling thread: the 2-thread context starts one,
// the 1-thread context none. Both still match the reference.
TEST(LlmContext, TwoContextsRunAtOnceEachOnItsOwnThreadCount) {
  const Model model = Model::load(kDir / "tiny-llama-f32.gguf");
  const Tensor ref = io::load_npy(kDir / "tiny-llama-f32.logits.npy");
  const auto tokens = prompt_tokens("tiny-llama");
  auto process_threads = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                         std::filesystem::directory_iterator{});
  };
  const auto before = process_threads();
  std::latch ran(2), release(1);
  double errors[2] = {1, 1};
  auto generate = [&](int threads, double& error) {
    Context ctx(model, {.n_ctx = 64, .cache_type = CacheType::f32, .threads = threads});
    ctx.eval(tokens, /*all_logits=*/true);
    error = worst_relative_error(ctx, ref.data(), tokens.size());
    ran.count_down();
    release.wait();  // keeps this thread, and its OpenMP workers, alive while they are counted
  };
  std::thread a(generate, 1, std::ref(errors[0])), b(generate, 2, std::ref(errors[1]));
  ran.wait();
  const auto started = process_threads() - before;
  release.count_down();
  a.join();
  b.join();
  EXPECT_EQ(started, 3) << "the two callers and the 2-thread context's one OpenMP worker";
  EXPECT_LT(errors[0], 1e-4);
  EXPECT_LT(errors[1], 1e-4);
  EXPECT_THROW(Context(model, {.threads = -2}), UsageError);
}

// What the CLI reads off a model without its internals: the bytes one generated token reads (every
// layer matrix and the output matrix, summed here from the file's own tensor table) and the
// tokenizer kind.
// eval_batch refuses what it cannot run, naming it, and leaves the contexts as they were.
TEST(LlmContext, EvalBatchRefusesMixedOrOverfullBatches) {
  const Model model = Model::load(kDir / "tiny-llama-f32.gguf");
  const Model other = Model::load(kDir / "tiny-llama-f32.gguf");
  Context a(model, {.n_ctx = 16, .batch = 4}), b(model, {.n_ctx = 16, .batch = 4}),
      f32_cache(model, {.n_ctx = 16, .cache_type = CacheType::f32}), c(other, {.n_ctx = 16});
  const std::int32_t one[] = {1}, five[] = {1, 2, 3, 4, 5};
  auto refused = [&](std::vector<Context::SequenceTokens> batch, const std::string& expected) {
    try {
      Context::eval_batch(batch);
      ADD_FAILURE() << "accepted: " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused({{&a, one}, {&c, one}}, "same model");
  refused({{&a, one}, {&f32_cache, one}}, "cache type");
  refused({{&a, one}, {&a, one}}, "appears twice");
  refused({{&a, one}, {&b, five}}, "exceed the batch of 4");
  refused({{&a, {}}}, "no tokens");
  EXPECT_EQ(a.n_past(), 0);
  EXPECT_EQ(b.n_past(), 0);
}

TEST(LlmModel, ConfigGivesBytesPerTokenAndTokenizer) {
  for (const char* file : {"tiny-llama-f32.gguf", "tiny-llama-q4_0.gguf", "tiny-qwen2-f16.gguf"}) {
    SCOPED_TRACE(file);
    const Model model = Model::load(kDir / file);
    const GgufFile gguf = GgufFile::open(kDir / file);
    std::uint64_t want = 0;
    for (const GgufTensor& t : gguf.tensors()) {
      const bool matrix = t.name.starts_with("blk.") && t.name.ends_with(".weight") && t.dims.size() == 2;
      if (matrix || t.name == "output.weight") want += t.bytes;
    }
    if (gguf.find_tensor("output.weight") == nullptr) want += gguf.tensor("token_embd.weight").bytes;  // tied
    EXPECT_EQ(model.config().bytes_per_token, want);
    EXPECT_EQ(model.config().tokenizer, gguf.get_string("tokenizer.ggml.model"));
  }
}

// F32 weights with an f32 cache: only float rounding separates cpudl from the float64 reference
// (the 1e-4). Quantised weights: the reference uses the same stored weights, so the gap
// is cpudl's 8-bit activations (llama.cpp's Q8_0 path is 1.6-2.4e-2 from the same reference).
INSTANTIATE_TEST_SUITE_P(Models, LlmReference,
                         ::testing::Values(Case{"tiny-llama", "f32", CacheType::f32, 1e-4},
                                           Case{"tiny-llama", "f16", CacheType::f32, 1e-4},
                                           Case{"tiny-llama", "f32", CacheType::f16, 3e-3},
                                           Case{"tiny-llama", "q8_0", CacheType::f16, 3e-2},
                                           Case{"tiny-llama", "q4_0", CacheType::f16, 3e-2},
                                           Case{"tiny-llama", "q8_0", CacheType::q8_0, 3e-2},
                                           Case{"tiny-qwen2", "f32", CacheType::f32, 1e-4},
                                           Case{"tiny-qwen2", "f16", CacheType::f16, 3e-3},
                                           Case{"tiny-qwen2", "q8_0", CacheType::f16, 3e-2},
                                           Case{"tiny-qwen2", "q4_0", CacheType::q8_0, 3e-2}),
                         case_name);

}  // namespace
}  // namespace cpudl::llm

namespace cpudl::llm {
namespace {

// The sampler's cuts, checked on hand-made logits whose probabilities are known.
TEST(Sampler, GreedyAndEachCutBehaveAsDefined) {
  // Probabilities at temperature 1 proportional to exp(logit): 0.5, 0.25, 0.125, 0.0625, ...
  std::vector<float> logits;
  for (int i = 0; i < 8; ++i) logits.push_back(-static_cast<float>(i) * std::log(2.0f));
  auto histogram = [&](SamplerOptions o, std::span<const std::int32_t> recent = {}) {
    Sampler s(o);
    std::vector<int> counts(8, 0);
    for (int i = 0; i < 4000; ++i) ++counts[static_cast<std::size_t>(s.sample(logits.data(), 8, recent))];
    return counts;
  };
  SamplerOptions greedy;
  greedy.temperature = 0;
  EXPECT_EQ(histogram(greedy)[0], 4000);
  SamplerOptions top2{1.0f, 2, 1.0f, 0.0f, 1.0f, 64, 7};
  auto c = histogram(top2);
  EXPECT_EQ(c[0] + c[1], 4000);                            // only the two most likely
  EXPECT_NEAR(c[0] / 4000.0, 2.0 / 3, 0.03);               // renormalised 0.5 : 0.25
  SamplerOptions top_p{1.0f, 0, 0.7f, 0.0f, 1.0f, 64, 7};  // 0.5 + 0.25 reaches 0.7
  c = histogram(top_p);
  EXPECT_EQ(c[0] + c[1], 4000);
  SamplerOptions min_p{1.0f, 0, 1.0f, 0.2f, 1.0f, 64, 7};  // keeps p >= 0.1: the first three
  c = histogram(min_p);
  EXPECT_EQ(c[0] + c[1] + c[2], 4000);
  EXPECT_GT(c[2], 0);
  // Repetition penalty 4: a recent token's positive logit 0.5 becomes 0.125, below token 1's 0.3.
  logits[0] = 0.5f;
  logits[1] = 0.3f;
  SamplerOptions penalised{0.0f, 0, 1.0f, 0.0f, 4.0f, 64, 7};
  const std::int32_t recent[] = {0};
  EXPECT_EQ(histogram(penalised)[0], 4000);
  EXPECT_EQ(histogram(penalised, recent)[1], 4000);
}

}  // namespace
}  // namespace cpudl::llm

#include "llm/gguf/quantize.h"
#include "llm/model/weight_matmul.h"

namespace cpudl::llm {
namespace {

// Matrices whose kernels take different activation formats (Q4_0: Q8A blocks, Q6_K: Q8_K
// blocks, F16: floats) in one call give what separate calls give.
TEST(WeightMatmul, MixedFormatsInOneCallMatchSeparateCalls) {
  const std::size_t cols = 512, rows = 40;
  std::vector<float> w(rows * cols), x(3 * cols);  // up to 3 tokens
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 7919) % 1999) / 999.0f - 1.0f;
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 104729) % 997) / 498.0f - 1.0f;
  const GgmlType types[] = {GgmlType::q4_0, GgmlType::q6_k, GgmlType::f16, GgmlType::q8_0};
  std::vector<std::vector<std::uint8_t>> data;
  std::vector<WeightMatrix> matrices;
  for (GgmlType t : types) {
    const std::size_t rb = row_bytes(t, cols);
    auto& d = data.emplace_back(rows * rb);
    for (std::size_t r = 0; r < rows; ++r) quantize_row(t, w.data() + r * cols, d.data() + r * rb, cols);
    matrices.push_back({"m", t, d.data(), rows, cols, rb, nullptr});
  }
  for (std::size_t tokens : {1, 3}) {
    std::vector<std::vector<float>> together(4, std::vector<float>(tokens * rows)), apart = together;
    std::vector<MatmulTarget> targets;
    for (std::size_t i = 0; i < 4; ++i) targets.push_back({&matrices[i], together[i].data(), rows});
    MatmulScratch scratch;
    weight_matmul(targets, x.data(), tokens, cols, scratch, 2);
    for (std::size_t i = 0; i < 4; ++i) {
      MatmulScratch fresh;
      weight_matmul(matrices[i], x.data(), tokens, cols, apart[i].data(), rows, fresh, 1);
      EXPECT_EQ(together[i], apart[i]) << "matrix " << i << ", " << tokens << " tokens";
    }
  }
}

// A prompt over more tokens than one L2-sized chunk (4096 columns: 16-token chunks), with a
// partial last sliver and row counts that are not multiples of the six-row groups, threads
// splitting the rows: F32 and F16 weights against the double product of the stored values.
TEST(WeightMatmul, PromptAcrossTokenChunksMatchesTheDoubleProduct) {
  const std::size_t cols = 4096, rows = 13, tokens = 37;
  std::vector<float> w(rows * cols), x(tokens * cols);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 7919) % 1999) / 999.0f - 1.0f;
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 104729) % 997) / 498.0f - 1.0f;
  for (const GgmlType type : {GgmlType::f32, GgmlType::f16}) {
    const std::size_t rb = row_bytes(type, cols);
    std::vector<std::uint8_t> data(rows * rb);
    std::vector<float> stored(rows * cols);
    for (std::size_t r = 0; r < rows; ++r) {
      quantize_row(type, w.data() + r * cols, data.data() + r * rb, cols);
      dequantize_row(type, data.data() + r * rb, stored.data() + r * cols, cols);
    }
    const WeightMatrix m{"m", type, data.data(), rows, cols, rb, nullptr};
    std::vector<float> y(tokens * rows, -1.0f);
    MatmulScratch scratch;
    weight_matmul(m, x.data(), tokens, cols, y.data(), rows, scratch, 2);
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t r = 0; r < rows; ++r) {
        double want = 0, scale = 0;
        for (std::size_t c = 0; c < cols; ++c) {
          want += static_cast<double>(stored[r * cols + c]) * x[t * cols + c];
          scale += std::fabs(static_cast<double>(stored[r * cols + c]) * x[t * cols + c]);
        }
        ASSERT_NEAR(y[t * rows + r], want, 1e-5 * scale) << "token " << t << " row " << r;
      }
  }
}

// Matrices repacked at load (repack_at_load): on AMX, Q8_0 and Q4_0 tile panels for prompts,
// Q8_0's also for single tokens (the VNNI gemv); on VNNI CPUs, Q4_0's 4-bit generation panels
// (single tokens, and several on the dot-product kernel) and, without AMX, Q8_0's tile panels for
// several tokens; Q4_K's and Q6_K's generation panels (single tokens, and several on the Q8_K
// dot products). Row ranges split by the threads inside 16-row groups give what the mapped rows
// give, within float rounding; the bytes reported are the panels'. A prompt over the K-quant
// panels rounds its activations to Q8_K, as the mapped rows' kernel does for one token, where the
// mapped prompt path multiplies in float: those are compared token by token.
TEST(WeightMatmul, RepackedRowsMatchTheMappedRows) {
  const std::size_t cols = 256, rows = 41;
  std::vector<float> w(rows * cols), x(37 * cols);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 7919) % 1999) / 999.0f - 1.0f;
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 104729) % 997) / 498.0f - 1.0f;
  const bool amx = kernels::kernel_table().q8_0x16_q8a_gemm.level >= IsaLevel::amx;
  const bool vnni = kernels::kernel_table().q4_0x16_q8a_gemv.level >= IsaLevel::avx512_vnni;
  if (!amx) std::printf("note: no AMX here: no tile panels\n");
  if (!vnni) std::printf("note: no AVX512-VNNI here: nothing is repacked\n");
  for (const GgmlType type : {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q4_k, GgmlType::q6_k}) {
    const std::size_t rb = row_bytes(type, cols);
    std::vector<std::uint8_t> data(rows * rb);
    for (std::size_t r = 0; r < rows; ++r)
      quantize_row(type, w.data() + r * cols, data.data() + r * rb, cols);
    const WeightMatrix mapped{"m", type, data.data(), rows, cols, rb, nullptr};
    WeightMatrix repacked = mapped;
    const std::uint64_t bytes = repack_at_load(repacked, 2);
    const std::size_t blocks = (rows + 15) / 16 * (cols / 32);
    const bool gen = type == GgmlType::q4_0 && vnni;
    const bool k_quant = type == GgmlType::q4_k || type == GgmlType::q6_k;
    const bool tiles = (amx && !k_quant) || (type == GgmlType::q8_0 && vnni);
    const bool q4_k_panels = type == GgmlType::q4_k && vnni, q6_k_panels = type == GgmlType::q6_k && vnni;
    EXPECT_EQ(bytes, (tiles ? blocks * sizeof(kernels::Q8_0x16Block) : 0) +
                         (gen ? blocks * sizeof(kernels::Q4_0x16Block) : 0) +
                         (q4_k_panels ? blocks / 8 * sizeof(kernels::Q4_Kx16Block) : 0) +
                         (q6_k_panels ? blocks / 8 * sizeof(kernels::Q6_Kx16Block) : 0));
    EXPECT_EQ(static_cast<bool>(repacked.tile_panels), tiles);
    EXPECT_EQ(static_cast<bool>(repacked.gen_panels), gen);
    EXPECT_EQ(static_cast<bool>(repacked.q4_k_panels), q4_k_panels);
    EXPECT_EQ(static_cast<bool>(repacked.q6_k_panels), q6_k_panels);
    for (const std::size_t tokens : {37, 9, 3, 1}) {
      for (const int threads : {1, 2, 3}) {
        std::vector<float> a(tokens * rows), b(tokens * rows);
        MatmulScratch s1, s2;
        if ((q4_k_panels || q6_k_panels) && tokens >= kPromptMinTokens)
          for (std::size_t t = 0; t < tokens; ++t)
            weight_matmul(mapped, x.data() + t * cols, 1, cols, a.data() + t * rows, rows, s1, threads);
        else
          weight_matmul(mapped, x.data(), tokens, cols, a.data(), rows, s1, threads);
        weight_matmul(repacked, x.data(), tokens, cols, b.data(), rows, s2, threads);
        for (std::size_t i = 0; i < a.size(); ++i)
          ASSERT_NEAR(b[i], a[i], 1e-4 * (1.0 + std::fabs(a[i])))
              << ggml_type_info(static_cast<std::uint32_t>(type))->name << " tokens " << tokens << " threads "
              << threads << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace cpudl::llm
