// The second tier: a statistical judgement beside the bounds, where the bounds are loose (the
// 20480-term projection of mixes and its RMS scale; RMSNorm's; the comb's 39 normalisations; the
// weights, whose bounds allow every usual form of the sigmoid; the backward pieces' sums over d).
// It asks whether the kernel's error is the size of the legitimate rounding noise of fp32 kernels
// on this data, not whether it is possible. Its own rule ("noise") and its own numbers in the
// verdict: a flag is evidence at a stated false-alarm rate, not a proof. Model and calibration:
// docs/semantics.md, "The second tier"; measurements: bench/README.md, "The second tier".
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mhc/oracles/bounded.hpp"
#include "mhc/oracles/ops.hpp"
#include "mhc/oracles/verdict.hpp"

namespace mhc::oracles {

// Thresholds on z = |got - want| / s, s the element's noise scale: an element beyond the model's
// max_z, or a stage of at least 16 independent elements whose root mean square of z is beyond
// kNoiseRms, is flagged. max_z is
// kNoiseMax for mixes, the comb and the backward's sums over d, and 1 for the weights, whose scale
// is a worst case. Derivations: docs/semantics.md, "The second tier".
constexpr double kNoiseMax = 6;
constexpr double kNoiseRms = 1.5;

// A stage as the second tier models it: the exact value of each element from the data the stage
// reads (the kernel's own streams where the op computes them: anchored), its noise scale, and the
// limit on an element's z.
struct NoiseModel {
  std::vector<double> value, scale;
  double max_z = kNoiseMax;
  double independent = 1;  // the share of its elements whose errors are free (the comb's sums)
  bool on_kernel = false;  // it reads the kernel's own stages (anchored, the boundary's, a Block's)
};
// For mixes (ops mixes, boundary): the partial sums of fp32 accumulations of the projection
// (forward and backward, stream-major and d-major) and of the RMS statistic, and the deviations
// of those orders, run. For the comb from given mixes
// (split_sinkhorn's comb; anchored.comb of mixes and boundary): measured, the spread of
// stochastically rounded evaluations and the deviations of three fp32 runs, at least the
// result's half ulp. For the weights from
// given mixes (pre and post; anchored.pre and anchored.post): the worst case of the sigmoid's
// usual forms. For pre_backward's grad_pre_mix and post_backward's grad_post and grad_comb (dot
// products of the case's streams over d): the projection's sums model without its RMS scale; for
// boundary_backward's grad_pre_mix, the same over the streams it recomputes, with their own errors
// added (fp32 rounding; stored narrower, the rounding to that format where it is not known). For
// the split's parameter gradients grad_hc_scale and grad_hc_base (split_sinkhorn_backward;
// mixes_backward and boundary_backward, which recompute the mixes): the mixes' noise carried
// through the split's backward, its own rounding measured as the comb's, and the sum over tokens.
// For the gradient of the streams the kernel forms through the mixes' backward, with its own
// noise, the split backward's carried through the projection's backward, and the RMS scale's:
// mixes_backward's grad_x (that gradient), boundary_backward's grad_f and grad_residual (its sums
// over the streams) and grad_post and grad_comb (dots over d with it); under narrower streams over
// every composition of the boundary's gradient from its shares, and a stream gradient with its
// storage's rounding; and grad_hc_fn of both (the sum over tokens of G times the streams, any
// streams format). For RMSNorm's y (op rmsnorm; a Block's normed stages, anchored on the kernel's
// sublayer input): r's noise, shared by the token's elements, and each element's own roundings;
// for rmsnorm_backward's grad_x, r's and the dot a . x's noise, shared too, and each term's own.
// None for another gradient stored narrower than fp32. Empty for a stage it does not model, and
// where the stage it is anchored on (the kernel's mixes or streams) was handed over rounded
// (stored: rounded_on_handover).
NoiseModel noise_model(const OpCase& c, const std::string& stage, const Trace<float>& got,
                       const bnd::StoredFormats& stored = {});

// The second tier's judgement of one stage: z per element (an element whose scale is not finite
// is not judged); per_token: its elements per token, 0 for a parameter's gradient.
NoiseVerdict noise_judge(const float* got, const NoiseModel& model, std::size_t per_token);

// The model of every stage the tier models, end to end and anchored (kAnchored + name), by stage
// name. Reads only the case and the kernel's trace, so it may run beside the bounds' judgement.
// A stage handed over in a format narrower than fp32 (stored) has none: its storage's rounding,
// not fp32's noise, is its error (the bounds count that rounding). Under semantics other than
// DeepSeek's, the split's alone (comb, pre, post; moved_models).
using NoiseModels = std::map<std::string, NoiseModel>;
NoiseModels noise_models(const OpCase& c, const Trace<float>& got,
                         const bnd::StoredFormats& stored = {});

// Adds the second tier to every stage of v it has a model for; a stage that passed its bounds and
// is flagged fails by rule "noise".
void second_tier(const NoiseModels& models, const OpCase& c, const Trace<float>& got, Verdict& v);

// For the diagnosis's alternative semantics, whose models noise_models makes for the split alone:
// the case's models, each element's value moved by alt - own (the double values of the
// alternative's oracle and of the case's), the change the deviation makes, with the noise of the
// case's arithmetic. Only where both oracles read what the model reads: the case's data, or the
// kernel's mixes (anchored); not the models of the kernel's streams (on_kernel).
NoiseModels moved_models(const NoiseModels& models, const Trace<bnd::Bounded>& own,
                         const Trace<bnd::Bounded>& alt);

}  // namespace mhc::oracles
