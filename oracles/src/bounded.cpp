#include "mhc/oracles/bounded.hpp"

#include <stdexcept>
#include <utility>

namespace mhc::bnd {

Model fp32() { return Model{}; }

Model tf32() {
  Model m;
  m.name = "tf32";
  const double ut = 0x1.0p-11;  // tf32 keeps 10 explicit mantissa bits: u = 2^-11
  m.u_prod = 2 * ut + ut * ut;  // both operands rounded: (1+d1)(1+d2) - 1
  return m;
}

Model bf16() {
  Model m;
  m.name = "bf16";
  m.u_store = 0x1.0p-8;  // bf16 keeps 7 explicit mantissa bits: u = 2^-8
  return m;
}

Model model_by_name(const std::string& name) {
  if (name == "fp32") return fp32();
  if (name == "tf32") return tf32();
  if (name == "bf16") return bf16();
  throw std::invalid_argument("unknown precision model '" + name + "' (fp32, tf32, bf16)");
}

namespace {
const Model& default_model() {
  static const Model m = fp32();
  return m;
}
thread_local const Model* current = nullptr;
}  // namespace

const Model& model() { return current ? *current : default_model(); }
ModelScope::ModelScope(Model m) : model_(std::move(m)), prev_(current) { current = &model_; }
ModelScope::~ModelScope() { current = prev_; }

namespace {
// The error of an n-term reduction whose terms have magnitudes A and propagated bounds E.
Bounded reduce(double v, double A, double E, std::size_t n, double k_prod = 0) {
  const Model& m = model();
  const double nn = double(n);
  double e = E + k_prod * (A + E) + gamma(nn, m.u) * (A + E) * (1 + k_prod) + gamma(nn, u64) * A +
             nn * m.eta;
  if (A + E > m.big) e = HUGE_VAL;
  return {v, e};
}
}  // namespace

Bounded sum(const Bounded* t, std::size_t n) {
  double v = 0, A = 0, E = 0;
  for (std::size_t i = 0; i < n; ++i) {
    v += t[i].v;
    A += std::fabs(t[i].v);
    E += t[i].e;
  }
  return reduce(v, A, E, n > 0 ? n - 1 : 0);
}

// Each product rounds once (u) and the n-1 additions round: gamma_n covers both.
Bounded dot(const Bounded* a, const Bounded* b, std::size_t n) {
  double v = 0, A = 0, E = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double p = a[i].v * b[i].v;
    v += p;
    A += std::fabs(p);
    E += std::fabs(a[i].v) * b[i].e + std::fabs(b[i].v) * a[i].e + a[i].e * b[i].e;
  }
  return reduce(v, A, E, n);
}

// Four independent partial sums so that the loop vectorises; the order changes v only within
// the gamma_n(u64) term already in the bound.
Bounded linear(const Bounded* x, const float* w, std::size_t n) {
  double v[4] = {0, 0, 0, 0}, A[4] = {0, 0, 0, 0}, E[4] = {0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l) {
      const double wi = double(w[i + std::size_t(l)]);
      const double p = x[i + std::size_t(l)].v * wi;
      v[l] += p;
      A[l] += std::fabs(p);
      E[l] += std::fabs(wi) * x[i + std::size_t(l)].e;
    }
  for (; i < n; ++i) {
    const double wi = double(w[i]), p = x[i].v * wi;
    v[0] += p;
    A[0] += std::fabs(p);
    E[0] += std::fabs(wi) * x[i].e;
  }
  return reduce((v[0] + v[1]) + (v[2] + v[3]), (A[0] + A[1]) + (A[2] + A[3]),
                (E[0] + E[1]) + (E[2] + E[3]), n, model().u_prod);
}

}  // namespace mhc::bnd
