// The linearised error bound of the Sinkhorn of the comb (bounded.hpp), and why it is a
// linearisation rather than a budget from Birkhoff's contraction coefficient (birkhoff.hpp):
// docs/semantics.md, "The Sinkhorn bound"; its size: bench/README.md, "The Sinkhorn bound".
#include <algorithm>
#include <cmath>

#include "mhc/oracles/bounded.hpp"

namespace mhc::bnd {

namespace {
// A relative perturbation of a line sum beyond this is not small: the linearisation's neglected
// terms are no longer below its own (docs/semantics.md, "The Sinkhorn bound").
constexpr double kLinear = 0x1p-10;

// sums[l]: the sum of line l of the n x n matrix m, a column or a row.
void line_sums(int n, bool column, const double* m, std::vector<double>& sums) {
  std::fill(sums.begin(), sums.end(), 0.0);
  for (int j = 0; j < n; ++j)
    for (int k = 0; k < n; ++k) sums[std::size_t(column ? k : j)] += m[std::size_t(j * n + k)];
}

// A division step's entries x_l, each rounded by up to eta / x_l relative near underflow, move
// their line's denominator (sum + eps) by at most n eta / (sum + eps) relative, whatever their
// sizes: the premise holds where every denominator is at least n eta / kLinear. (The softmax's row
// sums are at least 1: the max is subtracted.)
bool linearisable(const ref::Config& c, const ref::SinkhornTrace<double>& tr) {
  const int n = c.n;
  const double floor = n * model().eta / kLinear, eps = ref::hc_eps(c);
  std::vector<double> sums(static_cast<std::size_t>(n));
  for (std::size_t s = 1; s < tr.steps.size(); ++s) {
    line_sums(n, tr.steps[s].step == ref::SinkhornTrace<double>::Step::column,
              tr.steps[s - 1].matrix.data(), sums);
    for (const double sum : sums)
      if (!(sum + eps >= floor)) return false;
  }
  return true;
}

// The adjoint of every iterate, G <- (G - sum over the line of G y) / (line sum + eps) a division
// step from the comb's upstream gradient, within limit: the premise of a first-order bound on
// the Sinkhorn's gradient (bounded.hpp, sinkhorn_gradient_bounded).
bool adjoint_in_range(const ref::Config& c, const ref::SinkhornTrace<double>& tr,
                      const double* up_comb) {
  using Step = ref::SinkhornTrace<double>::Step;
  const int n = c.n;
  const std::size_t nn = std::size_t(n) * std::size_t(n);
  std::vector<double> G(up_comb, up_comb + nn), sums(nn / std::size_t(n)), gy(sums);
  const double eps = ref::hc_eps(c), limit = format_info(Format::fp32).max * kLinear;
  for (std::size_t s = tr.steps.size() - 1; s >= 1; --s) {
    const bool column = tr.steps[s].step == Step::column;
    const std::vector<double>& y = tr.steps[s].matrix;
    line_sums(n, column, tr.steps[s - 1].matrix.data(), sums);
    std::fill(gy.begin(), gy.end(), 0.0);
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) {
        const std::size_t e = std::size_t(j * n + k);
        gy[std::size_t(column ? k : j)] += G[e] * y[e];
      }
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) {
        const std::size_t e = std::size_t(j * n + k), l = std::size_t(column ? k : j);
        G[e] = (G[e] - gy[l]) / (sums[l] + eps);
        if (!(std::fabs(G[e]) <= limit)) return false;
      }
  }
  return true;
}

ref::SinkhornTrace<double> trace_of(const ref::Config& c, const double* logits) {
  ref::SinkhornTrace<double> tr;
  std::vector<double> out(std::size_t(c.n) * std::size_t(c.n));
  ref::sinkhorn(c, logits, out.data(), &tr);
  return tr;
}

}  // namespace

bool sinkhorn_linearisable(const ref::Config& c, const double* logits) {
  return linearisable(c, trace_of(c, logits));
}

bool sinkhorn_gradient_bounded(const ref::Config& c, const double* logits, const double* up_comb) {
  const ref::SinkhornTrace<double> tr = trace_of(c, logits);
  return linearisable(c, tr) && adjoint_in_range(c, tr, up_comb);
}

// For a deviating semantics (diagnosis only), the values follow it exactly and the bound is the
// same linearisation evaluated on its own intermediate matrices: the right size, not exact.
void sinkhorn(const ref::Config& c, const Bounded* logits, Bounded* C,
              ref::SinkhornTrace<Bounded>* trace) {
  using Step = ref::SinkhornTrace<double>::Step;
  const Model& m = model();
  const int n = c.n;
  const std::size_t nn = std::size_t(n) * std::size_t(n);
  // Line sums of n terms: gamma_{n-1} (the probabilistic constant is smaller only beyond
  // lambda^2 + 1 terms, and would need its premise checked, see bounded.hpp).
  const double u = m.u, eps = ref::hc_eps(c), g = gamma(double(n - 1), u);

  std::vector<double> L(nn), out(nn);
  for (std::size_t i = 0; i < nn; ++i) L[i] = logits[i].v;
  ref::SinkhornTrace<double> tr;
  ref::sinkhorn(c, L.data(), out.data(), &tr);
  const std::size_t S = tr.steps.size();  // softmax, column, (row, column) * (iters - 1)
  auto fill_trace = [&] {
    if (trace)
      for (const auto& st : tr.steps) {
        typename ref::SinkhornTrace<Bounded>::Entry e;
        e.step = static_cast<ref::SinkhornTrace<Bounded>::Step>(st.step);
        e.row_sums.assign(st.row_sums.begin(), st.row_sums.end());
        e.col_sums.assign(st.col_sums.begin(), st.col_sums.end());
        e.matrix.assign(st.matrix.begin(), st.matrix.end());
        trace->steps.push_back(std::move(e));
      }
  };
  // A logit with no bound may be inf or NaN in the kernel (its mixes overflowed): exp(l - max)
  // is then NaN, even where the exact entry cannot depend on it (n = 1, whose comb is 1).
  const bool unbounded_logit =
      std::any_of(logits, logits + nn, [](const Bounded& l) { return !std::isfinite(l.e); });
  if (unbounded_logit || !linearisable(c, tr)) {
    for (std::size_t o = 0; o < nn; ++o) C[o] = Bounded(out[o], HUGE_VAL);
    fill_trace();
    return;
  }

  // Relative rounding of an entry of value x whose magnitude may sit near fp32's underflow.
  auto tiny = [&](double x) { return x > 0 ? m.eta / x : HUGE_VAL; };

  // Without the max subtraction (a deviation) exp(L) itself can overflow fp32; the row sums then
  // give Inf/Inf and everything after is NaN: no bound at all.
  if (!c.sem.max_subtraction)
    for (int j = 0; j < n; ++j) {
      double rowsum = 0;
      for (int k = 0; k < n; ++k)
        rowsum += std::exp(L[std::size_t(j * n + k)] + logits[j * n + k].e);
      if (rowsum * (1 + m.k_exp * u) > m.big) {
        for (std::size_t o = 0; o < nn; ++o) C[o] = Bounded(out[o], HUGE_VAL);
        return;
      }
    }
  const std::vector<double> b_add(nn, u), b_div(nn, g + m.k_div * u);
  // Step 0's sources: exp(L - max) with the logits' bounds, the subtraction's and exp's rounding.
  std::vector<double> b_exp(nn), P(nn);
  for (int j = 0; j < n; ++j) {
    int arg = 0;
    for (int k = 1; k < n; ++k)
      if (L[std::size_t(j * n + k)] > L[std::size_t(j * n + arg)]) arg = k;
    const double mx = L[std::size_t(j * n + arg)], e_mx = logits[j * n + arg].e;
    double rowsum = 0;
    for (int k = 0; k < n; ++k) rowsum += std::exp(L[std::size_t(j * n + k)] - mx);
    for (int k = 0; k < n; ++k) {
      const std::size_t e = std::size_t(j * n + k);
      const double diff_err = logits[e].e + (k == arg ? 0 : e_mx) + u * std::fabs(L[e] - mx);
      P[e] = std::exp(L[e] - mx) / rowsum;  // the softmax before + eps
      b_exp[e] = std::expm1(diff_err) + m.k_exp * u + tiny(P[e]);
    }
  }

  // Per division step s >= 1: its rounding per entry, and the weights w = before / (line sum +
  // eps) of its linearised map D -> D - (sum over the line of w D). Independent of the output.
  std::vector<double> b(S * nn), w(S * nn);
  std::vector<char> is_col(S);
  std::vector<double> sums(static_cast<std::size_t>(n));
  for (std::size_t s = 1; s < S; ++s) {
    const auto& before = tr.steps[s - 1].matrix;
    const bool column = tr.steps[s].step == Step::column;
    is_col[s] = column;
    line_sums(n, column, before.data(), sums);
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) {
        const std::size_t e = std::size_t(j * n + k);
        const double Sl = sums[std::size_t(column ? k : j)];
        b[s * nn + e] = g * Sl / (Sl + eps) + u + m.k_div * u + tiny(tr.steps[s].matrix[e]);
        w[s * nn + e] = before[e] / (Sl + eps);
      }
  }

  std::vector<double> r(nn), rs(static_cast<std::size_t>(n));
  for (std::size_t o = 0; o < nn; ++o) {
    std::fill(r.begin(), r.end(), 0.0);
    r[o] = 1;
    double beta = 0;
    auto local = [&](const double* bs) {
      for (std::size_t e = 0; e < nn; ++e)
        if (r[e] != 0) beta += std::fabs(r[e]) * bs[e];  // an entry that cannot matter may be 0
    };
    for (std::size_t s = S - 1; s >= 1; --s) {
      local(&b[s * nn]);
      const bool column = is_col[s];
      line_sums(n, column, r.data(), rs);
      for (int j = 0; j < n; ++j)
        for (int k = 0; k < n; ++k) {
          const std::size_t e = std::size_t(j * n + k);
          r[e] -= w[s * nn + e] * rs[std::size_t(column ? k : j)];
        }
    }
    // Step 0 backwards: C = P + eps, P = E / rowsum(E), E = exp(L - max).
    local(b_add.data());
    for (std::size_t e = 0; e < nn; ++e) r[e] *= P[e] / (P[e] + eps);
    local(b_div.data());
    line_sums(n, false, r.data(), rs);
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k)
        r[std::size_t(j * n + k)] -= P[std::size_t(j * n + k)] * rs[std::size_t(j)];
    local(b_exp.data());
    const double v = out[o];
    C[o] = Bounded(v, v * std::expm1(beta) + 64 * u64 * v + m.eta);
  }
  fill_trace();
}

}  // namespace mhc::bnd
