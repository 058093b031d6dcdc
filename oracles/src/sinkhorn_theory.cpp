#include "mhc/oracles/sinkhorn_theory.hpp"

#include <boost/multiprecision/eigen.hpp>
#include <boost/multiprecision/mpfr.hpp>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>

#include "mhc/reference/mhc.hpp"

namespace mhc::oracles {
namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

// The doubly stochastic scaling diag(e^x) A diag(e^y) by Newton's method on the convex
// f(x, y) = sum_jk A_jk e^(x_j + y_k) - sum x - sum y (its gradient: the line sums minus 1), with
// y_(n-1) = 0 fixing the gauge and a backtracking line search; started from ten Sinkhorn rounds.
template <class T>
bool scale(const Mat<T>& A, T tol, Mat<T>& P, int& steps) {
  using std::abs;
  using std::exp;
  using std::log;
  const int n = int(A.rows());
  Vec<T> x = Vec<T>::Zero(n), y = Vec<T>::Zero(n);
  auto scaled = [&](const Vec<T>& xs, const Vec<T>& ys) {
    Mat<T> M(n, n);
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) M(j, k) = A(j, k) * exp(xs(j) + ys(k));
    return M;
  };
  for (int it = 0; it < 10; ++it) {
    Mat<T> M = scaled(x, y);
    for (int j = 0; j < n; ++j) x(j) -= log(M.row(j).sum());
    M = scaled(x, y);
    for (int k = 0; k < n; ++k) y(k) -= log(M.col(k).sum());
  }
  const T shift = y(n - 1);  // the gauge: y_(n-1) = 0
  x.array() += shift;
  y.array() -= shift;
  auto objective = [&](const Vec<T>& xs, const Vec<T>& ys) {
    return T(scaled(xs, ys).sum() - xs.sum() - ys.sum());
  };
  const int m = 2 * n - 1;
  for (steps = 0; steps < 200; ++steps) {
    const Mat<T> M = scaled(x, y);
    Vec<T> g(m);
    Mat<T> H = Mat<T>::Zero(m, m);
    T worst(0);
    for (int j = 0; j < n; ++j) {
      g(j) = M.row(j).sum() - T(1);
      H(j, j) = M.row(j).sum();
      worst = std::max(worst, T(abs(g(j))));
    }
    for (int k = 0; k < n; ++k) {
      const T ck = M.col(k).sum() - T(1);
      worst = std::max(worst, T(abs(ck)));
      if (k == n - 1) continue;
      g(n + k) = ck;
      H(n + k, n + k) = M.col(k).sum();
      for (int j = 0; j < n; ++j) H(j, n + k) = H(n + k, j) = M(j, k);
    }
    if (worst <= tol) {
      P = M;
      return true;
    }
    const Vec<T> d = -H.ldlt().solve(g);
    // Near the scaling f changes below its own rounding: a step that shrinks the gradient is
    // taken then.
    auto gradient = [&](const Vec<T>& xs, const Vec<T>& ys) {
      const Mat<T> Ms = scaled(xs, ys);
      T w(0);
      for (int i = 0; i < n; ++i)
        w = std::max({w, T(abs(Ms.row(i).sum() - T(1))), T(abs(Ms.col(i).sum() - T(1)))});
      return w;
    };
    const T f0 = objective(x, y), slope = g.dot(d);
    T t(1);
    for (int back = 0; back < 60; ++back, t /= 2) {
      Vec<T> xs = x + t * d.head(n), ys = y;
      ys.head(n - 1) += t * d.tail(n - 1);
      if (objective(xs, ys) <= f0 + T(1e-4) * t * slope || gradient(xs, ys) < worst / 2 ||
          back == 59) {
        x = xs;
        y = ys;
        break;
      }
    }
  }
  return false;
}

template <class T>
SinkhornTheory theory(const std::vector<double>& a, int n, double eps, T tol) {
  using std::abs;
  using std::sqrt;
  SinkhornTheory th;
  th.n = n;
  th.eps = eps;
  th.floor = eps;
  Mat<T> A(n, n);
  for (int j = 0; j < n; ++j)
    for (int k = 0; k < n; ++k) {
      const double v = a[std::size_t(j * n + k)];
      if (!(v > 0) || !std::isfinite(v)) {
        th.why = "the start has an entry that is not positive and finite";
        return th;
      }
      A(j, k) = T(v);
    }
  Mat<T> P;
  if (!scale(A, tol, P, th.newton)) {
    th.why = "Newton's method found no doubly stochastic scaling in 200 steps";
    return th;
  }
  th.limit.resize(std::size_t(n * n));
  T worst(0);
  for (int j = 0; j < n; ++j) {
    worst = std::max({worst, T(abs(P.row(j).sum() - T(1))), T(abs(P.col(j).sum() - T(1)))});
    for (int k = 0; k < n; ++k) th.limit[std::size_t(j * n + k)] = double(P(j, k));
  }
  th.limit_residual = double(worst);
  const Eigen::JacobiSVD<Mat<T>> svd(P);
  for (int i = 0; i < n; ++i) th.singular.push_back(double(svd.singularValues()(i)));
  th.ok = true;
  if (n < 2) return th;
  const T s2 = svd.singularValues()(1), e(eps);
  th.knight = double(s2 * s2);
  // A round (a row division, then a column division) in log-scalings at its fixed point
  // M = (1 - eps) P: dx' = eps dx - M dy, dy' = eps dy - M^T dx'.
  const Mat<T> M = (T(1) - e) * P;
  const T sigma = (T(1) - e) * s2;
  th.rate_closed = double((T(2) * e + sigma * sigma + sigma * sqrt(sigma * sigma + T(4) * e)) / 2);
  const Mat<T> I = Mat<T>::Identity(n, n);
  Mat<T> J(2 * n, 2 * n);
  J << e * I, -M, -e * M.transpose(), e * I + M.transpose() * M;
  // The gauge (x + t, y - t) is an eigenvector with eigenvalue 1 that moves no entry: J on the
  // quotient by it, in an orthonormal basis of its complement.
  Mat<T> G = Mat<T>::Identity(2 * n, 2 * n);
  for (int i = 0; i < 2 * n; ++i) G(i, 0) = i < n ? T(1) : T(-1);
  const Mat<T> Q = Eigen::HouseholderQR<Mat<T>>(G).householderQ();
  const Mat<T> basis = Q.rightCols(2 * n - 1);
  const Mat<T> Jq = basis.transpose() * J * basis;
  const Eigen::EigenSolver<Mat<T>> es(Jq, false);
  for (int i = 0; i < Jq.rows(); ++i) th.modes.push_back(double(abs(es.eigenvalues()(i))));
  std::sort(th.modes.rbegin(), th.modes.rend());
  th.rate = th.modes[0];
  for (double m : th.modes)
    if (m < th.rate * (1 - 1e-9)) {
      th.next = m;
      break;
    }
  return th;
}

template <class T>
std::vector<Gain> gains(const std::vector<const double*>& combs, int n) {
  using std::abs;
  std::vector<Gain> out;
  Mat<T> H = Mat<T>::Identity(n, n), C(n, n);
  for (const double* c : combs) {
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) C(j, k) = T(c[j * n + k]);
    H = (C.transpose() * H).eval();
    const Mat<T> a = H.cwiseAbs();
    Gain g;
    g.forward = double(a.rowwise().sum().maxCoeff());
    g.backward = double(a.colwise().sum().maxCoeff());
    g.spectral = double(Eigen::JacobiSVD<Mat<T>>(H).singularValues()(0));
    out.push_back(g);
  }
  return out;
}

}  // namespace

std::vector<Gain> composite_gains(const std::vector<const double*>& combs, int n, bool mpfr) {
  if (!mpfr) return gains<double>(combs, n);
  namespace bmp = boost::multiprecision;
  return gains<bmp::number<bmp::mpfr_float_backend<kTheoryDigits>, bmp::et_off>>(combs, n);
}

SinkhornTheory sinkhorn_theory(const std::vector<double>& A, int n, double eps, bool mpfr) {
  if (!mpfr) return theory<double>(A, n, eps, 64 * std::numeric_limits<double>::epsilon());
  namespace bmp = boost::multiprecision;
  using mp = bmp::number<bmp::mpfr_float_backend<kTheoryDigits>, bmp::et_off>;
  return theory<mp>(A, n, eps, mp("1e-42"));
}

bool RateObservation::disagrees() const {
  return settled && nearest == 0 && mode < 0;
}

std::vector<double> sinkhorn_start(const ref::Config& c, const double* logits) {
  ref::SinkhornTrace<double> tr;
  std::vector<double> C(std::size_t(c.n * c.n));
  ref::sinkhorn(c, logits, C.data(), &tr);
  return tr.steps.front().matrix;
}

SinkhornRounds::SinkhornRounds(const ref::Config& cfg, const double* logits)
    : c(cfg), C(std::size_t(cfg.n * cfg.n)), col(std::size_t(cfg.n)) {
  ref::Config one = c;
  one.iters = 1;
  ref::sinkhorn(one, logits, C.data());
}

SinkhornRounds::SinkhornRounds(const ref::Config& cfg, std::vector<double> start)
    : c(cfg), C(std::move(start)), col(std::size_t(cfg.n)) {
  ref::detail::divide_columns(c, C.data(), col.data());
}

void SinkhornRounds::next() {
  ref::detail::divide_rows(c, C.data());
  ref::detail::divide_columns(c, C.data(), col.data());
  ++done;
}

RateObservation observe_rate(const std::vector<double>& A, int n, double eps,
                             const SinkhornTheory& th, int max_rounds) {
  RateObservation ob;
  if (!th.ok || n < 2) return ob;
  ref::Config c;
  c.n = n;
  c.hc_eps = eps;
  SinkhornRounds it(c, A);
  auto deviation = [&] {
    double s2 = 0;
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += it.C[std::size_t(j * n + k)];
      s2 += (s - (1 - eps)) * (s - (1 - eps));
    }
    return std::sqrt(s2);
  };
  // q_K tends to the eigenvalue of the slowest mode the start excites: the slowest (rate) unless
  // a symmetry of the start keeps it out. Near an eigenvalue lambda it moves geometrically with
  // factor mu = max(below / lambda, lambda, lambda / above), below and above the eigenvalues next
  // to it (the faster mode dies out by below / lambda a round relative to it, the quadratic
  // remainder by lambda; a slower mode excited weakly takes over by above / lambda): after round K
  // what is left is about D mu / (1 - mu), D the envelope of the changes |q_j - q_(j-1)|: their
  // largest times mu^(K - j) over the last three e-foldings of mu, so that a change small only
  // because q turns there (a dip lasts about one e-folding) does not pass for convergence.
  auto nearest = [&](double q) {
    std::size_t at = 0;
    for (std::size_t i = 1; i < th.modes.size(); ++i)
      if (std::fabs(th.modes[i] - q) < std::fabs(th.modes[at] - q)) at = i;
    return at;
  };
  const double u = std::numeric_limits<double>::epsilon() / 2;
  double e_prev = deviation(), q_prev = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> changes;  // |q_j - q_(j-1)|, j = 3 .. K
  for (int k = 2; k <= max_rounds; ++k) {
    it.next();
    const double e = deviation();
    const double q = e / e_prev;
    const std::size_t m = nearest(q);
    const double lambda = th.modes[m];
    double below = 0, above = 0;  // none: 0
    for (double v : th.modes) {
      if (v > lambda * (1 + 1e-9)) above = v;
      if (v < lambda * (1 - 1e-9)) {
        below = v;
        break;
      }
    }
    const double mu = std::max({below / lambda, lambda, above > 0 ? lambda / above : 0.0});
    // Each round's rounding (n u in a line sum) persists in the slow mode and decays with it:
    // ~ 16 n u / (1 - lambda) in e, carried into q relative to e.
    const double noise = 16 * n * u / ((1 - lambda) * e);
    if (!(e > 0) || noise > 1e-3 * (1 - lambda)) break;
    if (std::isfinite(q_prev)) {
      changes.push_back(std::fabs(q - q_prev));
      const std::size_t window =
          mu > 0 ? std::size_t(std::min(1e6, std::ceil(3 / -std::log(mu)))) + 1 : 1;
      double envelope = 0, w = 1;
      for (std::size_t j = changes.size(); j-- > 0 && changes.size() - j <= window; w *= mu)
        envelope = std::max(envelope, changes[j] * w);
      ob.round = k;
      ob.ratio = q;
      ob.error = 3 * (envelope * mu / (1 - mu) + noise);
      ob.nearest = int(m);
      ob.mode = std::fabs(q - lambda) <= ob.error ? int(m) : -1;
      // Settled: ten changes at least (in fewer rounds a mixture of fast modes can look settled),
      // the error small, and the changes shrinking, halved at least over half the window (a
      // slower mode taking over, weakly excited, makes them grow or stay).
      const std::size_t half = std::max<std::size_t>(window / 2, 5);
      if (changes.size() >= std::max<std::size_t>(window, 10) && ob.error <= 1e-3 * (1 - lambda) &&
          changes.back() <= 0.5 * changes[changes.size() - 1 - half]) {
        ob.settled = true;
        break;
      }
    }
    e_prev = e;
    q_prev = q;
  }
  return ob;
}

long rounds_needed(double r0, int k0, double tol, double rate) {
  if (r0 <= tol) return k0;
  if (!(rate < 1) || !(rate > 0)) return -1;
  return k0 + long(std::ceil(std::log(tol / r0) / std::log(rate)));
}

}  // namespace mhc::oracles
