#include "mhc/oracles/bounded.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <utility>

#include "mhc/oracles/generate.hpp"

namespace mhc::bnd {

Model model_for(const Declaration& d, const std::string& name) {
  Model m;
  m.name = name;
  if (d.products != Format::fp32) {
    const double up = format_info(d.products).u;
    m.u_prod = 2 * up + up * up;  // both operands rounded: (1+d1)(1+d2) - 1
    // Below its smallest normal an operand errs by half a subnormal step, not relatively: fp16's
    // 2^-25; bf16 and tf32 share fp32's range and floor.
    m.eta_prod = d.products == Format::fp16 ? 0x1.0p-25 : m.eta;
    m.big_prod = format_info(d.products).max;
  }
  if (d.accumulation != Format::fp32 && d.accumulation != Format::bf16)
    throw std::invalid_argument(std::string("an accumulation in ") +
                                format_info(d.accumulation).name + " is not modelled (fp32, bf16)");
  m.u_sum = format_info(d.accumulation).u;
  const Format stores[] = {d.streams, d.mixes, d.coefficients,
                           d.intermediates};  // indexed by ref::Storage
  for (int k = 0; k < 4; ++k)
    if (stores[k] != Format::fp32) {
      const FormatInfo& s = format_info(stores[k]);
      m.store[k] = {s.u, std::max(s.eta, m.eta), s.max};
    }
  return m;
}

Bounded rounded_to(const Bounded& a, Format f) {
  if (f == Format::fp32) return a;
  // To fp32 first: monotone, as the kernel's fp32 value is.
  auto round = [f](double x) { return double(oracles::gen::round_to(f, float(x))); };
  const double c = round(a.v), lo = round(a.v - a.e), hi = round(a.v + a.e);
  const double e = std::max(hi - c, c - lo);
  return {c, std::isfinite(c) && std::isfinite(e) ? e : HUGE_VAL};
}

Model fp32() {
  return model_by_name("fp32");
}

double reduction_gamma(const Model& m, double n, double u) {
  if (!m.probabilistic) return gamma(n, u);
  // Never above the rigorous constant: for small n the deterministic bound is the smaller.
  return std::min(gamma(n, u), std::expm1(m.lambda * std::sqrt(n) * u + n * u * u / (1 - u)));
}

Model tf32() {
  return model_by_name("tf32");
}

Model bf16() {
  return model_by_name("bf16");
}

Model model_by_name(const std::string& name) {
  for (const auto& [preset, d] : presets())
    if (preset == name) return model_for(d, name);
  std::string known;
  for (const auto& p : presets()) known += (known.empty() ? "" : ", ") + p.first;
  throw std::invalid_argument("unknown precision model '" + name + "' (" + known + ")");
}

namespace {
const Model& default_model() {
  static const Model m = fp32();
  return m;
}
thread_local const Model* current = nullptr;
}  // namespace

const Model& model() {
  return current ? *current : default_model();
}
ModelScope::ModelScope(Model m) : model_(std::move(m)), prev_(current) {
  current = &model_;
}
ModelScope::~ModelScope() {
  current = prev_;
}

// One term at a time, A and E apart: the definition that project() regroups.
namespace {
// Operands rounded with an absolute floor eta_p: w' x' - w x errs by at most u_prod |w x| +
// eta_p (1 + u_p) (|w| + |x|) + eta_p^2 per product, the second and third terms summed here and
// carried through the running sum (its rigorous gamma_n), rounded up.
double operand_floor(const Model& m, double sum_w, double sum_x, std::size_t n) {
  if (m.eta_prod == 0) return 0;
  const double e = m.eta_prod, nn = double(n);
  return (1 + gamma(nn, m.u_sum)) * (e * (1 + m.u_prod) * (sum_w + sum_x) + nn * e * e) *
         (1 + 0x1.0p-40);
}
}  // namespace

Bounded linear(const Bounded* x, const float* w, std::size_t n) {
  double v = 0, A = 0, E = 0, sw = 0, sx = 0, top = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double wi = double(w[i]), p = x[i].v * wi;
    v += p;
    A += std::fabs(p);
    E += std::fabs(wi) * x[i].e;
    sw += std::fabs(wi);
    sx += std::fabs(x[i].v) + x[i].e;
    top = std::max({top, std::fabs(wi), std::fabs(x[i].v) + x[i].e});
  }
  if (!(top <= model().big_prod)) return Bounded(v, HUGE_VAL);  // an operand may round to inf
  const double seq =
      detail::premise_checked(model(), double(n)) ? detail::sequential_error(x, w, n) : 0;
  Bounded r = detail::reduce(v, A, E, n, model().u_prod, seq, model().u_sum);
  r.e += operand_floor(model(), sw, sx, n);
  return r;
}

namespace detail {
namespace {

// Bit l - 1 of mask[i]: v[i] equals v[i - l] and is nonzero. Returns how many i have a bit. One
// pass per lag, so that the compiler runs each in vector lanes.
std::size_t repeat_mask(const float* v, std::size_t n, unsigned char* mask) {
  std::fill(mask, mask + n, 0);
  for (std::size_t l = 1; l <= kRepeatLag; ++l)
    for (std::size_t i = l; i < n; ++i)
      mask[i] =
          static_cast<unsigned char>(mask[i] | unsigned(v[i] != 0 && v[i] == v[i - l]) << (l - 1));
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i) count += mask[i] != 0;
  return count;
}

// x's values as the fp32 sums read them: the oracle's bound-carrying values rounded, or a kernel's.
float value(const Bounded& b) {
  return float(b.v);
}
float value(float f) {
  return f;
}

// The power of two 2^-e that brings the largest magnitude m near 1 (e its exponent), kept within
// float's normal range; the squares' scale.
int scale_exponent(float m) {
  return m > 0 && std::isfinite(m) ? std::clamp(-std::ilogb(m), -63, 63) : 0;
}
std::vector<int> scale_exponents(const float* v, std::size_t rows, std::size_t n) {
  std::vector<int> e(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    float m = 0;
    for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(v[r * n + i]));
    e[r] = scale_exponent(m);
  }
  return e;
}

#ifdef __AVX2__
// Four tokens and four rows at a time in vector lanes: lane (r, k) of a float vector holds row r's
// and token k's running sum; the same operations in the same order as the scalar definition.
// kSquares: also the sums of squared partial sums and products (float: only a scale).
template <bool kSquares, class X>
void sums_avx2(const X* x, std::size_t tokens, const float* W, std::size_t rows, std::size_t n,
               SequentialSums* out) {
  const std::size_t padded = (tokens + 3) / 4 * 4, prows = (rows + 3) / 4 * 4;
  std::vector<float> xt(padded * n, 0.0f);  // [token block][i][4 tokens]
  std::vector<int> xe(tokens);  // the squares' scale exponents of the tokens and of the rows
  for (std::size_t t = 0; t < tokens; ++t) {
    float most = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float v = value(x[t * n + i]);
      xt[(t / 4) * n * 4 + i * 4 + t % 4] = v;
      most = std::max(most, std::fabs(v));
    }
    xe[t] = scale_exponent(most);
  }
  const std::vector<int> we = kSquares ? scale_exponents(W, rows, n) : std::vector<int>();
  std::vector<float> wt(n * 4);
  std::vector<double> wd(n * 4);
  const __m256i lo = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
                hi = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (std::size_t a0 = 0; a0 < prows; a0 += 4) {
    const std::size_t nr = std::min<std::size_t>(4, rows - a0);
    std::fill(wt.begin(), wt.end(), 0.0f);
    for (std::size_t r = 0; r < nr; ++r)
      for (std::size_t i = 0; i < n; ++i) wt[i * 4 + r] = W[(a0 + r) * n + i];
    for (std::size_t i = 0; i < n * 4; ++i) wd[i] = double(wt[i]);
    for (std::size_t t0 = 0; t0 < padded; t0 += 4) {
      const float* xb = &xt[t0 * n];
      // Lanes: rows 0-1 (f01) and 2-3 (f23), four tokens each; ex per row, four tokens.
      __m256 f01 = _mm256_setzero_ps(), f23 = f01, b01 = f01, b23 = f01, s01 = f01, s23 = f01;
      __m256 qf01 = f01, qf23 = f01, qb01 = f01, qb23 = f01, qp01 = f01, qp23 = f01;
      alignas(32) float sc[16] = {};  // lane (r, k): its row's and token's scale
      if (kSquares)
        for (std::size_t r = 0; r < nr; ++r)
          for (std::size_t k = 0; k < 4 && t0 + k < tokens; ++k)
            sc[r * 4 + k] = std::ldexp(1.0f, we[a0 + r] + xe[t0 + k]);
      const __m256 sc01 = _mm256_load_ps(sc), sc23 = _mm256_load_ps(sc + 8);
      __m256d e0 = _mm256_setzero_pd(), e1 = e0, e2 = e0, e3 = e0;
      for (std::size_t i = 0, j = n - 1; i < n; ++i, --j) {
        const __m256 xi = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(xb + i * 4));
        const __m256 xj = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(xb + j * 4));
        const __m256 wi = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(&wt[i * 4]));
        const __m256 wj = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(&wt[j * 4]));
        const __m256 p01 = _mm256_mul_ps(_mm256_permutevar8x32_ps(wi, lo), xi);
        const __m256 p23 = _mm256_mul_ps(_mm256_permutevar8x32_ps(wi, hi), xi);
        f01 = _mm256_add_ps(f01, p01);
        f23 = _mm256_add_ps(f23, p23);
        b01 = _mm256_add_ps(b01, _mm256_mul_ps(_mm256_permutevar8x32_ps(wj, lo), xj));
        b23 = _mm256_add_ps(b23, _mm256_mul_ps(_mm256_permutevar8x32_ps(wj, hi), xj));
        s01 = _mm256_add_ps(s01, _mm256_and_ps(p01, abs_mask));
        s23 = _mm256_add_ps(s23, _mm256_and_ps(p23, abs_mask));
        if (kSquares) {
          const auto square_add = [](__m256 v, __m256 scale, __m256 q) {
            const __m256 w = _mm256_mul_ps(v, scale);
            return _mm256_fmadd_ps(w, w, q);
          };
          qf01 = square_add(f01, sc01, qf01);
          qf23 = square_add(f23, sc23, qf23);
          qb01 = square_add(b01, sc01, qb01);
          qb23 = square_add(b23, sc23, qb23);
          qp01 = square_add(p01, sc01, qp01);
          qp23 = square_add(p23, sc23, qp23);
        }
        // Products of two floats are exact in double: a fused add rounds as add(mul) does.
        const __m256d xd = _mm256_cvtps_pd(_mm_loadu_ps(xb + i * 4));
        e0 = _mm256_fmadd_pd(_mm256_broadcast_sd(&wd[i * 4 + 0]), xd, e0);
        e1 = _mm256_fmadd_pd(_mm256_broadcast_sd(&wd[i * 4 + 1]), xd, e1);
        e2 = _mm256_fmadd_pd(_mm256_broadcast_sd(&wd[i * 4 + 2]), xd, e2);
        e3 = _mm256_fmadd_pd(_mm256_broadcast_sd(&wd[i * 4 + 3]), xd, e3);
      }
      alignas(32) float f[16], b[16], sa[16], qf[16], qb[16], qp[16];
      alignas(32) double ex[16];
      auto store = [](float* to, __m256 v01, __m256 v23) {
        _mm256_store_ps(to, v01);
        _mm256_store_ps(to + 8, v23);
      };
      store(f, f01, f23);
      store(b, b01, b23);
      store(sa, s01, s23);
      store(qf, qf01, qf23);
      store(qb, qb01, qb23);
      store(qp, qp01, qp23);
      _mm256_store_pd(ex, e0);
      _mm256_store_pd(ex + 4, e1);
      _mm256_store_pd(ex + 8, e2);
      _mm256_store_pd(ex + 12, e3);
      for (std::size_t r = 0; r < nr; ++r)
        for (std::size_t k = 0; k < 4 && t0 + k < tokens; ++k) {
          const std::size_t l = r * 4 + k;
          SequentialSums& o = out[(t0 + k) * rows + a0 + r];
          o.forward = f[l];
          o.backward = b[l];
          o.magnitude = sa[l];
          o.exact = ex[l];
          if (kSquares) {
            const int e = -2 * (we[a0 + r] + xe[t0 + k]);
            o.partials2_forward = std::ldexp(double(qf[l]), e);
            o.partials2_backward = std::ldexp(double(qb[l]), e);
            o.products2 = std::ldexp(double(qp[l]), e);
          }
        }
    }
  }
}
#endif

template <bool kSquares, class X>
void sums(const X* x, std::size_t tokens, const float* W, std::size_t rows, std::size_t n,
          SequentialSums* out) {
#ifdef __AVX2__
  sums_avx2<kSquares>(x, tokens, W, rows, n, out);
#else
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t a = 0; a < rows; ++a) {
      SequentialSums& o = out[t * rows + a];
      o = SequentialSums{};
      const float* w = W + a * n;
      const X* xt = x + t * n;
      for (std::size_t i = 0, j = n - 1; i < n; ++i, --j) {
        const float p = value(xt[i]) * w[i];
        o.forward += p;
        o.backward += value(xt[j]) * w[j];
        o.magnitude += std::fabs(p);
        o.exact += double(value(xt[i])) * double(w[i]);
        if (kSquares) {
          o.partials2_forward += double(o.forward) * double(o.forward);
          o.partials2_backward += double(o.backward) * double(o.backward);
          o.products2 += double(p) * double(p);
        }
      }
    }
#endif
}

// Repeats are counted from masks per operand, and only where both operands have more than the
// threshold: the count never exceeds either operand's.
template <class X>
std::vector<bool> repeats_of(const X* x, std::size_t tokens, const float* W, std::size_t rows,
                             std::size_t n) {
  const Model& m = model();
  std::vector<bool> out(tokens * rows, false);
  std::vector<unsigned char> mx(tokens * n), mw;
  std::vector<std::size_t> cx(tokens, 0), cw;
  std::vector<float> xf(n);
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t i = 0; i < n; ++i) xf[i] = value(x[t * n + i]);
    cx[t] = repeat_mask(xf.data(), n, &mx[t * n]);
  }
  auto many = [&](std::size_t c) { return too_many_repeats(m, double(n), c); };
  if (std::any_of(cx.begin(), cx.end(), many)) {
    mw.resize(rows * n);
    cw.resize(rows);
    for (std::size_t a = 0; a < rows; ++a) cw[a] = repeat_mask(W + a * n, n, &mw[a * n]);
  }
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t a = 0; a < rows; ++a) {
      std::size_t repeats = 0;
      if (many(cx[t]) && many(cw[a]))
        for (std::size_t i = 0; i < n; ++i) repeats += (mx[t * n + i] & mw[a * n + i]) != 0;
      out[t * rows + a] = many(repeats);
    }
  return out;
}

}  // namespace

std::size_t repeated_values(const float* v, std::size_t n) {
  std::vector<unsigned char> mask(n);
  return repeat_mask(v, n, mask.data());
}

void sequential_sums(const float* x, std::size_t tokens, const float* W, std::size_t rows,
                     std::size_t n, SequentialSums* out) {
  sums<true>(x, tokens, W, rows, n, out);
}

void self_sums(const float* x, std::size_t tokens, std::size_t n, SequentialSums* out) {
#ifdef __AVX2__
  // sums_avx2's operations for the diagonal alone: lane k holds token k's sum of squares.
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  std::vector<float> xt(n * 4);
  for (std::size_t t0 = 0; t0 < tokens; t0 += 4) {
    const std::size_t k = std::min<std::size_t>(4, tokens - t0);
    std::fill(xt.begin(), xt.end(), 0.0f);
    for (std::size_t t = 0; t < k; ++t)
      for (std::size_t i = 0; i < n; ++i) xt[i * 4 + t] = x[(t0 + t) * n + i];
    const std::vector<int> xe = scale_exponents(x + t0 * n, k, n);
    alignas(16) float sc4[4] = {};  // lane t: its token's squares' scale
    for (std::size_t t = 0; t < k; ++t) sc4[t] = std::ldexp(1.0f, 2 * xe[t]);
    const __m128 sc = _mm_load_ps(sc4);
    __m128 f = _mm_setzero_ps(), b = f, sa = f, qf = f, qb = f, qp = f;
    __m256d e = _mm256_setzero_pd();
    for (std::size_t i = 0, j = n - 1; i < n; ++i, --j) {
      const __m128 xi = _mm_loadu_ps(&xt[i * 4]), xj = _mm_loadu_ps(&xt[j * 4]);
      const __m128 p = _mm_mul_ps(xi, xi);
      f = _mm_add_ps(f, p);
      b = _mm_add_ps(b, _mm_mul_ps(xj, xj));
      sa = _mm_add_ps(sa, _mm_and_ps(p, abs_mask));
      const __m128 fs = _mm_mul_ps(f, sc), bs = _mm_mul_ps(b, sc), ps = _mm_mul_ps(p, sc);
      qf = _mm_fmadd_ps(fs, fs, qf);
      qb = _mm_fmadd_ps(bs, bs, qb);
      qp = _mm_fmadd_ps(ps, ps, qp);
      const __m256d xd = _mm256_cvtps_pd(xi);
      e = _mm256_fmadd_pd(xd, xd, e);
    }
    alignas(16) float vf[4], vb[4], vs[4], vqf[4], vqb[4], vqp[4];
    alignas(32) double ve[4];
    _mm_store_ps(vf, f);
    _mm_store_ps(vb, b);
    _mm_store_ps(vs, sa);
    _mm_store_ps(vqf, qf);
    _mm_store_ps(vqb, qb);
    _mm_store_ps(vqp, qp);
    _mm256_store_pd(ve, e);
    for (std::size_t t = 0; t < k; ++t) {
      const int unscale = -4 * xe[t];
      out[t0 + t] = SequentialSums{vf[t],
                                   vb[t],
                                   vs[t],
                                   ve[t],
                                   std::ldexp(double(vqf[t]), unscale),
                                   std::ldexp(double(vqb[t]), unscale),
                                   std::ldexp(double(vqp[t]), unscale)};
    }
  }
#else
  for (std::size_t t = 0; t < tokens; ++t) sums<true>(x + t * n, 1, x + t * n, 1, n, out + t);
#endif
}

double squares_error(const Bounded* x, std::size_t n) {
  std::vector<float> xf(n);
  for (std::size_t i = 0; i < n; ++i) xf[i] = float(x[i].v);
  SequentialSums s;
  self_sums(xf.data(), 1, n, &s);
  // A term repeats where its value does (both operands are the same value).
  if (too_many_repeats(model(), double(n), repeated_values(xf.data(), n))) return HUGE_VAL;
  return std::max(std::fabs(double(s.forward) - s.exact), std::fabs(double(s.backward) - s.exact));
}

void sequential_errors(const Bounded* x, std::size_t tokens, const float* W, std::size_t rows,
                       std::size_t n, double* seq, double* A) {
  std::vector<SequentialSums> s(tokens * rows);
  sums<false>(x, tokens, W, rows, n, s.data());
  const std::vector<bool> repeated = repeats_of(x, tokens, W, rows, n);
  for (std::size_t o = 0; o < tokens * rows; ++o) {
    seq[o] = repeated[o] ? HUGE_VAL
                         : std::max(std::fabs(double(s[o].forward) - s[o].exact),
                                    std::fabs(double(s[o].backward) - s[o].exact));
    A[o] = double(s[o].magnitude);
  }
}

std::vector<bool> repeated_terms(const float* x, std::size_t tokens, const float* W,
                                 std::size_t rows, std::size_t n) {
  return repeats_of(x, tokens, W, rows, n);
}
}  // namespace detail

// The projection is the oracle's hot loop. Its bound, regrouped per term (sum |w_i| c_i + n eta),
// is a dot product of nonnegative terms, run in fp32 with c rounded up and the result enlarged by
// that arithmetic's worst case: docs/semantics.md, "The bound-carrying Scalar". Values in double.
void project(const Bounded* x, std::size_t tokens, const float* W, std::size_t rows, std::size_t n,
             Bounded* out) {
#ifdef __AVX2__
  const Model& m = model();
  // A running sum in another format than fp32 gets the rigorous constant (as in reduce()).
  const bool fp32_sum = m.u_sum == m.u;
  const double nn = double(n), kp = m.u_prod,
               g = fp32_sum ? reduction_gamma(m, nn, m.u) : gamma(nn, m.u_sum);
  const double alpha = 1 + kp + g * (1 + kp), beta = kp + g * (1 + kp) + gamma(nn, u64);
  // fp32 products and sums of nonnegative terms, any order: the exact sum is at most
  // (computed + n 2^-150 for underflow) (1 + gamma_n(2^-24)); 2^-45 covers the double steps.
  const double enlarge = (1 + gamma(nn + 1, 0x1.0p-24)) * (1 + 0x1.0p-45), lost = nn * 0x1.0p-149;
  constexpr std::size_t kTok = 4, kChunk = 256;
  const std::size_t n8 = n / 8 * 8, padded = (tokens + kTok - 1) / kTok * kTok;
  thread_local std::vector<double> xv;
  thread_local std::vector<float> cf;
  xv.assign(padded * n, 0.0);
  cf.assign(padded * n, 0.0f);
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t i = 0; i < n; ++i) {
      const Bounded& b = x[t * n + i];
      xv[t * n + i] = b.v;
      // Rounded to nearest, c (1 + 2^-23) + 2^-149 lands at or above c (normal or subnormal).
      cf[t * n + i] = float((alpha * b.e + beta * std::fabs(b.v)) * (1 + 0x1.0p-23) + 0x1.0p-149);
    }
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  // Accumulators per token and row: 4 value lanes and 8 bound lanes. Each chunk of W serves
  // every token (tiles of 4) while it is in the L1 cache.
  std::vector<double> accv_all(padded * rows * 4, 0.0);
  std::vector<float> accb_all(padded * rows * 8, 0.0f);
  for (std::size_t i0 = 0; i0 < n8; i0 += kChunk) {
    const std::size_t i1 = std::min(n8, i0 + kChunk);
    for (std::size_t t0 = 0; t0 < padded; t0 += kTok) {
      double* accv = &accv_all[t0 * rows * 4];
      float* accb = &accb_all[t0 * rows * 8];
      const double* x0 = &xv[t0 * n];
      const float* c0 = &cf[t0 * n];
      for (std::size_t a = 0; a < rows; ++a) {
        const float* w = W + a * n;
        __m256d v0 = _mm256_loadu_pd(&accv[(0 * rows + a) * 4]),
                v1 = _mm256_loadu_pd(&accv[(1 * rows + a) * 4]);
        __m256d v2 = _mm256_loadu_pd(&accv[(2 * rows + a) * 4]),
                v3 = _mm256_loadu_pd(&accv[(3 * rows + a) * 4]);
        __m256 b0 = _mm256_loadu_ps(&accb[(0 * rows + a) * 8]),
               b1 = _mm256_loadu_ps(&accb[(1 * rows + a) * 8]);
        __m256 b2 = _mm256_loadu_ps(&accb[(2 * rows + a) * 8]),
               b3 = _mm256_loadu_ps(&accb[(3 * rows + a) * 8]);
        for (std::size_t i = i0; i < i1; i += 8) {
          const __m256 w8 = _mm256_loadu_ps(w + i);
          const __m256d wl = _mm256_cvtps_pd(_mm256_castps256_ps128(w8));
          const __m256d wh = _mm256_cvtps_pd(_mm256_extractf128_ps(w8, 1));
          v0 = _mm256_fmadd_pd(_mm256_loadu_pd(x0 + i), wl, v0);
          v1 = _mm256_fmadd_pd(_mm256_loadu_pd(x0 + n + i), wl, v1);
          v2 = _mm256_fmadd_pd(_mm256_loadu_pd(x0 + 2 * n + i), wl, v2);
          v3 = _mm256_fmadd_pd(_mm256_loadu_pd(x0 + 3 * n + i), wl, v3);
          v0 = _mm256_fmadd_pd(_mm256_loadu_pd(x0 + i + 4), wh, v0);
          v1 = _mm256_fmadd_pd(_mm256_loadu_pd(x0 + n + i + 4), wh, v1);
          v2 = _mm256_fmadd_pd(_mm256_loadu_pd(x0 + 2 * n + i + 4), wh, v2);
          v3 = _mm256_fmadd_pd(_mm256_loadu_pd(x0 + 3 * n + i + 4), wh, v3);
          const __m256 aw = _mm256_and_ps(w8, abs_mask);
          b0 = _mm256_fmadd_ps(_mm256_loadu_ps(c0 + i), aw, b0);
          b1 = _mm256_fmadd_ps(_mm256_loadu_ps(c0 + n + i), aw, b1);
          b2 = _mm256_fmadd_ps(_mm256_loadu_ps(c0 + 2 * n + i), aw, b2);
          b3 = _mm256_fmadd_ps(_mm256_loadu_ps(c0 + 3 * n + i), aw, b3);
        }
        _mm256_storeu_pd(&accv[(0 * rows + a) * 4], v0);
        _mm256_storeu_pd(&accv[(1 * rows + a) * 4], v1);
        _mm256_storeu_pd(&accv[(2 * rows + a) * 4], v2);
        _mm256_storeu_pd(&accv[(3 * rows + a) * 4], v3);
        _mm256_storeu_ps(&accb[(0 * rows + a) * 8], b0);
        _mm256_storeu_ps(&accb[(1 * rows + a) * 8], b1);
        _mm256_storeu_ps(&accb[(2 * rows + a) * 8], b2);
        _mm256_storeu_ps(&accb[(3 * rows + a) * 8], b3);
      }
    }
  }
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t a = 0; a < rows; ++a) {
      const double* lv = &accv_all[(t * rows + a) * 4];
      const float* lb = &accb_all[(t * rows + a) * 8];
      double v = (lv[0] + lv[1]) + (lv[2] + lv[3]), tail = 0;
      float s = 0;
      for (int l = 0; l < 8; ++l) s += lb[l];
      for (std::size_t i = n8; i < n; ++i) {
        const double wi = double(W[a * n + i]);
        v += xv[t * n + i] * wi;
        tail += std::fabs(wi) * double(cf[t * n + i]);
      }
      const double bound = (double(s) + tail + lost) * enlarge;
      // A + E <= bound / beta (alpha >= beta); beyond the model's range, or not finite, the
      // exact sums decide.
      if (bound / beta <= m.big) {
        double floor = 0;
        if (m.eta_prod > 0) {
          double sw = 0, sx = 0;
          for (std::size_t i = 0; i < n; ++i) {
            sw += std::fabs(double(W[a * n + i]));
            sx += std::fabs(x[t * n + i].v) + x[t * n + i].e;
          }
          floor = operand_floor(m, sw, sx, n);
        }
        out[t * rows + a] = Bounded(v, bound + nn * m.eta + floor);
      } else {
        out[t * rows + a] = linear(x + t * n, W + a * n, n);
      }
    }
  }
  // Where the probabilistic premise fails, linear() gives the element its gamma_n bound.
  if (fp32_sum && detail::premise_checked(m, nn)) {
    std::vector<double> seq(tokens * rows), A(tokens * rows);
    detail::sequential_errors(x, tokens, W, rows, n, seq.data(), A.data());
    for (std::size_t o = 0; o < tokens * rows; ++o)
      if (!detail::premise_holds(m, nn, A[o], seq[o]))
        out[o] = linear(x + o / rows * n, W + o % rows * n, n);
  }
  // An operand beyond the products format's range may round to inf: no bound (linear() says so).
  if (m.big_prod < 0x1.fffffep127) {
    std::vector<char> over_x(tokens), over_w(rows);
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t i = 0; i < n; ++i)
        over_x[t] |= !(std::fabs(x[t * n + i].v) + x[t * n + i].e <= m.big_prod);
    for (std::size_t a = 0; a < rows; ++a)
      for (std::size_t i = 0; i < n; ++i)
        over_w[a] |= !(std::fabs(double(W[a * n + i])) <= m.big_prod);
    for (std::size_t o = 0; o < tokens * rows; ++o)
      if (over_x[o / rows] || over_w[o % rows]) out[o].e = HUGE_VAL;
  }
#else
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t a = 0; a < rows; ++a) out[t * rows + a] = linear(x + t * n, W + a * n, n);
#endif
}

}  // namespace mhc::bnd
