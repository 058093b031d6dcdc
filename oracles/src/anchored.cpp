#include "mhc/oracles/anchored.hpp"

#include <iterator>

namespace mhc::oracles {

Trace<bnd::Bounded> anchored_trace(const OpCase& c, const Trace<float>& got, unsigned threads,
                                   ErrorModel model, const bnd::StoredFormats& stored) {
  if (c.op != Op::mixes && c.op != Op::boundary) return {};
  if (rounded_on_handover(c, stored, "mixes")) return {};
  const std::size_t M = std::size_t(c.cfg.mix());
  const Stage<float>* mixes = find_stage(got, "mixes");
  if (!mixes || mixes->values.size() != c.tokens * M) return {};
  OpCase split = case_header(Op::split_sinkhorn, c.cfg, c.tokens, c.seed, c.precision);
  split.inputs = {{"mixes", Tensor{{c.tokens, M}, mixes->values}}};
  split.params = {{"hc_scale", c.param("hc_scale")}, {"hc_base", c.param("hc_base")}};
  Trace<bnd::Bounded> want = oracle_trace(split, threads, model), kept;
  for (auto& w : want) {
    const Stage<float>* g = find_stage(got, w.name);
    if (!g || g->values.size() != w.values.size()) continue;  // judged end to end already
    w.name = kAnchored + w.name;
    kept.push_back(std::move(w));
  }
  return kept;
}

std::vector<StageVerdict> anchored_stages(const OpCase& c, const Trace<float>& got,
                                          const Trace<bnd::Bounded>& anchored) {
  std::vector<StageVerdict> added;
  for (const auto& w : anchored) {
    const Stage<float>* g = find_stage(got, w.name.substr(kAnchored.size()));
    added.push_back(judge(w.name, g->values.data(), w.values.data(), w.values.size(),
                          w.values.size() / c.tokens));
  }
  return added;
}

void add_anchored(std::vector<StageVerdict> anchored, Verdict& v) {
  if (anchored.empty()) return;
  for (const StageVerdict& a : anchored)
    for (auto& s : v.stages)
      if (s.stage == a.stage.substr(kAnchored.size()) && s.state == State::undecidable &&
          (a.state == State::pass || a.state == State::fail)) {
        s.state = a.state;
        s.rule = "anchored";
        s.reason += "; from the kernel's own mixes: " + a.reason + " (" + a.stage + ")";
      }
  v.stages.insert(v.stages.end(), std::make_move_iterator(anchored.begin()),
                  std::make_move_iterator(anchored.end()));
  settle(v);
}

}  // namespace mhc::oracles
