// The configuration of the mHC pieces (docs/semantics.md, "Configuration"). Plain data;
// validate() says what is wrong.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>

namespace mhc::ref {

// Where plausible implementations of the semantics differ, the reference takes an explicit
// choice. The defaults are DeepSeek's (docs/semantics.md); every other value is a known
// wrong-but-plausible deviation (docs/semantics.md, "Traps"), evaluated by the diagnosis
// ("matches the oracle with eps outside the column division") and mirrored by the mutation
// self-test's wrong kernels.
struct Semantics {
  // How eps enters a normalisation of v by its sum S: v/(S+eps), v/S + eps, or v/S.
  enum class Eps { in_sum, after, none };
  Eps softmax_eps = Eps::after;  // the softmax adds eps AFTER dividing
  Eps col_eps = Eps::in_sum;     // every Sinkhorn division adds eps to the SUM
  Eps row_eps = Eps::in_sum;
  bool first_row = false;        // a row division before the first column division
  int iters_delta = 0;           // rounds run: iters + iters_delta
  bool comb_transposed = false;  // hc_post reading C[k,j] for C[j,k]
  bool post_factor2 = true;      // post = 2 * sig(.)
  bool post_eps = false;         // post + eps
  bool pre_eps = true;           // pre = sig(.) + eps
  bool scales_swapped = false;   // pre scaled by hc_scale[1], post by hc_scale[0]
  enum class Rms { token_mean, stream_mean, token_sum };
  Rms rms = Rms::token_mean;    // r from the mean over all n*d values of the token
  bool d_major = false;         // streams flattened x[c*n + j] for the projection
  bool max_subtraction = true;  // softmax of L - max L; the same in exact arithmetic, but
                                // without it exp overflows in fp32 (the bound then says so)
  double hc_eps_scale = 1;      // hc_eps used = hc_eps * hc_eps_scale

  bool is_default() const { return name() == "deepseek"; }
  std::string name() const;  // "deepseek" for the defaults, else the deviations joined by '+'
};

struct Config {
  int n = 4;             // hc_mult: parallel residual streams
  int d = 5120;          // dim: hidden width
  int iters = 20;        // hc_sinkhorn_iters: column divisions (the softmax is the first row step)
  double hc_eps = 1e-6;  // eps of pre and of every Sinkhorn step
  double norm_eps = 1e-20;  // eps of the mix RMS and of RMSNorm
  Semantics sem;            // DeepSeek's unless a deviation is being evaluated

  int mix() const { return (2 + n) * n; }                                      // M = mix_hc
  std::size_t stream_size() const { return std::size_t(n) * std::size_t(d); }  // n*d
  // hc_fn [M, n*d] + hc_base [M] + hc_scale [3]: one hc site's parameters.
  std::size_t site_params() const {
    return std::size_t(mix()) * stream_size() + std::size_t(mix()) + 3;
  }
};

inline std::string Semantics::name() const {
  std::string s;
  auto add = [&s](const std::string& part) { s += (s.empty() ? "" : "+") + part; };
  auto eps_name = [](Eps e) {
    return e == Eps::in_sum ? "in_sum" : e == Eps::after ? "after" : "none";
  };
  if (softmax_eps != Eps::after) add(std::string("softmax_eps_") + eps_name(softmax_eps));
  if (col_eps != Eps::in_sum) add(std::string("col_eps_") + eps_name(col_eps));
  if (row_eps != Eps::in_sum) add(std::string("row_eps_") + eps_name(row_eps));
  if (first_row) add("first_division_row");
  if (iters_delta != 0)
    add("iters" + std::string(iters_delta > 0 ? "+" : "") + std::to_string(iters_delta));
  if (comb_transposed) add("comb_transposed");
  if (!post_factor2) add("post_without_factor2");
  if (post_eps) add("post_with_eps");
  if (!pre_eps) add("pre_without_eps");
  if (scales_swapped) add("scales_swapped");
  if (rms == Rms::stream_mean) add("rms_per_stream");
  if (rms == Rms::token_sum) add("rms_of_sum");
  if (d_major) add("d_major_flattening");
  if (!max_subtraction) add("no_max_subtraction");
  if (hc_eps_scale != 1) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "hc_eps_x%g", hc_eps_scale);
    add(buf);
  }
  return s.empty() ? "deepseek" : s;
}

// The DeepSeek V4.1 values (docs/semantics.md, "Configuration").
inline Config v41() {
  return Config{};
}

// The most Sinkhorn rounds a case may ask for (what a fixture holds): far beyond any model's,
// and a case of more would hold a run for hours.
constexpr int kMaxIters = 100000;

// Empty when the configuration is one the reference accepts; otherwise what is wrong. The eps
// are constants of fp32 kernels: one beyond fp32's range is infinite there, and every output
// then NaN or undecidable, which judges nothing.
inline std::string validate(const Config& c) {
  const auto g = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return std::string(buf);
  };
  if (c.n < 1) return "n (hc_mult) must be >= 1, got " + std::to_string(c.n);
  if (c.d < 1) return "d (dim) must be >= 1, got " + std::to_string(c.d);
  if (c.iters < 1 || c.iters > kMaxIters)
    return "iters (sinkhorn_iters) must be in [1, " + std::to_string(kMaxIters) + "], got " +
           std::to_string(c.iters);
  constexpr double fp32_max = 3.4028234663852886e38;
  if (!(c.hc_eps >= 0 && c.hc_eps <= fp32_max))
    return "hc_eps must be >= 0 and finite in fp32 (at most 3.4028235e38), got " + g(c.hc_eps);
  if (!(c.norm_eps >= 0 && c.norm_eps <= fp32_max))
    return "norm_eps must be >= 0 and finite in fp32 (at most 3.4028235e38), got " + g(c.norm_eps);
  if (c.iters + c.sem.iters_delta < 1) return "iters + iters_delta must be >= 1";
  return {};
}

}  // namespace mhc::ref
