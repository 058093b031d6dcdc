// Reverse-mode differentiation as a Scalar: run through the generic reference, each value records
// on a tape how it was computed (its parents and the partial derivatives with respect to them),
// and one backward sweep gives the gradient of any weighted sum of the outputs with respect to
// every input: the backward pass derived from the one reference, with every eps where the forward
// has it. Values in T (double; MPFR to certify the double one; bnd::Bounded; Var<double> for the
// first-order bound of a backward). docs/semantics.md, "The backward pass".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "mhc/reference/arith.hpp"

namespace mhc::rev {

template <class T>
struct Var;

// The sum of a node's n contributions: T's own reduction (compensated in double, any order for
// the bound-carrying type, left to right in float).
template <class T>
T accumulate(const T* terms, std::size_t n) {
  using ref::sum;
  return sum(terms, n);
}

// The record of one evaluation. A Tape is the current one of its thread from construction to
// destruction (they nest); Vars of T made meanwhile record on it.
template <class T>
class Tape {
 public:
  Tape() : prev_(current_) { current_ = this; }
  ~Tape() { current_ = prev_; }
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  static Tape* current() { return current_; }

  // fp32 overflow in the recorded program: off by default (the forward's recorded autograd, whose
  // fp32 evaluation meets 0 * inf wherever a sigmoid saturates, is not a kernel's form); on for
  // programs written as kernels write them (the split's closed forms).
  void check_overflow() { overflow_ = true; }
  bool overflow_checked() const { return overflow_; }
  bool overflowed(std::int64_t id) const {
    return id >= 0 && overflow_ && budget_[std::size_t(id)] == HUGE_VAL;
  }

  // An independent variable (an input or parameter to differentiate by); error: a bound on how
  // far the value a kernel holds may be from it (first_order() counts it as a budget).
  Var<T> input(const T& value, double error = 0) { return Var<T>(value, node({}, error)); }

  // A node with edges to its parents (index, partial); constants (index < 0) are left out.
  // budget: a bound on the rounding error of the node's own operation in fp32 (first_order()).
  // Checking overflow, it is infinite where the node may overflow, and then for every node
  // computed from it: an fp32 inf or NaN reaches its descendants whatever their partials (0 * inf).
  std::int64_t node(std::initializer_list<std::pair<std::int64_t, T>> edges, double budget = 0) {
    for (const auto& [p, d] : edges)
      if (p >= 0) {
        parent_.push_back(p);
        partial_.push_back(d);
        if (overflowed(p)) budget = HUGE_VAL;
      }
    start_.push_back(parent_.size());
    budget_.push_back(budget);
    return std::int64_t(start_.size()) - 1;
  }
  // A node with n edges given one at a time by edge(i) -> (index, partial).
  template <class Edge>
  std::int64_t node(std::size_t n, Edge edge, double budget = 0) {
    for (std::size_t i = 0; i < n; ++i) {
      auto [p, d] = edge(i);
      if (p >= 0) {
        parent_.push_back(p);
        partial_.push_back(std::move(d));
        if (overflowed(p)) budget = HUGE_VAL;
      }
    }
    start_.push_back(parent_.size());
    budget_.push_back(budget);
    return std::int64_t(start_.size()) - 1;
  }

  // The first-order rounding bound of each output when everything recorded is evaluated in fp32,
  // each operation rounding once within its budget: sum over nodes of |d out / d node| budget.
  // A node whose budgeted ancestry comes through one parent p has bound budget + |d node / d p|
  // bound(p) (one path: no signs to cancel), so chains (a weight's gradient, g r x_i for every i)
  // share their parent's bound; the other nodes (roots) are swept over their ancestors, down the
  // ids (a node's children come after it), kWidth roots at a time in one pass.
  std::vector<double> first_order(const std::vector<Var<T>>& outputs) const {
    const std::size_t N = start_.size();
    auto edges = [this](std::size_t i) {
      return std::pair<std::size_t, std::size_t>(i == 0 ? 0 : start_[i - 1], start_[i]);
    };
    std::vector<char> relevant(N, 0);  // a budget on the node or in its ancestry
    for (std::size_t i = 0; i < N; ++i) {
      relevant[i] = budget_[i] > 0;
      for (auto [e, end] = edges(i); e < end && !relevant[i]; ++e)
        relevant[i] = relevant[std::size_t(parent_[e])];
    }
    // The one relevant parent of node i and the sum of its partials (-1: none; -2: several).
    auto only_parent = [&](std::size_t i, double& partial) {
      std::int64_t only = -1;
      partial = 0;
      for (auto [e, end] = edges(i); e < end; ++e) {
        const std::int64_t p = parent_[e];
        if (!relevant[std::size_t(p)]) continue;
        if (only >= 0 && p != only) return std::int64_t(-2);
        only = p;
        partial += double(partial_[e]);
      }
      return only;
    };
    // Each output's chain ends at a root, or at a node without budgeted ancestry.
    std::vector<double> memo(N, 0);
    std::vector<char> is_root(N, 0);
    std::vector<std::size_t> roots;
    for (const auto& o : outputs)
      for (std::int64_t id = o.id; id >= 0;) {
        double partial;
        const std::int64_t only = only_parent(std::size_t(id), partial);
        if (only == -2) {
          if (!is_root[std::size_t(id)]) roots.push_back(std::size_t(id));
          is_root[std::size_t(id)] = 1;
        }
        id = only;
      }
    std::sort(roots.begin(), roots.end(), std::greater<>());
    constexpr std::size_t kWidth = 8;
    std::vector<double> adj(roots.empty() ? 0 : (roots.front() + 1) * kWidth, 0);
    std::vector<char> queued(N, 0);
    for (std::size_t r0 = 0; r0 < roots.size(); r0 += kWidth) {
      const std::size_t nr = std::min(kWidth, roots.size() - r0);
      double b[kWidth] = {};
      std::size_t lo = roots[r0 + nr - 1];
      for (std::size_t k = 0; k < nr; ++k) {
        adj[roots[r0 + k] * kWidth + k] = 1;
        queued[roots[r0 + k]] = 1;
      }
      for (std::size_t i = roots[r0] + 1; i-- > lo;) {
        if (!queued[i]) continue;
        queued[i] = 0;
        double* a = &adj[i * kWidth];
        // A lane outside this node's descendants holds 0 and adds nothing (not 0 * inf).
        for (std::size_t k = 0; k < kWidth; ++k)
          if (a[k] != 0) b[k] += std::fabs(a[k]) * budget_[i];
        for (auto [e, end] = edges(i); e < end; ++e) {
          const std::size_t p = std::size_t(parent_[e]);
          if (!relevant[p]) continue;
          const double d = double(partial_[e]);
          double* ap = &adj[p * kWidth];
          for (std::size_t k = 0; k < kWidth; ++k)
            if (a[k] != 0) ap[k] += a[k] * d;
          queued[p] = 1;
          lo = std::min(lo, p);
        }
        std::fill(a, a + kWidth, 0.0);
      }
      for (std::size_t k = 0; k < nr; ++k) memo[roots[r0 + k]] = b[k];
    }
    std::vector<double> out;
    for (const auto& o : outputs) {
      double b = 0, scale = 1;
      for (std::int64_t id = o.id; id >= 0;) {
        const std::size_t i = std::size_t(id);
        if (is_root[i]) {
          b += scale * memo[i];
          break;
        }
        double partial;
        b += scale * budget_[i];
        id = only_parent(i, partial);
        scale *= std::fabs(partial);
      }
      out.push_back(std::isnan(b) ? HUGE_VAL : b);  // no bound is an infinite one
    }
    return out;
  }

  // The adjoint of every node for the seed sum_k w_k out_k: d(seed)/d(node), one sweep from the
  // last node to the first (a node's parents were recorded before it). A node's adjoint is the
  // sum of its children's contributions adj(child) * partial, summed as one reduction once they
  // are all in (accumulate(): in any order, for a bound-carrying T).
  std::vector<T> adjoints(const std::vector<std::pair<Var<T>, T>>& seed) const {
    const std::size_t N = start_.size();
    std::vector<std::size_t> at(N + 1, 0);  // node i's terms: [at[i], at[i + 1])
    for (const auto& [v, w] : seed)
      if (v.id >= 0) ++at[std::size_t(v.id) + 1];
    for (std::int64_t p : parent_) ++at[std::size_t(p) + 1];
    for (std::size_t i = 0; i < N; ++i) at[i + 1] += at[i];
    std::vector<T> terms(at[N], T(0));
    std::vector<std::size_t> fill(at.begin(), at.end() - 1);
    for (const auto& [v, w] : seed)
      if (v.id >= 0) terms[fill[std::size_t(v.id)]++] = w;
    std::vector<T> adj(N, T(0));
    for (std::size_t i = N; i-- > 0;) {
      const std::size_t count = at[i + 1] - at[i];
      if (count == 0) continue;
      adj[i] = accumulate(terms.data() + at[i], count);
      const std::size_t lo = i == 0 ? 0 : start_[i - 1];
      for (std::size_t e = lo; e < start_[i]; ++e)
        terms[fill[std::size_t(parent_[e])]++] = adj[i] * partial_[e];
    }
    return adj;
  }

 private:
  std::vector<std::size_t> start_;  // node i's edges end at start_[i] (begin at start_[i - 1])
  std::vector<std::int64_t> parent_;
  std::vector<T> partial_;
  std::vector<double> budget_;
  bool overflow_ = false;
  Tape* prev_;
  static thread_local Tape* current_;
};
template <class T>
thread_local Tape<T>* Tape<T>::current_ = nullptr;

template <class T>
struct Var {
  T v = T(0);
  std::int64_t id = -1;  // its node on the current tape; -1: a constant
  Var() = default;
  Var(double x) : v(T(x)) {}  // NOLINT: constants convert implicitly, as in the reference
  Var(float x) : v(T(double(x))) {}
  Var(int x) : v(T(double(x))) {}
  Var(T value, std::int64_t node) : v(std::move(value)), id(node) {}
  template <class U = T, class = std::enable_if_t<!std::is_arithmetic<U>::value>>
  Var(const T& x) : v(x) {}  // NOLINT

  static Tape<T>& tape() {
    Tape<T>* t = Tape<T>::current();
    if (!t) throw std::logic_error("rev::Var: no tape is recording");
    return *t;
  }
  // A result computed from a and b with partials da and db.
  // k: the operation's rounding in fp32, in units of u (division 2, sqrt 2, exp 4: as the forward
  // model's budgets; negation exact).
  static Var make(T value, const Var& a, T da, const Var& b = Var(), T db = T(0), double k = 1) {
    if (a.id < 0 && b.id < 0) return Var(std::move(value), -1);
    Tape<T>& t = tape();
    const double budget = fp32_rounding(value, k, t.overflow_checked());
    return Var(std::move(value), t.node({{a.id, std::move(da)}, {b.id, std::move(db)}}, budget));
  }
  // A result fp32 gives as 0 whatever its operands (x / inf, exp(-inf)): no edges, and its value
  // as its error.
  static Var flushed(T value) {
    double budget = 0;
    if constexpr (std::is_same<T, double>::value) budget = std::fabs(value) + 0x1.0p-126;
    return Var(std::move(value), tape().node({}, budget));
  }
  static double fp32_rounding(const T& value, double k, bool overflow = false) {
    if constexpr (std::is_same<T, double>::value) {
      if (k == 0) return 0;
      const double r = k * 0x1.0p-24 * std::fabs(value) + 0x1.0p-126;
      return overflow && std::fabs(value) + r > 0x1.fffffep127 ? HUGE_VAL : r;
    }
    return 0;
  }

  Var& operator+=(const Var& o) { return *this = *this + o; }
  Var& operator-=(const Var& o) { return *this = *this - o; }
  Var& operator*=(const Var& o) { return *this = *this * o; }
  Var& operator/=(const Var& o) { return *this = *this / o; }

  friend Var operator-(const Var& a) { return make(-a.v, a, T(-1), Var(), T(0), 0); }
  friend Var operator+(const Var& a, const Var& b) { return make(a.v + b.v, a, T(1), b, T(1)); }
  friend Var operator-(const Var& a, const Var& b) { return make(a.v - b.v, a, T(1), b, T(-1)); }
  friend Var operator*(const Var& a, const Var& b) { return make(a.v * b.v, a, b.v, b, a.v); }
  friend Var operator/(const Var& a, const Var& b) {
    const T q = a.v / b.v;
    if (b.id >= 0 && !(a.id >= 0 && tape().overflowed(a.id)) && tape().overflowed(b.id))
      return flushed(q);  // x / inf
    return make(q, a, T(1) / b.v, b, -q / b.v, 2);
  }
  friend bool operator<(const Var& a, const Var& b) { return a.v < b.v; }
  friend bool operator>(const Var& a, const Var& b) { return a.v > b.v; }
  friend bool operator<=(const Var& a, const Var& b) { return a.v <= b.v; }
  friend bool operator>=(const Var& a, const Var& b) { return a.v >= b.v; }
  friend bool operator==(const Var& a, const Var& b) { return a.v == b.v; }
};

template <class T>
Var<T> exp(const Var<T>& a) {
  using std::exp;
  const T e = exp(a.v);
  if (a.id >= 0 && a.v < 0 && Var<T>::tape().overflowed(a.id)) return Var<T>::flushed(e);
  return Var<T>::make(e, a, e, Var<T>(), T(0), 4);
}
template <class T>
Var<T> sqrt(const Var<T>& a) {
  using std::sqrt;
  const T s = sqrt(a.v);
  return Var<T>::make(s, a, T(0.5) / s, Var<T>(), T(0), 2);
}

namespace detail {
// The values of n Vars, and whether all are constants.
template <class T>
bool values(const Var<T>* v, std::size_t n, std::vector<T>& out) {
  out.resize(n);
  bool constant = true;
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = v[i].v;
    constant = constant && v[i].id < 0;
  }
  return constant;
}
// |x| where T is double (the tape's rounding budgets are kept for double only), else 0.
template <class T>
double magnitude(const T&) {
  return 0;
}
inline double magnitude(double x) {
  return std::fabs(x);
}
// A reduction's result: s, with n edges edge(i) unless every operand is a constant. Its fp32
// rounding in any order: gamma_{terms - 1} of its terms' magnitudes (plus underflow); infinite
// where their magnitudes pass FLT_MAX, since a partial sum in some order may overflow.
template <class T, class Edge>
Var<T> reduced(T s, bool constant, std::size_t n, Edge edge, double magnitude, std::size_t terms) {
  if (constant) return Var<T>(std::move(s), -1);
  const double k = double(terms > 1 ? terms - 1 : 0), g = k * 0x1.0p-24 * (1 + k * 0x1.0p-23);
  Tape<T>& t = Var<T>::tape();
  const double budget = t.overflow_checked() && (1 + g) * magnitude > 0x1.fffffep127
                            ? HUGE_VAL
                            : g * magnitude + double(terms) * 0x1.0p-126;
  return Var<T>(std::move(s), t.node(n, edge, budget));
}
}  // namespace detail

// Reductions as one node each (n edges rather than n nodes); the value as the plain Scalar T
// computes it (double: compensated, as the double oracle's).
template <class T>
Var<T> sum(const Var<T>* v, std::size_t n) {
  std::vector<T> x;
  const bool constant = detail::values(v, n, x);
  double m = 0;
  for (const T& e : x) m += detail::magnitude(e);
  using ref::sum;
  return detail::reduced(
      sum(x.data(), n), constant, n,
      [&](std::size_t i) { return std::pair<std::int64_t, T>(v[i].id, T(1)); }, m, n);
}
// n products and n - 1 additions: gamma_n of the products' magnitudes.
template <class T>
Var<T> dot(const Var<T>* a, const Var<T>* b, std::size_t n) {
  std::vector<T> x, y;
  const bool a_constant = detail::values(a, n, x), b_constant = detail::values(b, n, y);
  double m = 0;
  for (std::size_t i = 0; i < n; ++i) m += detail::magnitude(x[i]) * detail::magnitude(y[i]);
  using ref::dot;
  return detail::reduced(
      dot(x.data(), y.data(), n), a_constant && b_constant, 2 * n,
      [&](std::size_t k) {
        const std::size_t i = k / 2;
        return k % 2 == 0 ? std::pair<std::int64_t, T>(a[i].id, y[i])
                          : std::pair<std::int64_t, T>(b[i].id, x[i]);
      },
      m, n + 1);
}
// A dot product with constant weights (fp32 parameters read exactly).
template <class T>
Var<T> dot(const Var<T>* a, const float* w, std::size_t n) {
  std::vector<T> x;
  const bool constant = detail::values(a, n, x);
  double m = 0;
  for (std::size_t i = 0; i < n; ++i) m += detail::magnitude(x[i]) * std::fabs(double(w[i]));
  using ref::dot;
  return detail::reduced(
      dot(x.data(), w, n), constant, n,
      [&](std::size_t i) { return std::pair<std::int64_t, T>(a[i].id, T(double(w[i]))); }, m,
      n + 1);
}

// The vector-Jacobian product of f at x: f maps input tensors (Vars) to output tensors; given
// upstream gradients of its outputs (same shapes), the gradient of sum_k upstream_k . out_k with
// respect to each input tensor.
template <class T, class F>
std::vector<std::vector<T>> vjp(F f, const std::vector<std::vector<T>>& inputs,
                                const std::vector<std::vector<T>>& upstream) {
  Tape<T> tape;
  std::vector<std::vector<Var<T>>> in(inputs.size());
  for (std::size_t k = 0; k < inputs.size(); ++k)
    for (const T& x : inputs[k]) in[k].push_back(tape.input(x));
  const std::vector<std::vector<Var<T>>> out = f(in);
  if (out.size() != upstream.size()) throw std::invalid_argument("vjp: upstream per output");
  std::vector<std::pair<Var<T>, T>> seed;
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (out[k].size() != upstream[k].size())
      throw std::invalid_argument("vjp: an upstream gradient of another shape than its output");
    for (std::size_t i = 0; i < out[k].size(); ++i) seed.emplace_back(out[k][i], upstream[k][i]);
  }
  const std::vector<T> adj = tape.adjoints(seed);
  std::vector<std::vector<T>> grad(inputs.size());
  for (std::size_t k = 0; k < in.size(); ++k)
    for (const auto& v : in[k]) grad[k].push_back(adj[std::size_t(v.id)]);
  return grad;
}

// The vector-Jacobian product in double and, per element, the first-order bound on the rounding
// error of an fp32 evaluation of the same backward: the forward recomputed, the partials and the
// sweep, each operation rounding once within the forward model's budget, every accumulation in
// any order. Reverse over reverse: the backward is recorded on a tape of its own (f runs on
// Var<Var<double>>), then swept once per gradient element (Tape::first_order). First order only:
// the second-order terms, O(u^2), are not bounded (docs/semantics.md, "The backward pass").
struct Gradient {
  std::vector<std::vector<double>> value, bound;
};
// input_error, upstream_error (optional, their shapes): bounds on the inputs' and the upstream
// gradients' own errors, propagated to first order as well.
template <class F>
Gradient first_order_vjp(F f, const std::vector<std::vector<double>>& inputs,
                         const std::vector<std::vector<double>>& upstream,
                         const std::vector<std::vector<double>>& input_error = {},
                         const std::vector<std::vector<double>>& upstream_error = {}) {
  Tape<double> inner;
  std::vector<std::vector<Var<double>>> in(inputs.size()), up(upstream.size());
  for (std::size_t k = 0; k < inputs.size(); ++k)
    for (std::size_t i = 0; i < inputs[k].size(); ++i)
      in[k].push_back(inner.input(inputs[k][i], k < input_error.size() ? input_error[k][i] : 0));
  for (std::size_t k = 0; k < upstream.size(); ++k)
    for (std::size_t i = 0; i < upstream[k].size(); ++i)
      up[k].push_back(k < upstream_error.size() ? inner.input(upstream[k][i], upstream_error[k][i])
                                                : Var<double>(upstream[k][i]));
  const auto g = vjp<Var<double>>(f, in, up);
  Gradient out;
  std::vector<Var<double>> all;  // one first_order() for every element: shared sweeps
  for (const auto& t : g) {
    out.value.emplace_back();
    for (const auto& v : t) out.value.back().push_back(v.v);
    all.insert(all.end(), t.begin(), t.end());
  }
  const std::vector<double> b = inner.first_order(all);
  std::size_t at = 0;
  for (const auto& t : g) {
    out.bound.emplace_back(b.begin() + std::ptrdiff_t(at),
                           b.begin() + std::ptrdiff_t(at + t.size()));
    at += t.size();
  }
  return out;
}

}  // namespace mhc::rev
