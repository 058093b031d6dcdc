// The fused fp32 CPU backend: threaded over tokens, inner loops over 16 lanes of the hidden
// dimension (so the compiler vectorises them), and the sublayer boundary in ONE pass over the
// streams per token: each chunk of the new streams is computed (hc_post), stored, and consumed
// at once by the sum of squares, the 24 projections of mixes and hc_pre. It reads n*d + d and
// writes n*d + d values per token, against about twice that for the four-pass form.
#include <array>

#include "common.hpp"

namespace mhc::impl {
namespace {
using namespace cpu_detail;
constexpr std::size_t L = 16;

float lane_sum(const float* v) {  // pairwise over the 16 lanes
  float s[8];
  for (std::size_t l = 0; l < 8; ++l) s[l] = v[l] + v[l + 8];
  for (std::size_t l = 0; l < 4; ++l) s[l] += s[l + 4];
  return (s[0] + s[2]) + (s[1] + s[3]);
}

// One token's pass over its streams: load(k, c0, len, xk) yields stream k's values c0..c0+len;
// they are written to x_out (if any), folded into y_out = sum_k pre_mix[k] * x_k (if any), into
// the sum of squares and into the M projections; mix_out gets the finished mixes.
template <bool TF32, class Load>
void stream_pass(const KernelConfig& c, const float* W, const float* pre_mix, Load load,
                 float* x_out, float* y_out, float* mix_out) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d), nd = n * d;
  const std::size_t M = std::size_t(c.mix());
  std::vector<float> acc(M * L, 0.0f);
  alignas(64) float ss[L] = {}, xk[L], y[L];
  for (std::size_t c0 = 0; c0 < d; c0 += L) {
    const std::size_t len = std::min(L, d - c0);
    std::fill(y, y + L, 0.0f);
    for (std::size_t k = 0; k < n; ++k) {
      std::fill(xk, xk + L, 0.0f);
      load(k, c0, len, xk);
      if (x_out) std::copy(xk, xk + len, x_out + k * d + c0);
      for (std::size_t l = 0; l < L; ++l) ss[l] += xk[l] * xk[l];
      if (y_out)
        for (std::size_t l = 0; l < L; ++l) y[l] += pre_mix[k] * xk[l];
      float xo[L];
      for (std::size_t l = 0; l < L; ++l) xo[l] = TF32 ? round_tf32(xk[l]) : xk[l];
      const float* Wk = W + k * d + c0;
      for (std::size_t a = 0; a < M; ++a) {
        const float* w = Wk + a * nd;
        float* A = &acc[a * L];
        if (len == L) {
          for (std::size_t l = 0; l < L; ++l) A[l] += (TF32 ? round_tf32(w[l]) : w[l]) * xo[l];
        } else {
          for (std::size_t l = 0; l < len; ++l) A[l] += (TF32 ? round_tf32(w[l]) : w[l]) * xo[l];
        }
      }
    }
    if (y_out)
      for (std::size_t l = 0; l < len; ++l) y_out[c0 + l] = store(c, y[l]);
  }
  const float r = 1.0f / std::sqrt(lane_sum(ss) / float(nd) + c.norm_eps);
  for (std::size_t a = 0; a < M; ++a) mix_out[a] = lane_sum(&acc[a * L]) * r;
}

template <class Load>
void stream_pass_any(const KernelConfig& c, const float* W, const float* pre_mix, Load load,
                     float* x_out, float* y_out, float* mix_out) {
  if (c.arith == Arith::tf32)
    stream_pass<true>(c, W, pre_mix, load, x_out, y_out, mix_out);
  else
    stream_pass<false>(c, W, pre_mix, load, x_out, y_out, mix_out);
}

void mixes(const KernelConfig& c, std::size_t T, const float* x, const float* W, float* out) {
  const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), d = std::size_t(c.d);
  parallel_tokens(c.threads, T, [&](std::size_t t) {
    const float* xt = x + t * nd;
    auto load = [&](std::size_t k, std::size_t c0, std::size_t len, float* xk) {
      std::copy(xt + k * d + c0, xt + k * d + c0 + len, xk);
    };
    stream_pass_any(c, W, nullptr, load, nullptr, nullptr, out + t * std::size_t(c.mix()));
  });
}

void split_sinkhorn(const KernelConfig& c, std::size_t T, const float* m, const float* s,
                    const float* b, float* pre, float* post, float* comb) {
  const std::size_t n = std::size_t(c.n), M = std::size_t(c.mix());
  parallel_tokens(c.threads, T, [&](std::size_t t) {
    split_token(c, m + t * M, s, b, pre + t * n, post + t * n, comb + t * n * n);
  });
}

void hc_pre(const KernelConfig& c, std::size_t T, const float* x, const float* p, float* y) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  parallel_tokens(c.threads, T, [&](std::size_t t) {
    float* yt = y + t * d;
    std::fill(yt, yt + d, 0.0f);
    for (std::size_t j = 0; j < n; ++j) {
      const float pj = p[t * n + j];
      const float* xj = x + (t * n + j) * d;
      for (std::size_t cc = 0; cc < d; ++cc) yt[cc] += pj * xj[cc];
    }
    for (std::size_t cc = 0; cc < d; ++cc) yt[cc] = store(c, yt[cc]);
  });
}

// Stream k of hc_post for columns c0..c0+len: post[k] * f + sum_j comb[j,k] * R[j].
inline void post_chunk(const KernelConfig& c, const float* f, const float* R, const float* post,
                       const float* comb, std::size_t k, std::size_t c0, std::size_t len,
                       float* out) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  for (std::size_t l = 0; l < len; ++l) out[l] = post[k] * f[c0 + l];
  for (std::size_t j = 0; j < n; ++j) {
    const float w = comb[j * n + k];
    const float* Rj = R + j * d + c0;
    for (std::size_t l = 0; l < len; ++l) out[l] += w * Rj[l];
  }
  for (std::size_t l = 0; l < len; ++l) out[l] = store(c, out[l]);
}

void hc_post(const KernelConfig& c, std::size_t T, const float* f, const float* R,
             const float* post, const float* comb, float* y) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  parallel_tokens(c.threads, T, [&](std::size_t t) {
    for (std::size_t k = 0; k < n; ++k)
      post_chunk(c, f + t * d, R + t * n * d, post + t * n, comb + t * n * n, k, 0, d,
                 y + (t * n + k) * d);
  });
}

void rmsnorm(const KernelConfig& c, std::size_t T, const float* x, const float* g, float* y) {
  const std::size_t d = std::size_t(c.d);
  parallel_tokens(c.threads, T, [&](std::size_t t) {
    const float* xt = x + t * d;
    alignas(64) float ss[L] = {};
    std::size_t i = 0;
    for (; i + L <= d; i += L)
      for (std::size_t l = 0; l < L; ++l) ss[l] += xt[i + l] * xt[i + l];
    for (std::size_t l = 0; i + l < d; ++l) ss[l] += xt[i + l] * xt[i + l];
    const float r = 1.0f / std::sqrt(lane_sum(ss) / float(d) + c.norm_eps);
    for (std::size_t cc = 0; cc < d; ++cc) y[t * d + cc] = store(c, g[cc] * (xt[cc] * r));
  });
}

void boundary(const KernelConfig& c, std::size_t T, const BoundaryIn& in, const BoundaryOut& out) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d), M = std::size_t(c.mix());
  parallel_tokens(c.threads, T, [&](std::size_t t) {
    const float *f = in.f + t * d, *R = in.residual + t * n * d;
    const float *post = in.post + t * n, *comb = in.comb + t * n * n;
    auto load = [&](std::size_t k, std::size_t c0, std::size_t len, float* xk) {
      post_chunk(c, f, R, post, comb, k, c0, len, xk);
    };
    float* mix = out.mixes + t * M;
    stream_pass_any(c, in.hc_fn, in.pre_mix + t * n, load, out.x + t * n * d, out.y + t * d, mix);
    split_token(c, mix, in.hc_scale, in.hc_base, out.pre + t * n, out.post + t * n,
                out.comb + t * n * n);
  });
}

}  // namespace

const Backend& cpu_fused() {
  static const Backend b{"cpu-fused",
                         "fp32 CPU, vectorisable and threaded over tokens; single-pass boundary",
                         mixes, split_sinkhorn, hc_pre, hc_post, rmsnorm, boundary};
  return b;
}

}  // namespace mhc::impl
