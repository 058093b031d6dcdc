// The asymptotic theory of the comb's Sinkhorn with hc_eps in every division (docs/semantics.md,
// "Sinkhorn convergence"): its limit, the rate at which it is approached, and the observed rate
// to hold it against. Dense linear algebra by Eigen, in double or in MPFR.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mhc/reference/config.hpp"

namespace mhc::oracles {

struct SinkhornTheory {
  bool ok = false;
  std::string why;  // what failed, when not ok
  int n = 0;
  double eps = 0;
  std::vector<double> limit;     // P, the doubly stochastic scaling of the start A, [j*n + k]
  std::vector<double> singular;  // of P, largest first (the first is 1)
  double knight = 0;             // sigma_2(P)^2: the rate without eps (Knight 2008)
  double rate = 0;               // largest eigenvalue of the round's Jacobian, gauge removed
  double rate_closed = 0;        // the same from sigma_2((1 - eps) P) in closed form
  double next = 0;               // the largest eigenvalue below rate (what decays faster)
  std::vector<double> modes;     // every eigenvalue of the round's Jacobian, gauge removed,
                                 // largest first (modes[0] = rate)
  double floor = 0;              // what max |line sum - 1| after a column division tends to
  int newton = 0;                // Newton steps to the limit
  double limit_residual = 0;     // max |line sum - 1| of the computed limit
};

// The theory of the iteration that starts from A (the softmax's output, eps added: positive,
// n x n) in double, or in MPFR with kTheoryDigits decimal digits; results rounded to double. Not
// ok when A has no doubly stochastic scaling that Newton's method finds.
inline constexpr unsigned kTheoryDigits = 50;
SinkhornTheory sinkhorn_theory(const std::vector<double>& A, int n, double eps, bool mpfr = false);

// The rate observed in double: q_K = e_K / e_{K-1}, e_K = ||row sums - (1 - eps)||_2 after the
// K-th column division, iterated from A until q_K is within 1e-3 of its eigenvalue's gap by the
// theory's own error, e_K reaches rounding level, or max_rounds. q_K tends to the eigenvalue of
// the slowest mode the start excites: th.rate, or a faster one where a symmetry of the start (two
// equal rows) keeps the slowest out.
struct RateObservation {
  int round = 0;
  double ratio = 0;
  double error = 0;      // |ratio - eigenvalue| the theory allows at that round (3x its estimate)
  bool settled = false;  // error below 1e-3 of 1 - the eigenvalue
  int nearest = 0;       // the eigenvalue (th.modes) nearest to ratio
  int mode = -1;         // nearest, when within error of ratio; -1: none
  // A settled ratio nearest the rate and not within the theory's error of it. Near a faster mode
  // no verdict: a slower mode, excited weakly, may be taking over, which no error bound sees
  // coming.
  bool disagrees() const;
};
RateObservation observe_rate(const std::vector<double>& A, int n, double eps,
                             const SinkhornTheory& th, int max_rounds = 200000);

// max over rows and columns of |line sum - target| of an n x n matrix, in double.
template <class T>
double line_distance(const T* C, int n, double target = 1) {
  double d = 0;
  for (int j = 0; j < n; ++j) {
    double r = 0, s = 0;
    for (int k = 0; k < n; ++k) {
      r += double(C[j * n + k]);
      s += double(C[k * n + j]);
    }
    d = std::max({d, std::fabs(r - target), std::fabs(s - target)});
  }
  return d;
}

// The start A of the comb's Sinkhorn from its logits: the softmax's output, eps added.
std::vector<double> sinkhorn_start(const ref::Config& c, const double* logits);

// The comb's Sinkhorn (c's hc_eps and placements) in double, a round at a time, as ref::sinkhorn
// runs it: round 1 is the softmax and the first column division, each later round a row and a
// column division.
struct SinkhornRounds {
  SinkhornRounds(const ref::Config& c, const double* logits);       // from the logits
  SinkhornRounds(const ref::Config& c, std::vector<double> start);  // from the softmax's output
  void next();
  ref::Config c;
  std::vector<double> C, col;  // the iterate [j*n + k], scratch
  int done = 1;                // rounds done
};

// The rounds needed for a distance from the limit (line_distance to 1 - eps) <= tol, predicted
// from the distance r0 after round k0 and the theory's rate; -1 when the rate is 1 or not finite.
long rounds_needed(double r0, int k0, double tol, double rate);

// The composite residual mapping of combs applied in order, H_s = C_s^T ... C_1^T (a comb carries
// stream j into stream k: x' = C^T x), after each: its largest absolute row sum (the forward
// signal's gain), column sum (the backward gradient's) and spectral norm. combs[s] is n x n,
// [j*n + k]; in double, or in MPFR with kTheoryDigits digits (results rounded to double).
struct Gain {
  double forward = 0, backward = 0, spectral = 0;
};
std::vector<Gain> composite_gains(const std::vector<const double*>& combs, int n,
                                  bool mpfr = false);

}  // namespace mhc::oracles
