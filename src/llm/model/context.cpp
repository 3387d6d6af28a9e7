// The forward pass of a Llama-family decoder with a KV cache. Per layer: RMSNorm, Q/K/V
// projections (+ biases for qwen2), RoPE, grouped-query attention over the cache, output
// projection, residual; RMSNorm, SwiGLU feed-forward, residual. Every product, including the two
// of attention, goes through the weight kernels of the dispatch table:
//   scores = K q      with the cached K as a (positions x head_dim) weight matrix,
//   out    = V^T p    with V cached transposed, a (head_dim x positions) weight matrix,
// so the cache types (f32, f16, q8_0) reuse the F32, F16 and Q8_0 kernels.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "llm/gguf/quantize.h"
#include "llm/model/weight_matmul.h"
#include "runtime/parallel.h"
#include "runtime/team.h"
#include "runtime/zeroed_pages.h"

namespace cpudl::llm {

CacheType parse_cache_type(std::string_view name) {
  if (name == "f32") return CacheType::f32;
  if (name == "f16") return CacheType::f16;
  if (name == "q8_0") return CacheType::q8_0;
  throw UsageError("--cache-type '" + std::string(name) + "': expected f16, f32 or q8_0");
}

namespace {
std::size_t round_up(std::size_t n, std::size_t m) { return (n + m - 1) / m * m; }

GgmlType cache_ggml_type(CacheType t) {
  return t == CacheType::f32 ? GgmlType::f32 : t == CacheType::f16 ? GgmlType::f16 : GgmlType::q8_0;
}

// Per layer and KV head: K as n_ctx rows of head_dim values, V transposed as head_dim rows of
// n_ctx rounded up to 32 positions (a q8_0 block).
struct CacheLayout {
  std::size_t n_ctx_padded, k_row_bytes, v_row_bytes, k_bytes, v_bytes;
};
CacheLayout cache_layout(const ModelConfig& c, int n_ctx, GgmlType type) {
  CacheLayout l{};
  const auto hd = static_cast<std::size_t>(c.head_dim);
  const std::size_t heads_total = static_cast<std::size_t>(c.layers) * c.kv_heads;
  l.n_ctx_padded = round_up(static_cast<std::size_t>(n_ctx), 32);
  l.k_row_bytes = row_bytes(type, hd);
  l.v_row_bytes = row_bytes(type, l.n_ctx_padded);
  l.k_bytes = heads_total * static_cast<std::size_t>(n_ctx) * l.k_row_bytes;
  l.v_bytes = heads_total * hd * l.v_row_bytes;
  return l;
}
}  // namespace

struct Context::State {
  const Model::Impl* model;
  ModelConfig c;
  int n_ctx, threads, batch;
  int max_threads;  // what the per-thread scratch is sized for
  CacheType cache_type;
  GgmlType cache_ggml;
  int n_past = 0;

  // Cache, per layer and KV head: K as n_ctx rows of head_dim; V transposed as head_dim rows of
  // n_ctx_padded positions. q8_0 V rows are requantised per 32-position block as positions
  // arrive, from the block's float values kept in v_staging.
  std::size_t k_row_bytes, v_row_bytes, n_ctx_padded;
  // Zeroed mappings: pages commit as the context fills (runtime/zeroed_pages.h).
  ZeroedPages<std::uint8_t> k_cache, v_cache;
  std::vector<float> v_staging;  // layers x kv_heads x head_dim x 32 (q8_0 only)

  // Activations for up to `batch` tokens.
  std::vector<float> x, xb, q, k, v, att, tmp, hb, hb2;
  MatmulScratch act_scratch;
  std::vector<std::vector<float>> scores;              // per thread: batch x n_ctx_padded
  std::vector<std::vector<std::uint8_t>> att_scratch;  // per thread: quantised q or p rows
  std::vector<float> logits;
  std::size_t logit_rows = 0;

  std::uint8_t* k_row(int layer, int head, int pos) {
    return k_cache.data() +
           ((static_cast<std::size_t>(layer) * c.kv_heads + head) * n_ctx + pos) * k_row_bytes;
  }
  std::uint8_t* v_rows(int layer, int head) {
    return v_cache.data() + (static_cast<std::size_t>(layer) * c.kv_heads + head) * c.head_dim * v_row_bytes;
  }

  // A slice of a forward pass's rows that belongs to one sequence: rows row0 ... row0 + tokens - 1
  // of the buffers of the state running the pass are that sequence's next tokens, at positions
  // pos0 ... of its own cache. One run when a context evaluates its own tokens; one per context
  // in eval_batch.
  struct Run {
    State* seq;
    std::size_t row0;
    int tokens, pos0;
  };
  void store_kv(int layer, std::span<const Run> runs, Workers& workers);
  void store_kv_head(int layer, int head, const float* kk, const float* vv, int pos);
  // fn(t) for each token, over the threads when there are several tokens.
  template <class Fn>
  void per_token(std::size_t tokens, Workers& workers, Fn&& fn) {
    per_token_rows(tokens, workers, [&](std::size_t begin, std::size_t rows) {
      for (std::size_t t = begin; t < begin + rows; ++t) fn(t);
    });
  }
  // fn(first token, token count) over the threads' shares, for the row kernels (RMSNorm); one
  // token's rows on one thread.
  template <class Fn>
  void per_token_rows(std::size_t tokens, Workers& workers, Fn&& fn) {
    if (tokens == 1)
      workers.once([&] { fn(0, 1); });
    else
      workers.split(tokens, 1, [&](std::size_t begin, std::size_t end) { fn(begin, end - begin); });
  }
  void attention(int layer, std::span<const Run> runs, Workers& workers);
  void attend(const Run& run, int layer, int head, float* scores, std::vector<std::uint8_t>& scratch);
  // RoPE angles of the rows being evaluated, computed once per forward for all layers: cos and
  // sin per row and frequency (rows x rope_dims/2 each), at each run's positions.
  std::vector<float> rope_cos, rope_sin;
  void rope_angles(std::size_t rows, std::span<const Run> runs);
  void rope(float* vec, int heads, std::size_t t) const;
  // The decoder layers over `tokens`, rows of this state's buffers, each run's rows attending to
  // (and appended to) its sequence's cache; the final hidden states are left in x. The caller
  // advances the sequences' n_past.
  // Every member of a team calls it (forward), or one thread with forked workers.
  void layers(std::span<const std::int32_t> tokens, std::span<const Run> runs, Workers& workers);
  // Final norm and output projection of `rows` hidden rows of x (row indices), into `out`.
  void output(std::span<const std::size_t> rows, float* out, Workers& workers);
  // layers() and output() of a pass, in one parallel region whose threads meet at a spinning
  // barrier between steps (runtime/team.h): a generated token's ~60 steps are 10-70 us each.
  void forward(std::span<const std::int32_t> tokens, std::span<const Run> runs,
               std::span<const std::size_t> out_rows, float* out);
  std::vector<float> batch_logits;  // eval_batch's logits before they go to their contexts
};

Context::Context(const Model& model, const ContextOptions& options) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.model = &model.impl();
  s.c = model.config();
  s.n_ctx = options.n_ctx > 0 ? options.n_ctx : std::min(s.c.context_length, 4096);
  if (s.n_ctx > s.c.context_length)
    throw UsageError("--ctx " + std::to_string(s.n_ctx) + " exceeds the model's context length " +
                     std::to_string(s.c.context_length));
  if (options.threads < 0 || options.threads > 4096)
    throw UsageError("context threads " + std::to_string(options.threads) +
                     ": expected 0 (the default) to 4096");
  s.threads = options.threads > 0 ? options.threads : compute_threads();
  s.max_threads = s.threads;
  s.batch = std::max(1, options.batch);
  s.cache_type = options.cache_type;
  s.cache_ggml = cache_ggml_type(options.cache_type);
  if (s.cache_type == CacheType::q8_0 && s.c.head_dim % 32 != 0)
    throw UsageError("--cache-type q8_0 needs a head dimension divisible by 32 (this model's is " +
                     std::to_string(s.c.head_dim) + ")");
  const auto hd = static_cast<std::size_t>(s.c.head_dim);
  const CacheLayout layout = cache_layout(s.c, s.n_ctx, s.cache_ggml);
  s.n_ctx_padded = layout.n_ctx_padded;
  s.k_row_bytes = layout.k_row_bytes;
  s.v_row_bytes = layout.v_row_bytes;
  const std::size_t heads_total = static_cast<std::size_t>(s.c.layers) * s.c.kv_heads;
  s.k_cache = ZeroedPages<std::uint8_t>(layout.k_bytes);
  s.v_cache = ZeroedPages<std::uint8_t>(layout.v_bytes);
  if (s.cache_type == CacheType::q8_0) s.v_staging.assign(heads_total * hd * 32, 0.0f);
  const auto b = static_cast<std::size_t>(s.batch), dim = static_cast<std::size_t>(s.c.dim),
             kvd = static_cast<std::size_t>(s.c.kv_heads) * hd, ffn = static_cast<std::size_t>(s.c.ffn);
  s.x.resize(b * dim);
  s.xb.resize(b * dim);
  s.q.resize(b * dim);
  s.k.resize(b * kvd);
  s.v.resize(b * kvd);
  s.att.resize(b * dim);
  s.tmp.resize(b * dim);
  s.hb.resize(b * ffn);
  s.hb2.resize(b * ffn);
  s.scores.resize(static_cast<std::size_t>(s.threads));
  s.att_scratch.resize(static_cast<std::size_t>(s.threads));
  for (auto& sc : s.scores) sc.assign(b * s.n_ctx_padded, 0.0f);
}

Context::~Context() = default;

std::uint64_t Context::cache_bytes(const ModelConfig& config, int n_ctx, CacheType type) {
  const CacheLayout layout = cache_layout(config, n_ctx, cache_ggml_type(type));
  return layout.k_bytes + layout.v_bytes;
}

int Context::vocab_size() const { return state_->c.vocab; }
int Context::n_past() const { return state_->n_past; }
int Context::n_ctx() const { return state_->n_ctx; }
void Context::reset() {
  state_->n_past = 0;
  std::fill(state_->v_staging.begin(), state_->v_staging.end(), 0.0f);
  state_->v_cache.clear();
}

const float* Context::logits(std::size_t i) const {
  if (i >= state_->logit_rows) throw Error("logits row " + std::to_string(i) + " was not kept");
  return state_->logits.data() + i * static_cast<std::size_t>(state_->c.vocab);
}

void Context::set_threads(int threads) { state_->threads = std::clamp(threads, 1, state_->max_threads); }

void Context::eval(std::span<const std::int32_t> tokens, bool all_logits) {
  State& s = *state_;
  const ThreadScope scope(s.threads);  // this context's count, whatever other contexts run on
  if (tokens.empty()) throw Error("eval: no tokens");
  for (const std::int32_t t : tokens)
    if (t < 0 || t >= s.c.vocab)
      throw Error("token id " + std::to_string(t) + " is outside the vocabulary (0 to " +
                  std::to_string(s.c.vocab - 1) + ")");
  if (s.n_past + static_cast<int>(tokens.size()) > s.n_ctx)
    throw Error("context overflow: " + std::to_string(s.n_past) + " cached + " +
                std::to_string(tokens.size()) + " new tokens exceed the context of " +
                std::to_string(s.n_ctx));
  const auto vocab = static_cast<std::size_t>(s.c.vocab);
  s.logit_rows = all_logits ? tokens.size() : 1;
  s.logits.resize(s.logit_rows * vocab);
  for (std::size_t start = 0; start < tokens.size(); start += static_cast<std::size_t>(s.batch)) {
    const std::size_t n = std::min(tokens.size() - start, static_cast<std::size_t>(s.batch));
    const State::Run run{&s, 0, static_cast<int>(n), s.n_past};
    // Logits of every row with all_logits (to rows start...), else of the last token only, and
    // none for a non-final chunk.
    // (A generated token's one row needs no vector: no allocation per token.)
    std::vector<std::size_t> all;
    const std::size_t last = n - 1;
    std::span<const std::size_t> rows;
    if (all_logits) {
      for (std::size_t i = 0; i < n; ++i) all.push_back(i);
      rows = all;
    } else if (start + n == tokens.size()) {
      rows = {&last, 1};
    }
    s.forward(tokens.subspan(start, n), {&run, 1}, rows, s.logits.data() + (all_logits ? start * vocab : 0));
    s.n_past += static_cast<int>(n);
  }
}

void Context::eval_batch(std::span<const SequenceTokens> sequences) {
  if (sequences.empty()) throw Error("eval_batch: no sequences");
  State& work = *sequences[0].context->state_;
  const ThreadScope scope(work.threads);
  std::vector<State::Run> runs;
  std::vector<std::int32_t> tokens;
  for (const SequenceTokens& q : sequences) {
    State& s = *q.context->state_;
    if (s.model != work.model || s.n_ctx != work.n_ctx || s.cache_type != work.cache_type)
      throw Error("eval_batch: every context must be of the same model, context size and cache type");
    for (const State::Run& r : runs)
      if (r.seq == &s) throw Error("eval_batch: a context appears twice");
    if (q.tokens.empty()) throw Error("eval_batch: a sequence has no tokens");
    for (const std::int32_t t : q.tokens)
      if (t < 0 || t >= s.c.vocab)
        throw Error("token id " + std::to_string(t) + " is outside the vocabulary (0 to " +
                    std::to_string(s.c.vocab - 1) + ")");
    if (s.n_past + static_cast<int>(q.tokens.size()) > s.n_ctx)
      throw Error("context overflow: " + std::to_string(s.n_past) + " cached + " +
                  std::to_string(q.tokens.size()) + " new tokens exceed the context of " +
                  std::to_string(s.n_ctx));
    runs.push_back({&s, tokens.size(), static_cast<int>(q.tokens.size()), s.n_past});
    tokens.insert(tokens.end(), q.tokens.begin(), q.tokens.end());
  }
  if (tokens.size() > static_cast<std::size_t>(work.batch))
    throw Error("eval_batch: " + std::to_string(tokens.size()) + " tokens exceed the batch of " +
                std::to_string(work.batch));
  std::vector<std::size_t> last(runs.size());
  for (std::size_t i = 0; i < runs.size(); ++i)
    last[i] = runs[i].row0 + static_cast<std::size_t>(runs[i].tokens) - 1;
  const auto vocab = static_cast<std::size_t>(work.c.vocab);
  work.batch_logits.resize(runs.size() * vocab);
  work.forward(tokens, runs, last, work.batch_logits.data());
  for (std::size_t i = 0; i < runs.size(); ++i) {
    State& s = *runs[i].seq;
    s.n_past += runs[i].tokens;
    s.logit_rows = 1;
    s.logits.assign(work.batch_logits.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                    work.batch_logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
  }
}

void Context::State::rope_angles(std::size_t rows, std::span<const Run> runs) {
  const auto half = static_cast<std::size_t>(c.rope_dims / 2);
  rope_cos.resize(rows * half);
  rope_sin.resize(rope_cos.size());
  for (const Run& run : runs)
    for (int i = 0; i < run.tokens; ++i) {
      const std::size_t t = run.row0 + static_cast<std::size_t>(i);
      const double p = (run.pos0 + i) / static_cast<double>(c.rope_scale);
      for (std::size_t j = 0; j < half; ++j) {
        const double theta =
            p * std::pow(static_cast<double>(c.rope_base), -2.0 * static_cast<double>(j) / c.rope_dims);
        rope_cos[t * half + j] = static_cast<float>(std::cos(theta));
        rope_sin[t * half + j] = static_cast<float>(std::sin(theta));
      }
    }
}

// RoPE for `heads` heads of vec, token t of this forward: llama rotates adjacent pairs (2i, 2i+1),
// the order llama.cpp's converter permutes Q/K rows into; NEOX-style models (qwen2) rotate (i, i+d/2).
void Context::State::rope(float* vec, int heads, std::size_t t) const {
  const int hd = c.head_dim, half = c.rope_dims / 2;
  for (int i = 0; i < half; ++i) {
    const float cs = rope_cos[t * static_cast<std::size_t>(half) + static_cast<std::size_t>(i)],
                sn = rope_sin[t * static_cast<std::size_t>(half) + static_cast<std::size_t>(i)];
    for (int h = 0; h < heads; ++h) {
      float* v = vec + static_cast<std::size_t>(h) * hd;
      const int a = c.rope_neox ? i : 2 * i, b = c.rope_neox ? i + half : 2 * i + 1;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cs - x1 * sn;
      v[b] = x0 * sn + x1 * cs;
    }
  }
}

// Appends the rows' K and V (this state's k and v) to each run's cache, KV heads split across
// threads (each head's rows are its own, and a q8_0 V block is requantised by the one thread
// that owns the head).
void Context::State::store_kv(int layer, std::span<const Run> runs, Workers& workers) {
  const int hd = c.head_dim;
  const std::size_t kvd = static_cast<std::size_t>(c.kv_heads) * hd;
  // One token's heads over a team too (its stores miss the cache: the weights streamed through
  // since the last token); forked, one token is not worth a fork.
  const bool several = runs.size() > 1 || runs[0].tokens > 1 || workers.in_team();
  const std::size_t grain = several ? 1 : static_cast<std::size_t>(c.kv_heads);
  workers.split(static_cast<std::size_t>(c.kv_heads), grain, [&](std::size_t h0, std::size_t h1) {
    for (const Run& run : runs)
      for (int i = 0; i < run.tokens; ++i)
        for (auto h = static_cast<int>(h0); h < static_cast<int>(h1); ++h) {
          const std::size_t at =
              (run.row0 + static_cast<std::size_t>(i)) * kvd + static_cast<std::size_t>(h) * hd;
          run.seq->store_kv_head(layer, h, k.data() + at, v.data() + at, run.pos0 + i);
        }
  });
}

void Context::State::store_kv_head(int layer, int h, const float* kk, const float* vv, int pos) {
  const int hd = c.head_dim;
  {
    quantize_row(cache_ggml, kk, k_row(layer, h, pos), static_cast<std::size_t>(hd));
    std::uint8_t* vt = v_rows(layer, h);
    switch (cache_type) {
      case CacheType::f32:
        for (int d = 0; d < hd; ++d) reinterpret_cast<float*>(vt + d * v_row_bytes)[pos] = vv[d];
        break;
      case CacheType::f16:
        for (int d = 0; d < hd; ++d)
          reinterpret_cast<std::uint16_t*>(vt + d * v_row_bytes)[pos] = f32_to_fp16(vv[d]);
        break;
      case CacheType::q8_0: {
        float* staging = v_staging.data() + ((static_cast<std::size_t>(layer) * c.kv_heads + h) * hd) * 32;
        const int block = pos / 32, offset = pos % 32;
        for (int d = 0; d < hd; ++d) {
          float* values = staging + d * 32;
          if (offset == 0) std::fill(values, values + 32, 0.0f);
          values[offset] = vv[d];
          quantize_row(GgmlType::q8_0, values, vt + d * v_row_bytes + block * sizeof(BlockQ8_0), 32);
        }
        break;
      }
    }
  }
}

// Every (run, query head) pair is one task, over at most `threads` threads, each with its own
// scores and quantisation scratch.
void Context::State::attention(int layer, std::span<const Run> runs, Workers& workers) {
  const auto heads = static_cast<std::size_t>(c.heads);
  workers.split(runs.size() * heads, 1, [&](std::size_t begin, std::size_t end) {
    const auto tid = static_cast<std::size_t>(omp_in_parallel() ? omp_get_thread_num() : 0);
    for (std::size_t item = begin; item < end; ++item)
      attend(runs[item / heads], layer, static_cast<int>(item % heads), scores[tid].data(), att_scratch[tid]);
  });
}

// One query head of one run: its rows of q (this state's) against the run's cache, into att.
void Context::State::attend(const Run& run, int layer, int h, float* sc, std::vector<std::uint8_t>& scratch) {
  const int hd = c.head_dim, group = c.heads / c.kv_heads, tokens = run.tokens, pos0 = run.pos0;
  State& seq = *run.seq;
  const std::size_t dim = static_cast<std::size_t>(c.dim);
  const int n_kv = pos0 + tokens;
  const std::size_t k_len = cache_type == CacheType::q8_0 ? round_up(static_cast<std::size_t>(n_kv), 32)
                                                          : static_cast<std::size_t>(n_kv);
  const WeightKernel kk = weight_kernel(cache_ggml);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int kvh = h / group;
  const float* qh = q.data() + run.row0 * dim + static_cast<std::size_t>(h) * hd;
  // scores[t][p] = K[p] . q[t]
  const void* qx = qh;
  std::size_t q_row = dim * sizeof(float);
  if (kk.quantize != nullptr) {
    q_row = activation_row_bytes(kk.activation, static_cast<std::size_t>(hd));
    scratch.resize(std::max(scratch.size(), static_cast<std::size_t>(tokens) *
                                                std::max(q_row, activation_row_bytes(kk.activation, k_len))));
    for (int t = 0; t < tokens; ++t)
      kk.quantize(qh + t * dim, scratch.data() + t * q_row, static_cast<std::size_t>(hd));
    qx = scratch.data();
  }
  kk.matmul({seq.k_row(layer, kvh, 0), k_row_bytes, qx, q_row, sc, n_ctx_padded,
             static_cast<std::size_t>(n_kv), static_cast<std::size_t>(tokens), static_cast<std::size_t>(hd)});
  // Causal softmax per query row; positions past the query (and the q8_0 padding) get 0.
  for (int t = 0; t < tokens; ++t) {
    float* row = sc + static_cast<std::size_t>(t) * n_ctx_padded;
    const int visible = pos0 + t + 1;
    float mx = -INFINITY;
    for (int p = 0; p < visible; ++p) mx = std::max(mx, row[p] * scale);
    double sum = 0;
    for (int p = 0; p < visible; ++p) {
      row[p] = std::exp(row[p] * scale - mx);
      sum += row[p];
    }
    const auto inv = static_cast<float>(1.0 / sum);
    for (int p = 0; p < visible; ++p) row[p] *= inv;
    std::fill(row + visible, row + k_len, 0.0f);
  }
  // out[t][d] = V^T[d] . p[t]
  const void* px = sc;
  std::size_t p_row = n_ctx_padded * sizeof(float);
  if (kk.quantize != nullptr) {
    p_row = activation_row_bytes(kk.activation, k_len);
    for (int t = 0; t < tokens; ++t)
      kk.quantize(sc + static_cast<std::size_t>(t) * n_ctx_padded, scratch.data() + t * p_row, k_len);
    px = scratch.data();
  }
  kk.matmul({seq.v_rows(layer, kvh), v_row_bytes, px, p_row,
             att.data() + run.row0 * dim + static_cast<std::size_t>(h) * hd, dim,
             static_cast<std::size_t>(hd), static_cast<std::size_t>(tokens), k_len});
}

void Context::State::forward(std::span<const std::int32_t> tokens, std::span<const Run> runs,
                             std::span<const std::size_t> out_rows, float* out) {
  auto pass = [&](Workers& workers) {
    layers(tokens, runs, workers);
    if (!out_rows.empty()) output(out_rows, out, workers);
  };
  run_as_team(threads, pass);
}

void Context::State::layers(std::span<const std::int32_t> tokens, std::span<const Run> runs,
                            Workers& workers) {
  const auto T = tokens.size();
  const auto dim = static_cast<std::size_t>(c.dim), ffn = static_cast<std::size_t>(c.ffn),
             kvd = static_cast<std::size_t>(c.kv_heads * c.head_dim);
  const Model::Impl& m = *model;
  const auto swiglu = kernels::kernel_table().f32_swiglu.fn;  // silu(gate) * up
  const auto rms_norm = kernels::kernel_table().f32_rms_norm.fn;
  workers.once([&] {
    for (std::size_t t = 0; t < T; ++t) {
      const WeightMatrix& e = m.token_embedding;
      dequantize_row(e.type, e.data + static_cast<std::size_t>(tokens[t]) * e.row_bytes, x.data() + t * dim,
                     dim);
    }
    rope_angles(T, runs);
  });
  for (int l = 0; l < c.layers; ++l) {
    const LayerWeights& w = m.layers[static_cast<std::size_t>(l)];
    per_token_rows(T, workers, [&](std::size_t t, std::size_t rows) {
      rms_norm(x.data() + t * dim, w.attn_norm.data(), xb.data() + t * dim, rows, dim, c.rms_epsilon);
    });
    const MatmulTarget qkv[] = {{&w.q, q.data(), dim}, {&w.k, k.data(), kvd}, {&w.v, v.data(), kvd}};
    weight_matmul(qkv, xb.data(), T, dim, act_scratch, workers);
    per_token(T, workers, [&](std::size_t t) {
      if (!w.q_bias.empty()) {
        for (std::size_t i = 0; i < dim; ++i) q[t * dim + i] += w.q_bias[i];
        for (std::size_t i = 0; i < kvd; ++i) k[t * kvd + i] += w.k_bias[i];
        for (std::size_t i = 0; i < kvd; ++i) v[t * kvd + i] += w.v_bias[i];
      }
      rope(q.data() + t * dim, c.heads, t);
      rope(k.data() + t * kvd, c.kv_heads, t);
    });
    store_kv(l, runs, workers);
    attention(l, runs, workers);
    weight_matmul(w.o, att.data(), T, dim, tmp.data(), dim, act_scratch, workers);
    per_token_rows(T, workers, [&](std::size_t t, std::size_t rows) {
      for (std::size_t i = t * dim; i < (t + rows) * dim; ++i) x[i] += tmp[i];
      rms_norm(x.data() + t * dim, w.ffn_norm.data(), xb.data() + t * dim, rows, dim, c.rms_epsilon);
    });
    const MatmulTarget gate_up[] = {{&w.gate, hb.data(), ffn}, {&w.up, hb2.data(), ffn}};
    weight_matmul(gate_up, xb.data(), T, dim, act_scratch, workers);
    per_token(T, workers, [&](std::size_t t) {
      swiglu(hb.data() + t * ffn, hb2.data() + t * ffn, hb.data() + t * ffn, ffn);
    });
    weight_matmul(w.down, hb.data(), T, ffn, tmp.data(), dim, act_scratch, workers);
    per_token(T, workers, [&](std::size_t t) {
      for (std::size_t i = t * dim; i < (t + 1) * dim; ++i) x[i] += tmp[i];
    });
  }
}

void Context::State::output(std::span<const std::size_t> rows, float* out, Workers& workers) {
  const auto dim = static_cast<std::size_t>(c.dim), vocab = static_cast<std::size_t>(c.vocab);
  const auto rms_norm = kernels::kernel_table().f32_rms_norm.fn;
  workers.once([&] {
    for (std::size_t i = 0; i < rows.size(); ++i)
      rms_norm(x.data() + rows[i] * dim, model->output_norm.data(), xb.data() + i * dim, 1, dim,
               c.rms_epsilon);
  });
  weight_matmul(model->output, xb.data(), rows.size(), dim, out, vocab, act_scratch, workers);
}

}  // namespace cpudl::llm
