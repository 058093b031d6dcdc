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

// out[i] = sum_r W[r*m + i] * g[r] for i < m: the backward of matvec, added into out.
void matvec_t_add(const float* W, std::size_t rows, std::size_t m, const float* g, float* out) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < m; ++i) out[i] += W[r * m + i] * g[r];
}

void attention_backward(const KernelConfig& c, const BlockShape& s, const BlockKnobs& kn,
                        std::size_t T, const float* h, const BlockWeights& w, const float* g,
                        float* dh) {
  const std::size_t d = std::size_t(c.d), H = std::size_t(s.heads), dk = std::size_t(s.head_dim);
  const std::size_t HD = H * dk;
  std::vector<float> q(T * HD), k(T * HD), v(T * HD), go(T * HD, 0.0f), dq(T * HD, 0.0f),
      dkk(T * HD, 0.0f), dv(T * HD, 0.0f), p(T), dp(T);
  for (std::size_t t = 0; t < T; ++t) {
    matvec(c, w.wq, HD, d, h + t * d, &q[t * HD]);
    matvec(c, w.wk, HD, d, h + t * d, &k[t * HD]);
    matvec(c, w.wv, HD, d, h + t * d, &v[t * HD]);
    matvec_t_add(w.wo, d, HD, g + t * d, &go[t * HD]);
  }
  const float scale = std::sqrt(float(dk));
  for (std::size_t hd = 0; hd < H; ++hd)
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t upto = kn.causal ? t + 1 : T, o = hd * dk;
      float mx = -INFINITY, den = 0, gp = 0;
      for (std::size_t u = 0; u < upto; ++u) {
        float acc = 0;
        for (std::size_t i = 0; i < dk; ++i) acc += q[t * HD + o + i] * k[u * HD + o + i];
        p[u] = acc / scale;
        mx = std::max(mx, p[u]);
      }
      for (std::size_t u = 0; u < upto; ++u) den += (p[u] = std::exp(p[u] - mx));
      for (std::size_t u = 0; u < upto; ++u) {
        p[u] /= den;
        float acc = 0;
        for (std::size_t i = 0; i < dk; ++i) acc += go[t * HD + o + i] * v[u * HD + o + i];
        dp[u] = acc;
        gp += p[u] * acc;
      }
      for (std::size_t u = 0; u < upto; ++u) {
        const float ds = p[u] * (dp[u] - gp) / scale;
        for (std::size_t i = 0; i < dk; ++i) {
          dq[t * HD + o + i] += ds * k[u * HD + o + i];
          dkk[u * HD + o + i] += ds * q[t * HD + o + i];
          dv[u * HD + o + i] += p[u] * go[t * HD + o + i];
        }
      }
    }
  for (std::size_t t = 0; t < T; ++t) {
    float* out = dh + t * d;
    std::fill(out, out + d, 0.0f);
    matvec_t_add(w.wq, HD, d, &dq[t * HD], out);
    matvec_t_add(w.wk, HD, d, &dkk[t * HD], out);
    matvec_t_add(w.wv, HD, d, &dv[t * HD], out);
  }
}

// One expert's backward for the gradient g of its output, added into dh.
void expert_backward(const KernelConfig& c, const BlockShape& s, const float* h, const float* w1,
                     const float* w2, const float* w3, const float* g, float* dh) {
  const std::size_t d = std::size_t(c.d), I = std::size_t(s.inter);
  std::vector<float> a(I), e(I), du(I, 0.0f), da(I), de(I);
  matvec(c, w1, I, d, h, a.data());
  matvec(c, w3, I, d, h, e.data());
  matvec_t_add(w2, d, I, g, du.data());
  for (std::size_t i = 0; i < I; ++i) {
    const float sg = sigmoid(a[i]);
    da[i] = du[i] * e[i] * sg * (1.0f + a[i] * (1.0f - sg));
    de[i] = du[i] * (a[i] * sg);  // silu(a) first, as the reference: du a alone may overflow
  }
  matvec_t_add(w1, I, d, da.data(), dh);
  matvec_t_add(w3, I, d, de.data(), dh);
}

void moe_backward(const KernelConfig& c, const BlockShape& s, const BlockKnobs& kn, bool routing,
                  std::size_t N, const float* h, const BlockWeights& w, const float* experts,
                  const float* g, float* dh) {
  const std::size_t d = std::size_t(c.d), E = std::size_t(s.experts), K = std::size_t(s.top_k);
  const std::size_t I = std::size_t(s.inter);
  std::vector<float> logit(E), score(K), we(K), dw(K), res(d), gw(d);
  for (std::size_t t = 0; t < N; ++t) {
    const float *ht = h + t * d, *gt = g + t * d;
    float* out = dh + t * d;
    std::fill(out, out + d, 0.0f);
    matvec(c, w.router, E, d, ht, logit.data());
    float total = 0;
    for (std::size_t j = 0; j < K; ++j)
      total += (score[j] = sigmoid(logit[std::size_t(experts[t * K + j])]));
    float dww = 0;
    for (std::size_t j = 0; j < K; ++j) {
      const std::size_t e = std::size_t(experts[t * K + j]);
      we[j] = kn.normalise_routing ? s.route_scale * score[j] / total : s.route_scale * score[j];
      expert(c, s, ht, w.w1 + e * I * d, w.w2 + e * d * I, w.w3 + e * I * d, res.data());
      dw[j] = 0;
      for (std::size_t i = 0; i < d; ++i) dw[j] += gt[i] * res[i];
      dww += dw[j] * we[j];
      for (std::size_t i = 0; i < d; ++i) gw[i] = we[j] * gt[i];
      expert_backward(c, s, ht, w.w1 + e * I * d, w.w2 + e * d * I, w.w3 + e * I * d, gw.data(),
                      out);
    }
    expert_backward(c, s, ht, w.shared_w1, w.shared_w2, w.shared_w3, gt, out);
    for (std::size_t j = 0; j < K && routing; ++j) {
      const std::size_t e = std::size_t(experts[t * K + j]);
      const float ds = kn.normalise_routing ? s.route_scale / total * (dw[j] - dww / s.route_scale)
                                            : s.route_scale * dw[j];
      const float dl = ds * score[j] * (1.0f - score[j]);
      for (std::size_t i = 0; i < d; ++i) out[i] += dl * w.router[e * d + i];
    }
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
  s.attention_backward = [](const KernelConfig& c, const BlockShape& sh, const BlockKnobs& kn,
                            std::size_t B, std::size_t T, const float* h, const BlockWeights& w,
                            const float* g, float* dh) {
    const std::size_t d = std::size_t(c.d);
    for (std::size_t b = 0; b < B; ++b)
      attention_backward(c, sh, kn, T, h + b * T * d, w, g + b * T * d, dh + b * T * d);
  };
  s.moe_backward = moe_backward;
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

std::function<void(const KernelConfig&, const BlockShape&, std::size_t, std::size_t, const float*,
                   const float*, const BlockWeights&, const BlockStages&, const float*,
                   const float*, const BlockGradStages&)>
make_block_backward(const Backend& pieces, Sublayers sub, const BackwardKnobs& kb) {
  auto pc = std::make_shared<Backend>(pieces);
  return [pc, sub, kb](const KernelConfig& c, const BlockShape& s, std::size_t B, std::size_t T,
                       const float* x, const float* pre_mix, const BlockWeights& w,
                       const BlockStages& o, const float* g_out, const float* g_next,
                       const BlockGradStages& r) {
    const Backend::Backward& g = pc->backward;
    if (!g.mixes || !g.split_sinkhorn || !g.hc_pre || !g.hc_post || !g.rmsnorm)
      throw NotCompiled(pc->name + " has no backward kernels");
    if (!sub.attention_backward || !sub.moe_backward)
      throw NotCompiled("the sublayers have no backward kernels");
    const BlockKnobs kn;
    const std::size_t N = B * T, n = std::size_t(c.n), d = std::size_t(c.d), nd = n * d;
    const std::size_t M = std::size_t(c.mix());
    std::vector<float> d_res(N * nd), d_read(N * nd), d_proj(N * nd), d_pre_a(N * n);
    std::vector<float> d_post(N * n), d_comb(N * n * n), d_pre(N * n);
    std::vector<float> d_fn(M * nd), d_scale(3), d_base(M), d_norm(d);  // not returned
    auto sum3 = [](float* to, const std::vector<float>& a, const std::vector<float>& b,
                   const std::vector<float>& e) {
      for (std::size_t i = 0; i < a.size(); ++i) to[i] = a[i] + b[i] + e[i];
    };
    // The FFN's site: hc_post, the MoE, RMSNorm, hc_pre (with the attn site's pre), the split,
    // the projection.
    g.hc_post(c, N, o.ffn_out, o.x_mid, o.ffn_post, o.ffn_comb, g_out, r.ffn_grad_out, d_res.data(),
              d_post.data(), d_comb.data());
    sub.moe_backward(c, s, kn, kb.routing, N, o.ffn_normed, w, o.ffn_experts, r.ffn_grad_out,
                     r.ffn_grad_normed);
    g.rmsnorm(c, N, o.ffn_in, w.ffn_norm, r.ffn_grad_normed, r.ffn_grad_in, d_norm.data());
    g.hc_pre(c, N, o.x_mid, o.attn_pre, r.ffn_grad_in, d_read.data(), d_pre_a.data());
    std::vector<float> up_f(g_next, g_next + N * n);
    if (!kb.shifted_pre) {  // the reading's gradient to the wrong site
      for (std::size_t i = 0; i < N * n; ++i) up_f[i] += d_pre_a[i];
      std::fill(d_pre_a.begin(), d_pre_a.end(), 0.0f);
    }
    g.split_sinkhorn(c, N, o.ffn_mixes, w.ffn_hc_scale, w.ffn_hc_base, up_f.data(), d_post.data(),
                     d_comb.data(), r.ffn_grad_mixes, d_scale.data(), d_base.data());
    g.mixes(c, N, o.x_mid, w.ffn_hc_fn, r.ffn_grad_mixes, d_proj.data(), d_fn.data());
    sum3(r.grad_x_mid, d_res, d_read, d_proj);
    // The attn site, the same way; its pre's gradient is the FFN's reading's.
    g.hc_post(c, N, o.attn_out, x, o.attn_post, o.attn_comb, r.grad_x_mid, r.attn_grad_out,
              d_res.data(), d_post.data(), d_comb.data());
    sub.attention_backward(c, s, kn, B, T, o.attn_normed, w, r.attn_grad_out, r.attn_grad_normed);
    g.rmsnorm(c, N, o.attn_in, w.attn_norm, r.attn_grad_normed, r.attn_grad_in, d_norm.data());
    g.hc_pre(c, N, x, pre_mix, r.attn_grad_in, d_read.data(), r.grad_pre_mix);
    g.split_sinkhorn(c, N, o.attn_mixes, w.attn_hc_scale, w.attn_hc_base, d_pre_a.data(),
                     d_post.data(), d_comb.data(), r.attn_grad_mixes, d_scale.data(),
                     d_base.data());
    g.mixes(c, N, x, w.attn_hc_fn, r.attn_grad_mixes, d_proj.data(), d_fn.data());
    sum3(r.grad_x, d_res, d_read, d_proj);
  };
}

}  // namespace mhc::impl
