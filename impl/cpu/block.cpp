// The whole Block from a backend's mHC pieces and a choice of sublayers; the CPU sublayers here:
// straightforward fp32 attention (causal, max-subtracted softmax) and MoE (sigmoid routing, top-k
// with ties to the lower expert, shared SwiGLU expert).
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "common.hpp"

namespace mhc::impl {
namespace {
using cpu_detail::operand;
using cpu_detail::store;

// out[r] = sum_i W[r*m + i] * x[i] for r < rows.
void matvec(const KernelConfig& c, const float* W, std::size_t rows, std::size_t m, const float* x,
            float* out) {
  for (std::size_t r = 0; r < rows; ++r) {
    float acc = 0;
    for (std::size_t i = 0; i < m; ++i) acc += operand(c, W[r * m + i]) * operand(c, x[i]);
    out[r] = acc;
  }
}

float sigmoid(float z) {
  return 1.0f / (1.0f + std::exp(-z));
}

void attention(const KernelConfig& c, const BlockShape& s, const BlockKnobs& kn, std::size_t T,
               const float* h, const BlockWeights& w, float* out) {
  const std::size_t d = std::size_t(c.d), H = std::size_t(s.heads), dh = std::size_t(s.head_dim);
  const std::size_t HD = H * dh;
  std::vector<float> q(T * HD), k(T * HD), v(T * HD), o(T * HD), p(T);
  for (std::size_t t = 0; t < T; ++t) {
    matvec(c, w.wq, HD, d, h + t * d, &q[t * HD]);
    matvec(c, w.wk, HD, d, h + t * d, &k[t * HD]);
    matvec(c, w.wv, HD, d, h + t * d, &v[t * HD]);
  }
  const float scale = std::sqrt(float(dh));
  for (std::size_t hd = 0; hd < H; ++hd)
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t upto = kn.causal ? t + 1 : T;
      float mx = -INFINITY;
      for (std::size_t u = 0; u < upto; ++u) {
        float acc = 0;
        for (std::size_t i = 0; i < dh; ++i)
          acc += q[t * HD + hd * dh + i] * k[u * HD + hd * dh + i];
        p[u] = acc / scale;
        mx = std::max(mx, p[u]);
      }
      float den = 0;
      for (std::size_t u = 0; u < upto; ++u) den += (p[u] = std::exp(p[u] - mx));
      for (std::size_t i = 0; i < dh; ++i) {
        float acc = 0;
        for (std::size_t u = 0; u < upto; ++u) acc += (p[u] / den) * v[u * HD + hd * dh + i];
        o[t * HD + hd * dh + i] = acc;
      }
    }
  for (std::size_t t = 0; t < T; ++t) {
    matvec(c, w.wo, d, HD, &o[t * HD], out + t * d);
    for (std::size_t i = 0; i < d; ++i) out[t * d + i] = store(c, out[t * d + i]);
  }
}

void expert(const KernelConfig& c, const BlockShape& s, const float* h, const float* w1,
            const float* w2, const float* w3, float* out) {
  const std::size_t d = std::size_t(c.d), I = std::size_t(s.inter);
  std::vector<float> a(I), g(I);
  matvec(c, w1, I, d, h, a.data());
  matvec(c, w3, I, d, h, g.data());
  for (std::size_t i = 0; i < I; ++i) a[i] = a[i] * sigmoid(a[i]) * g[i];
  matvec(c, w2, d, I, a.data(), out);
}

void moe(const KernelConfig& c, const BlockShape& s, const BlockKnobs& kn, std::size_t N,
         const float* h, const BlockWeights& w, float* out, float* experts_out) {
  const std::size_t d = std::size_t(c.d), E = std::size_t(s.experts), K = std::size_t(s.top_k);
  const std::size_t I = std::size_t(s.inter);
  std::vector<float> logit(E), score(E), sel(E), res(d), shared(d);
  std::vector<std::size_t> order(E);
  for (std::size_t t = 0; t < N; ++t) {
    const float* ht = h + t * d;
    matvec(c, w.router, E, d, ht, logit.data());
    for (std::size_t e = 0; e < E; ++e) {
      score[e] = sigmoid(logit[e]);
      sel[e] = score[e] + w.router_bias[e];
    }
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t y) { return sel[x] > sel[y]; });
    float total = 0;
    for (std::size_t j = 0; j < K; ++j) total += score[order[j]];
    expert(c, s, ht, w.shared_w1, w.shared_w2, w.shared_w3, shared.data());
    float* o = out + t * d;
    std::fill(o, o + d, 0.0f);
    for (std::size_t j = 0; j < K; ++j) {
      const std::size_t e = order[j];
      experts_out[t * K + j] = float(e);
      const float we =
          kn.normalise_routing ? s.route_scale * score[e] / total : s.route_scale * score[e];
      expert(c, s, ht, w.w1 + e * I * d, w.w2 + e * d * I, w.w3 + e * I * d, res.data());
      for (std::size_t i = 0; i < d; ++i) o[i] += we * res[i];
    }
    for (std::size_t i = 0; i < d; ++i) o[i] = store(c, o[i] + shared[i]);
  }
}

}  // namespace

Sublayers cpu_sublayers() {
  Sublayers s;
  s.attention = [](const KernelConfig& c, const BlockShape& sh, const BlockKnobs& kn, std::size_t B,
                   std::size_t T, const float* h, const BlockWeights& w, float* out) {
    const std::size_t d = std::size_t(c.d);
    for (std::size_t b = 0; b < B; ++b) attention(c, sh, kn, T, h + b * T * d, w, out + b * T * d);
  };
  s.moe = moe;
  return s;
}

namespace {

std::vector<float> transposed(const KernelConfig& c, std::size_t N, const float* comb) {
  const std::size_t n = std::size_t(c.n);
  std::vector<float> t(N * n * n);
  for (std::size_t k = 0; k < N; ++k)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) t[(k * n + i) * n + j] = comb[(k * n + j) * n + i];
  return t;
}

}  // namespace

std::function<void(const KernelConfig&, const BlockShape&, std::size_t, std::size_t, const float*,
                   const float*, const BlockWeights&, const BlockStages&)>
make_block(const Backend& pieces, const BlockKnobs& kn, Sublayers sub) {
  auto pc = std::make_shared<Backend>(pieces);
  return [pc, kn, sub](const KernelConfig& c, const BlockShape& s, std::size_t B, std::size_t T,
                       const float* x, const float* pre_mix, const BlockWeights& w,
                       const BlockStages& o) {
    const Backend& p = *pc;
    const std::size_t N = B * T, n = std::size_t(c.n), d = std::size_t(c.d);
    p.mixes(c, N, x, w.attn_hc_fn, o.attn_mixes);
    p.split_sinkhorn(c, N, o.attn_mixes, w.attn_hc_scale, w.attn_hc_base, o.attn_pre, o.attn_post,
                     o.attn_comb);
    p.hc_pre(c, N, x, kn.shifted_pre ? pre_mix : o.attn_pre, o.attn_in);
    if (kn.attn_norm)
      p.rmsnorm(c, N, o.attn_in, w.attn_norm, o.attn_normed);
    else
      std::copy(o.attn_in, o.attn_in + N * d, o.attn_normed);
    sub.attention(c, s, kn, B, T, o.attn_normed, w, o.attn_out);
    const std::vector<float> comb_a =
        kn.comb_transposed_site == 0 ? transposed(c, N, o.attn_comb)
                                     : std::vector<float>(o.attn_comb, o.attn_comb + N * n * n);
    if (kn.fused_boundary && kn.shifted_pre) {
      const BoundaryIn in{o.attn_out, x,           o.attn_post,    comb_a.data(),
                          o.attn_pre, w.ffn_hc_fn, w.ffn_hc_scale, w.ffn_hc_base};
      const BoundaryOut out{o.x_mid, o.ffn_in, o.ffn_mixes, o.ffn_pre, o.ffn_post, o.ffn_comb};
      p.boundary(c, N, in, out);
    } else {
      p.hc_post(c, N, o.attn_out, x, o.attn_post, comb_a.data(), o.x_mid);
      p.mixes(c, N, o.x_mid, w.ffn_hc_fn, o.ffn_mixes);
      p.split_sinkhorn(c, N, o.ffn_mixes, w.ffn_hc_scale, w.ffn_hc_base, o.ffn_pre, o.ffn_post,
                       o.ffn_comb);
      p.hc_pre(c, N, o.x_mid, kn.shifted_pre ? o.attn_pre : o.ffn_pre, o.ffn_in);
    }
    if (kn.ffn_norm)
      p.rmsnorm(c, N, o.ffn_in, w.ffn_norm, o.ffn_normed);
    else
      std::copy(o.ffn_in, o.ffn_in + N * d, o.ffn_normed);
    sub.moe(c, s, kn, N, o.ffn_normed, w, o.ffn_out, o.ffn_experts);
    const std::vector<float> comb_f = kn.comb_transposed_site == 1
                                          ? transposed(c, N, o.ffn_comb)
                                          : std::vector<float>(o.ffn_comb, o.ffn_comb + N * n * n);
    p.hc_post(c, N, o.ffn_out, o.x_mid, o.ffn_post, comb_f.data(), o.x_out);
    std::copy(o.ffn_pre, o.ffn_pre + N * n, o.next_pre_mix);
  };
}

}  // namespace mhc::impl
