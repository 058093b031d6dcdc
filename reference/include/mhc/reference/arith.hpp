// Customisation points of the reference: reductions and elementary functions.
//
// The reference calls sum(), dot(), exp(), sqrt() unqualified. A Scalar type overrides them in
// its own namespace (found by ADL); e.g. a bound-carrying type gives a reduction a bound that
// holds for every summation order. The defaults here are plain left-to-right loops: run with
// Scalar = float they compute what a straightforward fp32 port computes.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace mhc::ref {

// A named stage output of a Trace: [tokens, ...] values.
template <class S>
struct Stage {
  std::string name;
  std::vector<std::size_t> shape;
  std::vector<S> values;
};

// The tensors a kernel may store in a narrower format than it computes in: the streams (hc_pre,
// hc_post, RMSNorm and sublayer outputs), the mixes before the split, the coefficients (pre,
// post, comb) before they are applied, and the intermediate results of the stream pieces (an eager
// framework's per-operation outputs).
enum class Storage { streams, mixes, coefficients, intermediates };

// The rounding of an element of such a tensor to its storage type: nothing, unless the Scalar
// models storage formats (the bound-carrying type does).
template <class S>
S stored(const S& x, Storage = Storage::streams) {
  return x;
}
// stored() over n elements in place (a Scalar may skip the pass when its storage is exact).
template <class S>
void store_all(S* x, std::size_t n, Storage kind = Storage::streams) {
  for (std::size_t i = 0; i < n; ++i) x[i] = stored(x[i], kind);
}

// The larger of two values (the softmax's running max): b when b > a, else a. A Scalar that
// holds several lanes picks per lane.
template <class S>
S max_of(const S& a, const S& b) {
  return b > a ? b : a;
}

template <class S>
S sum(const S* v, std::size_t n) {
  S acc(0);
  for (std::size_t i = 0; i < n; ++i) acc += v[i];
  return acc;
}

// sum_i a[i] * b[i]; b may be stored in another type (fp32 weights) and is read exactly.
template <class S, class T>
S dot(const S* a, const T* b, std::size_t n) {
  S acc(0);
  for (std::size_t i = 0; i < n; ++i) acc += a[i] * S(b[i]);
  return acc;
}

// The double oracle evaluates reductions compensated (Ogita, Rump & Oishi 2005, Sum2/Dot2): the
// result is as accurate as if computed in twice the working precision and then rounded,
// |res - exact| <= u|exact| + gamma_n^2 * sum|terms| (u = 2^-53). Without this a 20480-term dot
// product in plain double loses up to n*u relative, which is not 1e6 times better than fp32.
namespace detail {
inline void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  const double z = s - a;
  e = (a - (s - z)) + (b - z);
}
inline void two_prod(double a, double b, double& p, double& e) {
  p = a * b;
  e = std::fma(a, b, -p);  // exact: the rounding error of a*b is representable
}
template <class T>
double dot2(const double* a, const T* b, std::size_t n) {
  double p = 0, s = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double h, r, q;
    two_prod(a[i], static_cast<double>(b[i]), h, r);
    two_sum(p, h, p, q);
    s += q + r;
  }
  return p + s;
}
}  // namespace detail

inline double sum(const double* v, std::size_t n) {
  double p = 0, s = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double q;
    detail::two_sum(p, v[i], p, q);
    s += q;
  }
  return p + s;
}
inline double dot(const double* a, const double* b, std::size_t n) {
  return detail::dot2(a, b, n);
}
inline double dot(const double* a, const float* b, std::size_t n) {
  return detail::dot2(a, b, n);
}

// The projection of mixes (F.linear over the n*d stream): its own point so that a Scalar can model
// a matmul unit (tf32 products) apart from the other dot products.
// (Declared after the double overloads so that plain lookup finds them.)
template <class S, class T>
S linear(const S* x, const T* w, std::size_t n) {
  return dot(x, w, n);
}

// out[t*rows + a] = linear(x + t*m, W + a*m, m): the projection of mixes for `tokens` consecutive
// tokens, a [tokens, m] x [m, rows] product, so that a Scalar can block it for the caches.
template <class S, class T>
void project(const S* x, std::size_t tokens, const T* W, std::size_t rows, std::size_t m, S* out) {
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t a = 0; a < rows; ++a) out[t * rows + a] = linear(x + t * m, W + a * m, m);
}

// out[c] = sum_i w[i] * rows[i][c] for c < m: the small linear combination of rows that hc_pre
// (the streams) and hc_post (the sublayer output and the streams) are made of. A Scalar may
// bound all m columns at once.
template <class S, class W, class R>
void lincomb(const W* w, const R* const* rows, std::size_t k, std::size_t m, S* out) {
  std::vector<S> a(w, w + k), b(k);
  for (std::size_t c = 0; c < m; ++c) {
    for (std::size_t i = 0; i < k; ++i) b[i] = S(rows[i][c]);
    out[c] = dot(a.data(), b.data(), k);
  }
}

}  // namespace mhc::ref
