// The fused fp32 CPU backend: threaded over tokens, inner loops over 16 lanes of the hidden
// dimension (so the compiler vectorises them), and the sublayer boundary in ONE pass over the
// streams per token: each chunk of the new streams is computed (hc_post), stored, and consumed
// at once by the sum of squares, the 24 projections of mixes and hc_pre. It reads n*d + d and
// writes n*d + d values per token, against about twice that for the four-pass form, and blocks
// tokens so that each chunk of hc_fn serves several of them.
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

// Tokens per block: each 16-wide chunk of hc_fn is loaded once per block of tokens (hc_fn is
// 2 MB at the V4.1 sizes, so per-token passes would be bound by streaming it).
constexpr std::size_t TB = 8;

// One pass over the streams of a block of nt <= TB tokens: load(b, k, c0, len, xk) yields token
// b's stream k at columns c0..c0+len; the values go to x_out[b] (if any), into
// y_out[b] = sum_k pre_mix[b][k] * x_k (if any), the sum of squares and the M projections;
// mix_out[b] gets the finished mixes.
template <bool Round, class Load>
void block_pass(const KernelConfig& c, const float* W, std::size_t nt, const float* const* pre_mix,
                Load load, float* const* x_out, float* const* y_out, float* const* mix_out) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d), nd = n * d;
  const std::size_t M = std::size_t(c.mix());
  std::vector<float> acc(TB * M * L, 0.0f);
  alignas(64) float ss[TB][L] = {}, xk[TB][L], y[TB][L], wl[L];
  for (std::size_t c0 = 0; c0 < d; c0 += L) {
    const std::size_t len = std::min(L, d - c0);
    for (std::size_t b = 0; b < nt; ++b) std::fill(y[b], y[b] + L, 0.0f);
    for (std::size_t k = 0; k < n; ++k) {
      for (std::size_t b = 0; b < nt; ++b) {
        float* xb = xk[b];
        std::fill(xb, xb + L, 0.0f);
        load(b, k, c0, len, xb);
        if (x_out) std::copy(xb, xb + len, x_out[b] + k * d + c0);
        for (std::size_t l = 0; l < L; ++l) ss[b][l] += xb[l] * xb[l];
        if (y_out)
          for (std::size_t l = 0; l < L; ++l) y[b][l] += pre_mix[b][k] * xb[l];
        if (Round)
          for (std::size_t l = 0; l < L; ++l) xb[l] = round_to(c.products, xb[l]);
      }
      const float* Wk = W + k * d + c0;
      for (std::size_t a = 0; a < M; ++a) {
        const float* w = Wk + a * nd;
        for (std::size_t l = 0; l < L; ++l)
          wl[l] = l < len ? (Round ? round_to(c.products, w[l]) : w[l]) : 0.0f;
        for (std::size_t b = 0; b < nt; ++b) {
          float* __restrict A = &acc[(b * M + a) * L];
          const float* __restrict xb = xk[b];
          for (std::size_t l = 0; l < L; ++l) A[l] += wl[l] * xb[l];
        }
      }
    }
    if (y_out)
      for (std::size_t b = 0; b < nt; ++b)
        for (std::size_t l = 0; l < len; ++l) y_out[b][c0 + l] = store(c, y[b][l]);
  }
  for (std::size_t b = 0; b < nt; ++b) {
    const float r = 1.0f / std::sqrt(lane_sum(ss[b]) / float(nd) + c.norm_eps);
    for (std::size_t a = 0; a < M; ++a) mix_out[b][a] = lane_sum(&acc[(b * M + a) * L]) * r;
  }
}

// Runs fn(t0, nt) over blocks of up to TB tokens, blocks spread over the threads.
template <class Fn>
void parallel_blocks(unsigned threads, std::size_t T, Fn fn) {
  parallel_tokens(threads, (T + TB - 1) / TB,
                  [&](std::size_t blk) { fn(blk * TB, std::min(TB, T - blk * TB)); });
}

void need_fp32_sums(const KernelConfig& c) {
  if (c.accumulation != Format::fp32)
    throw NotCompiled("cpu-fused accumulates the projection in fp32 only");
  need_fp32_stages(c, "cpu-fused");
}

template <class Load>
void block_pass_any(const KernelConfig& c, const float* W, std::size_t nt,
                    const float* const* pre_mix, Load load, float* const* x_out,
                    float* const* y_out, float* const* mix_out) {
  if (c.products != Format::fp32)
    block_pass<true>(c, W, nt, pre_mix, load, x_out, y_out, mix_out);
  else
    block_pass<false>(c, W, nt, pre_mix, load, x_out, y_out, mix_out);
}

void mixes(const KernelConfig& c, std::size_t T, const float* x, const float* W, float* out) {
  need_fp32_sums(c);
  const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), d = std::size_t(c.d);
  const std::size_t M = std::size_t(c.mix());
  parallel_blocks(c.threads, T, [&](std::size_t t0, std::size_t nt) {
    float* mix[TB];
    for (std::size_t b = 0; b < nt; ++b) mix[b] = out + (t0 + b) * M;
    auto load = [&](std::size_t b, std::size_t k, std::size_t c0, std::size_t len, float* xk) {
      const float* xt = x + (t0 + b) * nd + k * d + c0;
      std::copy(xt, xt + len, xk);
    };
    block_pass_any(c, W, nt, nullptr, load, nullptr, nullptr, mix);
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
  need_fp32_intermediates(c, "cpu-fused");
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
  need_fp32_intermediates(c, "cpu-fused");
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  parallel_tokens(c.threads, T, [&](std::size_t t) {
    for (std::size_t k = 0; k < n; ++k)
      post_chunk(c, f + t * d, R + t * n * d, post + t * n, comb + t * n * n, k, 0, d,
                 y + (t * n + k) * d);
  });
}

void rmsnorm(const KernelConfig& c, std::size_t T, const float* x, const float* g, float* y) {
  need_fp32_intermediates(c, "cpu-fused");
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
  need_fp32_sums(c);
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d), M = std::size_t(c.mix());
  parallel_blocks(c.threads, T, [&](std::size_t t0, std::size_t nt) {
    const float* pm[TB];
    float *xo[TB], *yo[TB], *mix[TB];
    for (std::size_t b = 0; b < nt; ++b) {
      const std::size_t t = t0 + b;
      pm[b] = in.pre_mix + t * n;
      xo[b] = out.x + t * n * d;
      yo[b] = out.y + t * d;
      mix[b] = out.mixes + t * M;
    }
    auto load = [&](std::size_t b, std::size_t k, std::size_t c0, std::size_t len, float* xk) {
      const std::size_t t = t0 + b;
      post_chunk(c, in.f + t * d, in.residual + t * n * d, in.post + t * n, in.comb + t * n * n, k,
                 c0, len, xk);
    };
    block_pass_any(c, in.hc_fn, nt, pm, load, xo, yo, mix);
    for (std::size_t b = 0; b < nt; ++b) {
      const std::size_t t = t0 + b;
      split_token(c, mix[b], in.hc_scale, in.hc_base, out.pre + t * n, out.post + t * n,
                  out.comb + t * n * n);
    }
  });
}

}  // namespace

const Backend& cpu_fused() {
  static const Backend b = [] {
    Backend k{"cpu-fused",
              "fp32 CPU, vectorisable and threaded over tokens; single-pass boundary",
              mixes,
              split_sinkhorn,
              hc_pre,
              hc_post,
              rmsnorm,
              boundary,
              {},
              false,
              cpu_backward({}, true),
              ""};
    BlockKnobs knobs;
    knobs.fused_boundary = true;
    k.block = make_block(k, knobs);
    return k;
  }();
  return b;
}

}  // namespace mhc::impl
