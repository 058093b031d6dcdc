// The mHC pieces (docs/semantics.md, "The mHC pieces"), per token, generic over the Scalar S
// they compute in (what S must provide: docs/semantics.md, "Scalar customisation points").
//
// Inputs may be stored in another type (fp32 activations and weights) and are read exactly, by
// conversion to S. Layouts: a token's streams x[j*d + c] (stream-major), mixes[M],
// pre[n], post[n], comb[j*n + k] with C[j,k] carrying stream j INTO stream k.
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

#include "mhc/reference/arith.hpp"
#include "mhc/reference/config.hpp"

namespace mhc::ref {

// The logistic sigmoid; a customisation point (a Scalar may bound it as one function).
template <class S>
S sigmoid(const S& z) {
  using std::exp;
  return S(1) / (S(1) + exp(-z));
}

// r = 1 / sqrt(mean(x^2) + eps) over the m values of x (already in S); of_sum: the sum instead
// of the mean (a deviation). Each step's result is an intermediate (the squares are positive: one
// rounding of their sum bounds the rounding of each).
template <class S>
S rms_scale(const S* x, std::size_t m, double eps, bool of_sum = false) {
  using std::sqrt;
  const auto step = [](const S& v) { return stored(v, Storage::intermediates); };
  const S ss = step(dot(x, x, m));
  const S mean = of_sum ? ss : step(ss / S(static_cast<double>(m)));
  return step(S(1) / sqrt(step(mean + S(eps))));
}

// hc_mixes of T consecutive tokens (x: [T, n*d], out: [T, M]): one RMS statistic over all n*d
// values of each token, projection first (its result an intermediate), then * r.
template <class S, class X, class W>
void mixes(const Config& c, std::size_t T, const X* x, const W* hc_fn, S* out) {
  const Semantics& sem = c.sem;
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  const std::size_t nd = c.stream_size(), M = std::size_t(c.mix());
  std::vector<S> copy;
  const S* xs = nullptr;
  if constexpr (std::is_same<X, S>::value) {
    xs = x;
  } else {
    copy.assign(x, x + T * nd);
    xs = copy.data();
  }
  if (sem.rms == Semantics::Rms::stream_mean) {  // deviation: one statistic per stream
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t a = 0; a < M; ++a) {
        S acc(0);
        for (std::size_t j = 0; j < n; ++j) {
          const S* xj = xs + t * nd + j * d;
          acc += linear(xj, hc_fn + a * nd + j * d, d) * rms_scale(xj, d, c.norm_eps);
        }
        out[t * M + a] = acc;
      }
    return;
  }
  std::vector<S> flat;
  const S* proj_in = xs;
  if (sem.d_major) {  // deviation: the projection sees x[c*n + j]
    flat.resize(T * nd);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t j = 0; j < n; ++j)
        for (std::size_t cc = 0; cc < d; ++cc) flat[t * nd + cc * n + j] = xs[t * nd + j * d + cc];
    proj_in = flat.data();
  }
  project(proj_in, T, hc_fn, M, nd, out);
  for (std::size_t t = 0; t < T; ++t) {
    const S r = rms_scale(xs + t * nd, nd, c.norm_eps, sem.rms == Semantics::Rms::token_sum);
    for (std::size_t a = 0; a < M; ++a)
      out[t * M + a] = stored(out[t * M + a], Storage::intermediates) * r;
  }
}

// hc_mixes of one token.
template <class S, class X, class W>
void mixes(const Config& c, const X* x, const W* hc_fn, S* out) {
  mixes(c, 1, x, hc_fn, out);
}

// Row and column sums of comb after each step of the Sinkhorn (for convergence work).
template <class S>
struct SinkhornTrace {
  enum class Step { softmax, row, column };
  struct Entry {
    Step step;
    std::vector<S> row_sums, col_sums;  // of the matrix right after this step
    std::vector<S> matrix;              // the matrix right after this step, [j*n + k]
  };
  std::vector<Entry> steps;
};

// hc_eps as used: the configured value, times the deviation's scale.
inline double hc_eps(const Config& c) {
  return c.hc_eps * c.sem.hc_eps_scale;
}

namespace detail {
template <class S>
void record(const Config& c, const S* C, typename SinkhornTrace<S>::Step step,
            SinkhornTrace<S>* trace) {
  if (!trace) return;
  const int n = c.n;
  typename SinkhornTrace<S>::Entry e{step, std::vector<S>(n), std::vector<S>(n),
                                     std::vector<S>(C, C + n * n)};
  std::vector<S> col(n);
  for (int j = 0; j < n; ++j) e.row_sums[j] = sum(C + j * n, std::size_t(n));
  for (int k = 0; k < n; ++k) {
    for (int j = 0; j < n; ++j) col[j] = C[j * n + k];
    e.col_sums[k] = sum(col.data(), std::size_t(n));
  }
  trace->steps.push_back(std::move(e));
}

// v normalised by its line sum S, with eps where `mode` puts it.
template <class S>
S normalise(const S& v, const S& sum_, Semantics::Eps mode, double eps) {
  switch (mode) {
    case Semantics::Eps::in_sum:
      return v / (sum_ + S(eps));
    case Semantics::Eps::after:
      return v / sum_ + S(eps);
    case Semantics::Eps::none:
      break;
  }
  return v / sum_;
}

// v[0], v[stride], ... (n entries) divided by den: a customisation point, so that a Scalar that
// only searches (lanes::Lanes) may multiply by the reciprocal instead.
template <class S>
void divide_line(S* v, std::size_t stride, int n, const S& den) {
  for (int i = 0; i < n; ++i) v[std::size_t(i) * stride] = v[std::size_t(i) * stride] / den;
}

// The n entries v[0], v[stride], ... divided by their line sum s, eps where `mode` puts it (the
// denominator s + eps formed once per line, as the formula reads).
template <class S>
void normalise_line(S* v, std::size_t stride, int n, const S& s, Semantics::Eps mode, double eps) {
  switch (mode) {
    case Semantics::Eps::in_sum:
      divide_line(v, stride, n, S(s + S(eps)));
      return;
    case Semantics::Eps::after: {
      divide_line(v, stride, n, s);
      const S e = S(eps);
      for (int i = 0; i < n; ++i) v[std::size_t(i) * stride] = v[std::size_t(i) * stride] + e;
      return;
    }
    case Semantics::Eps::none:
      divide_line(v, stride, n, s);
      return;
  }
}

// Every column k divided by its sum: C[j,k] / (sum_j' C[j',k] + eps) by default. col: n scratch.
template <class S>
void divide_columns(const Config& c, S* C, S* col) {
  const int n = c.n;
  for (int k = 0; k < n; ++k) {
    for (int j = 0; j < n; ++j) col[j] = C[j * n + k];
    normalise_line(C + k, std::size_t(n), n, sum(col, std::size_t(n)), c.sem.col_eps, hc_eps(c));
  }
}

// Every row j divided by its sum: C[j,k] / (sum_k' C[j,k'] + eps) by default.
template <class S>
void divide_rows(const Config& c, S* C) {
  const int n = c.n;
  for (int j = 0; j < n; ++j)
    normalise_line(C + j * n, 1, n, sum(C + j * n, std::size_t(n)), c.sem.row_eps, hc_eps(c));
}
}  // namespace detail

// The comb from its logits L[j*n + k]: a row softmax (max-subtracted) plus eps AFTER the
// division, then a column division, then iters-1 rounds of (row division, column division);
// every division adds eps to the SUM. With iters = 20: 20 column and 19 row divisions.
template <class S>
void sinkhorn(const Config& c, const S* logits, S* C, SinkhornTrace<S>* trace = nullptr) {
  using Step = typename SinkhornTrace<S>::Step;
  using std::exp;
  const int n = c.n;
  std::vector<S> e(std::size_t(2 * n));  // a row of exponentials, then a column's scratch
  S* col = e.data() + n;
  for (int j = 0; j < n; ++j) {
    const S* L = logits + j * n;
    S mx = L[0];
    for (int k = 1; k < n; ++k) mx = max_of(mx, L[k]);
    for (int k = 0; k < n; ++k) e[k] = c.sem.max_subtraction ? exp(L[k] - mx) : exp(L[k]);
    const S rs = sum(e.data(), std::size_t(n));
    for (int k = 0; k < n; ++k)
      C[j * n + k] = detail::normalise(e[k], rs, c.sem.softmax_eps, hc_eps(c));
  }
  detail::record(c, C, Step::softmax, trace);
  if (c.sem.first_row) {  // deviation: the first division a row division
    detail::divide_rows(c, C);
    detail::record(c, C, Step::row, trace);
  }
  detail::divide_columns(c, C, col);
  detail::record(c, C, Step::column, trace);
  for (int it = 1; it < c.iters + c.sem.iters_delta; ++it) {
    detail::divide_rows(c, C);
    detail::record(c, C, Step::row, trace);
    detail::divide_columns(c, C, col);
    detail::record(c, C, Step::column, trace);
  }
}

// The comb's logits L[j*n + k] = mix[2n + j*n + k] * hc_scale[2] + hc_base[2n + j*n + k].
template <class S, class P>
void comb_logits(const Config& c, const S* mix, const P* hc_scale, const P* hc_base, S* logits) {
  const int n = c.n;
  const S s2 = S(hc_scale[2]);
  for (int i = 0; i < n * n; ++i) logits[i] = mix[2 * n + i] * s2 + S(hc_base[2 * n + i]);
}

// hc_split_sinkhorn: reading weights pre (+eps after the sigmoid), writing weights post (factor 2,
// no eps), and the doubly stochastic comb.
template <class S, class P>
void split_sinkhorn(const Config& c, const S* mix, const P* hc_scale, const P* hc_base, S* pre,
                    S* post, S* comb, SinkhornTrace<S>* trace = nullptr) {
  const Semantics& sem = c.sem;
  const int n = c.n;
  const double eps = hc_eps(c);
  const S s0 = S(hc_scale[sem.scales_swapped ? 1 : 0]),
          s1 = S(hc_scale[sem.scales_swapped ? 0 : 1]);
  for (int j = 0; j < n; ++j) {
    pre[j] = sigmoid(S(mix[j] * s0 + S(hc_base[j])));
    if (sem.pre_eps) pre[j] = pre[j] + S(eps);
  }
  for (int j = 0; j < n; ++j) {
    post[j] = sigmoid(S(mix[n + j] * s1 + S(hc_base[n + j])));
    if (sem.post_factor2) post[j] = S(2) * post[j];
    if (sem.post_eps) post[j] = post[j] + S(eps);
  }
  std::vector<S> logits(std::size_t(n) * n);
  comb_logits(c, mix, hc_scale, hc_base, logits.data());
  sinkhorn(c, logits.data(), comb, trace);
}

// hc_pre: y[c] = sum_j p[j] * X[j, c].
template <class S, class X, class P>
void hc_pre(const Config& c, const X* x, const P* p, S* y) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  std::vector<const X*> rows(n);
  for (std::size_t j = 0; j < n; ++j) rows[j] = x + j * d;
  lincomb(p, rows.data(), n, d, y);
}

// hc_post: Y[k, c] = post[k] * F[c] + sum_j C[j, k] * R[j, c]; C[j,k] carries j INTO k.
template <class S, class X, class P>
void hc_post(const Config& c, const X* f, const X* residual, const P* post, const P* comb, S* y) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  std::vector<P> w(n + 1);
  std::vector<const X*> rows(n + 1);
  rows[0] = f;
  for (std::size_t j = 0; j < n; ++j) rows[j + 1] = residual + j * d;
  for (std::size_t k = 0; k < n; ++k) {
    w[0] = post[k];
    for (std::size_t j = 0; j < n; ++j)
      w[j + 1] = c.sem.comb_transposed ? comb[k * n + j] : comb[j * n + k];
    lincomb(w.data(), rows.data(), n + 1, d, y + k * d);
  }
}

// RMSNorm: y[c] = g[c] * x[c] / sqrt(mean_c(x^2) + eps), over the d values of one token.
template <class S, class X, class G>
void rmsnorm(std::size_t d, double eps, const X* x, const G* g, S* y) {
  std::vector<S> xs(x, x + d);
  const S r = rms_scale(xs.data(), d, eps);
  for (std::size_t cc = 0; cc < d; ++cc)
    y[cc] = S(g[cc]) * stored(xs[cc] * r, Storage::intermediates);
}

}  // namespace mhc::ref
