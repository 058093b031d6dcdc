#include "mhc/oracles/bounded.hpp"

#include <algorithm>
#include <stdexcept>
#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <utility>

namespace mhc::bnd {

#ifdef __AVX2__
namespace {
// Four terms of the projection: x as {v, e} pairs read at 2i, weights w[i..i+4) in fp32.
inline void step4(const double* xd, const float* w, std::size_t i, __m256d& vv, __m256d& aa,
                  __m256d& ee) {
  const __m256d sign = _mm256_set1_pd(-0.0);
  // [v0 e0 v1 e1], [v2 e2 v3 e3] -> values [v0 v2 v1 v3], bounds [e0 e2 e1 e3]; w permuted alike
  const __m256d lo = _mm256_loadu_pd(xd + 2 * i), hi = _mm256_loadu_pd(xd + 2 * i + 4);
  const __m256d xv = _mm256_unpacklo_pd(lo, hi), xe = _mm256_unpackhi_pd(lo, hi);
  const __m256d wv = _mm256_permute4x64_pd(_mm256_cvtps_pd(_mm_loadu_ps(w + i)), 0xD8);
  const __m256d p = _mm256_mul_pd(xv, wv);
  vv = _mm256_add_pd(vv, p);
  aa = _mm256_add_pd(aa, _mm256_andnot_pd(sign, p));
  ee = _mm256_add_pd(ee, _mm256_mul_pd(_mm256_andnot_pd(sign, wv), xe));
}
}  // namespace
#endif

Model fp32() { return Model{}; }

double reduction_gamma(const Model& m, double n, double u) {
  if (!m.probabilistic) return gamma(n, u);
  // Never above the rigorous constant: for small n the deterministic bound is the smaller.
  return std::min(gamma(n, u), std::expm1(m.lambda * std::sqrt(n) * u + n * u * u / (1 - u)));
}

Model tf32() {
  Model m;
  m.name = "tf32";
  const double ut = 0x1.0p-11;  // tf32 keeps 10 explicit mantissa bits: u = 2^-11
  m.u_prod = 2 * ut + ut * ut;  // both operands rounded: (1+d1)(1+d2) - 1
  return m;
}

Model bf16() {
  Model m;
  m.name = "bf16";
  m.u_store = 0x1.0p-8;  // bf16 keeps 7 explicit mantissa bits: u = 2^-8
  return m;
}

Model model_by_name(const std::string& name) {
  if (name == "fp32") return fp32();
  if (name == "tf32") return tf32();
  if (name == "bf16") return bf16();
  throw std::invalid_argument("unknown precision model '" + name + "' (fp32, tf32, bf16)");
}

namespace {
const Model& default_model() {
  static const Model m = fp32();
  return m;
}
thread_local const Model* current = nullptr;
}  // namespace

const Model& model() { return current ? *current : default_model(); }
ModelScope::ModelScope(Model m) : model_(std::move(m)), prev_(current) { current = &model_; }
ModelScope::~ModelScope() { current = prev_; }

// The projection is the oracle's hot loop (n*d terms for each of the M mixes). Partial sums in
// four lanes; the order changes v only within the gamma_n(u64) term already in the bound.
Bounded linear(const Bounded* x, const float* w, std::size_t n) {
  static_assert(sizeof(Bounded) == 2 * sizeof(double), "Bounded is read as {v, e} pairs");
  const double* xd = &x[0].v;
  double v = 0, A = 0, E = 0;
  std::size_t i = 0;
#ifdef __AVX2__
  __m256d vv = _mm256_setzero_pd(), aa = vv, ee = vv;
  for (; i + 4 <= n; i += 4) {
    step4(xd, w, i, vv, aa, ee);
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
    const double wi = double(w[i]), p = xd[2 * i] * wi;
    v += p;
    A += std::fabs(p);
    E += std::fabs(wi) * xd[2 * i + 1];
  }
  return detail::reduce(v, A, E, n, model().u_prod);
}

void project(const Bounded* x, std::size_t tokens, const float* W, std::size_t rows, std::size_t n,
             Bounded* out) {
#ifdef __AVX2__
  constexpr std::size_t kChunk = 256, kBlock = 4;  // 4 tokens x 256 terms x 16 B = 16 KB of x
  const std::size_t n4 = n / 4 * 4;
  const double k_prod = model().u_prod;
  // Accumulators as plain doubles (a vector of __m256d would lose its 32-byte alignment).
  std::vector<double> acc(12 * rows * kBlock);
  for (std::size_t t0 = 0; t0 < tokens; t0 += kBlock) {
    const std::size_t nt = std::min(kBlock, tokens - t0);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (std::size_t i0 = 0; i0 < n4; i0 += kChunk) {
      const std::size_t i1 = std::min(n4, i0 + kChunk);
      for (std::size_t a = 0; a < rows; ++a) {
        const float* w = W + a * n;
        for (std::size_t b = 0; b < nt; ++b) {
          const double* xd = &x[(t0 + b) * n].v;
          double* ac = &acc[12 * (b * rows + a)];
          __m256d vv = _mm256_loadu_pd(ac), aa = _mm256_loadu_pd(ac + 4), ee = _mm256_loadu_pd(ac + 8);
          for (std::size_t i = i0; i < i1; i += 4) {
            step4(xd, w, i, vv, aa, ee);
          }
          _mm256_storeu_pd(ac, vv);
          _mm256_storeu_pd(ac + 4, aa);
          _mm256_storeu_pd(ac + 8, ee);
        }
      }
    }
    for (std::size_t b = 0; b < nt; ++b) {
      const Bounded* xt = x + (t0 + b) * n;
      for (std::size_t a = 0; a < rows; ++a) {
        const double* lv = &acc[12 * (b * rows + a)];
        const double* la = lv + 4;
        const double* le = lv + 8;
        double v = (lv[0] + lv[1]) + (lv[2] + lv[3]), A = (la[0] + la[1]) + (la[2] + la[3]);
        double E = (le[0] + le[1]) + (le[2] + le[3]);
        for (std::size_t i = n4; i < n; ++i) {
          const double wi = double(W[a * n + i]), p = xt[i].v * wi;
          v += p;
          A += std::fabs(p);
          E += std::fabs(wi) * xt[i].e;
        }
        out[(t0 + b) * rows + a] = detail::reduce(v, A, E, n, k_prod);
      }
    }
  }
#else
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t a = 0; a < rows; ++a) out[t * rows + a] = linear(x + t * n, W + a * n, n);
#endif
}

}  // namespace mhc::bnd
