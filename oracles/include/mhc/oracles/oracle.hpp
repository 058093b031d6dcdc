// The everyday double oracle, with its a-priori accuracy certificate and fallback: compensated
// reductions, and the tokens whose mixes projection cancels too much (gamma_m^2 kappa above
// kOracleAccuracy/8) evaluated again in 113-bit quad (docs/semantics.md, "The double oracle").
#pragma once

#include <cstddef>

#include "mhc/oracles/pieces.hpp"

namespace mhc::oracles {

struct OracleStats {
  std::size_t tokens = 0;
  std::size_t fallback_tokens = 0;  // re-evaluated in quad precision
  double max_mixes_condition = 0;   // max over tokens and rows of kappa
};

// max over the M rows of kappa_a = sum_i |W[a,i] x_i| / |sum_i W[a,i] x_i| (inf where the sum is 0
// and the terms are not; 1 for an all-zero row).
double mixes_condition(const ref::Config& c, const float* x, const float* hc_fn);

// The relative error bound gamma_m^2 * kappa of the compensated m-term projection.
double mixes_drift(const ref::Config& c, double kappa);

// evaluate_pieces<double> with the fallback above; `limit` is the drift above which a token falls
// back (default kOracleAccuracy / 8, tests lower it to exercise the path).
PiecesTrace<double> oracle_pieces(const PiecesCase& c, unsigned threads = 0,
                                  OracleStats* stats = nullptr, double limit = -1);

}  // namespace mhc::oracles
