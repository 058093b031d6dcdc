// The straightforward fp32 port: each piece a plain loop in the order the PyTorch reference
// writes it, one token at a time, and the boundary as four separate passes over the streams.
#include "common.hpp"

namespace mhc::impl {
namespace {
using namespace cpu_detail;

// 1 / sqrt(mean(x^2) + norm_eps), each result an intermediate (an eager framework's squares,
// mean, sum and reciprocal square root).
float rms_scale(const KernelConfig& c, const float* x, std::size_t m) {
  float ss = 0;
  for (std::size_t i = 0; i < m; ++i) ss += step(c, x[i] * x[i]);
  return step(c, 1.0f / std::sqrt(step(c, step(c, ss / float(m)) + c.norm_eps)));
}

void mixes(const KernelConfig& c, std::size_t T, const float* x, const float* W, float* out) {
  const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), M = std::size_t(c.mix());
  for (std::size_t t = 0; t < T; ++t) {
    const float* xt = x + t * nd;
    const float r = rms_scale(c, xt, nd);
    for (std::size_t a = 0; a < M; ++a) {
      float acc = 0;
      for (std::size_t i = 0; i < nd; ++i)
        acc = round_to(c.accumulation, acc + operand(c, W[a * nd + i]) * operand(c, xt[i]));
      out[t * M + a] = round_to(c.mixes, step(c, acc) * r);
    }
  }
}

void split_sinkhorn(const KernelConfig& c, std::size_t T, const float* m, const float* s,
                    const float* b, float* pre, float* post, float* comb) {
  const std::size_t n = std::size_t(c.n), M = std::size_t(c.mix());
  for (std::size_t t = 0; t < T; ++t)
    split_token(c, m + t * M, s, b, pre + t * n, post + t * n, comb + t * n * n);
  for (float* v : {pre, post}) std::transform(v, v + T * n, v, coefficient(c));
  std::transform(comb, comb + T * n * n, comb, coefficient(c));
}

void hc_pre(const KernelConfig& c, std::size_t T, const float* x, const float* p, float* y) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t cc = 0; cc < d; ++cc) {
      float acc = 0;
      for (std::size_t j = 0; j < n; ++j) acc += step(c, p[t * n + j] * x[(t * n + j) * d + cc]);
      y[t * d + cc] = store(c, step(c, acc));
    }
}

void hc_post(const KernelConfig& c, std::size_t T, const float* f, const float* R,
             const float* post, const float* comb, float* y) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t cc = 0; cc < d; ++cc) {
        float acc = 0;
        for (std::size_t j = 0; j < n; ++j)
          acc += step(c, comb[(t * n + j) * n + k] * R[(t * n + j) * d + cc]);
        y[(t * n + k) * d + cc] = store(c, step(c, post[t * n + k] * f[t * d + cc]) + step(c, acc));
      }
}

void rmsnorm(const KernelConfig& c, std::size_t T, const float* x, const float* g, float* y) {
  const std::size_t d = std::size_t(c.d);
  for (std::size_t t = 0; t < T; ++t) {
    const float r = rms_scale(c, x + t * d, d);
    for (std::size_t i = 0; i < d; ++i) y[t * d + i] = store(c, g[i] * step(c, x[t * d + i] * r));
  }
}

void boundary(const KernelConfig& c, std::size_t T, const BoundaryIn& in, const BoundaryOut& out) {
  hc_post(c, T, in.f, in.residual, in.post, in.comb, out.x);
  mixes(c, T, out.x, in.hc_fn, out.mixes);
  split_sinkhorn(c, T, out.mixes, in.hc_scale, in.hc_base, out.pre, out.post, out.comb);
  hc_pre(c, T, out.x, in.pre_mix, out.y);
}

}  // namespace

const Backend& cpu() {
  static const Backend b = [] {
    Backend k{"cpu",   "fp32 CPU, straightforward port: one plain pass per piece, one thread",
              mixes,   split_sinkhorn,
              hc_pre,  hc_post,
              rmsnorm, boundary,
              {},      false,
              {},      ""};
    BlockKnobs knobs;
    knobs.fused_boundary = false;
    k.block = make_block(k, knobs);
    k.backward = cpu_backward({}, false);
    return k;
  }();
  return b;
}

}  // namespace mhc::impl
