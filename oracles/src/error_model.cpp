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

ErrorModel standard_model(Op, const std::string&) { return ErrorModel::rigorous; }

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
  if (model == ErrorModel::probabilistic) {
    bnd::Model m = bnd::model_by_name(c.precision);
    m.probabilistic = true;
    return evaluate_op<bnd::Bounded>(c, threads, [&m](std::size_t) { return bnd::ModelScope(m); });
  }
  Trace<bnd::Bounded> t = oracle_trace(c, threads);
  if (model == ErrorModel::rigorous || c.precision == "tf32") return t;
  std::vector<bool> stages(t.size(), model == ErrorModel::empirical);
  if (model == ErrorModel::standard)
    for (std::size_t s = 0; s < t.size(); ++s)
      stages[s] = standard_model(c.op, t[s].name) == ErrorModel::empirical;
  if (std::find(stages.begin(), stages.end(), true) != stages.end())
    apply_empirical(c, t, threads, params, stages);
  return t;
}

}  // namespace mhc::oracles
