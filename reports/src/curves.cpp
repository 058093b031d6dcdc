#include "mhc/reports/curves.hpp"

#include <algorithm>
#include <cmath>

#include "mhc/reference/mhc.hpp"

namespace mhc::reports {

namespace {

const oracles::Stage<float>* find(const oracles::Trace<float>& t, const std::string& name) {
  for (const auto& s : t)
    if (s.name == name) return &s;
  return nullptr;
}

double residual(int n, const std::vector<double>& row_sums, const std::vector<double>& col_sums) {
  double r = 0;
  for (int i = 0; i < n; ++i)
    r = std::max(
        {r, std::fabs(row_sums[std::size_t(i)] - 1), std::fabs(col_sums[std::size_t(i)] - 1)});
  return r;
}

}  // namespace

SinkhornCurve sinkhorn_curve(const ref::SinkhornTrace<double>& trace, int n, std::string label) {
  SinkhornCurve curve;
  curve.label = std::move(label);
  for (const auto& e : trace.steps) curve.residual.push_back(residual(n, e.row_sums, e.col_sums));
  curve.kernel_residual = std::nan("");
  return curve;
}

std::optional<SinkhornCurve> sinkhorn_curve(const oracles::OpCase& c,
                                            const oracles::Trace<float>& got, std::size_t token) {
  const int n = c.cfg.n, M = c.cfg.mix();
  if (token >= c.tokens || !c.params.count("hc_scale") || !c.params.count("hc_base"))
    return std::nullopt;
  const oracles::Stage<float>* comb = find(got, "comb");
  if (!comb || comb->values.size() < (token + 1) * std::size_t(n * n)) return std::nullopt;
  // The logits the kernel's comb came from: the case's mixes, else the kernel's own.
  std::vector<double> mix(std::size_t(M), 0.0);
  if (c.inputs.count("mixes")) {
    const auto& m = c.input("mixes").data;
    std::copy(m.begin() + std::ptrdiff_t(token * std::size_t(M)),
              m.begin() + std::ptrdiff_t((token + 1) * std::size_t(M)), mix.begin());
  } else if (const auto* m = find(got, "mixes");
             m && m->values.size() >= (token + 1) * std::size_t(M)) {
    std::copy(m->values.begin() + std::ptrdiff_t(token * std::size_t(M)),
              m->values.begin() + std::ptrdiff_t((token + 1) * std::size_t(M)), mix.begin());
  } else {
    return std::nullopt;
  }
  const auto& scale = c.param("hc_scale").data;
  const auto& base = c.param("hc_base").data;
  const std::size_t nn = std::size_t(n);
  std::vector<double> pre(nn), post(nn), C(nn * nn);
  ref::SinkhornTrace<double> trace;
  ref::split_sinkhorn(c.cfg, mix.data(), scale.data(), base.data(), pre.data(), post.data(),
                      C.data(), &trace);
  SinkhornCurve curve = sinkhorn_curve(trace, n, "token " + std::to_string(token));
  std::vector<double> rows(std::size_t(n), 0.0), cols(std::size_t(n), 0.0);
  for (int j = 0; j < n; ++j)
    for (int k = 0; k < n; ++k) {
      const double v = double(comb->values[token * std::size_t(n * n) + std::size_t(j * n + k)]);
      rows[std::size_t(j)] += v;
      cols[std::size_t(k)] += v;
    }
  curve.kernel_residual = residual(n, rows, cols);
  return curve;
}

}  // namespace mhc::reports
