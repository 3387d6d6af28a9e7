// Matmul and linear layers through oneDNN's matmul and inner-product primitives and its sgemm.
#include <algorithm>
#include <mutex>
#include <string>

#include "dense/matmul/matmul_list.h"
#include "dense/onednn/dense.h"
#include "dense/onednn/executable.h"
#include "dense/onednn/primitive_cache.h"

namespace cpudl::onednn {
namespace {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;

std::string shape_text(const MatmulShape& s) {
  return "matmul [" + std::to_string(s.batch) + "x" + std::to_string(s.m) + "x" + std::to_string(s.k) +
         "] x [" + std::to_string(s.k) + "x" + std::to_string(s.n) + "]";
}

void require_dims(const MatmulShape& s) {
  if (s.batch < 1 || s.m < 1 || s.n < 1 || s.k < 1)
    throw Error(shape_text(s) + ": every dimension must be at least 1");
}

struct MatmulEntry {
  Executable exec;
  bool has_bias = false;
};

// A, B, C and bias descriptors: A and B in `type` (f32, or bf16 for the autocast path), C and the
// bias f32.
struct MatmulDescs {
  dnnl::memory::desc a, b, c, bias;
};
MatmulDescs matmul_descs(const MatmulShape& s, dnnl::memory::data_type type) {
  const bool batched = s.batch > 1;
  auto md = [&](std::int64_t rows, std::int64_t cols, bool transposed, dnnl::memory::data_type t) {
    // Stored as rows x cols row-major, or as its transpose (cols x rows) read through strides.
    dims d = {rows, cols};
    dims st = transposed ? dims{1, rows} : dims{cols, 1};
    if (batched) {
      d.insert(d.begin(), s.batch);
      st.insert(st.begin(), rows * cols);
    }
    return strided_desc(d, st, t);
  };
  const auto f32 = dnnl::memory::data_type::f32;
  return {md(s.m, s.k, s.transpose_a, type), md(s.k, s.n, s.transpose_b, type), md(s.m, s.n, false, f32),
          batched ? plain_desc({1, 1, s.n}, tag::abc) : plain_desc({1, s.n}, tag::ab)};
}

dnnl::matmul::primitive_desc matmul_pd(const MatmulDescs& d, bool bias, const MatmulEpilogue& e) {
  dnnl::primitive_attr attr;
  attr.set_post_ops(make_post_ops(static_cast<int>(e.activation), e.clip_min, e.clip_max, e.accumulate));
  const auto desc = bias ? dnnl::matmul::desc(d.a, d.b, d.bias, d.c) : dnnl::matmul::desc(d.a, d.b, d.c);
  return dnnl::matmul::primitive_desc(desc, attr, engine());
}

PrimitiveKey matmul_key(PrimitiveKind op, const MatmulShape& s, const MatmulEpilogue& e) {
  PrimitiveKey key(op);
  key.add(s.batch).add(s.m).add(s.n).add(s.k).add(s.transpose_a).add(s.transpose_b);
  key.add(e.bias != nullptr).add(static_cast<int>(e.activation)).add(e.accumulate);
  key.add(float_bits(e.clip_min)).add(float_bits(e.clip_max));
  return key;
}

std::shared_ptr<MatmulEntry> make_matmul(const MatmulShape& s, bool bias, const MatmulEpilogue& e) {
  const MatmulDescs d = matmul_descs(s, dnnl::memory::data_type::f32);
  auto entry = std::make_shared<MatmulEntry>();
  entry->exec.set_primitive(dnnl::matmul(matmul_pd(d, bias, e)));
  entry->has_bias = bias;
  entry->exec.bind(DNNL_ARG_SRC, d.a);
  entry->exec.bind(DNNL_ARG_WEIGHTS, d.b);
  entry->exec.bind(DNNL_ARG_DST, d.c);
  if (bias) entry->exec.bind(DNNL_ARG_BIAS, d.bias);
  return entry;
}

// The bf16 matmul: A and B staged in bf16, then the product accumulating and writing f32. The
// mutex keeps a staged copy from being overwritten by a concurrent caller before it is read.
struct Bf16MatmulEntry {
  Executable exec;
  Bf16Staging a, b;
  bool has_bias = false;
  const float* staged_b = nullptr;  // B's pointer and version when its copy was kept
  std::uint64_t staged_version = 0;
  std::mutex mutex;
};

struct LinearEntry {
  Executable exec;
};

// oneDNN 2.6 runs a plain f32 matmul primitive through its brgemm kernel, which on large
// products measured slower here than the library's own gemm:jit sgemm (dnnl_sgemm), one thread:
// 2048^3 102.6 vs 87.8 ms, 1024^3 11.2 vs 10.3, 128x3072x768 (a BERT-base FFN) 6.8 vs 3.3; two
// threads alike. Below ~2.5e8 multiply-adds the primitive wins or ties (512^3 1.26 vs 1.33 ms,
// 256x10x21632 1.08 vs 1.44), and only the primitive fuses a bias or an activation.
}  // namespace

bool sgemm_preferred(const MatmulShape& s, const MatmulEpilogue& e) {
  return !e.bias && e.activation == Activation::none &&
         static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) >= 2.5e8;
}

void matmul_sgemm(const MatmulShape& s, const float* a, const float* b, float* c, bool accumulate) {
  require_dims(s);
  const ThreadScope openmp(0);  // dnnl_sgemm runs on OpenMP's count of the calling thread
  for (std::int64_t p = 0; p < s.batch; ++p) {
    const dnnl_status_t status =
        dnnl_sgemm(s.transpose_a ? 'T' : 'N', s.transpose_b ? 'T' : 'N', s.m, s.n, s.k, 1.0f,
                   a + p * s.m * s.k, s.transpose_a ? s.m : s.k, b + p * s.k * s.n, s.transpose_b ? s.k : s.n,
                   accumulate ? 1.0f : 0.0f, c + p * s.m * s.n, s.n);
    if (status != dnnl_success)
      throw Error(shape_text(s) + ": oneDNN's sgemm failed (status " + std::to_string(status) + ")");
  }
}

void matmul_primitive(const MatmulShape& s, const float* a, const float* b, float* c,
                      const MatmulEpilogue& e) {
  require_dims(s);
  static PrimitiveCache<MatmulEntry> cache;
  const PrimitiveKey key = matmul_key(PrimitiveKind::matmul, s, e);
  const auto entry =
      with_context([&] { return shape_text(s); },
                   [&] { return cache.get(key, [&] { return make_matmul(s, e.bias != nullptr, e); }); });
  if (entry->has_bias)
    entry->exec.run({a, b, c, e.bias});
  else
    entry->exec.run({a, b, c});
}

void matmul_onednn(const MatmulShape& s, const float* a, const float* b, float* c, const MatmulEpilogue& e) {
  if (sgemm_preferred(s, e)) return matmul_sgemm(s, a, b, c, e.accumulate);
  matmul_primitive(s, a, b, c, e);
}

void matmul_bf16(const MatmulShape& s, const float* a, const float* b, float* c, const MatmulEpilogue& e,
                 std::uint64_t b_version) {
  require_dims(s);
  static PrimitiveCache<Bf16MatmulEntry> cache;
  PrimitiveKey key = matmul_key(PrimitiveKind::matmul_bf16, s, e);
  // Kept copies belong to one weight tensor: layers of equal shape must not share an entry.
  if (b_version != 0) key.add(static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(b)));
  const auto entry =
      with_context([&] { return shape_text(s) + " in bf16"; },
                   [&] {
                     return cache.get(key, [&] {
                       const MatmulDescs f32 = matmul_descs(s, dnnl::memory::data_type::f32),
                                         bf16 = matmul_descs(s, dnnl::memory::data_type::bf16);
                       auto entry = std::make_shared<Bf16MatmulEntry>();
                       entry->exec.set_primitive(dnnl::matmul(matmul_pd(bf16, e.bias != nullptr, e)));
                       entry->has_bias = e.bias != nullptr;
                       entry->a.init(entry->exec, DNNL_ARG_SRC, f32.a, bf16.a);
                       entry->b.init(entry->exec, DNNL_ARG_WEIGHTS, f32.b, bf16.b);
                       entry->exec.bind(DNNL_ARG_DST, bf16.c);
                       if (entry->has_bias) entry->exec.bind(DNNL_ARG_BIAS, bf16.bias);
                       return entry;
                     });
                   });
  std::lock_guard<std::mutex> lock(entry->mutex);
  entry->a.run(a);
  if (b_version == 0 || entry->staged_b != b || entry->staged_version != b_version) {
    entry->b.run(b);
    entry->staged_b = b_version != 0 ? b : nullptr;
    entry->staged_version = b_version;
  }
  if (entry->has_bias)
    entry->exec.run({c, e.bias});
  else
    entry->exec.run({c});
}

namespace {
std::string linear_text(const LinearShape& s) {
  return "linear [" + std::to_string(s.batch) + "x" + std::to_string(s.in) + "] -> " + std::to_string(s.out);
}
void check(const LinearShape& s) {
  if (s.batch < 1 || s.in < 1 || s.out < 1)
    throw Error(linear_text(s) + ": every dimension must be at least 1");
}
}  // namespace

void linear_forward(const LinearShape& s, const float* x, const float* weight, const float* bias, float* y,
                    Activation activation, std::uint64_t weights_version) {
  check(s);
  if (s.bf16) {
    MatmulEpilogue e;
    e.bias = bias;
    e.activation = activation;
    return matmul_bf16(MatmulShape{1, s.batch, s.out, s.in, false, true}, x, weight, y, e, weights_version);
  }
  static PrimitiveCache<LinearEntry> cache;
  PrimitiveKey key(PrimitiveKind::linear_forward);
  key.add(s.batch).add(s.in).add(s.out).add(bias != nullptr).add(static_cast<int>(activation));
  const auto entry =
      with_context([&] { return linear_text(s); },
                   [&] {
                     return cache.get(key, [&] {
                       const auto x_md = plain_desc({s.batch, s.in}, tag::nc);
                       const auto w_md = plain_desc({s.out, s.in}, tag::oi);
                       const auto b_md = plain_desc({s.out}, tag::x);
                       const auto y_md = plain_desc({s.batch, s.out}, tag::nc);
                       dnnl::primitive_attr attr;
                       attr.set_post_ops(make_post_ops(static_cast<int>(activation), 0.0f, 6.0f, false));
                       const auto desc = bias ? dnnl::inner_product_forward::desc(
                                                    dnnl::prop_kind::forward_training, x_md, w_md, b_md, y_md)
                                              : dnnl::inner_product_forward::desc(
                                                    dnnl::prop_kind::forward_training, x_md, w_md, y_md);
                       const dnnl::inner_product_forward::primitive_desc pd(desc, attr, engine());
                       auto e = std::make_shared<LinearEntry>();
                       e->exec.set_primitive(dnnl::inner_product_forward(pd));
                       e->exec.bind(DNNL_ARG_SRC, x_md);
                       e->exec.bind(DNNL_ARG_WEIGHTS, w_md);
                       e->exec.bind(DNNL_ARG_DST, y_md);
                       if (bias) e->exec.bind(DNNL_ARG_BIAS, b_md);
                       return e;
                     });
                   });
  if (bias)
    entry->exec.run({x, weight, y, bias});
  else
    entry->exec.run({x, weight, y});
}

// dX = dY W and dW = dY^T X as plain matmuls read PyTorch's (out x in) weight layout in place,
// so no weight reorder is ever needed on the backward path.
void linear_backward_data(const LinearShape& s, const float* dy, const float* weight, float* dx) {
  check(s);
  const MatmulShape shape{1, s.batch, s.in, s.out, false, false};
  if (s.bf16)
    matmul_bf16(shape, dy, weight, dx);
  else
    dense::matmul(shape, dy, weight, dx);
}

void linear_backward_weights(const LinearShape& s, const float* x, const float* dy, float* dweight,
                             float* dbias) {
  check(s);
  const MatmulShape shape{1, s.out, s.in, s.batch, true, false};
  if (s.bf16)
    matmul_bf16(shape, dy, x, dweight);
  else
    dense::matmul(shape, dy, x, dweight);
  if (dbias) {  // f32 in either precision
    // db = column sums of dY: a 1 x batch ones-vector product keeps it on the GEMM path.
    thread_local std::vector<float> ones;
    if (ones.size() < static_cast<std::size_t>(s.batch)) ones.assign(static_cast<std::size_t>(s.batch), 1.0f);
    dense::matmul(MatmulShape{1, 1, s.out, s.batch, false, false}, ones.data(), dy, dbias);
  }
}

}  // namespace cpudl::onednn
