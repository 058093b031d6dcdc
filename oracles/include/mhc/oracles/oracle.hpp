// The everyday double oracle, with its a-priori accuracy certificate and fallback.
//
// Every reduction of the double oracle is compensated (reference/arith.hpp): its error is
// <= u|s| + gamma_m^2 * sum|terms| (Ogita, Rump & Oishi 2005). The only place where that second
// term can matter is the m = n*d term projection of mixes when it cancels: its relative error is
// then ~ gamma_m^2 * kappa with kappa = sum|W x| / |sum W x|. Tokens whose kappa would let the
// double result drift past kOracleAccuracy/8 are evaluated again in 113-bit quad precision.
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
