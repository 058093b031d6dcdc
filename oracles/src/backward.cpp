#include "mhc/oracles/backward.hpp"

#include <stdexcept>
#include <string>
#include <type_traits>

#include "mhc/oracles/parallel.hpp"

namespace mhc::oracles {

namespace {

// One token's gradients: values and first-order bounds, in the backward op's output order.
rev::Gradient token_gradient(const OpCase& c, Op fwd, const Tensors<double>& at,
                             const Tensors<double>& up) {
  rev::Gradient g = rev::first_order_vjp(
      [&](auto& x) {
        using V = std::decay_t<decltype(x[0][0])>;
        return forward_piece<V>(fwd, c.cfg, x);
      },
      at, up);
  if (!has_closed_form(fwd)) return g;
  rev::Tape<double> tape;
  Tensors<rev::Var<double>> x(at.size()), u(up.size());
  for (std::size_t k = 0; k < at.size(); ++k)
    for (double v : at[k]) x[k].push_back(tape.input(v));
  for (std::size_t k = 0; k < up.size(); ++k)
    for (double v : up[k]) u[k].emplace_back(v);
  const Tensors<rev::Var<double>> p = piecewise_backward<rev::Var<double>>(fwd, c.cfg, x, u);
  for (std::size_t k = 0; k < p.size(); ++k) {
    const std::vector<double> b = tape.first_order(p[k]);
    for (std::size_t i = 0; i < b.size(); ++i) g.bound[k][i] = std::max(g.bound[k][i], b[i]);
  }
  return g;
}

}  // namespace

Trace<bnd::Bounded> backward_trace(const OpCase& c, unsigned threads) {
  const OpSpec& spec = op_spec(c.op);
  if (!spec.backward) throw std::logic_error("backward_trace: " + spec.name + " is a forward op");
  if (c.precision != Precision::fp32())
    throw std::invalid_argument(spec.name +
                                ": backward ops are judged under the fp32 declaration (" +
                                precision_name(c.precision) + " given)");
  const OpSpec& fwd = op_spec(spec.forward);
  const std::size_t T = c.tokens, nin = fwd.inputs.size();
  Trace<bnd::Bounded> trace;
  for (const auto& t : spec.outputs) {
    std::vector<std::size_t> shape = resolve(t.dims, c.cfg);
    if (t.per_token) shape.insert(shape.begin(), T);
    std::size_t size = 1;
    for (auto s : shape) size *= s;
    trace.push_back({t.name, shape, std::vector<bnd::Bounded>(size)});
  }
  const std::size_t nparams = fwd.params.size();
  // Params' gradients: per-token contributions summed in token order, their bounds and
  // magnitudes alongside, in chunks of tokens (the result does not depend on the thread count).
  std::vector<std::vector<double>> sum(nparams), bound(nparams), magnitude(nparams);
  for (std::size_t p = 0; p < nparams; ++p) {
    const std::size_t size = trace[nin + p].values.size();
    sum[p].assign(size, 0);
    bound[p].assign(size, 0);
    magnitude[p].assign(size, 0);
  }
  constexpr std::size_t kChunk = 64;
  std::vector<rev::Gradient> grads(std::min(T, kChunk));
  for (std::size_t t0 = 0; t0 < T; t0 += kChunk) {
    const std::size_t nt = std::min(kChunk, T - t0);
    par::for_each(nt, threads, [&](std::size_t k) {
      Tensors<double> at, up;
      token_tensors(c, t0 + k, at, up);
      grads[k] = token_gradient(c, spec.forward, at, up);
    });
    for (std::size_t k = 0; k < nt; ++k) {
      const rev::Gradient& g = grads[k];
      for (std::size_t i = 0; i < nin; ++i) {
        auto& out = trace[i].values;
        const std::size_t per = g.value[i].size();
        for (std::size_t e = 0; e < per; ++e)
          out[(t0 + k) * per + e] = bnd::Bounded(g.value[i][e], g.bound[i][e]);
      }
      for (std::size_t p = 0; p < nparams; ++p)
        for (std::size_t e = 0; e < sum[p].size(); ++e) {
          sum[p][e] += g.value[nin + p][e];
          bound[p][e] += g.bound[nin + p][e];
          magnitude[p][e] += std::fabs(g.value[nin + p][e]);
        }
    }
  }
  const double terms = double(T > 1 ? T - 1 : 0);
  const double gamma = terms * 0x1.0p-24 * (1 + terms * 0x1.0p-23);
  for (std::size_t p = 0; p < nparams; ++p)
    for (std::size_t e = 0; e < sum[p].size(); ++e)
      trace[nin + p].values[e] =
          bnd::Bounded(sum[p][e], bound[p][e] + gamma * magnitude[p][e] + double(T) * 0x1.0p-126);
  return trace;
}

}  // namespace mhc::oracles
