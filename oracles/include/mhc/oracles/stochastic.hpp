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
inline std::uint64_t next() {  // splitmix64
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace detail

// The random stream of this thread; seed it before an evaluation.
inline void seed(std::uint64_t s) {
  detail::state = s * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
}

// Stochastic rounding to fp32: x's neighbour on either side, with probability by closeness
// (inline: the ensembles call it for every operation).
inline float round(double x) {
  const float f = static_cast<float>(x);
  if (!std::isfinite(f) || double(f) == x) return f;
  // The neighbour of f on x's side (std::nextafter toward x, on the bits): the magnitude grows
  // where f's sign and the direction agree; from a zero, the smallest subnormal.
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  const bool up = double(f) < x;
  if ((b & 0x7FFFFFFFu) == 0)
    b = up ? 1u : 0x80000001u;
  else
    b = up == !(b >> 31) ? b + 1 : b - 1;
  float other;
  std::memcpy(&other, &b, 4);
  // P(other) = |x - f| / |other - f|: unbiased. The gap is a power of two, so r * gap < |x - f|
  // is exactly r < P, without a division.
  const double r = double(detail::next() >> 11) * 0x1.0p-53;
  return r * std::fabs(double(other) - double(f)) < std::fabs(x - double(f)) ? other : f;
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

}  // namespace mhc::sr
