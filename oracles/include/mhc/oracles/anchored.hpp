// Anchored judging inside an op: a stage that reads an earlier stage is judged again from the
// kernel's own value of that stage, as the Block is between sublayers. In `mixes` and `boundary`
// the split (pre, post, comb) reads mixes, whose bound over a 20480-term projection is loose; from
// the kernel's mixes the split's bounds are the Sinkhorn's alone, so a fault in the split is not
// hidden by the projection's bound and the comb is not undecidable because of it. The end-to-end
// stages stay (docs/semantics.md, "Anchored stages").
#pragma once

#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/verdict.hpp"

namespace mhc::oracles {

// The prefix of an anchored stage's name: "anchored.comb" is comb judged from the kernel's mixes.
inline const std::string kAnchored = "anchored.";

// The split's oracle from the kernel's mixes, a stage "anchored.<stage>" for each of pre, post and
// comb the kernel produced (ops mixes and boundary, given the kernel's mixes; empty where the
// mixes were rounded on handover). Reads only the case and the kernel's trace, so it may run beside
// the end-to-end judgement.
Trace<bnd::Bounded> anchored_trace(const OpCase& c, const Trace<float>& got, unsigned threads,
                                   ErrorModel model, const bnd::StoredFormats& stored = {});

// The verdict of each anchored stage, against the kernel's stage it names.
std::vector<StageVerdict> anchored_stages(const OpCase& c, const Trace<float>& got,
                                          const Trace<bnd::Bounded>& anchored);

// Appends the anchored verdicts to v and settles it. An end-to-end stage that is undecidable while
// its anchored stage is decided takes that decision (rule "anchored").
void add_anchored(std::vector<StageVerdict> anchored, Verdict& v);

}  // namespace mhc::oracles
