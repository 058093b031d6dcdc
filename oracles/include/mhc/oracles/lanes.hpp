// Several doubles in one Scalar: the reference run on W cases at once, each lane its own case
// (vector divisions take several at a time). For campaigns that evaluate the Sinkhorn millions of
// times: sums are plain (not compensated) and a normalisation multiplies by the reciprocal of its
// line's denominator, so a lane is within a few ulps of the double oracle, not equal to it.
#pragma once

#include <cmath>
#include <cstddef>

namespace mhc::lanes {

// GCC vector types of W doubles (the attribute needs a constant size, hence the specialisations).
template <int W>
struct VecOf;
template <>
struct VecOf<4> {
  typedef double type __attribute__((vector_size(32)));
};
template <>
struct VecOf<8> {
  typedef double type __attribute__((vector_size(64)));
};

template <int W>
struct Lanes {
  using vec = typename VecOf<W>::type;
  vec v{};
  Lanes() = default;
  Lanes(double x) {  // NOLINT: constants broadcast
    for (int i = 0; i < W; ++i) v[i] = x;
  }
  Lanes(float x) : Lanes(double(x)) {}
  Lanes(int x) : Lanes(double(x)) {}
  explicit Lanes(vec x) : v(x) {}
  double operator[](int i) const { return v[i]; }
  void set(int i, double x) { v[i] = x; }

  Lanes& operator+=(const Lanes& o) {
    v += o.v;
    return *this;
  }
  friend Lanes operator-(const Lanes& a) { return Lanes(-a.v); }
  friend Lanes operator+(const Lanes& a, const Lanes& b) { return Lanes(a.v + b.v); }
  friend Lanes operator-(const Lanes& a, const Lanes& b) { return Lanes(a.v - b.v); }
  friend Lanes operator*(const Lanes& a, const Lanes& b) { return Lanes(a.v * b.v); }
  friend Lanes operator/(const Lanes& a, const Lanes& b) { return Lanes(a.v / b.v); }
  friend Lanes max_of(const Lanes& a, const Lanes& b) { return Lanes(b.v > a.v ? b.v : a.v); }
  // A line of a normalisation: one division, then products (within 2 ulps of each division).
  friend void divide_line(Lanes* line, std::size_t stride, int n, const Lanes& den) {
    const vec r = 1.0 / den.v;
    for (int i = 0; i < n; ++i) line[std::size_t(i) * stride].v *= r;
  }
  friend Lanes exp(const Lanes& a) {
    Lanes r;
    for (int i = 0; i < W; ++i) r.v[i] = std::exp(a.v[i]);
    return r;
  }
  friend Lanes sqrt(const Lanes& a) {
    Lanes r;
    for (int i = 0; i < W; ++i) r.v[i] = std::sqrt(a.v[i]);
    return r;
  }
};

using Lanes4 = Lanes<4>;
using Lanes8 = Lanes<8>;

}  // namespace mhc::lanes
