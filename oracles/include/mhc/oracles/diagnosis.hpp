// Diagnosis of a failing kernel: which known, plausible deviation from the semantics explains
// its output ("matches the oracle with eps outside the column division").
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/noise.hpp"
#include "mhc/oracles/ops.hpp"

namespace mhc::oracles {

// The catalogued deviations (ref::Semantics values other than DeepSeek's): eps inside, outside or
// missing in each normalisation, the first division a row, iterations +-1, comb transposed, post
// without its factor 2 or with an eps, pre without eps, scales swapped, per-stream RMS, RMS of the
// sum, d-major flattening, and other eps values.
const std::vector<ref::Semantics>& deviation_catalogue();
// Block-level deviations, tried for block and stack: pre not shifted, attention not causal, a norm
// skipped, routing weights not normalised, comb transposed at one site.
const std::vector<ref::BlockSemantics>& block_deviation_catalogue();
// The RMS statistics' eps a kernel may use in place of the configured norm_eps (a framework's
// usual RMSNorm eps), by the name the diagnosis gives it: an alternative of every op reading it.
const std::vector<std::pair<std::string, double>>& norm_eps_alternatives();

// The names of the deviations under which the oracle (same case, same precision model, bounds
// of the given error model) passes every stage the kernel produced, its anchored stages too;
// empty when none explains it. `failed`: the stages that failed, and `own` the case's own oracle
// (its anchored stages too); a deviation that leaves all of them as `own` has them cannot explain
// the failure, and is not named. With the case's second tier (`models`), a deviation must pass it
// too, around its own values (second_tier): an error inside the bounds that the tier flags is
// explained only by a deviation that moves the values onto it.
std::vector<std::string> diagnose(const OpCase& c, const Trace<float>& got, unsigned threads = 1,
                                  ErrorModel model = ErrorModel::rigorous,
                                  const std::vector<std::string>& failed = {},
                                  const Trace<bnd::Bounded>* own = nullptr,
                                  const NoiseModels* models = nullptr,
                                  const bnd::StoredFormats& stored = {});

// Whether the output passes every stage within the worst-case (rigorous) bounds of the case's own
// semantics. A failure under tighter bounds is then explained by a deviation only under those
// tighter bounds, and by none when none passes them: an accuracy shortfall (a precision the
// kernel does not declare, an arithmetic regression).
bool within_worst_case(const OpCase& c, const Trace<float>& got, unsigned threads = 1);
extern const char* const kWithinWorstCase;  // the diagnosis line for it

// Where no catalogued deviation explains an output that fails its bounds: the declarations,
// each c's with one part narrower (the projection's products tf32 or bf16; mixes, coefficients,
// streams, an eager framework's intermediates, inputs or weights fp16 or bf16), under which it
// passes every stage and the second tier, named undeclared_<part>_<format>; those of the narrowest
// width that explains it, or, where no single part does, the fewest parts of that width together
// (undeclared_a_bf16_and_b_bf16). A statement of the error's size: a kernel that computes in that
// format, or errs as much for another reason, passes under it alike.
std::vector<std::string> undeclared_precision(const OpCase& c, const Trace<float>& got,
                                              unsigned threads = 1,
                                              ErrorModel model = ErrorModel::rigorous,
                                              const bnd::StoredFormats& stored = {});

// One line for people: "matches the oracle with X" / "... with X or Y" / "no catalogued ...".
std::string describe_diagnosis(const std::vector<std::string>& names);

// What a catalogued deviation's name (Semantics::name, BlockSemantics::name: "col_eps_after",
// "comb_transposed_at_ffn") means, in one plain-English sentence; "" for a name not catalogued.
std::string diagnosis_sentence(const std::string& name);
// The catalogued names that a diagnosis line or a list of names ("a|b", "... with a or b")
// holds as whole words, each once, in the order they appear, with their sentences.
std::vector<std::pair<std::string, std::string>> diagnosis_sentences(const std::string& text);

}  // namespace mhc::oracles
