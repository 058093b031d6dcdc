// The error models behind the oracle's per-element bounds (docs/semantics.md, "Error models").
//
//   rigorous       the bound-carrying Scalar: a bound on every fp32 evaluation of the formula, for
//                  every summation order (Higham's gamma_n).
//   probabilistic  the same, with reductions bounded by Higham & Mary's lambda sqrt(n) u
//                  (lambda = 8, failure probability <= 5e-10 per element at n = 20480) where
//                  their data meet its premise (bnd::detail::premise_holds), else gamma_n.
//   empirical      safety * the spread of an ensemble of stochastic-rounding fp32 evaluations of
//                  the reference (+ a floor of 4 u |v| + FLT_MIN), never above the rigorous bound.
//   standard       per stage, the model chosen from measurements (see standard_model()).
#pragma once

#include <string>

#include "mhc/oracles/ops.hpp"

namespace mhc::oracles {

enum class ErrorModel { rigorous, probabilistic, empirical, standard };
const std::vector<ErrorModel>& all_error_models();
std::string error_model_name(ErrorModel m);
ErrorModel error_model_from_name(const std::string& name);  // throws std::invalid_argument

struct EmpiricalParams {
  int samples = 8;    // stochastic-rounding evaluations
  double safety = 8;  // times the largest deviation seen
};

// The model `standard` uses for a stage of an op.
ErrorModel standard_model(Op op, const std::string& stage);

// The oracle's Trace with bounds from the given model (the case's precision model throughout;
// the empirical model needs fp32 arithmetic and the mHC pieces: it falls back to rigorous for
// tf32 and for block and stack).
//
// Block and stack: given the kernel's Trace, every stage is evaluated from the kernel's own values
// of the stages it reads (anchored), so bounds do not compound through the Block and the first
// failing stage is where the fault is. A token whose top-k margin is within its bound is evaluated
// with the kernel's reported choice ("ffn.experts"), or is undecidable, never failed
// (docs/semantics.md, "Stand-in sublayers").
Trace<bnd::Bounded> oracle_trace(const OpCase& c, unsigned threads, ErrorModel model,
                                 const EmpiricalParams& params = {},
                                 const Trace<float>* kernel = nullptr);

// The tokens of each layer whose routing the oracle cannot decide (for reports and tests).
std::vector<std::vector<std::size_t>> undecidable_routing(const OpCase& c);

}  // namespace mhc::oracles
