// A bound-carrying Scalar: run through the reference, it gives every output a bound on the
// error of ANY evaluation of the same formula in a declared precision model (fp32, fp32 with
// tf32-rounded products, bf16 storage of stream tensors). Each operation propagates its operands'
// bounds to first order (plus their product) and adds its own rounding
// rnd(v, p) = k*u*(|v| + p) + u64*|v| + eta; reductions use gamma_n, valid for every order:
// docs/semantics.md, "The bound-carrying Scalar".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "mhc/reference/mhc.hpp"

namespace mhc::bnd {

// A number format a kernel stores or computes in: its unit roundoff, its largest finite value and
// its absolute rounding floor (the smallest normal: underflow, flush to zero).
enum class Format { fp32, tf32, bf16, fp16 };
struct FormatInfo {
  const char* name;
  double u, max, eta;
};
const FormatInfo& format_info(Format f);
Format format_from_name(const std::string& name);  // throws std::invalid_argument

// Outputs a kernel stored in a narrower format than fp32 (bf16, fp16), by stage name: their
// rounding to that format is part of their bounds.
using StoredFormats = std::vector<std::pair<std::string, Format>>;

// What a kernel declares about its precision, part by part; the Model of any combination comes
// from model_for() (docs/semantics.md, "Precision models").
struct Declaration {
  // Storage of the tensors a kernel reads: the values it is given are those of this format.
  Format inputs = Format::fp32;  // stream tensors (x, residual, f)
  Format weights =
      Format::fp32;  // parameters (hc_fn, hc_scale, hc_base, norm and sublayer weights)
  // Storage of what it writes or passes between stages: rounded on store.
  Format mixes = Format::fp32;         // the mixes, before the split reads them
  Format coefficients = Format::fp32;  // pre, post and comb, before hc_pre and hc_post read them
  Format streams = Format::fp32;       // stream tensors (hc_pre, hc_post, RMSNorm, sublayers)
  // The mixes projection, the one long reduction a kernel may run narrower:
  Format products = Format::fp32;      // its operands, rounded before multiplying
  Format accumulation = Format::fp32;  // its running sum (fp32 or bf16)
  // Every result inside hc_pre, hc_post, RMSNorm and the mixes before their output, rounded as an
  // eager framework rounds each operation's output to the tensors' type (sums in fp32 or in it).
  Format intermediates = Format::fp32;
  friend bool operator==(const Declaration& a, const Declaration& b) {
    return a.inputs == b.inputs && a.weights == b.weights && a.mixes == b.mixes &&
           a.coefficients == b.coefficients && a.streams == b.streams && a.products == b.products &&
           a.accumulation == b.accumulation && a.intermediates == b.intermediates;
  }
};

// The parts of a declaration by name, in the order a name lists them, with the formats each
// allows: streams, mixes and coefficients fp32, bf16 or fp16 (so are inputs and weights),
// products any, accumulation fp32 or bf16.
struct Part {
  const char* key;
  Format Declaration::*member;
  std::vector<Format> allowed;
  const char* what;
};
const std::vector<Part>& declaration_parts();

// The rounding of a stored tensor: unit roundoff, absolute floor, largest finite value (u = 0:
// stored exactly, in fp32).
struct Store {
  double u = 0, eta = 0, big = 0x1.fffffep127;
};

struct Model {
  std::string name = "fp32";
  double u = 0x1.0p-24;              // unit roundoff of the arithmetic
  double u_prod = 0;                 // extra relative error of each linear() product (tf32 inputs)
  double eta_prod = 0;               // ... and absolute, per operand (fp16's subnormals: 2^-25)
  double big_prod = 0x1.fffffep127;  // an operand beyond it may round to inf (fp16: 65504)
  double u_sum = 0x1.0p-24;          // unit roundoff of linear()'s running sum (bf16: 2^-8)
  Store store[4];               // per ref::Storage: streams, mixes, coefficients, intermediates
  double eta = 0x1.0p-126;      // absolute floor per rounded result (FLT_MIN: underflow, FTZ)
  double big = 0x1.fffffep127;  // FLT_MAX: a value beyond it overflows in the model
  // Budgets in units of u, each large enough for the usual implementations:
  double k_div = 2;   // a/b, or a * (1/b)
  double k_sqrt = 2;  // sqrt; with k_div covers 1/sqrt and rsqrt (2 ulp)
  double k_exp = 4;   // expf within 2 ulp (CUDA expf; glibc expf < 1 ulp)
  double k_sig = 8;   // 1/(1+exp(-z)) relative, see sigmoid()
  double a_sig = 2;   // ... and absolute (0.5*(1+tanh(z/2)) cancels for z << 0)
  // How an n-term reduction is bounded: rigorous, Higham's gamma_n (every order and rounding),
  // or probabilistic, Higham & Mary's gamma~_n(lambda), lambda = 8, where the reduction's data
  // meet its premise (detail::premise_holds), else gamma_n: docs/semantics.md, "Error models".
  bool probabilistic = false;
  double lambda = 8;
};

// The relative error constant of an n-term reduction in unit roundoff u under model m.
double reduction_gamma(const Model& m, double n, double u);

// The Model of a declaration: fp32 arithmetic everywhere else.
Model model_for(const Declaration& d, const std::string& name);
// Presets: fp32; tf32 (projection operands in tf32); bf16 (stream tensors stored in bf16);
// bf16-projection (projection operands in bf16, fp32 sums); fp16 (inputs, weights and stream
// tensors stored, and projection operands rounded, in fp16).
const std::vector<std::pair<std::string, Declaration>>& presets();
Model fp32();
Model tf32();
Model bf16();
Model model_by_name(const std::string& name);  // a preset; throws std::invalid_argument

// The model the Bounded operations of this thread use; a ModelScope sets (a copy of) it until
// the scope ends.
const Model& model();
class ModelScope {
 public:
  explicit ModelScope(Model m);
  ~ModelScope();
  ModelScope(const ModelScope&) = delete;
  ModelScope& operator=(const ModelScope&) = delete;

 private:
  Model model_;
  const Model* prev_;
};

constexpr double u64 = 0x1.0p-53;
// Higham's gamma_n = n u / (1 - n u), bounded above by n u (1 + 2 n u) while n u <= 1/2 (no
// division on the hot path).
inline double gamma(double n, double u) {
  return n * u <= 0.5 ? n * u * (1 + 2 * n * u) : HUGE_VAL;
}

struct Bounded {
  double v = 0;  // value (double evaluation)
  double e = 0;  // bound on the model's error
  Bounded() = default;
  Bounded(double x) : v(x) {}  // NOLINT: exact inputs and constants convert implicitly
  Bounded(float x) : v(double(x)) {}
  Bounded(int x) : v(double(x)) {}
  Bounded(double value, double bound) : v(value), e(bound) {}

  Bounded& operator+=(const Bounded& o) { return *this = *this + o; }
  Bounded& operator-=(const Bounded& o) { return *this = *this - o; }
  Bounded& operator*=(const Bounded& o) { return *this = *this * o; }
  Bounded& operator/=(const Bounded& o) { return *this = *this / o; }

  friend Bounded operator-(const Bounded& a) { return {-a.v, a.e}; }
  friend Bounded operator+(const Bounded& a, const Bounded& b) {
    const double x = a.v + b.v, p = a.e + b.e;
    return {x, p + rnd(x, p, 1)};
  }
  friend Bounded operator-(const Bounded& a, const Bounded& b) { return a + (-b); }
  friend Bounded operator*(const Bounded& a, const Bounded& b) {
    const double x = a.v * b.v, p = std::fabs(a.v) * b.e + std::fabs(b.v) * a.e + a.e * b.e;
    return {x, p + rnd(x, p, 1)};
  }
  // |a/b - (a+da)/(b+db)| <= (|da| + |a/b| |db|) / (|b| - |db|) while |db| < |b|.
  friend Bounded operator/(const Bounded& a, const Bounded& b) {
    const double x = a.v / b.v;
    if (!(b.e < std::fabs(b.v))) return {x, HUGE_VAL};
    const double p = (a.e + std::fabs(x) * b.e) / (std::fabs(b.v) - b.e);
    return {x, p + rnd(x, p, model().k_div)};
  }
  friend bool operator<(const Bounded& a, const Bounded& b) { return a.v < b.v; }
  friend bool operator>(const Bounded& a, const Bounded& b) { return a.v > b.v; }
  friend bool operator<=(const Bounded& a, const Bounded& b) { return a.v <= b.v; }
  friend bool operator>=(const Bounded& a, const Bounded& b) { return a.v >= b.v; }
  friend bool operator==(const Bounded& a, const Bounded& b) { return a.v == b.v; }

  // Rounding of one result v with propagated bound p, k*u relative (see the header comment).
  // A result the model cannot represent (overflow, an infinite value whatever its propagated
  // bound: inf * 0 makes that NaN) gets an infinite bound, and so does one from an unbounded
  // operand (inf - inf of overflowed operands). A NaN input's NaN stays NaN: undefined exactly.
  static double rnd(double v, double p, double k) {
    const Model& m = model();
    if (p == HUGE_VAL || std::fabs(v) > m.big || std::fabs(v) + p > m.big) return HUGE_VAL;
    return k * m.u * (std::fabs(v) + p) + u64 * std::fabs(v) + m.eta;
  }
};
static_assert(sizeof(Bounded) == 2 * sizeof(double), "vector code reads Bounded as {v, e} pairs");

// exp: |exp(x+dx) - exp(x)| <= exp(x) * expm1(|dx|).
inline Bounded exp(const Bounded& a) {
  const double v = std::exp(a.v), p = v * std::expm1(a.e);
  return {v, p + Bounded::rnd(v, p, model().k_exp)};
}
// sqrt: |sqrt(x+dx) - sqrt(x)| <= |dx| / (sqrt(x) + sqrt(max(x-|dx|, 0))) <= sqrt(|dx|).
inline Bounded sqrt(const Bounded& a) {
  const double v = std::sqrt(a.v), lo = std::sqrt(std::max(a.v - a.e, 0.0));
  const double p = v + lo > 0 ? std::min(a.e / (v + lo), std::sqrt(a.e)) : std::sqrt(a.e);
  return {v, p + Bounded::rnd(v, p, model().k_sqrt)};
}
inline Bounded abs(const Bounded& a) {
  return {std::fabs(a.v), a.e};
}

// sigmoid, as one function: sig' <= 1/4 bounds the propagation (the max of sig' over
// [z - e, z + e] where that interval keeps away from 0); its own error covers the usual forms:
// 1/(1+exp(-z)) is within (k_exp + 1 + k_div) u relative <= k_sig u, 0.5*(1+tanh(z/2)) within
// a_sig u absolute.
inline Bounded sigmoid(const Bounded& z) {
  const double v = 1 / (1 + std::exp(-z.v));
  const double near0 = std::max(0.0, std::fabs(z.v) - z.e);  // closest point to 0
  const double s = 1 / (1 + std::exp(-near0));
  const double p = z.e * s * (1 - s);
  const Model& m = model();
  return {v, p + m.k_sig * m.u * (v + p) + m.a_sig * m.u + u64 * v + m.eta};
}

inline double val(float x) {
  return double(x);
}
inline double val(const Bounded& x) {
  return x.v;
}
inline double err(float) {
  return 0;
}
inline double err(const Bounded& x) {
  return x.e;
}

namespace detail {
// The probabilistic bound's premise (independent rounding errors), checked on each long
// reduction's data: the forward and the backward fp32 sums must each err by at most a quarter of
// the bound, and more than lambda sqrt(n) / 4 repeated terms (both operands equal to those of one
// of the kRepeatLag previous terms, nonzero) mean gamma_n. Why: docs/semantics.md, "The
// probabilistic premise"; measurements: bench/README.md, "Repeated terms and the probabilistic
// bound". Short reductions (n <= lambda^2) need no check: gamma_n is the smaller there.
constexpr std::size_t kRepeatLag = 4;
inline bool premise_checked(const Model& m, double n) {
  return m.probabilistic && n > m.lambda * m.lambda;
}
inline bool premise_holds(const Model& m, double n, double A, double seq) {
  return seq <= 0.25 * m.lambda * std::sqrt(n) * m.u * A;  // false for NaN (fp32 overflow)
}
inline bool too_many_repeats(const Model& m, double n, std::size_t repeats) {
  return double(repeats) > 0.25 * m.lambda * std::sqrt(n);
}
// The larger error of the forward and the backward fp32 sum of a_i b_i (operands rounded to
// fp32 first) against their exact value, or infinity where too many terms repeat. (That value
// in double errs by n 2^-53 sum|t|, far below the threshold above.)
template <class P, class Q>
double sequential_error(const P* a, const Q* b, std::size_t n) {
  float f = 0, r = 0;
  double exact = 0;
  std::size_t repeats = 0;
  for (std::size_t i = 0, j = n - 1; i < n; ++i, --j) {
    const float x = float(val(a[i])), y = float(val(b[i]));
    f += x * y;  // the oracle is compiled without FMA contraction
    r += float(val(a[j])) * float(val(b[j]));
    exact += double(x) * double(y);
    if (x != 0 && y != 0)
      for (std::size_t l = 1; l <= kRepeatLag && l <= i; ++l)
        if (float(val(a[i - l])) == x && float(val(b[i - l])) == y) {
          ++repeats;
          break;
        }
  }
  if (too_many_repeats(model(), double(n), repeats)) return HUGE_VAL;
  return std::max(std::fabs(double(f) - exact), std::fabs(double(r) - exact));
}

// sequential_error(x, x, n), bit for bit, in vector lanes: the premise check of a sum of squares
// (the RMS statistic).
double squares_error(const Bounded* x, std::size_t n);
// The error of an n-term reduction whose terms have magnitudes A and propagated bounds E; k_prod
// is an extra relative error of each term (tf32 products); seq as above (0 where not checked).
inline Bounded reduce(double v, double A, double E, std::size_t n, double k_prod = 0,
                      double seq = 0, double u_sum = 0) {
  const Model& m = model();
  const double nn = double(n);
  if (A + E > m.big) return {v, HUGE_VAL};
  if (u_sum == 0) u_sum = m.u;
  // The probabilistic premise is checked on fp32 sums: an accumulation in another format gets
  // the rigorous constant.
  const double g =
      u_sum == m.u && premise_holds(m, nn, A, seq) ? reduction_gamma(m, nn, m.u) : gamma(nn, u_sum);
  return {v, E + k_prod * (A + E) + g * (A + E) * (1 + k_prod) + gamma(nn, u64) * A + nn * m.eta};
}
}  // namespace detail

#ifdef __AVX2__
namespace detail {
// Four consecutive elements as value and bound vectors.
inline void load4(const float* r, __m256d& v, __m256d& e) {
  v = _mm256_cvtps_pd(_mm_loadu_ps(r));
  e = _mm256_setzero_pd();
}
inline void load4(const Bounded* r, __m256d& v, __m256d& e) {
  const __m256d lo = _mm256_loadu_pd(&r[0].v), hi = _mm256_loadu_pd(&r[2].v);  // v0 e0 v1 e1 ...
  v = _mm256_permute4x64_pd(_mm256_unpacklo_pd(lo, hi), 0xD8);
  e = _mm256_permute4x64_pd(_mm256_unpackhi_pd(lo, hi), 0xD8);
}
}  // namespace detail
#endif

// Reductions, bounded for every order:
//   |sum_hat - sum| <= sum e_i + gamma_{n-1} (sum|t_i| + sum e_i).
inline Bounded sum(const Bounded* t, std::size_t n) {
  double v = 0, A = 0, E = 0;
  for (std::size_t i = 0; i < n; ++i) {
    v += t[i].v;
    A += std::fabs(t[i].v);
    E += t[i].e;
  }
  const double n1 = n > 0 ? double(n - 1) : 0;
  const float one = 1;
  const double seq = detail::premise_checked(model(), n1)
                         ? detail::sequential_error(t, std::vector<float>(n, one).data(), n)
                         : 0;
  return detail::reduce(v, A, E, n > 0 ? n - 1 : 0, 0, seq);
}
// Each product rounds once (u) and the n-1 additions round: gamma_n covers both, in any order,
// with or without FMA. (Partial sums in four lanes: the order changes v only within the
// gamma_n(u64) term.)
inline Bounded dot(const Bounded* a, const Bounded* b, std::size_t n) {
  double v = 0, A = 0, E = 0;
  std::size_t i = 0;
#ifdef __AVX2__
  const __m256d sign = _mm256_set1_pd(-0.0);
  __m256d vv = _mm256_setzero_pd(), aa = vv, ee = vv;
  for (; i + 4 <= n; i += 4) {
    __m256d av, ae, bv, be;
    detail::load4(a + i, av, ae);
    detail::load4(b + i, bv, be);
    const __m256d p = _mm256_mul_pd(av, bv);
    vv = _mm256_add_pd(vv, p);
    aa = _mm256_add_pd(aa, _mm256_andnot_pd(sign, p));
    ee = _mm256_add_pd(ee,
                       _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_andnot_pd(sign, av), be),
                                                   _mm256_mul_pd(_mm256_andnot_pd(sign, bv), ae)),
                                     _mm256_mul_pd(ae, be)));
  }
  alignas(32) double lv[4], la[4], le[4];
  _mm256_store_pd(lv, vv);
  _mm256_store_pd(la, aa);
  _mm256_store_pd(le, ee);
  v = (lv[0] + lv[1]) + (lv[2] + lv[3]);
  A = (la[0] + la[1]) + (la[2] + la[3]);
  E = (le[0] + le[1]) + (le[2] + le[3]);
#endif
  for (; i < n; ++i) {
    const double p = a[i].v * b[i].v;
    v += p;
    A += std::fabs(p);
    E += std::fabs(a[i].v) * b[i].e + std::fabs(b[i].v) * a[i].e + a[i].e * b[i].e;
  }
  const double seq = !detail::premise_checked(model(), double(n)) ? 0
                     : a == b                                     ? detail::squares_error(a, n)
                              : detail::sequential_error(a, b, n);
  return detail::reduce(v, A, E, n, 0, seq);
}
// lincomb (hc_pre, hc_post): every column is a k-term dot product; the model's constants are
// fetched once for all m columns. Always gamma_k: hc_pre and hc_post have k <= n + 1 terms,
// where it is the smaller bound, and for attention's longer ones the premise is not checked.
// Intermediates rounded as an eager framework rounds them, its sums in fp32 or in that format
// (a bf16 batched matmul, a loop of adds): every operation of the k-term combination rounded to
// it, in any order, gamma_k, and at least two roundings a term (a product and the sum's result,
// which hc_post adds to post F); each also by the format's floor.
template <class W, class R>
void lincomb(const W* w, const R* const* rows, std::size_t k, std::size_t m, Bounded* out) {
  const Model& md = model();
  const Store& st = md.store[int(ref::Storage::intermediates)];
  const double kk = double(k), g64 = gamma(kk, u64);
  const double g = st.u == 0 ? gamma(kk, md.u)
                             : (1 + gamma(kk, md.u)) * (1 + gamma(std::max(kk, 2.0), st.u)) - 1;
  const double floor =
      kk * md.eta + (st.u == 0 ? 0 : 2 * kk * st.eta);  // 2k - 1 operations, the result
  const double big_sum = std::min(md.big, st.big);
  // Term by term over chunks of columns (the inner loop runs over c and vectorises; the chunk's
  // accumulators stay in the L1 cache).
  std::size_t start = 0;
#ifdef __AVX2__
  if constexpr (std::is_same<W, float>::value) {  // hc_pre and hc_post: four columns at a time
    const __m256d sign = _mm256_set1_pd(-0.0), gv = _mm256_set1_pd(g), g64v = _mm256_set1_pd(g64);
    const __m256d fl = _mm256_set1_pd(floor), big = _mm256_set1_pd(big_sum);
    const __m256d inf = _mm256_set1_pd(HUGE_VAL);
    double* o = &out[0].v;
    for (; start + 4 <= m; start += 4) {
      __m256d v = _mm256_setzero_pd(), a = v, e = v;
      for (std::size_t i = 0; i < k; ++i) {
        const __m256d wv = _mm256_set1_pd(double(w[i]));
        __m256d rv, re;
        detail::load4(rows[i] + start, rv, re);
        const __m256d p = _mm256_mul_pd(wv, rv);
        v = _mm256_add_pd(v, p);
        a = _mm256_add_pd(a, _mm256_andnot_pd(sign, p));
        if constexpr (!std::is_same<R, float>::value)
          e = _mm256_add_pd(e, _mm256_mul_pd(_mm256_andnot_pd(sign, wv), re));
      }
      // As below: E + g (A + E) + g64 A + floor, infinite where A + E exceeds the model's range.
      const __m256d ae = _mm256_add_pd(a, e);
      __m256d b = _mm256_add_pd(
          _mm256_add_pd(_mm256_add_pd(e, _mm256_mul_pd(gv, ae)), _mm256_mul_pd(g64v, a)), fl);
      b = _mm256_blendv_pd(b, inf, _mm256_cmp_pd(ae, big, _CMP_GT_OQ));
      const __m256d lo = _mm256_unpacklo_pd(v, b), hi = _mm256_unpackhi_pd(v, b);
      _mm256_storeu_pd(o + 2 * start, _mm256_permute2f128_pd(lo, hi, 0x20));
      _mm256_storeu_pd(o + 2 * start + 4, _mm256_permute2f128_pd(lo, hi, 0x31));
    }
  }
#endif
  constexpr std::size_t kChunk = 512;
  double V[kChunk], A[kChunk], E[kChunk];
  for (std::size_t c0 = start; c0 < m; c0 += kChunk) {
    const std::size_t len = std::min(kChunk, m - c0);
    std::fill(V, V + len, 0.0);
    std::fill(A, A + len, 0.0);
    std::fill(E, E + len, 0.0);
    for (std::size_t i = 0; i < k; ++i) {
      const double wv = val(w[i]), we = err(w[i]), aw = std::fabs(wv);
      const R* row = rows[i] + c0;
      for (std::size_t c = 0; c < len; ++c) {
        const double rv = val(row[c]), re = err(row[c]), p = wv * rv;
        V[c] += p;
        A[c] += std::fabs(p);
        E[c] += aw * re + std::fabs(rv) * we + we * re;
      }
    }
    for (std::size_t c = 0; c < len; ++c)
      out[c0 + c] = A[c] + E[c] > big_sum
                        ? Bounded(V[c], HUGE_VAL)
                        : Bounded(V[c], E[c] + g * (A[c] + E[c]) + g64 * A[c] + floor);
  }
}

// The products a * b[i], bounded as operator* bounds each, added into the running sums of their
// values, bounds and magnitudes (a weight's gradient over tokens: one row of an outer product).
inline void accumulate_products(const Bounded& a, const Bounded* b, std::size_t n, double* value,
                                double* bound, double* magnitude) {
  const Model& m = model();
  const double av = a.v, aa = std::fabs(a.v), ae = a.e, u = m.u, eta = m.eta, big = m.big;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = av * b[i].v, ax = std::fabs(x);
    const double p = aa * b[i].e + std::fabs(b[i].v) * ae + ae * b[i].e;
    value[i] += x;
    bound[i] += ax + p > big ? HUGE_VAL : p + (u * (ax + p) + u64 * ax + eta);
    magnitude[i] += ax;
  }
}

// The projection of mixes (F.linear): exact fp32 weights; tf32 models round both operands.
Bounded linear(const Bounded* x, const float* w, std::size_t n);
// The projection of several tokens, blocked: each chunk of W serves a block of tokens and each
// chunk of x stays in the L1 cache while all rows use it.
void project(const Bounded* x, std::size_t tokens, const float* W, std::size_t rows, std::size_t n,
             Bounded* out);
namespace detail {
// One element of x W^T summed in fp32 as a straightforward kernel does (products rounded, then
// added one at a time), both ways, with what the second tier's noise model reads.
struct SequentialSums {
  float forward = 0, backward = 0;  // first to last, last to first
  float magnitude = 0;              // sum of |w x| (forward)
  double exact = 0;                 // in double: each product of two floats is exact
  // Sums of the squared partial sums (each forward and backward sum after each addition) and of
  // the squared products: scales only, kept from float's underflow (summed in double, or in float
  // on operands scaled by a power of two and returned unscaled).
  double partials2_forward = 0, partials2_backward = 0, products2 = 0;
};
// Every (token, row) of x W^T, into out[token * rows + row].
void sequential_sums(const float* x, std::size_t tokens, const float* W, std::size_t rows,
                     std::size_t n, SequentialSums* out);
// Each token's sum of squares of its n values (the diagonal of sequential_sums(x, T, x, T, n), bit
// for bit), into out[token].
void self_sums(const float* x, std::size_t tokens, std::size_t n, SequentialSums* out);
// How many of v's values equal one of the kRepeatLag before them (and are nonzero): the repeats
// of a sum of squares of v.
std::size_t repeated_values(const float* v, std::size_t n);
// Whether each (token, row) of x W^T has more repeated terms than the premise allows (as in
// sequential_error).
std::vector<bool> repeated_terms(const float* x, std::size_t tokens, const float* W,
                                 std::size_t rows, std::size_t n);
// project()'s premise check: detail::sequential_error of every (token, row) of x W^T into seq
// (tokens x rows), and the fp32 sum of |w x| into A.
void sequential_errors(const Bounded* x, std::size_t tokens, const float* W, std::size_t rows,
                       std::size_t n, double* seq, double* A);
}  // namespace detail

// The Sinkhorn of the comb as one function: the values from the reference in double, the bound
// from the first-order propagation of relative perturbations through the linearised
// normalisations, one backward sweep per output entry (a scalar bound propagated step by step
// would double at every division): docs/semantics.md, "The Sinkhorn bound".
// Where its premise fails (sinkhorn_linearisable) every entry is unbounded.
void sinkhorn(const ref::Config& c, const Bounded* logits, Bounded* C,
              ref::SinkhornTrace<Bounded>* trace = nullptr);

// The premise of the Sinkhorn's linearisation, that every relative perturbation it counts is
// small: false where a division's denominator (a line's sum + hc_eps) lies within n 2^10 of fp32's
// underflow floor, so that its entries' roundings may move it by a large part of itself or flush
// it to 0 (with hc_eps = 0, a line flushed to 0 is divided by its sum: 0 / 0). logits: the comb's,
// n x n.
bool sinkhorn_linearisable(const ref::Config& c, const double* logits);

// The premises of a first-order bound on the Sinkhorn's gradient: the forward's
// (sinkhorn_linearisable), and that the adjoint of every iterate (the gradient an autograd or a
// hand-written backward forms, step by step) stays 2^10 below fp32's largest value. A division by
// a line sum near underflow multiplies it by up to 1 / (sum + eps) a step: an fp32 backward
// overflows to inf and then NaN though the exact gradient is small. up_comb: the upstream
// gradient of the comb, n x n.
bool sinkhorn_gradient_bounded(const ref::Config& c, const double* logits, const double* up_comb);

// The rounding to storage of an element of a stored tensor (nothing where it is stored in fp32).
// Beyond the format's largest finite value it may overflow: no bound.
inline Bounded stored(const Bounded& a, ref::Storage kind = ref::Storage::streams) {
  const Store& s = model().store[int(kind)];
  if (s.u == 0) return a;
  const double p = a.e;
  if (std::fabs(a.v) + p > s.big) return {a.v, HUGE_VAL};
  // A normal value rounds by u of itself, one below the smallest normal (eta) by less than eta (to
  // a subnormal, to 0 or to eta): the floor only where the value may lie below it.
  const double rel = s.u * (std::fabs(a.v) + p);
  return {a.v, p + (std::fabs(a.v) - p >= s.eta ? rel : std::max(rel, s.eta))};
}
// The same where the rounding is known to be to nearest (even) of an fp32 evaluation within a's
// bound: rounding is monotone, so the roundings of the bound's ends enclose it, and where they
// agree (the bound within one rounding cell) the stored value is known exactly.
Bounded rounded_to(const Bounded& a, Format f);
inline void store_all(Bounded* x, std::size_t n, ref::Storage kind = ref::Storage::streams) {
  if (model().store[int(kind)].u == 0) return;  // stored in fp32: a pass saved
  for (std::size_t i = 0; i < n; ++i) x[i] = stored(x[i], kind);
}

}  // namespace mhc::bnd
