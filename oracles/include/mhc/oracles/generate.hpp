// Generators of the tensors of a Case, shared by every case type. All values are fp32.
#pragma once

#include <cstddef>
#include <vector>

#include "mhc/oracles/bounded.hpp"
#include "mhc/oracles/random.hpp"
#include "mhc/reference/config.hpp"

namespace mhc::oracles::gen {

// [T, m] Gaussian rows with per-row scales spanning 1e-3..1e3, a few massive channels (as LLM
// residual streams have) and, where zero_tokens and T > 2, a zero row now and then.
std::vector<float> activations(Rng& rng, std::size_t T, std::size_t m, bool zero_tokens);
// hc_fn [M, n*d] giving mixes of standard deviation 1e-3..3 for unit-RMS tokens; hc_scale [3];
// hc_base [M].
std::vector<float> hc_fn(Rng& rng, const ref::Config& c);
std::vector<float> hc_scale(Rng& rng);
std::vector<float> hc_base(Rng& rng, const ref::Config& c);
// Reading weights sig(.) + eps and writing weights 2 sig(.), [T, n].
std::vector<float> pre_weights(Rng& rng, const ref::Config& c, std::size_t T);
std::vector<float> post_weights(Rng& rng, const ref::Config& c, std::size_t T);
// [T, n, n] combs as split_sinkhorn makes them (Sinkhorn of random logits, in double).
std::vector<float> combs(Rng& rng, const ref::Config& c, std::size_t T);
// [T, M] mixes: logits from mild to sharp (standard deviation 0.1..30).
std::vector<float> mixes(Rng& rng, const ref::Config& c, std::size_t T);
// RMSNorm weights around 1.
std::vector<float> norm_weight(Rng& rng, std::size_t d);
// The oracle side's one bf16 rounding (the kernels have impl::round_bf16): to the nearest bf16
// value, ties to even, kept in a float; NaN stays NaN.
float round_bf16(float x);
// To the nearest fp16 value (subnormals below 2^-14, infinite beyond 65504), kept in a float.
float round_fp16(float x);
// To the nearest value of storage format f (bf16, fp16; fp32 and tf32: x as it is).
float round_to(bnd::Format f, float x);
// Every value as stream storage in format f holds it (stored exactly in fp32): bf16 and fp16
// rounded, fp16 first clamped to +-2^12.
void to_format(bnd::Format f, std::vector<float>& v);

}  // namespace mhc::oracles::gen
