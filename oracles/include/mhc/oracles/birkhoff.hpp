// Birkhoff's contraction coefficient of a positive matrix (Franklin & Lorenz 1989): the rate at
// which Sinkhorn's scalings converge in Hilbert's projective metric.
#pragma once

#include <cmath>
#include <vector>

namespace mhc::oracles {

// Delta(A) = max over i, j, k, l of log(A[i,k] A[j,l] / (A[i,l] A[j,k])); infinite when an entry
// is 0 (A[j*n + k], n x n).
inline double projective_diameter(const std::vector<double>& A, int n) {
  double worst = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k)
        for (int l = 0; l < n; ++l) {
          const double num = A[std::size_t(i * n + k)] * A[std::size_t(j * n + l)];
          const double den = A[std::size_t(i * n + l)] * A[std::size_t(j * n + k)];
          if (den == 0 || num == 0) return HUGE_VAL;
          worst = std::max(worst, std::log(num / den));
        }
  return worst;
}

// kappa(A) = tanh(Delta(A) / 4), in [0, 1): every Sinkhorn iterate D1 A D2 has the same kappa,
// so one number describes the convergence of the whole run (residual ~ kappa^(2k)).
inline double birkhoff_kappa(const std::vector<double>& A, int n) {
  return std::tanh(projective_diameter(A, n) / 4);
}

}  // namespace mhc::oracles
