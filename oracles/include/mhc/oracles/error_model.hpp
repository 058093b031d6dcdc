// The error models behind the oracle's per-element bounds.
//
//   rigorous       the bound-carrying Scalar: a bound on every fp32 evaluation of the formula, for
//                  every summation order (Higham's gamma_n).
//   probabilistic  the same, with reductions bounded by Higham & Mary's lambda sqrt(n) u
//                  (lambda = 8, failure probability <= 5e-10 per element at n = 20480).
//   empirical      safety * the spread of an ensemble of stochastic-rounding fp32 evaluations of
//                  the reference (+ a floor of 4 u |v| + FLT_MIN), never above the rigorous bound.
//   standard       per stage, the model chosen from measurements (see standard_model()).
#pragma once

#include <string>

#include "mhc/oracles/ops.hpp"

namespace mhc::oracles {

enum class ErrorModel { rigorous, probabilistic, empirical, standard };
std::string error_model_name(ErrorModel m);
ErrorModel error_model_from_name(const std::string& name);  // throws std::invalid_argument

struct EmpiricalParams {
  int samples = 8;     // stochastic-rounding evaluations
  double safety = 8;   // times the largest deviation seen
};

// The model `standard` uses for a stage of an op.
ErrorModel standard_model(Op op, const std::string& stage);

// The oracle's Trace with bounds from the given model (the case's precision model throughout;
// the empirical model needs fp32 arithmetic and falls back to rigorous for tf32).
Trace<bnd::Bounded> oracle_trace(const OpCase& c, unsigned threads, ErrorModel model,
                                 const EmpiricalParams& params = {});

}  // namespace mhc::oracles
