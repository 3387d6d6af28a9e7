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

namespace cpudl::llm {

CacheType parse_cache_type(std::string_view name) {
  if (name == "f32") return CacheType::f32;
  if (name == "f16") return CacheType::f16;
  if (name == "q8_0") return CacheType::q8_0;
  throw UsageError("--cache-type '" + std::string(name) + "': expected f16, f32 or q8_0");
}

namespace {
GgmlType cache_ggml_type(CacheType t) {
  return t == CacheType::f32 ? GgmlType::f32 : t == CacheType::f16 ? GgmlType::f16 : GgmlType::q8_0;
}
std::size_t round_up(std::size_t n, std::size_t m) { return (n + m - 1) / m * m; }
}  // namespace

struct Context::State {
  const Model::Impl* model;
  ModelConfig c;
  int n_ctx, threads, batch;
  CacheType cache_type;
  GgmlType cache_ggml;
  int n_past = 0;

  // Cache, per layer and KV head: K as n_ctx rows of head_dim; V transposed as head_dim rows of
  // n_ctx_padded positions. q8_0 V rows are requantised per 32-position block as positions
  // arrive, from the block's float values kept in v_staging.
  std::size_t k_row_bytes, v_row_bytes, n_ctx_padded;
  std::vector<std::uint8_t> k_cache, v_cache;
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

  void store_kv(int layer, int tokens, int pos0);
  void store_kv_head(int layer, int head, int t, int pos);
  // fn(t) for each token, over the threads when there are several tokens.
  template <class Fn>
  void per_token(std::size_t tokens, Fn&& fn) {
    per_token_rows(tokens, [&](std::size_t begin, std::size_t rows) {
      for (std::size_t t = begin; t < begin + rows; ++t) fn(t);
    });
  }
  // fn(first token, token count) over the threads' shares, for the row kernels (RMSNorm).
  template <class Fn>
  void per_token_rows(std::size_t tokens, Fn&& fn) {
    parallel_for(tokens, 1, tokens > 1 ? threads : 1,
                 [&](std::size_t begin, std::size_t end) { fn(begin, end - begin); });
  }
  void attention(int layer, int tokens, int pos0);
  // RoPE angles of the tokens being evaluated, computed once per forward for all layers:
  // cos and sin per token and frequency (tokens x rope_dims/2 each).
  std::vector<float> rope_cos, rope_sin;
  void rope_angles(int tokens, int pos0);
  void rope(float* vec, int heads, int t) const;
  // Logits of the kept rows go to logits rows logit_row0...; without all_logits only the last
  // token's (into row 0), and none when keep_logits is false (a non-final prompt chunk).
  void forward(std::span<const std::int32_t> tokens, bool keep_logits, bool all_logits,
               std::size_t logit_row0);
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
  s.batch = std::max(1, options.batch);
  s.cache_type = options.cache_type;
  s.cache_ggml = cache_ggml_type(options.cache_type);
  if (s.cache_type == CacheType::q8_0 && s.c.head_dim % 32 != 0)
    throw UsageError("--cache-type q8_0 needs a head dimension divisible by 32 (this model's is " +
                     std::to_string(s.c.head_dim) + ")");
  const auto hd = static_cast<std::size_t>(s.c.head_dim);
  s.n_ctx_padded = round_up(static_cast<std::size_t>(s.n_ctx), 32);
  s.k_row_bytes = row_bytes(s.cache_ggml, hd);
  s.v_row_bytes = row_bytes(s.cache_ggml, s.n_ctx_padded);
  const std::size_t heads_total = static_cast<std::size_t>(s.c.layers) * s.c.kv_heads;
  s.k_cache.assign(heads_total * s.n_ctx * s.k_row_bytes, 0);
  s.v_cache.assign(heads_total * hd * s.v_row_bytes, 0);
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

int Context::vocab_size() const { return state_->c.vocab; }
int Context::n_past() const { return state_->n_past; }
int Context::n_ctx() const { return state_->n_ctx; }
void Context::reset() {
  state_->n_past = 0;
  std::fill(state_->v_staging.begin(), state_->v_staging.end(), 0.0f);
  std::fill(state_->v_cache.begin(), state_->v_cache.end(), 0);
}

const float* Context::logits(std::size_t i) const {
  if (i >= state_->logit_rows) throw Error("logits row " + std::to_string(i) + " was not kept");
  return state_->logits.data() + i * static_cast<std::size_t>(state_->c.vocab);
}

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
    const bool last_chunk = start + n == tokens.size();
    s.forward(tokens.subspan(start, n), all_logits || last_chunk, all_logits, all_logits ? start : 0);
  }
}

void Context::State::rope_angles(int tokens, int pos0) {
  const int half = c.rope_dims / 2;
  rope_cos.resize(static_cast<std::size_t>(tokens) * half);
  rope_sin.resize(rope_cos.size());
  for (int t = 0; t < tokens; ++t) {
    const double p = (pos0 + t) / static_cast<double>(c.rope_scale);
    for (int i = 0; i < half; ++i) {
      const double theta = p * std::pow(static_cast<double>(c.rope_base), -2.0 * i / c.rope_dims);
      rope_cos[static_cast<std::size_t>(t) * half + i] = static_cast<float>(std::cos(theta));
      rope_sin[static_cast<std::size_t>(t) * half + i] = static_cast<float>(std::sin(theta));
    }
  }
}

// RoPE for `heads` heads of vec, token t of this forward: llama rotates adjacent pairs (2i, 2i+1),
// the order llama.cpp's converter permutes Q/K rows into; NEOX-style models (qwen2) rotate (i, i+d/2).
void Context::State::rope(float* vec, int heads, int t) const {
  const int hd = c.head_dim, half = c.rope_dims / 2;
  for (int i = 0; i < half; ++i) {
    const float cs = rope_cos[static_cast<std::size_t>(t) * half + i],
                sn = rope_sin[static_cast<std::size_t>(t) * half + i];
    for (int h = 0; h < heads; ++h) {
      float* v = vec + static_cast<std::size_t>(h) * hd;
      const int a = c.rope_neox ? i : 2 * i, b = c.rope_neox ? i + half : 2 * i + 1;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cs - x1 * sn;
      v[b] = x0 * sn + x1 * cs;
    }
  }
}

// Appends the tokens' K and V to the cache, KV heads split across threads (each head's rows are
// its own, and a q8_0 V block is requantised by the one thread that owns the head).
void Context::State::store_kv(int layer, int tokens, int pos0) {
  parallel_for(static_cast<std::size_t>(c.kv_heads), 1, tokens > 1 ? threads : 1,
               [&](std::size_t h0, std::size_t h1) {
                 for (int t = 0; t < tokens; ++t)
                   for (auto h = static_cast<int>(h0); h < static_cast<int>(h1); ++h)
                     store_kv_head(layer, h, t, pos0 + t);
               });
}

void Context::State::store_kv_head(int layer, int h, int t, int pos) {
  const int hd = c.head_dim;
  const std::size_t kvd = static_cast<std::size_t>(c.kv_heads) * hd;
  {
    const float* kk = k.data() + t * kvd + static_cast<std::size_t>(h) * hd;
    const float* vv = v.data() + t * kvd + static_cast<std::size_t>(h) * hd;
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

void Context::State::attention(int layer, int tokens, int pos0) {
  const int hd = c.head_dim, group = c.heads / c.kv_heads;
  const std::size_t dim = static_cast<std::size_t>(c.dim);
  const int n_kv = pos0 + tokens;
  const std::size_t k_len = cache_type == CacheType::q8_0 ? round_up(static_cast<std::size_t>(n_kv), 32)
                                                          : static_cast<std::size_t>(n_kv);
  const WeightKernel kk = weight_kernel(cache_ggml);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // One query head per task: heads x tokens rows of scores, over at most `threads` threads.
  parallel_for(static_cast<std::size_t>(c.heads), 1, threads, [&](std::size_t h_begin, std::size_t h_end) {
    const auto tid = static_cast<std::size_t>(omp_in_parallel() ? omp_get_thread_num() : 0);
    float* sc = scores[tid].data();
    std::vector<std::uint8_t>& scratch = att_scratch[tid];
    for (std::size_t h = h_begin; h < h_end; ++h) {
      const int kvh = static_cast<int>(h) / group;
      const float* qh = q.data() + h * hd;
      // scores[t][p] = K[p] . q[t]
      const void* qx = qh;
      std::size_t q_row = dim * sizeof(float);
      if (kk.quantize != nullptr) {
        q_row = activation_row_bytes(kk.activation, static_cast<std::size_t>(hd));
        scratch.resize(std::max(
            scratch.size(),
            static_cast<std::size_t>(tokens) * std::max(q_row, activation_row_bytes(kk.activation, k_len))));
        for (int t = 0; t < tokens; ++t)
          kk.quantize(qh + t * dim, scratch.data() + t * q_row, static_cast<std::size_t>(hd));
        qx = scratch.data();
      }
      kk.matmul({k_row(layer, kvh, 0), k_row_bytes, qx, q_row, sc, n_ctx_padded,
                 static_cast<std::size_t>(n_kv), static_cast<std::size_t>(tokens),
                 static_cast<std::size_t>(hd)});
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
      kk.matmul({v_rows(layer, kvh), v_row_bytes, px, p_row, att.data() + h * hd, dim,
                 static_cast<std::size_t>(hd), static_cast<std::size_t>(tokens), k_len});
    }
  });
}

void Context::State::forward(std::span<const std::int32_t> tokens, bool keep_logits, bool all_logits,
                             std::size_t logit_row0) {
  const auto T = tokens.size();
  const auto dim = static_cast<std::size_t>(c.dim), ffn = static_cast<std::size_t>(c.ffn),
             kvd = static_cast<std::size_t>(c.kv_heads * c.head_dim),
             vocab = static_cast<std::size_t>(c.vocab);
  const Model::Impl& m = *model;
  const auto swiglu = kernels::kernel_table().f32_swiglu.fn;  // silu(gate) * up
  const auto rms_norm = kernels::kernel_table().f32_rms_norm.fn;
  for (std::size_t t = 0; t < T; ++t) {
    const WeightMatrix& e = m.token_embedding;
    dequantize_row(e.type, e.data + static_cast<std::size_t>(tokens[t]) * e.row_bytes, x.data() + t * dim,
                   dim);
  }
  const int pos0 = n_past;
  rope_angles(static_cast<int>(T), pos0);
  for (int l = 0; l < c.layers; ++l) {
    const LayerWeights& w = m.layers[static_cast<std::size_t>(l)];
    per_token_rows(T, [&](std::size_t t, std::size_t rows) {
      rms_norm(x.data() + t * dim, w.attn_norm.data(), xb.data() + t * dim, rows, dim, c.rms_epsilon);
    });
    const MatmulTarget qkv[] = {{&w.q, q.data(), dim}, {&w.k, k.data(), kvd}, {&w.v, v.data(), kvd}};
    weight_matmul(qkv, xb.data(), T, dim, act_scratch, threads);
    per_token(T, [&](std::size_t t) {
      if (!w.q_bias.empty()) {
        for (std::size_t i = 0; i < dim; ++i) q[t * dim + i] += w.q_bias[i];
        for (std::size_t i = 0; i < kvd; ++i) k[t * kvd + i] += w.k_bias[i];
        for (std::size_t i = 0; i < kvd; ++i) v[t * kvd + i] += w.v_bias[i];
      }
      rope(q.data() + t * dim, c.heads, static_cast<int>(t));
      rope(k.data() + t * kvd, c.kv_heads, static_cast<int>(t));
    });
    store_kv(l, static_cast<int>(T), pos0);
    attention(l, static_cast<int>(T), pos0);
    weight_matmul(w.o, att.data(), T, dim, tmp.data(), dim, act_scratch, threads);
    per_token_rows(T, [&](std::size_t t, std::size_t rows) {
      for (std::size_t i = t * dim; i < (t + rows) * dim; ++i) x[i] += tmp[i];
      rms_norm(x.data() + t * dim, w.ffn_norm.data(), xb.data() + t * dim, rows, dim, c.rms_epsilon);
    });
    const MatmulTarget gate_up[] = {{&w.gate, hb.data(), ffn}, {&w.up, hb2.data(), ffn}};
    weight_matmul(gate_up, xb.data(), T, dim, act_scratch, threads);
    per_token(T, [&](std::size_t t) {
      swiglu(hb.data() + t * ffn, hb2.data() + t * ffn, hb.data() + t * ffn, ffn);
    });
    weight_matmul(w.down, hb.data(), T, ffn, tmp.data(), dim, act_scratch, threads);
    per_token(T, [&](std::size_t t) {
      for (std::size_t i = t * dim; i < (t + 1) * dim; ++i) x[i] += tmp[i];
    });
  }
  n_past += static_cast<int>(T);
  if (!keep_logits) return;
  // Final norm and output projection for the rows whose logits are kept.
  const std::size_t first = all_logits ? 0 : T - 1, rows = T - first;
  rms_norm(x.data() + first * dim, m.output_norm.data(), xb.data(), rows, dim, c.rms_epsilon);
  weight_matmul(m.output, xb.data(), rows, dim, logits.data() + logit_row0 * vocab, vocab, act_scratch,
                threads);
}

}  // namespace cpudl::llm
