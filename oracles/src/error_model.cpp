#include "mhc/oracles/error_model.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "mhc/oracles/stochastic.hpp"

namespace mhc::sr {
// bf16 storage of stream tensors in the stochastic ensemble: to nearest, as a kernel stores.
inline sr32 stored_bf16(const sr32& x) {
  float f = x.v;
  if (std::isnan(f)) return x;
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&f, &u, 4);
  return sr32(f);
}
thread_local bool bf16_storage = false;
inline sr32 stored(const sr32& x) { return bf16_storage ? stored_bf16(x) : x; }
}  // namespace mhc::sr

namespace mhc::oracles {

std::string error_model_name(ErrorModel m) {
  switch (m) {
    case ErrorModel::rigorous: return "rigorous";
    case ErrorModel::probabilistic: return "probabilistic";
    case ErrorModel::empirical: return "empirical";
    case ErrorModel::standard: return "standard";
  }
  return "?";
}

ErrorModel error_model_from_name(const std::string& name) {
  for (ErrorModel m : {ErrorModel::rigorous, ErrorModel::probabilistic, ErrorModel::empirical,
                       ErrorModel::standard})
    if (error_model_name(m) == name) return m;
  throw std::invalid_argument("unknown error model '" + name +
                              "' (rigorous, probabilistic, empirical, standard)");
}

// Chosen from measurements (bench/README.md: mhc-bench-tightness on the cpu kernel at the V4.1
// sizes; the mutation campaigns of `mhc-verify mutants`, small random and production configs):
// - mixes, and pre/post/comb computed from it (ops mixes and boundary): probabilistic. Their
//   error is dominated by the n*d = 20480-term projection, where gamma_n is ~17x the
//   lambda sqrt(n) u of Higham & Mary: median observed/bound 9e-5 (rigorous) against 1.6e-3, the
//   largest legitimate ratio 0.04, and no legitimate kernel flagged in any campaign.
// - everything else: rigorous. The reductions there are either short (n or n+1 terms, where
//   the two bounds coincide) or same-sign sums of squares (rmsnorm), where rounding to nearest
//   can be biased and the independence behind lambda sqrt(n) u is doubtful; the rigorous
//   bound's median ratio there is 0.004-0.08 already.
// - empirical: never the default. It samples only the roundings of the reference's own formula,
//   so legitimate reformulations fall outside it (tanh-form sigmoid: ratio 1e5 at the
//   production values), and its safety factor is a guess about the tail.
ErrorModel standard_model(Op op, const std::string& stage) {
  const bool from_projection =
      (op == Op::mixes || op == Op::boundary) &&
      (stage == "mixes" || stage == "pre" || stage == "post" || stage == "comb");
  return from_projection ? ErrorModel::probabilistic : ErrorModel::rigorous;
}

namespace {

// Replaces each bound by min(rigorous, safety * max_k |sr_k - v| + 4 u |v| + eta).
void apply_empirical(const OpCase& c, Trace<bnd::Bounded>& t, unsigned threads,
                     const EmpiricalParams& p, const std::vector<bool>& stages) {
  std::vector<std::vector<double>> dev(t.size());
  for (std::size_t s = 0; s < t.size(); ++s) dev[s].assign(t[s].values.size(), 0.0);
  const bool bf16 = c.precision == "bf16";
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
  const bnd::Model m = bnd::model_by_name(c.precision);
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

Trace<bnd::Bounded> oracle_trace(const OpCase& c, unsigned threads, ErrorModel model,
                                 const EmpiricalParams& params) {
  auto probabilistic = [&] {
    bnd::Model m = bnd::model_by_name(c.precision);
    m.probabilistic = true;
    return evaluate_op<bnd::Bounded>(c, threads, [&m](std::size_t) { return bnd::ModelScope(m); });
  };
  if (model == ErrorModel::probabilistic) return probabilistic();
  Trace<bnd::Bounded> t = oracle_trace(c, threads);
  if (model == ErrorModel::rigorous) return t;
  if (model == ErrorModel::standard) {
    bool any = false;
    for (const auto& s : t) any = any || standard_model(c.op, s.name) == ErrorModel::probabilistic;
    if (!any) return t;
    const Trace<bnd::Bounded> p = probabilistic();
    for (std::size_t s = 0; s < t.size(); ++s)
      if (standard_model(c.op, t[s].name) == ErrorModel::probabilistic) t[s] = p[s];
    return t;
  }
  if (c.precision == "tf32") return t;  // the ensemble models fp32 products only
  apply_empirical(c, t, threads, params, std::vector<bool>(t.size(), true));
  return t;
}

}  // namespace mhc::oracles
