#include "mhc/oracles/diagnosis.hpp"

#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/verdict.hpp"

namespace mhc::oracles {

const std::vector<ref::Semantics>& deviation_catalogue() {
  static const std::vector<ref::Semantics> all = [] {
    using E = ref::Semantics::Eps;
    std::vector<ref::Semantics> v;
    auto add = [&v](auto set) {
      ref::Semantics s;
      set(s);
      v.push_back(s);
    };
    add([](ref::Semantics& s) { s.softmax_eps = E::in_sum; });
    add([](ref::Semantics& s) { s.softmax_eps = E::none; });
    add([](ref::Semantics& s) { s.col_eps = E::after; });
    add([](ref::Semantics& s) { s.col_eps = E::none; });
    add([](ref::Semantics& s) { s.row_eps = E::after; });
    add([](ref::Semantics& s) { s.row_eps = E::none; });
    add([](ref::Semantics& s) { s.first_row = true; });
    add([](ref::Semantics& s) { s.iters_delta = 1; });
    add([](ref::Semantics& s) { s.iters_delta = -1; });
    add([](ref::Semantics& s) { s.comb_transposed = true; });
    add([](ref::Semantics& s) { s.post_factor2 = false; });
    add([](ref::Semantics& s) { s.post_eps = true; });
    add([](ref::Semantics& s) { s.pre_eps = false; });
    add([](ref::Semantics& s) { s.scales_swapped = true; });
    add([](ref::Semantics& s) { s.rms = ref::Semantics::Rms::stream_mean; });
    add([](ref::Semantics& s) { s.rms = ref::Semantics::Rms::token_sum; });
    add([](ref::Semantics& s) { s.d_major = true; });
    add([](ref::Semantics& s) { s.max_subtraction = false; });
    for (double scale : {0.0, 0.1, 10.0})
      add([scale](ref::Semantics& s) { s.hc_eps_scale = scale; });
    return v;
  }();
  return all;
}

const std::vector<ref::BlockSemantics>& block_deviation_catalogue() {
  static const std::vector<ref::BlockSemantics> all = [] {
    std::vector<ref::BlockSemantics> v(7);
    v[0].shifted_pre = false;
    v[1].causal = false;
    v[2].attn_norm = false;
    v[3].ffn_norm = false;
    v[4].normalise_routing = false;
    v[5].comb_transposed_site = 0;
    v[6].comb_transposed_site = 1;
    return v;
  }();
  return all;
}

std::vector<std::string> diagnose(const OpCase& c, const Trace<float>& got, unsigned threads,
                                  ErrorModel model) {
  std::vector<std::string> names;
  std::vector<OpCase> alternatives;
  for (const auto& sem : deviation_catalogue()) {
    OpCase alt = c;
    alt.cfg.sem = sem;
    alternatives.push_back(std::move(alt));
  }
  if (op_spec(c.op).whole)
    for (const auto& sem : block_deviation_catalogue()) {
      // Inside a captured sublayer: nothing of the case depends on it.
      if (c.block.captured_sublayers && (!sem.causal || !sem.normalise_routing)) continue;
      OpCase alt = c;
      alt.block.sem = sem;
      alternatives.push_back(std::move(alt));
    }
  for (const auto& alt : alternatives) {
    if (!ref::validate(alt.cfg).empty()) continue;  // e.g. iters - 1 = 0
    const std::string name = alt.block.sem.is_default() ? alt.cfg.sem.name() : alt.block.sem.name();
    const Verdict v = compare(got, oracle_trace(alt, threads, model, {}, &got));
    bool all_pass = !v.stages.empty();
    bool any_judged = false;
    for (const auto& s : v.stages) {
      if (s.state == State::fail) all_pass = false;
      any_judged = any_judged || s.state == State::pass;
    }
    if (all_pass && any_judged) names.push_back(name);
  }
  return names;
}

const char* const kWithinWorstCase =
    "no catalogued deviation explains it, and it is within the worst-case bounds: an accuracy "
    "shortfall (a precision the kernel does not declare, or an arithmetic regression)";

bool within_worst_case(const OpCase& c, const Trace<float>& got, unsigned threads) {
  const Verdict v = compare(got, oracle_trace(c, threads, ErrorModel::rigorous, {}, &got));
  bool any_judged = false;
  for (const auto& s : v.stages) {
    if (s.state == State::fail) return false;
    any_judged = any_judged || s.state == State::pass;
  }
  return any_judged;
}

std::string describe_diagnosis(const std::vector<std::string>& names) {
  if (names.empty()) return "no catalogued deviation explains the output";
  std::string s = "matches the oracle with ";
  for (std::size_t i = 0; i < names.size(); ++i) s += (i ? " or " : "") + names[i];
  return s;
}

}  // namespace mhc::oracles
