// The mutation self-test's kernels: one configurable straightforward fp32 kernel, and a catalogue
// of named configurations. Legitimate ones ("variant:NAME") make implementation choices that
// fp32 rounding allows (sum orders, FMA, reciprocal division, other sigmoid and exp forms, RMS
// scaling before the projection, the projection on tensor cores in split tf32, math functions as
// accurate as a GPU's rather than glibc's): the harness must pass them. Wrong ones ("mutant:NAME")
// deviate from the semantics in a plausible way (eps placement, iterations, comb transposed, ...):
// the harness must catch them and, where the deviation is a catalogued one, name it.
#pragma once

#include <string>
#include <vector>

#include "mhc/impl/kernels.hpp"

namespace mhc::impl {

struct Variant {
  std::string name;
  bool wrong = false;
  std::string explains;  // wrong: the deviation the diagnosis should name ("" if uncatalogued)

  // Legitimate choices.
  enum class Sum { forward, reverse, pairwise, blocked };
  Sum sum = Sum::forward;      // order of every reduction
  bool fma = false;            // products accumulated with fmaf
  bool reciprocal = false;     // a / b computed as a * (1 / b)
  bool tanh_sigmoid = false;   // sig(z) = 0.5 * (1 + tanh(z / 2))
  bool exp2_exp = false;       // exp(x) = exp2(x * log2(e))
  bool scale_first = false;    // x scaled by r before the projection of mixes
  bool tensor_core = false;    // the projection formed as cuda-fused's tensor cores do (tc_dot)
  bool d_major_order = false;  // the projection summed column by column across the streams
  bool ulp_math = false;       // exp and 1/sqrt one ulp off where a hash of the argument says:
                               // a GPU math library's accuracy (within 2 ulp), not glibc's

  // Deviations (the reference's Semantics, mirrored).
  enum class Eps { in_sum, after, none };
  Eps softmax_eps = Eps::after, col_eps = Eps::in_sum, row_eps = Eps::in_sum;
  bool first_row = false;
  int iters_delta = 0;
  bool comb_transposed = false;
  bool post_factor2 = true;
  bool post_eps = false;
  bool pre_eps = true;
  bool scales_swapped = false;
  enum class Rms { token_mean, stream_mean, token_sum };
  Rms rms = Rms::token_mean;
  bool d_major = false;
  float hc_eps_scale = 1;
  bool no_max_subtraction = false;  // exp(L) without subtracting the row max
  bool bf16_accumulation = false;   // the projection's accumulator rounded to bf16 each step
  // Precision regressions that stay inside the bounds (the second tier's band):
  bool rsqrt_estimate = false;     // r's reciprocal square root to 11 mantissa bits, no Newton step
  Format products = Format::fp32;  // the projection's operands rounded to it, whatever is declared
  Format mixes = Format::fp32;     // the mixes stored in it, whatever is declared
  Format streams = Format::fp32;   // hc_pre, hc_post, RMSNorm outputs stored in it, likewise
  int sinkhorn_recip_bits = 0;     // Sinkhorn divisions as x * (1 / s) cut to this many bits
  int sigmoid_exp_bits = 0;        // the weights' exp(-z) cut to this many bits (a fast exp)
  BlockKnobs block;                // Block-level deviations (pre not shifted, not causal, ...)
  BackwardKnobs backward;          // the backward kernels' choices and deviations
};

const std::vector<Variant>& variant_catalogue();
// "variant:NAME" for a legitimate entry, "mutant:NAME" for a wrong one.
std::string backend_name(const Variant& v);
Backend make_backend(const Variant& v);

}  // namespace mhc::impl
