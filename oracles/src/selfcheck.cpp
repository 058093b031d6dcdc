#include "mhc/oracles/selfcheck.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <type_traits>

#include "mhc/oracles/backward.hpp"
#include "mhc/oracles/oracle.hpp"
#include "mhc/oracles/random.hpp"
#include "mhc/oracles/scalars.hpp"

namespace mhc::oracles {

ref::Config selfcheck_config(int i, std::uint64_t seed) {
  if (i % 2 == 0) return ref::v41();
  Rng rng(seed * 7919u + std::uint64_t(i));
  static const int ns[] = {1, 2, 3, 4, 8};
  ref::Config c;
  c.n = ns[rng.integer(0, 4)];
  c.d = rng.integer(1, 64);
  c.iters = rng.integer(1, 40);
  c.hc_eps = rng.uniform() < 0.2 ? 0.0 : rng.log_uniform(1e-8, 1e-1);
  c.norm_eps = rng.uniform() < 0.2 ? 0.0 : rng.log_uniform(1e-20, 1e-2);
  return c;
}

StageCertificate certify(const std::string& name, const std::vector<double>& dbl,
                         const std::vector<num::mpfr>& hp, const std::vector<num::mpfi>& iv) {
  StageCertificate s;
  s.stage = name;
  s.elements = dbl.size();
  for (std::size_t i = 0; i < dbl.size(); ++i) {
    const num::mpfr m = hp[i];
    const num::mpfr err = abs(num::mpfr(dbl[i]) - m);
    const num::mpfr lo = num::bmp::lower(iv[i]).convert_to<num::mpfr>();
    const num::mpfr hi = num::bmp::upper(iv[i]).convert_to<num::mpfr>();
    const num::mpfr cert = std::max(abs(num::mpfr(dbl[i]) - lo), abs(num::mpfr(dbl[i]) - hi));
    const double inf = std::numeric_limits<double>::infinity();
    double rel = 0, crel = 0;
    if (m != 0) {
      rel = num::mpfr(err / abs(m)).convert_to<double>();
      crel = num::mpfr(cert / abs(m)).convert_to<double>();
    } else {
      rel = err == 0 ? 0.0 : inf;
      crel = cert == 0 ? 0.0 : inf;
    }
    if (i == 0 || rel > s.max_rel_err) {
      s.max_rel_err = rel;
      s.worst = i;
    }
    s.certified_rel_err = std::max(s.certified_rel_err, crel);
    s.max_interval_width = std::max(s.max_interval_width, num::rel_width(iv[i]));
    if (!num::encloses(iv[i], m)) ++s.not_enclosed;
  }
  return s;
}

namespace {

// Case i's backward op: every backward op in turn.
Op backward_op_of(int i) {
  static const Op all[] = {Op::split_sinkhorn_backward, Op::mixes_backward,   Op::pre_backward,
                           Op::post_backward,           Op::rmsnorm_backward, Op::boundary_backward,
                           Op::block_backward,          Op::stack_backward};
  return all[std::size_t(i / 2) % 8];
}

// block_backward, stack_backward: the composed gradients (unanchored) against the recorded
// backward of the Block's (a stack's) reference in MPFR, at the case's n, rounds and eps and a
// small Block (its sublayers' products in MPFR cost d^2 a token): d = 16, 2 heads of 4, 3 experts
// of 8, 3 tokens.
std::vector<BackwardCertificate> certify_block_backward(Op op, ref::Config cfg, std::uint64_t seed,
                                                        unsigned threads) {
  cfg.d = std::min(cfg.d, 16);
  ref::BlockConfig b;
  b.heads = 2;
  b.head_dim = 4;
  b.experts = 3;
  b.inter = 8;
  b.layers = op == Op::stack_backward ? 2 : 1;
  const std::size_t T = 3;
  const OpCase c = generate_block_case(op, cfg, b, 1, T, seed, Precision::fp32());
  const Trace<bnd::Bounded> got = backward_trace(c, threads);
  std::vector<ref::BlockParams> layers;
  for (int l = 0; l < b.layers; ++l) layers.push_back(block_params(c, l));
  using M = num::mpfr;
  auto tensor = [&](const std::string& name) {
    const auto& v = c.input(name).data;
    return std::vector<M>(v.begin(), v.end());
  };
  const bool stack = op == Op::stack_backward;
  Tensors<M> at{tensor("x"),
                stack ? std::vector<M>(T * std::size_t(cfg.n), M(0)) : tensor("pre_mix")};
  const Tensors<M> up{tensor("upstream_x"), tensor("upstream_next_pre_mix")};
  const Tensors<M> want = rev::vjp<M>(
      [&](auto& x) {
        using V = std::decay_t<decltype(x[0][0])>;
        std::vector<ref::Stage<V>> trace;
        if (stack)
          ref::stack_forward(c.cfg, c.block, 1, T, x[0].data(), layers,
                             c.param("final_norm/weight").data.data(), trace);
        else
          ref::block_forward(c.cfg, c.block, 1, T, x[0].data(), x[1].data(), layers[0], trace, "");
        const std::string last = stack ? "L1." : "";
        return Tensors<V>{ref::stage_values(trace, last + "x_out"),
                          ref::stage_values(trace, last + "next_pre_mix")};
      },
      at, up);
  std::vector<BackwardCertificate> out;
  for (std::size_t k = 0; k < (stack ? 1u : 2u); ++k) {
    const std::string name = k == 0 ? "grad_x" : "grad_pre_mix";
    const auto& g = ref::stage_values(got, name);
    BackwardCertificate bc;
    bc.stage = op_name(op) + "." + name;
    bc.elements = g.size();
    // Unanchored, a Block's bounds compound (a stack's are often infinite): the error is measured
    // against the smaller of the bound and u_fp32 max |grad|, the least an fp32 kernel can have.
    double largest = 0;
    for (const auto& v : g) largest = std::max(largest, std::fabs(v.v));
    for (std::size_t i = 0; i < g.size(); ++i) {
      const double err = M(abs(M(g[i].v) - want[k][i])).convert_to<double>();
      const double r = err == 0 ? 0 : err / std::min(g[i].e, 0x1p-24 * largest);
      if (!(r <= bc.max_over_bound)) {
        bc.max_over_bound = std::isnan(r) ? HUGE_VAL : r;
        bc.worst = i;
      }
    }
    out.push_back(bc);
  }
  return out;
}

std::vector<BackwardCertificate> certify_backward(Op op, const ref::Config& cfg, std::uint64_t seed,
                                                  unsigned threads) {
  if (op_spec(op).whole) return certify_block_backward(op, cfg, seed, threads);
  const OpCase c = generate_case(op, cfg, 2, seed, Precision::fp32());
  const Trace<bnd::Bounded> got = backward_trace(c, threads);
  const OpSpec& spec = op_spec(op);
  const OpSpec& fwd = op_spec(spec.forward);
  using M = num::mpfr;
  std::vector<std::vector<M>> want(spec.outputs.size());
  for (std::size_t k = 0; k < want.size(); ++k) want[k].assign(got[k].values.size(), M(0));
  for (std::size_t t = 0; t < c.tokens; ++t) {
    Tensors<M> at, up;
    token_tensors(c, t, at, up);
    const Tensors<M> g = rev::vjp<M>(
        [&](auto& x) {
          using V = std::decay_t<decltype(x[0][0])>;
          return forward_piece<V>(spec.forward, c.cfg, x);
        },
        at, up);
    for (std::size_t k = 0; k < g.size(); ++k)
      for (std::size_t i = 0; i < g[k].size(); ++i)
        want[k][k < fwd.inputs.size() ? t * g[k].size() + i : i] += g[k][i];
  }
  std::vector<BackwardCertificate> out;
  for (std::size_t k = 0; k < want.size(); ++k) {
    BackwardCertificate b;
    b.stage = spec.name + "." + spec.outputs[k].name;
    b.elements = want[k].size();
    for (std::size_t i = 0; i < want[k].size(); ++i) {
      const bnd::Bounded& w = got[k].values[i];
      const double err = M(abs(M(w.v) - want[k][i])).convert_to<double>();
      const double r = err == 0 ? 0 : err / w.e;
      if (!(r <= b.max_over_bound)) {
        b.max_over_bound = std::isnan(r) ? HUGE_VAL : r;
        b.worst = i;
      }
    }
    out.push_back(b);
  }
  return out;
}

}  // namespace

SelfcheckResult selfcheck(const SelfcheckOptions& opt,
                          const std::function<bool(const CaseCertificate&)>& on_case) {
  SelfcheckResult res;
  res.mpfr_bits = num::set_mpfr_bits(opt.mpfr_bits);
  res.mpfi_bits = num::set_mpfi_bits(opt.mpfi_bits);
  for (int i = 0; i < opt.cases; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const ref::Config cfg = opt.config_of(i, opt.seed);
    // Large streams cost MPFR time; small configurations get more tokens.
    const std::size_t tokens = cfg.stream_size() >= 4096 ? opt.v41_tokens : 8;
    const std::uint64_t case_seed = opt.seed * 1000003u + std::uint64_t(i);
    const PiecesCase c = generate_pieces(cfg, tokens, case_seed);
    OracleStats stats;
    const auto dbl = oracle_pieces(c, opt.threads, &stats);
    const auto hp = evaluate_pieces<num::mpfr>(c, opt.threads);
    const auto iv = evaluate_pieces<num::mpfi>(c, opt.threads);
    CaseCertificate cc;
    cc.index = i;
    cc.oracle = stats;
    cc.cfg = cfg;
    cc.tokens = tokens;
    cc.seed = case_seed;
    const auto sd = stages(dbl);
    const auto sh = stages(hp);
    const auto si = stages(iv);
    for (std::size_t s = 0; s < sd.size(); ++s) {
      cc.stages.push_back(certify(pieces_stage_names()[s], *sd[s], *sh[s], *si[s]));
      res.accurate = res.accurate && cc.stages.back().max_rel_err <= kOracleAccuracy;
      res.enclosed = res.enclosed && cc.stages.back().not_enclosed == 0;
    }
    cc.backward = certify_backward(backward_op_of(i), cfg, case_seed, opt.threads);
    for (const auto& b : cc.backward)
      res.backward_accurate = res.backward_accurate && b.max_over_bound <= kBackwardAccuracy;
    cc.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool go_on = !on_case || on_case(cc);
    res.cases.push_back(std::move(cc));
    if (!go_on) break;
  }
  return res;
}

}  // namespace mhc::oracles
