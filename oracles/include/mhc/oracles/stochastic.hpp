// fp32 with stochastic rounding, as a Scalar: run through the reference a few times, it gives an
// ensemble of legitimate fp32 results whose spread estimates the rounding error actually present
// in the data (the empirical error model, as Verificarlo and CADNA do). Each operation in double,
// then rounded up or down with probability by closeness: docs/semantics.md, "Error models".
#pragma once

#include <cmath>
#include <cstdint>

namespace mhc::sr {

// The random stream of this thread (splitmix64); seed it before an evaluation.
void seed(std::uint64_t s);
float round(double x);  // stochastic rounding to fp32

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
