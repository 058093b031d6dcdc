// The configuration of the mHC pieces (SPEC section 1). Plain data; validate() says what is wrong.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>

namespace mhc::ref {

struct Config {
  int n = 4;            // hc_mult: parallel residual streams
  int d = 5120;         // dim: hidden width
  int iters = 20;       // hc_sinkhorn_iters: column divisions (the softmax is the first row step)
  double hc_eps = 1e-6;    // eps of pre and of every Sinkhorn step
  double norm_eps = 1e-20; // eps of the mix RMS and of RMSNorm

  int mix() const { return (2 + n) * n; }                     // M = mix_hc
  std::size_t stream_size() const { return std::size_t(n) * std::size_t(d); }  // n*d
  // hc_fn [M, n*d] + hc_base [M] + hc_scale [3]: one hc site's parameters.
  std::size_t site_params() const { return std::size_t(mix()) * stream_size() + std::size_t(mix()) + 3; }
};

// The DeepSeek V4.1 values (SPEC section 1).
inline Config v41() { return Config{}; }

// Empty when the configuration is one the reference accepts; otherwise what is wrong.
inline std::string validate(const Config& c) {
  if (c.n < 1) return "n (hc_mult) must be >= 1, got " + std::to_string(c.n);
  if (c.d < 1) return "d (dim) must be >= 1, got " + std::to_string(c.d);
  if (c.iters < 1) return "iters (sinkhorn_iters) must be >= 1, got " + std::to_string(c.iters);
  if (!(c.hc_eps >= 0) || !std::isfinite(c.hc_eps)) return "hc_eps must be finite and >= 0";
  if (!(c.norm_eps >= 0) || !std::isfinite(c.norm_eps)) return "norm_eps must be finite and >= 0";
  return {};
}

}  // namespace mhc::ref
