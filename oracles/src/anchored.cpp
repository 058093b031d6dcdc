#include "mhc/oracles/anchored.hpp"

namespace mhc::oracles {

void judge_anchored(const OpCase& c, const Trace<float>& got, unsigned threads, ErrorModel model,
                    Verdict& v) {
  if (c.op != Op::mixes && c.op != Op::boundary) return;
  const std::size_t M = std::size_t(c.cfg.mix());
  const Stage<float>* mixes = find_stage(got, "mixes");
  if (!mixes || mixes->values.size() != c.tokens * M) return;
  OpCase split = c;
  split.op = Op::split_sinkhorn;
  split.inputs = {{"mixes", Tensor{{c.tokens, M}, mixes->values}}};
  split.params = {{"hc_scale", c.param("hc_scale")}, {"hc_base", c.param("hc_base")}};
  const Trace<bnd::Bounded> want = oracle_trace(split, threads, model);
  std::vector<StageVerdict> added;
  for (const auto& w : want) {
    const Stage<float>* g = find_stage(got, w.name);
    if (!g || g->values.size() != w.values.size()) continue;  // judged end to end already
    StageVerdict a = judge(kAnchored + w.name, g->values.data(), w.values.data(), w.values.size(),
                           w.values.size() / c.tokens);
    for (auto& s : v.stages)
      if (s.stage == w.name && s.state == State::undecidable &&
          (a.state == State::pass || a.state == State::fail)) {
        s.state = a.state;
        s.rule = "anchored";
        s.reason += "; from the kernel's own mixes: " + a.reason + " (" + a.stage + ")";
      }
    added.push_back(std::move(a));
  }
  v.stages.insert(v.stages.end(), added.begin(), added.end());
  settle(v);
}

}  // namespace mhc::oracles
