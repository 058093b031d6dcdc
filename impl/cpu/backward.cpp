// fp32 backward kernels of the pieces, closed forms (docs/semantics.md, "The backward pass"); a
// stream tensor's gradient stored as the configuration stores streams.
// Parameter gradients are sums over tokens: `parts` per-range partial sums (contiguous ranges of
// tokens, one per thread), then added in range order. One part is the straightforward order.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common.hpp"

namespace mhc::impl {
namespace {
using namespace cpu_detail;

// fn(t, partial) for every token, the tokens in `parts` contiguous ranges run in parallel, each
// range accumulating into its own zeroed partial of `size` floats; out = the partials' sum. The
// knobs' order: tokens ascending, descending, or shuffled anew on every call (one range).
template <class Fn>
void over_tokens(const BackwardKnobs& kb, std::size_t T, unsigned parts, std::size_t size,
                 float* out, Fn fn) {
  using O = BackwardKnobs::Order;
  if (kb.order != O::forward) parts = 1;
  parts = unsigned(std::max<std::size_t>(1, std::min<std::size_t>(parts, T)));
  std::vector<std::size_t> order(T);
  for (std::size_t t = 0; t < T; ++t) order[t] = kb.order == O::reverse ? T - 1 - t : t;
  if (kb.order == O::shuffled) {
    static std::atomic<std::uint64_t> calls{0};
    std::mt19937_64 rng(std::random_device{}() ^ calls.fetch_add(1));
    std::shuffle(order.begin(), order.end(), rng);
  }
  std::vector<std::vector<float>> partial(parts, std::vector<float>(size, 0.0f));
  parallel_tokens(parts, parts, [&](std::size_t w) {
    for (std::size_t k = T * w / parts; k < T * (w + 1) / parts; ++k)
      fn(order[k], partial[w].data());
  });
  std::fill(out, out + size, 0.0f);
  for (const auto& p : partial)
    for (std::size_t i = 0; i < size; ++i) out[i] += p[i];
}

unsigned parts_of(const KernelConfig& c, bool threaded) {
  if (!threaded) return 1;
  return c.threads ? c.threads : std::max(1u, std::thread::hardware_concurrency());
}

// d_x and d_hc_fn of mixes = r hc_fn x, r = (sum x^2 / nd + eps)^-1/2:
// d_hc_fn[a, i] = g_a r x_i, d_x_i = r sum_a g_a hc_fn[a, i] - (r^3 / nd) x_i sum_a g_a dot_a.
void mixes_backward(const BackwardKnobs& kb, const KernelConfig& c, std::size_t T, const float* x,
                    const float* W, const float* g, float* dx, float* dW, bool threaded) {
  const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), M = std::size_t(c.mix());
  const float mean = kb.mean_term ? 1.0f : 0.0f;
  over_tokens(kb, T, parts_of(c, threaded), M * nd, dW, [&](std::size_t t, float* dWp) {
    const float* xt = x + t * nd;
    const float* gt = g + t * M;
    float ss = 0;
    for (std::size_t i = 0; i < nd; ++i) ss += xt[i] * xt[i];
    const float r = 1.0f / std::sqrt(ss / float(nd) + c.norm_eps);
    float gdot = 0;
    for (std::size_t a = 0; a < M; ++a) {
      float dot = 0;
      for (std::size_t i = 0; i < nd; ++i) dot += W[a * nd + i] * xt[i];
      gdot += gt[a] * dot;
      for (std::size_t i = 0; i < nd; ++i) dWp[a * nd + i] += gt[a] * r * xt[i];
    }
    for (std::size_t i = 0; i < nd; ++i) {
      float acc = 0;
      for (std::size_t a = 0; a < M; ++a) acc += gt[a] * W[a * nd + i];
      dx[t * nd + i] = store(c, r * acc - mean * (r * r * r / float(nd) * xt[i] * gdot));
    }
  });
}

// One token of the split's backward: the forward recomputed with every Sinkhorn step's output
// and denominators kept, then each step undone by its closed form.
void split_backward_token(const BackwardKnobs& kb, const KernelConfig& c, const float* m,
                          const float* s, const float* b, const float* g_pre, const float* g_post,
                          const float* g_comb, float* dm, float* ds, float* db) {
  const int n = c.n;
  const float eps = c.hc_eps;
  const std::size_t nn = std::size_t(n * n);
  for (int w = 0; w < 2; ++w)
    for (int j = 0; j < n; ++j) {
      const int i = w * n + j;
      const float sg = 1.0f / (1.0f + std::exp(-(m[i] * s[w] + b[i])));
      const float dz =
          (w ? (kb.post_factor2 ? 2.0f : 1.0f) * g_post[j] : g_pre[j]) * sg * (1.0f - sg);
      dm[i] = dz * s[w];
      ds[w] += dz * m[i];
      db[i] = dz;
    }
  std::vector<float> P(nn), C(nn);
  for (int j = 0; j < n; ++j) {
    float* p = &P[std::size_t(j * n)];
    for (int k = 0; k < n; ++k) p[k] = m[2 * n + j * n + k] * s[2] + b[2 * n + j * n + k];
    float mx = p[0], rs = 0;
    for (int k = 1; k < n; ++k) mx = std::max(mx, p[k]);
    for (int k = 0; k < n; ++k) rs += (p[k] = std::exp(p[k] - mx));
    for (int k = 0; k < n; ++k) p[k] /= rs;
  }
  const int steps = 2 * c.iters - 1;  // columns, then (rows, columns) per further round
  std::vector<float> Y(std::size_t(steps) * nn), D(std::size_t(steps * n));
  // The iterates and denominators of steps 0..upto, from P; reversed: line sums last to first.
  auto forward_to = [&](int upto, bool reversed) {
    for (std::size_t i = 0; i < nn; ++i) C[i] = P[i] + eps;
    for (int st = 0; st <= upto; ++st) {
      const bool rows = st % 2 == 1;
      for (int a = 0; a < n; ++a) {
        float sum = 0;
        for (int k = 0; k < n; ++k) {
          const int e = reversed ? n - 1 - k : k;
          sum += C[std::size_t(rows ? a * n + e : e * n + a)];
        }
        const float den = sum + eps;
        D[std::size_t(st * n + a)] = den;
        for (int e = 0; e < n; ++e) {
          float& v = C[std::size_t(rows ? a * n + e : e * n + a)];
          v = v / den;
        }
      }
      std::copy(C.begin(), C.end(), Y.begin() + std::ptrdiff_t(std::size_t(st) * nn));
    }
  };
  if (!kb.recompute) forward_to(steps - 1, false);
  std::vector<float> G(g_comb, g_comb + nn);
  using S = BackwardKnobs::Sinkhorn;
  const int last = kb.sinkhorn == S::last_round ? std::max(0, steps - 2) : 0;
  for (int st = steps; st-- > last;) {
    const bool rows = st % 2 == 1;
    // converged: the derivative at the last iterate of this step's kind
    const int at = kb.sinkhorn == S::converged ? (rows ? steps - 2 : steps - 1) : st;
    if (kb.recompute) forward_to(at, true);  // checkpointing: only P kept from the forward
    const float* y = &Y[std::size_t(at) * nn];
    const float* den = &D[std::size_t(at * n)];
    for (int a = 0; a < n; ++a) {
      float gy = 0;
      for (int e = 0; e < n; ++e) {
        const std::size_t i = std::size_t(rows ? a * n + e : e * n + a);
        gy += G[i] * y[i];
      }
      for (int e = 0; e < n; ++e) {
        const std::size_t i = std::size_t(rows ? a * n + e : e * n + a);
        G[i] = (G[i] - gy) / (kb.den_eps ? den[a] : den[a] - eps);
      }
    }
  }
  for (int j = 0; j < n; ++j) {
    float gp = 0;
    for (int k = 0; k < n; ++k) gp += G[std::size_t(j * n + k)] * P[std::size_t(j * n + k)];
    for (int k = 0; k < n; ++k) {
      const std::size_t i = std::size_t(j * n + k), at = std::size_t(2 * n) + i;
      const float dl = P[i] * (G[i] - gp);
      dm[at] = dl * s[2];
      ds[2] += dl * m[at];
      db[at] = dl;
    }
  }
}

void split_backward(const BackwardKnobs& kb, const KernelConfig& c, std::size_t T, const float* m,
                    const float* s, const float* b, const float* g_pre, const float* g_post,
                    const float* g_comb, float* dm, float* ds, float* db, bool threaded) {
  const std::size_t n = std::size_t(c.n), M = std::size_t(c.mix());
  std::vector<float> both(3 + M);  // d hc_scale, d hc_base
  over_tokens(kb, T, parts_of(c, threaded), 3 + M, both.data(), [&](std::size_t t, float* p) {
    std::vector<float> dbt(M), mt(m + t * M, m + t * M + M);
    for (float& v : mt) v = round_to(kb.saved_mixes, v);
    split_backward_token(kb, c, mt.data(), s, b, g_pre + t * n, g_post + t * n, g_comb + t * n * n,
                         dm + t * M, p, dbt.data());
    for (std::size_t i = 0; i < M; ++i) p[3 + i] += dbt[i];
  });
  std::copy(both.begin(), both.begin() + 3, ds);
  std::copy(both.begin() + 3, both.end(), db);
}

// sum_c a_c b_c over d in the knobs' order (BackwardKnobs::Sums).
float sum_over_d(const BackwardKnobs& kb, const float* a, const float* b, std::size_t d) {
  using S = BackwardKnobs::Sums;
  const auto product = [&](std::size_t i) {
    return kb.tf32_products ? round_to(Format::tf32, a[i]) * round_to(Format::tf32, b[i])
                            : a[i] * b[i];
  };
  float s = 0;
  switch (kb.sums) {
    case S::forward:
      for (std::size_t i = 0; i < d; ++i) s += product(i);
      return s;
    case S::reverse:
      for (std::size_t i = d; i-- > 0;) s += product(i);
      return s;
    case S::pairwise: {
      std::vector<float> t(d);
      for (std::size_t i = 0; i < d; ++i) t[i] = product(i);
      for (std::size_t w = 1; w < d; w *= 2)
        for (std::size_t i = 0; i + w < d; i += 2 * w) t[i] += t[i + w];
      return d ? t[0] : 0.0f;
    }
    case S::lanes: {
      float lane[32] = {};
      for (std::size_t i = 0; i < d; ++i)
        lane[i % 32] =
            kb.tf32_products ? lane[i % 32] + product(i) : std::fma(a[i], b[i], lane[i % 32]);
      for (std::size_t w = 16; w > 0; w /= 2)
        for (std::size_t l = 0; l < w; ++l) lane[l] += lane[l + w];
      return lane[0];
    }
  }
  return s;
}

// y_c = sum_j p_j x_jc: d_x_jc = p_j g_c, d_p_j = sum_c g_c x_jc.
void pre_backward(const BackwardKnobs& kb, const KernelConfig& c, std::size_t T, const float* x,
                  const float* p, const float* g, float* dx, float* dp) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t cc = 0; cc < d; ++cc)
        dx[(t * n + j) * d + cc] = store(c, p[t * n + j] * g[t * d + cc]);
      dp[t * n + j] = sum_over_d(kb, g + t * d, x + (t * n + j) * d, d);
    }
}

// y_kc = post_k f_c + sum_j comb_jk R_jc.
void post_backward(const BackwardKnobs& kb, const KernelConfig& c, std::size_t T, const float* f,
                   const float* R, const float* post, const float* comb, const float* g, float* df,
                   float* dR, float* dpost, float* dcomb) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  for (std::size_t t = 0; t < T; ++t) {
    const float* gt = g + t * n * d;
    for (std::size_t cc = 0; cc < d; ++cc) {
      float acc = 0;
      for (std::size_t k = 0; k < n; ++k) acc += post[t * n + k] * gt[k * d + cc];
      df[t * d + cc] = store(c, acc);
    }
    for (std::size_t k = 0; k < n; ++k) dpost[t * n + k] = sum_over_d(kb, gt + k * d, f + t * d, d);
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t cc = 0; cc < d; ++cc) {
        float acc = 0;
        for (std::size_t k = 0; k < n; ++k) acc += comb[(t * n + j) * n + k] * gt[k * d + cc];
        dR[(t * n + j) * d + cc] = store(c, acc);
      }
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t k = 0; k < n; ++k)
        dcomb[kb.comb_transposed ? (t * n + k) * n + j : (t * n + j) * n + k] =
            sum_over_d(kb, gt + k * d, R + (t * n + j) * d, d);
  }
}

// y_i = w_i x_i r: d_w_i = sum_t g_i x_i r, d_x_i = r w_i g_i - (r^3 / d) x_i sum_j g_j w_j x_j.
void rmsnorm_backward(const BackwardKnobs& kb, const KernelConfig& c, std::size_t T, const float* x,
                      const float* w, const float* g, float* dx, float* dw, bool threaded) {
  const std::size_t d = std::size_t(c.d);
  const float mean = kb.mean_term ? 1.0f : 0.0f;
  over_tokens(kb, T, parts_of(c, threaded), d, dw, [&](std::size_t t, float* dwp) {
    const float* xt = x + t * d;
    const float* gt = g + t * d;
    float ss = 0, gwx = 0;
    for (std::size_t i = 0; i < d; ++i) ss += xt[i] * xt[i];
    const float r = 1.0f / std::sqrt(ss / float(d) + c.norm_eps);
    for (std::size_t i = 0; i < d; ++i) gwx += gt[i] * w[i] * xt[i];
    for (std::size_t i = 0; i < d; ++i) {
      dx[t * d + i] = store(c, r * w[i] * gt[i] - mean * (r * r * r / float(d) * xt[i] * gwx));
      dwp[i] += gt[i] * xt[i] * r;
    }
  });
}

}  // namespace

Backend::Backward cpu_backward(const BackwardKnobs& kb, bool threaded) {
  Backend::Backward b;
  b.mixes = [kb, threaded](const KernelConfig& c, std::size_t T, const float* x, const float* W,
                           const float* g, float* dx,
                           float* dW) { mixes_backward(kb, c, T, x, W, g, dx, dW, threaded); };
  b.split_sinkhorn = [kb, threaded](const KernelConfig& c, std::size_t T, const float* m,
                                    const float* s, const float* bb, const float* gp,
                                    const float* gq, const float* gc, float* dm, float* ds,
                                    float* db) {
    split_backward(kb, c, T, m, s, bb, gp, gq, gc, dm, ds, db, threaded);
  };
  b.hc_pre = [kb](const KernelConfig& c, std::size_t T, const float* x, const float* p,
                  const float* g, float* dx,
                  float* dp) { pre_backward(kb, c, T, x, p, g, dx, dp); };
  b.hc_post = [kb](const KernelConfig& c, std::size_t T, const float* f, const float* R,
                   const float* post, const float* comb, const float* g, float* df, float* dR,
                   float* dpost, float* dcomb) {
    post_backward(kb, c, T, f, R, post, comb, g, df, dR, dpost, dcomb);
  };
  b.rmsnorm = [kb, threaded](const KernelConfig& c, std::size_t T, const float* x, const float* w,
                             const float* g, float* dx,
                             float* dw) { rmsnorm_backward(kb, c, T, x, w, g, dx, dw, threaded); };
  if (kb.new_streams == BackwardKnobs::NewStreams::stored) return b;  // the driver composes
  b.boundary = [p = b, kb](const KernelConfig& c, std::size_t T, const BoundaryBackwardIn& a,
                           const BoundaryBackwardOut& o) {
    const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), M = std::size_t(c.mix());
    const BoundaryIn& f = a.forward;
    KernelConfig kept = c;  // the pieces' shares of gx, not stored
    kept.streams = Format::fp32;
    std::vector<float> dm(T * M), proj(T * nd), pre(T * nd), gx(T * nd);
    p.split_sinkhorn(c, T, a.mixes, f.hc_scale, f.hc_base, a.g_pre, a.g_post, a.g_comb, dm.data(),
                     o.d_hc_scale, o.d_hc_base);
    for (std::size_t i = 0; i < T * M; ++i) dm[i] += a.g_mixes[i];
    p.mixes(kept, T, a.x, f.hc_fn, dm.data(), proj.data(), o.d_hc_fn);
    p.hc_pre(kept, T, a.x, f.pre_mix, a.g_y, pre.data(), o.d_pre_mix);
    const Format s = c.streams;
    for (std::size_t i = 0; i < T * nd; ++i)
      gx[i] = kb.new_streams == BackwardKnobs::NewStreams::kept
                  ? a.g_x[i] + proj[i] + pre[i]
                  : round_to(s, round_to(s, round_to(s, pre[i]) + a.g_x[i]) + round_to(s, proj[i]));
    p.hc_post(c, T, f.f, f.residual, f.post, f.comb, gx.data(), o.d_f, o.d_residual, o.d_post,
              o.d_comb);
  };
  return b;
}

}  // namespace mhc::impl
