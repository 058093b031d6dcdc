// RapidCheck generators for the mHC pieces: configurations, floats of every regime, activations,
// parameters and logits. RapidCheck's own float generators never give -0, subnormals, NaN or
// huge values, and gen::inRange on floating types gives integers only, so floats are built here
// from an integer mantissa and exponent: they shrink towards 0, 1 and small exponents.
#pragma once

#include <rapidcheck.h>

#include <cmath>
#include <limits>
#include <vector>

#include "mhc/reference/config.hpp"

namespace mhc::props {

// m * 2^e with |m| < 2^20 and e in [lo, hi]: shrinks to 0, then to small mantissas and exponents.
inline rc::Gen<float> float_in(int lo, int hi) {
  return rc::gen::map(
      rc::gen::pair(rc::gen::inRange(-(1 << 20), 1 << 20), rc::gen::inRange(lo, hi + 1)),
      [](const std::pair<int, int>& p) {
        return static_cast<float>(std::ldexp(double(p.first) / double(1 << 20), p.second));
      });
}

// A standard Gaussian (Box-Muller on two integer uniforms, so it shrinks towards 0).
inline rc::Gen<float> gaussian() {
  return rc::gen::map(
      rc::gen::pair(rc::gen::inRange(0, 1 << 20), rc::gen::inRange(0, 1 << 20)),
      [](const std::pair<int, int>& p) {
        const double u1 = (p.first + 0.5) / double(1 << 20), u2 = p.second / double(1 << 20);
        return static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2));
      });
}

// Floats of every regime an activation can be in: Gaussian, heavy-tailed (log-uniform
// magnitudes), tiny (subnormal in fp32), huge (massive channels), exact zeros of both signs.
// Where a property is about NaN/Inf, with_nonfinite adds them.
inline rc::Gen<float> activation(bool with_nonfinite = false) {
  using L = std::numeric_limits<float>;
  auto specials = with_nonfinite
                      ? rc::gen::element(0.0f, -0.0f, L::denorm_min(), -L::min() / 2,
                                         L::quiet_NaN(), L::infinity())
                      : rc::gen::element(0.0f, -0.0f, L::denorm_min(), -L::min() / 2, 1.0f, -1.0f);
  return rc::gen::weightedOneOf<float>({{6, gaussian()},
                                        {4, float_in(-4, 4)},       // heavy-tailed
                                        {1, float_in(-140, -120)},  // tiny: squares underflow
                                        {1, float_in(8, 20)},       // large: massive channels
                                        {1, specials}});
}

// A configuration: n in 1..8, d among boundary sizes (1, 7, 8, 31, 32, 33, 5120) or 2..64, 1..40
// rounds, hc_eps 0 or 1e-8..1e-1, norm_eps 0 or 1e-20..1e-2.
inline rc::Gen<ref::Config> config() {
  return rc::gen::apply(
      [](int n, int d, int iters, int he, int ne) {
        ref::Config c;
        c.n = n;
        c.d = d;
        c.iters = iters;
        c.hc_eps = he == 0 ? 0.0 : std::pow(10.0, -he);
        c.norm_eps = ne == 0 ? 0.0 : std::pow(10.0, -ne);
        return c;
      },
      rc::gen::inRange(1, 9),
      rc::gen::weightedOneOf<int>({{4, rc::gen::element(1, 7, 8, 31, 32, 33)},
                                   {8, rc::gen::inRange(2, 65)},
                                   {1, rc::gen::just(5120)}}),
      rc::gen::inRange(1, 41), rc::gen::inRange(0, 9), rc::gen::element(0, 2, 6, 12, 20));
}

// Logits of a comb: mild (|L| < 4), sharp (up to 2^6) or huge (up to 2^10: exp overflows fp32
// without the max subtraction).
inline rc::Gen<std::vector<double>> logits(int n) {
  auto one = rc::gen::weightedOneOf<float>(
      {{3, float_in(-2, 2)}, {2, float_in(0, 6)}, {1, float_in(6, 10)}});
  return rc::gen::map(
      rc::gen::container<std::vector<float>>(std::size_t(n * n), one),
      [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); });
}

// hc_fn entries of scale 1e-4..1 (powers of ten; shrinks to 1e-4), hc_scale and hc_base.
inline rc::Gen<double> weight_scale() {
  return rc::gen::map(rc::gen::inRange(0, 5), [](int k) { return std::pow(10.0, -4 + k); });
}
inline rc::Gen<std::vector<float>> hc_scale() {
  return rc::gen::container<std::vector<float>>(3, float_in(-3, 2));
}

}  // namespace mhc::props
