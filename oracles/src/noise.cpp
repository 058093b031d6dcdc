#include "mhc/oracles/noise.hpp"

#include "mhc/oracles/anchored.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mhc::oracles {

namespace {

constexpr double u = 0x1.0p-24;

// The noise of an fp32 sum from its partial sums s_k and terms t_i: each rounding errs by at
// most u times its result, so the error is sum_k d_k s_k + sum_i e_i t_i with |d|, |e| <= u;
// independent, its spread is u sqrt(sum s_k^2 + sum t_i^2) / sqrt(3). The scale takes the larger
// of the two orders' partial sums, products counted 4 times (the product's rounding, the
// stream's own, a scaling before the projection, tensor-core operand handling).
double sum_noise(double partials2_forward, double partials2_backward, double products2) {
  return u * std::sqrt(std::max(partials2_forward, partials2_backward) + 4 * products2);
}

NoiseModel mixes_model(const ref::Config& cfg, const float* xs, std::size_t T, const float* W) {
  const std::size_t nd = cfg.stream_size(), M = std::size_t(cfg.mix());
  std::vector<bnd::detail::SequentialSums> dots(T * M), squares(T);
  bnd::detail::sequential_sums(xs, T, W, M, nd, dots.data());
  // The RMS statistic's sums of squares.
  bnd::detail::self_sums(xs, T, nd, squares.data());
  // Where terms repeat, round to nearest errs with a bias that depends on the terms' mantissas
  // (scaled terms, another bias): the independence the model stands on fails, so such elements,
  // and tokens whose squares repeat, are not modelled (their bounds already use gamma_n).
  bnd::Model probabilistic = bnd::fp32();
  probabilistic.probabilistic = true;
  const bnd::ModelScope scope(probabilistic);
  const std::vector<bool> repeated = bnd::detail::repeated_terms(xs, T, W, M, nd);
  NoiseModel m;
  m.value.resize(T * M);
  m.scale.resize(T * M);
  for (std::size_t t = 0; t < T; ++t) {
    const bnd::detail::SequentialSums& q = squares[t];
    const bool squares_repeat = bnd::detail::too_many_repeats(
        probabilistic, double(nd), bnd::detail::repeated_values(xs + t * nd, nd));
    // r as a kernel forms it from each order's sum, and exactly (double: its error is ~1e-16).
    auto r_fp32 = [&](float S) { return 1.0f / std::sqrt(S / float(nd) + float(cfg.norm_eps)); };
    const float rf = r_fp32(q.forward), rb = r_fp32(q.backward);
    const double r = 1 / std::sqrt(q.exact / double(nd) + cfg.norm_eps);
    // r's relative noise: half the sum's, and about one u for each of the mean, the eps, the
    // square root and the division (5 u, an approximate reciprocal square root included).
    const double S_noise =
        std::max({sum_noise(q.partials2_forward, q.partials2_backward, q.products2),
                  std::fabs(double(q.forward) - q.exact), std::fabs(double(q.backward) - q.exact)});
    const double r_rel = q.exact > 0 ? 0.5 * S_noise / q.exact + 5 * u : 5 * u;
    for (std::size_t a = 0; a < M; ++a) {
      const auto& o = dots[t * M + a];
      const double value = o.exact * r;
      const double sigma =
          std::fabs(r) * sum_noise(o.partials2_forward, o.partials2_backward, o.products2) +
          std::fabs(value) * (r_rel + u);
      // The two orders run in fp32 (round to nearest's bias on structured data is in them).
      const double run = std::max(std::fabs(double(o.forward * rf) - value),
                                  std::fabs(double(o.backward * rb) - value));
      m.value[t * M + a] = value;
      m.scale[t * M + a] = repeated[t * M + a] || squares_repeat ? HUGE_VAL : std::max(sigma, run);
    }
  }
  return m;
}

// The comb from the given mixes [T, M] (the case's, or the kernel's: anchored): values and
// noise from the Sinkhorn bound's linearisation (bnd::sinkhorn), roundings in quadrature.
NoiseModel comb_model(const OpCase& c, const float* mixes) {
  const std::size_t n = std::size_t(c.cfg.n), nn = n * n, M = std::size_t(c.cfg.mix());
  const float* scale = c.param("hc_scale").data.data();
  const float* base = c.param("hc_base").data.data();
  const bnd::ModelScope scope(bnd::fp32());
  NoiseModel m;
  m.value.resize(c.tokens * nn);
  m.scale.resize(c.tokens * nn);
  std::vector<bnd::Bounded> logits(nn), C(nn);
  std::vector<double> noise(nn);
  for (std::size_t t = 0; t < c.tokens; ++t) {
    for (std::size_t i = 0; i < nn; ++i)
      logits[i] = bnd::Bounded(double(mixes[t * M + 2 * n + i])) * bnd::Bounded(double(scale[2])) +
                  bnd::Bounded(double(base[2 * n + i]));
    bnd::sinkhorn(c.cfg, logits.data(), C.data(), nullptr, noise.data());
    for (std::size_t i = 0; i < nn; ++i) {
      m.value[t * nn + i] = C[i].v;
      m.scale[t * nn + i] = std::fabs(C[i].v) * noise[i] + bnd::model().eta;
    }
  }
  return m;
}

}  // namespace

NoiseModel noise_model(const OpCase& c, const std::string& stage, const Trace<float>& got) {
  if (!c.cfg.sem.is_default() || c.precision != Precision::fp32) return {};
  if ((c.op == Op::split_sinkhorn && stage == "comb") ||
      ((c.op == Op::mixes || c.op == Op::boundary) && stage == kAnchored + "comb")) {
    const Stage<float>* given = find_stage(got, "mixes");
    const float* mixes = c.op == Op::split_sinkhorn ? c.input("mixes").data.data()
                         : given && given->values.size() == c.tokens * std::size_t(c.cfg.mix())
                             ? given->values.data()
                             : nullptr;
    return mixes ? comb_model(c, mixes) : NoiseModel{};
  }
  if (stage != "mixes") return {};
  const float* xs = nullptr;
  if (c.op == Op::mixes) {
    xs = c.input("x").data.data();
  } else if (c.op == Op::boundary) {
    const Stage<float>* x = find_stage(got, "x");  // anchored: the streams the kernel's mixes read
    if (!x || x->values.size() != c.tokens * c.cfg.stream_size()) return {};
    xs = x->values.data();
  } else {
    return {};
  }
  return mixes_model(c.cfg, xs, c.tokens, c.param("hc_fn").data.data());
}

NoiseVerdict noise_judge(const float* got, const NoiseModel& model, std::size_t per_token) {
  NoiseVerdict v;
  double z2 = 0;
  for (std::size_t i = 0; i < model.value.size(); ++i) {
    const double s = model.scale[i], want = model.value[i];
    if (!std::isfinite(s) || !std::isfinite(want)) continue;
    const double diff = std::fabs(double(got[i]) - want);
    const double z = diff == 0 ? 0 : (s > 0 ? diff / s : HUGE_VAL);
    ++v.elements;
    z2 += std::isfinite(z) ? z * z : HUGE_VAL;
    if (v.elements == 1 || !(z <= v.z_max)) {
      v.z_max = std::isnan(z) ? HUGE_VAL : z;
      v.worst = Element{
          i, i / std::max<std::size_t>(per_token, 1), double(got[i]), want, s, v.z_max, "noise"};
    }
  }
  v.z_rms = v.elements ? std::sqrt(z2 / double(v.elements)) : 0;
  char buf[320];
  const bool flagged = v.z_max > kNoiseMax || v.z_rms > kNoiseRms;
  v.state = flagged ? State::fail : State::pass;
  std::snprintf(buf, sizeof buf,
                "second tier (statistical): error / fp32 rounding noise max %.3g (limit %g), rms "
                "%.3g (limit %g) over %zu elements; worst at %zu (token %zu): got %.9g, want "
                "%.9g, noise %.3g",
                v.z_max, kNoiseMax, v.z_rms, kNoiseRms, v.elements, v.worst.index, v.worst.token,
                v.worst.got, v.worst.want, v.worst.bound);
  v.reason = v.elements ? buf
                        : "second tier (statistical): no element modelled (the terms repeat: "
                          "their rounding errors are not independent)";
  return v;
}

NoiseModels noise_models(const OpCase& c, const Trace<float>& got) {
  NoiseModels models;
  for (const auto& s : got)
    for (const std::string& name : {s.name, kAnchored + s.name}) {
      NoiseModel m = noise_model(c, name, got);
      if (!m.value.empty()) models.emplace(name, std::move(m));
    }
  return models;
}

void second_tier(const NoiseModels& models, const OpCase& c, const Trace<float>& got, Verdict& v) {
  bool changed = false;
  for (auto& sv : v.stages) {
    const bool anchored = sv.stage.rfind(kAnchored, 0) == 0;  // judges the kernel's own stage
    const Stage<float>* g =
        find_stage(got, anchored ? sv.stage.substr(kAnchored.size()) : sv.stage);
    const auto it = models.find(sv.stage);
    if (!g || sv.state != State::pass || it == models.end()) continue;
    const NoiseModel& m = it->second;
    if (m.value.size() != g->values.size()) continue;
    std::size_t per_token = m.value.size() / std::max<std::size_t>(c.tokens, 1);
    sv.has_noise = true;
    sv.noise = noise_judge(g->values.data(), m, per_token);
    if (sv.noise.state == State::fail) {
      sv.state = State::fail;
      sv.rule = "noise";
      sv.reason = sv.noise.reason;
      changed = true;
    }
  }
  if (changed) settle(v);
}

}  // namespace mhc::oracles
