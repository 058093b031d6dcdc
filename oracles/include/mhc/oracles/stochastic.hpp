// fp32 with stochastic rounding, as a Scalar: run through the reference a few times, it gives an
// ensemble of legitimate fp32 results whose spread estimates the rounding error actually present
// in the data (the empirical error model, as Verificarlo and CADNA do). Each operation in double,
// then rounded up or down with probability by closeness: docs/semantics.md, "Error models".
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mhc::sr {

namespace detail {
inline thread_local std::uint64_t state = 0x853C49E6748FEA9Bull;
// splitmix64: the state of stream s, and the output of a state z (Z: one, or a vector of them).
inline std::uint64_t seeded(std::uint64_t s) {
  return s * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
}
template <class Z>
Z mix(Z z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace detail

// The random stream of this thread; seed it before an evaluation.
inline void seed(std::uint64_t s) {
  detail::state = detail::seeded(s);
}

// Stochastic rounding to fp32 with the given random stream: x's neighbour on either side, with
// probability by closeness. Draws only where x is finite and not a float, so that a run's stream
// depends on its values alone. Without branches on the data: the ensemble below runs it per lane.
inline float round(double x, std::uint64_t& state) {
  const float f = static_cast<float>(x);
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  const bool inexact = (b & 0x7F800000u) != 0x7F800000u && double(f) != x;
  // The neighbour of f on x's side (std::nextafter toward x, on the bits): the magnitude grows
  // where f's sign and the direction agree; from a zero, the smallest subnormal.
  const bool up = double(f) < x;
  const std::uint32_t step = up == !(b >> 31) ? b + 1 : b - 1;
  const std::uint32_t ob = (b & 0x7FFFFFFFu) == 0 ? (up ? 1u : 0x80000001u) : step;
  float other;
  std::memcpy(&other, &ob, 4);
  state += inexact ? 0x9E3779B97F4A7C15ull : 0;
  // P(other) = |x - f| / |other - f|: unbiased. The gap is a power of two, so r * gap < |x - f|
  // is exactly r < P, without a division.
  const double r = double(detail::mix(state) >> 11) * 0x1.0p-53;
  return inexact && r * std::fabs(double(other) - double(f)) < std::fabs(x - double(f)) ? other : f;
}

// The same with this thread's stream (inline: the ensembles call it for every operation).
inline float round(double x) {
  return round(x, detail::state);
}

struct sr32 {
  float v = 0;
  sr32() = default;
  sr32(float x) : v(x) {}                       // NOLINT: inputs are exact
  sr32(double x) : v(static_cast<float>(x)) {}  // NOLINT: constants to nearest
  sr32(int x) : v(static_cast<float>(x)) {}     // NOLINT

  sr32& operator+=(const sr32& o) { return *this = *this + o; }
  sr32& operator-=(const sr32& o) { return *this = *this - o; }
  sr32& operator*=(const sr32& o) { return *this = *this * o; }
  sr32& operator/=(const sr32& o) { return *this = *this / o; }
  friend sr32 operator-(const sr32& a) { return fromf(-a.v); }
  friend sr32 operator+(const sr32& a, const sr32& b) {
    return fromf(round(double(a.v) + double(b.v)));
  }
  friend sr32 operator-(const sr32& a, const sr32& b) {
    return fromf(round(double(a.v) - double(b.v)));
  }
  friend sr32 operator*(const sr32& a, const sr32& b) {
    return fromf(round(double(a.v) * double(b.v)));
  }
  friend sr32 operator/(const sr32& a, const sr32& b) {
    return fromf(round(double(a.v) / double(b.v)));
  }
  friend bool operator<(const sr32& a, const sr32& b) { return a.v < b.v; }
  friend bool operator>(const sr32& a, const sr32& b) { return a.v > b.v; }
  friend bool operator<=(const sr32& a, const sr32& b) { return a.v <= b.v; }
  friend bool operator>=(const sr32& a, const sr32& b) { return a.v >= b.v; }
  friend bool operator==(const sr32& a, const sr32& b) { return a.v == b.v; }

 private:
  static sr32 fromf(float f) {
    sr32 r;
    r.v = f;
    return r;
  }
};

inline sr32 exp(const sr32& a) {
  return sr32(round(std::exp(double(a.v))));
}
inline sr32 sqrt(const sr32& a) {
  return sr32(round(std::sqrt(double(a.v))));
}
inline sr32 abs(const sr32& a) {
  return sr32(std::fabs(a.v));
}

// Sixteen runs of sr32 in one Scalar, in vector lanes: lane k is, bit for bit, the run of sr32
// whose stream was seeded with first + k (seed_lanes), as each lane draws from its own stream in
// the same order. Four vectors of four lanes (AVX2's width for the doubles), independent within
// each operation: one run at a time is latency-bound.
struct Ensemble {
  static constexpr int kLanes = 16, kWidth = 4, kVectors = kLanes / kWidth;
  typedef float vf __attribute__((vector_size(16)));
  typedef double vd __attribute__((vector_size(32)));
  typedef std::uint32_t vu __attribute__((vector_size(16)));
  typedef std::int32_t vi __attribute__((vector_size(16)));
  typedef std::uint64_t vw __attribute__((vector_size(32)));
  typedef std::int64_t vl __attribute__((vector_size(32)));

  vf v[kVectors] = {};
  Ensemble() = default;
  Ensemble(float x) {                    // NOLINT: inputs are exact
    for (vf& q : v) q = vf{x, x, x, x};  // (not 0 + x: -0 stays -0)
  }
  Ensemble(double x) : Ensemble(static_cast<float>(x)) {}  // NOLINT: constants to nearest
  Ensemble(int x) : Ensemble(static_cast<float>(x)) {}     // NOLINT
  float operator[](int k) const { return v[k / kWidth][k % kWidth]; }

  static void seed_lanes(std::uint64_t first) {
    for (int k = 0; k < kLanes; ++k)
      state[k / kWidth][k % kWidth] = detail::seeded(first + std::uint64_t(k));
  }

  Ensemble& operator+=(const Ensemble& o) { return *this = *this + o; }
  friend Ensemble operator-(const Ensemble& a) {
    Ensemble r;
    for (int q = 0; q < kVectors; ++q) r.v[q] = -a.v[q];
    return r;
  }
  friend Ensemble operator+(const Ensemble& a, const Ensemble& b) {
    return apply(a, b, [](vd x, vd y) { return x + y; });
  }
  friend Ensemble operator-(const Ensemble& a, const Ensemble& b) {
    return apply(a, b, [](vd x, vd y) { return x - y; });
  }
  friend Ensemble operator*(const Ensemble& a, const Ensemble& b) {
    return apply(a, b, [](vd x, vd y) { return x * y; });
  }
  friend Ensemble operator/(const Ensemble& a, const Ensemble& b) {
    return apply(a, b, [](vd x, vd y) { return x / y; });
  }
  friend Ensemble max_of(const Ensemble& a, const Ensemble& b) {
    Ensemble r;
    for (int q = 0; q < kVectors; ++q) r.v[q] = b.v[q] > a.v[q] ? b.v[q] : a.v[q];
    return r;
  }
  friend Ensemble exp(const Ensemble& a) {
    Ensemble r;
    for (int q = 0; q < kVectors; ++q) {
      vd x;
      for (int k = 0; k < kWidth; ++k) x[k] = std::exp(double(a.v[q][k]));
      r.v[q] = round(x, state[q]);
    }
    return r;
  }

 private:
  static inline thread_local vw state[kVectors];
  template <class F>
  __attribute__((always_inline)) static Ensemble apply(const Ensemble& a, const Ensemble& b, F f) {
    Ensemble r;
    for (int q = 0; q < kVectors; ++q)
      r.v[q] = round(f(__builtin_convertvector(a.v[q], vd), __builtin_convertvector(b.v[q], vd)),
                     state[q]);
    return r;
  }
  static vd abs(vd x) { return vd(vl(x) & (vl{} + 0x7FFFFFFFFFFFFFFFll)); }
  // round(x, state) above, per lane of this vector's stream.
  __attribute__((always_inline)) static vf round(vd x, vw& stream) {
    const vf f = __builtin_convertvector(x, vf);
    const vd fd = __builtin_convertvector(f, vd);
    const vu b = vu(f);
    const vl inexact =
        __builtin_convertvector(vi((b & 0x7F800000u) != 0x7F800000u), vl) & vl(fd != x);
    const vi up = __builtin_convertvector(vl(fd < x), vi);
    const vu step = vu(up == vi((b >> 31) == 0)) ? b + 1 : b - 1;
    const vu ob = vu((b & 0x7FFFFFFFu) == 0) ? (vu(up) ? vu{} + 1u : vu{} + 0x80000001u) : step;
    stream += vw(inexact) & 0x9E3779B97F4A7C15ull;
    const vw z = detail::mix(stream);
    // double(z >> 11) exactly, in two halves (21 and 32 bits) through 2^52's mantissa: AVX2 has
    // no conversion from 64-bit integers.
    const vw hi = z >> 43, lo = (z >> 11) & 0xFFFFFFFFull, magic = vw{} + 0x4330000000000000ull;
    const vd two52 = vd{} + 0x1.0p52;
    const vd r = ((vd(hi | magic) - two52) * 0x1.0p32 + (vd(lo | magic) - two52)) * 0x1.0p-53;
    const vd od = __builtin_convertvector(vf(ob), vd);
    const vi take = __builtin_convertvector(inexact & vl(r * abs(od - fd) < abs(x - fd)), vi);
    return vf((vi(ob) & take) | (vi(b) & ~take));
  }
};

}  // namespace mhc::sr
