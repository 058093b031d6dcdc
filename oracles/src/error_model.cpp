#include "mhc/oracles/error_model.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "mhc/oracles/backward.hpp"
#include "mhc/oracles/generate.hpp"
#include "mhc/oracles/stochastic.hpp"

namespace mhc::sr {
// bf16 storage of stream tensors in the stochastic ensemble: to nearest, as a kernel stores.
inline sr32 stored_bf16(const sr32& x) {
  return sr32(mhc::oracles::gen::round_bf16(x.v));
}
thread_local bool bf16_storage = false;
inline sr32 stored(const sr32& x, mhc::ref::Storage kind = mhc::ref::Storage::streams) {
  return bf16_storage && kind == mhc::ref::Storage::streams ? stored_bf16(x) : x;
}
}  // namespace mhc::sr

namespace mhc::oracles {

std::string error_model_name(ErrorModel m) {
  switch (m) {
    case ErrorModel::rigorous:
      return "rigorous";
    case ErrorModel::probabilistic:
      return "probabilistic";
    case ErrorModel::empirical:
      return "empirical";
    case ErrorModel::standard:
      return "standard";
  }
  return "?";
}

const std::vector<ErrorModel>& all_error_models() {
  static const std::vector<ErrorModel> m{ErrorModel::rigorous, ErrorModel::probabilistic,
                                         ErrorModel::empirical, ErrorModel::standard};
  return m;
}

ErrorModel error_model_from_name(const std::string& name) {
  for (ErrorModel m : all_error_models())
    if (error_model_name(m) == name) return m;
  throw std::invalid_argument("unknown error model '" + name +
                              "' (rigorous, probabilistic, empirical, standard)");
}

// probabilistic for every stage: where a stage's reductions are short (<= lambda^2 terms) it is
// the rigorous bound, where they are long it is sqrt(n)/lambda tighter, and its premise is checked
// on each reduction's data (bnd::detail::premise_holds). empirical never: it misses legitimate
// reformulations and round to nearest's bias. Why: docs/semantics.md, "Error models"; the
// measurements: bench/README.md, "Bound tightness" and "Repeated terms and the probabilistic
// bound".
ErrorModel standard_model(Op, const std::string&) {
  return ErrorModel::probabilistic;
}

namespace {

// Replaces each bound by min(rigorous, safety * max_k |sr_k - v| + 4 u |v| + eta).
void apply_empirical(const OpCase& c, Trace<bnd::Bounded>& t, unsigned threads,
                     const EmpiricalParams& p, const std::vector<bool>& stages) {
  std::vector<std::vector<double>> dev(t.size());
  for (std::size_t s = 0; s < t.size(); ++s) dev[s].assign(t[s].values.size(), 0.0);
  const bool bf16 = c.precision.decl.streams == bnd::Format::bf16;
  for (int k = 0; k < p.samples; ++k) {
    const auto ens = evaluate_op<sr::sr32>(c, threads, [&](std::size_t blk) {
      sr::seed(c.seed * 1000003u + std::uint64_t(k) * 7919u + blk);
      sr::bf16_storage = bf16;
      return 0;
    });
    for (std::size_t s = 0; s < t.size(); ++s)
      for (std::size_t i = 0; i < t[s].values.size(); ++i) {
        const double d = std::fabs(double(ens[s].values[i].v) - t[s].values[i].v);
        dev[s][i] = std::isnan(d) ? HUGE_VAL : std::max(dev[s][i], d);
      }
  }
  const bnd::Model m = precision_model(c.precision);
  for (std::size_t s = 0; s < t.size(); ++s) {
    if (!stages[s]) continue;
    for (std::size_t i = 0; i < t[s].values.size(); ++i) {
      auto& b = t[s].values[i];
      const double floor = 4 * m.u * std::fabs(b.v) + m.eta;
      b.e = std::min(b.e, p.safety * dev[s][i] + floor);
    }
  }
}

}  // namespace

namespace {

std::string layer_prefix(const OpCase& c, std::size_t l) {
  return c.op == Op::stack ? "L" + std::to_string(l) + "." : "";
}

struct RoutingPlan {
  std::vector<std::vector<int>> forced;           // per layer [N, K], -1: the oracle's own
  std::vector<std::vector<std::size_t>> unknown;  // per layer, tokens to mark undecidable
  bool any_forced = false;
};

RoutingPlan plan_routing(const OpCase& c, const std::vector<ref::Routing<bnd::Bounded>>& routings,
                         const Trace<float>* kernel) {
  const std::size_t N = c.tokens, K = std::size_t(c.block.top_k);
  RoutingPlan plan;
  plan.forced.assign(routings.size(), std::vector<int>(N * K, -1));
  plan.unknown.assign(routings.size(), {});
  // The FFN's output captured: no routing to decide.
  if (c.block.captured_sublayers) return plan;
  for (std::size_t l = 0; l < routings.size(); ++l) {
    const Stage<float>* chosen = nullptr;
    if (kernel)
      for (const auto& st : *kernel)
        if (st.name == layer_prefix(c, l) + "ffn.experts") chosen = &st;
    for (std::size_t t = 0; t < N; ++t) {
      bool decidable = true;
      for (std::size_t j = 0; j < K; ++j) {
        const auto& m = routings[l].margin[t * K + j];
        decidable = decidable && (m.v > m.e || (j + 1 == K && K == std::size_t(c.block.experts)));
      }
      if (decidable) continue;
      if (!chosen) {
        plan.unknown[l].push_back(t);
        continue;
      }
      bool differs = false;
      for (std::size_t j = 0; j < K; ++j)
        differs = differs || int(chosen->values[t * K + j]) != routings[l].chosen[t * K + j];
      if (!differs) continue;
      for (std::size_t j = 0; j < K; ++j)
        plan.forced[l][t * K + j] = int(chosen->values[t * K + j]);
      plan.any_forced = true;
    }
  }
  return plan;
}

// Everything downstream of an undecidable token's routing: in its layer the token's ffn.experts,
// ffn.out and x_out; in later layers and the final collapse, every token of its sequence
// (attention mixes positions).
void mark_undecidable(const OpCase& c, const RoutingPlan& plan, Trace<bnd::Bounded>& t) {
  const std::size_t T = c.tokens / c.batch;
  for (std::size_t l = 0; l < plan.unknown.size(); ++l)
    for (std::size_t tok : plan.unknown[l]) {
      const std::size_t seq = tok / T;
      bool later = false;
      for (auto& st : t) {
        const std::size_t per = st.values.size() / c.tokens;
        const std::string p = layer_prefix(c, l);
        const bool same_layer =
            st.name.rfind(p, 0) == 0 && (p.empty() || st.name.find('.') == p.size() - 1);
        if (same_layer &&
            (st.name == p + "ffn.experts" || st.name == p + "ffn.out" || st.name == p + "x_out")) {
          for (std::size_t i = tok * per; i < (tok + 1) * per; ++i) st.values[i].e = HUGE_VAL;
          if (st.name == p + "x_out") later = true;
          continue;
        }
        if (later)
          for (std::size_t i = seq * T * per; i < (seq + 1) * T * per; ++i)
            st.values[i].e = HUGE_VAL;
      }
    }
}

Trace<bnd::Bounded> block_oracle(const OpCase& c, const bnd::Model& m, const RoutingPlan* plan,
                                 std::vector<ref::Routing<bnd::Bounded>>* routings,
                                 const Trace<float>* anchor, unsigned threads = 1) {
  const std::vector<std::vector<int>> none;
  return evaluate_block<bnd::Bounded>(
      c, [&m](std::size_t) { return bnd::ModelScope(m); }, routings,
      plan && plan->any_forced ? plan->forced : none, anchor, threads);
}

}  // namespace

std::vector<std::vector<std::size_t>> undecidable_routing(const OpCase& c) {
  std::vector<ref::Routing<bnd::Bounded>> routings;
  block_oracle(c, precision_model(c.precision), nullptr, &routings, nullptr);
  return plan_routing(c, routings, nullptr).unknown;
}

Trace<bnd::Bounded> oracle_trace(const OpCase& c, unsigned threads, ErrorModel model,
                                 const EmpiricalParams& params, const Trace<float>* kernel) {
  // A backward's pieces outside the split take the probabilistic model as the forward's do; the
  // empirical ensemble does not model the backward (docs/semantics.md, "The backward ops").
  // A Block's backward anchored on the kernel's forward: its forward stages judged first, as the
  // forward op's are, always under the shipped semantics (a deviation the diagnosis tries is the
  // backward's: the forward's are the block op's to diagnose).
  if (op_spec(c.op).backward) {
    bnd::Model m = bnd::fp32();
    m.probabilistic = model == ErrorModel::probabilistic || model == ErrorModel::standard;
    Trace<bnd::Bounded> t;
    if (kernel && block_stages_of(c, *kernel)) {
      OpCase forward = c;
      forward.op = op_spec(c.op).forward;
      forward.cfg.sem = ref::Semantics{};
      forward.block.sem = ref::BlockSemantics{};
      t = oracle_trace(forward, threads, model, params, kernel);
    }
    for (auto& s : backward_trace(c, threads, m, kernel)) t.push_back(std::move(s));
    return t;
  }
  if (c.op == Op::block || c.op == Op::stack) {
    const bnd::Model rig = precision_model(c.precision);
    bnd::Model prob = rig;
    prob.probabilistic = true;
    std::vector<ref::Routing<bnd::Bounded>> routings;
    Trace<bnd::Bounded> t = block_oracle(c, rig, nullptr, &routings, kernel, threads);
    const RoutingPlan plan = plan_routing(c, routings, kernel);
    if (plan.any_forced) t = block_oracle(c, rig, &plan, nullptr, kernel, threads);
    if (model == ErrorModel::probabilistic || model == ErrorModel::standard) {
      const Trace<bnd::Bounded> p = block_oracle(c, prob, &plan, nullptr, kernel, threads);
      for (std::size_t s = 0; s < t.size(); ++s)
        if (model == ErrorModel::probabilistic ||
            standard_model(c.op, t[s].name) == ErrorModel::probabilistic)
          t[s] = p[s];
    }
    mark_undecidable(c, plan, t);
    return t;
  }
  auto probabilistic = [&] {
    bnd::Model m = precision_model(c.precision);
    m.probabilistic = true;
    return evaluate_op<bnd::Bounded>(c, threads, [&m](std::size_t) { return bnd::ModelScope(m); });
  };
  if (model == ErrorModel::probabilistic) return probabilistic();
  if (model == ErrorModel::standard) {
    Trace<bnd::Bounded> p = probabilistic();
    bool all = true;
    for (const auto& s : p) all = all && standard_model(c.op, s.name) == ErrorModel::probabilistic;
    if (all) return p;
    Trace<bnd::Bounded> t = oracle_trace(c, threads);
    for (std::size_t s = 0; s < t.size(); ++s)
      if (standard_model(c.op, t[s].name) == ErrorModel::probabilistic) t[s] = p[s];
    return t;
  }
  Trace<bnd::Bounded> t = oracle_trace(c, threads);
  if (model == ErrorModel::rigorous) return t;
  // The ensemble models fp32 arithmetic with fp32 or bf16 streams, only.
  bnd::Declaration d = c.precision.decl;
  if (d.streams == bnd::Format::bf16) d.streams = bnd::Format::fp32;
  d.inputs = d.weights = bnd::Format::fp32;  // stored values: the case holds them
  if (!(d == bnd::Declaration{})) return t;
  apply_empirical(c, t, threads, params, std::vector<bool>(t.size(), true));
  return t;
}

}  // namespace mhc::oracles
