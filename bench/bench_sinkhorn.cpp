// The cost of the Sinkhorn theory per case (docs/semantics.md, "Sinkhorn convergence"): the
// limit, rates and eigenvalues in double and in MPFR (50 digits), and the observed rate, on
// starts of the fuzz's near-permutation and bell families (n = 4, hc_eps = 1e-6), one thread.
// Usage: mhc-bench-sinkhorn [cases] [repeats]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mhc/oracles/random.hpp"
#include "mhc/oracles/sinkhorn_theory.hpp"
#include "mhc/reference/mhc.hpp"
#include "timing.hpp"

using namespace mhc;

int main(int argc, char** argv) {
  const int cases = argc > 1 ? std::atoi(argv[1]) : 200;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  const int n = 4;
  ref::Config c;
  c.n = n;
  c.hc_eps = 1e-6;
  std::vector<std::vector<double>> starts;
  oracles::Rng rng(1);
  for (int i = 0; i < cases; ++i) {
    std::vector<double> L(std::size_t(n * n)), C(L.size());
    for (auto& v : L) v = rng.normal();
    if (i % 2)  // near a permutation: the slow regime
      for (int j = 0; j < n; ++j) L[std::size_t(j * n + (j + i) % n)] += rng.uniform(2, 10);
    ref::SinkhornTrace<double> tr;
    ref::sinkhorn(c, L.data(), C.data(), &tr);
    starts.push_back(tr.steps.front().matrix);
  }
  std::vector<oracles::SinkhornTheory> th(starts.size());
  const double t_double = bench::median_seconds(repeats, [&] {
    for (std::size_t i = 0; i < starts.size(); ++i)
      th[i] = oracles::sinkhorn_theory(starts[i], n, c.hc_eps);
  });
  const double t_mpfr = bench::median_seconds(repeats, [&] {
    for (const auto& A : starts) (void)oracles::sinkhorn_theory(A, n, c.hc_eps, true);
  });
  int settled = 0;
  double rounds = 0, largest = 0;
  const double t_observe = bench::median_seconds(repeats, [&] {
    settled = 0;
    rounds = 0;
    largest = 0;
    for (std::size_t i = 0; i < starts.size(); ++i) {
      const auto ob = oracles::observe_rate(starts[i], n, c.hc_eps, th[i]);
      settled += ob.settled;
      rounds += ob.round;
      if (ob.settled)
        largest = std::max(largest, std::fabs(ob.ratio - th[i].rate) / (1 - th[i].rate));
    }
  });
  std::printf(
      "%d starts (half near a permutation), n=4, hc_eps=1e-6, one thread, median of %d:\n"
      "  theory in double: %8.1f us per case\n"
      "  theory in MPFR:   %8.1f us per case\n"
      "  observed rate:    %8.1f us per case (%.0f rounds on average; %d of %d settled, largest "
      "|observed - predicted| / (1 - predicted) %.2g)\n",
      cases, repeats, 1e6 * t_double / cases, 1e6 * t_mpfr / cases, 1e6 * t_observe / cases,
      rounds / cases, settled, cases, largest);
  return 0;
}
