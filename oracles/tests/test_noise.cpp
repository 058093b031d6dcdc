// The second tier's weights model against the fp32 forms it claims to cover, computed here
// independently of it: every form's z must stay at or below 1 (the model's scale is a worst case).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>

#include "mhc/oracles/noise.hpp"

namespace {

using mhc::oracles::Op;
namespace oracles = mhc::oracles;
namespace ref = mhc::ref;

// x moved by k ulp: a math library less accurate than glibc's (a GPU's expf and tanhf: 2 ulp).
float ulps(float x, int k) {
  for (; k > 0; --k) x = std::nextafter(x, INFINITY);
  for (; k < 0; ++k) x = std::nextafter(x, -INFINITY);
  return x;
}

struct Form {
  std::string name;
  std::function<float(float m, float s, float b, int k)> sig;  // k: a hash in [-1, 1]
};

const std::vector<Form>& forms() {
  static const std::vector<Form> all = {
      {"1 / (1 + exp(-a))",
       [](float m, float s, float b, int) {
         const float a = m * s + b;
         return 1.0f / (1.0f + std::exp(-a));
       }},
      {"fma argument",
       [](float m, float s, float b, int) { return 1.0f / (1.0f + std::exp(-std::fma(m, s, b))); }},
      {"exp one ulp off (GPU expf)",
       [](float m, float s, float b, int k) {
         const float a = m * s + b;
         return 1.0f / (1.0f + ulps(std::exp(-a), k));
       }},
      {"exp2 with log2(e)",
       [](float m, float s, float b, int) {
         const float a = m * s + b;
         return 1.0f / (1.0f + std::exp2(-a * 1.44269504088896341f));
       }},
      {"e / (1 + e) for a < 0",
       [](float m, float s, float b, int k) {
         const float a = m * s + b;
         if (a >= 0) return 1.0f / (1.0f + std::exp(-a));
         const float e = ulps(std::exp(a), k);
         return e / (1.0f + e);
       }},
      {"e * (1 / (1 + e)) for a < 0",
       [](float m, float s, float b, int) {
         const float a = m * s + b;
         if (a >= 0) return 1.0f / (1.0f + std::exp(-a));
         const float e = std::exp(a);
         return e * (1.0f / (1.0f + e));
       }},
      {"0.5 (1 + tanh(a / 2))",
       [](float m, float s, float b, int) {
         const float a = m * s + b;
         return 0.5f * (1.0f + std::tanh(0.5f * a));
       }},
      {"tanh two ulp off the correctly rounded one",
       [](float m, float s, float b, int k) {
         const float a = m * s + b, t = float(std::tanh(0.5 * double(a)));
         return 0.5f * (1.0f + std::clamp(ulps(t, 2 * k), -1.0f, 1.0f));
       }},
  };
  return all;
}

}  // namespace

// Arguments a = m s + b of magnitude 2^-8 to 2^5.3 (log-uniform: sig near 1/2, where a's own
// roundings count, up to saturation both ways and the tanh form's cancellation for a << 0), 4
// seeds x 2048 tokens x 4 weights each for pre and post, every form.
TEST_CASE("noise: the weights' scale bounds every usual fp32 form of the sigmoid", "[noise]") {
  const ref::Config cfg;
  const std::size_t n = std::size_t(cfg.n), M = std::size_t(cfg.mix()), T = 2048;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    oracles::OpCase c =
        oracles::generate_case(Op::split_sinkhorn, cfg, T, seed, oracles::Precision::fp32());
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> exponent(-8, 5.3);
    auto arg = [&] { return (rng() & 1 ? 1 : -1) * std::exp2(exponent(rng)); };
    const float* s = c.param("hc_scale").data.data();
    const float* b = c.param("hc_base").data.data();
    std::vector<float>& mixes = c.inputs.at("mixes").data;
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t j = 0; j < 2 * n; ++j)
        mixes[t * M + j] = float((arg() - double(b[j])) / double(s[j < n ? 0 : 1]));
    for (const Form& f : forms()) {
      oracles::Trace<float> got{{"pre", {T, n}, std::vector<float>(T * n)},
                                {"post", {T, n}, std::vector<float>(T * n)}};
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t j = 0; j < n; ++j) {
          const int k = int((t * 7 + j * 3 + seed) % 3) - 1;
          got[0].values[t * n + j] = f.sig(mixes[t * M + j], s[0], b[j], k) + float(cfg.hc_eps);
          got[1].values[t * n + j] = 2.0f * f.sig(mixes[t * M + n + j], s[1], b[n + j], k);
        }
      for (const auto& st : got) {
        const oracles::NoiseModel m = oracles::noise_model(c, st.name, got);
        REQUIRE(m.value.size() == T * n);
        const auto v = oracles::noise_judge(st.values.data(), m, n);
        CAPTURE(seed, f.name, st.name, v.reason);
        CHECK(v.elements == T * n);
        CHECK(v.z_max <= 1);
      }
    }
  }
}

// Streams of the same shape (products of one sign in each half of every stream, cancelling within
// the stream): a column-by-column (d-major) sum's partial sums are about n = 4 times the
// stream-major ones. The kernel sums d-major with fused multiply-adds, as a GPU thread does: not
// bit for bit an order the model runs, so its errors must be held by the d-major partial sums.
// Under the model z's standard deviation is at most 1 / sqrt(3) (docs/semantics.md, "The second
// tier"); the root mean square of 768 such z stays below 0.577 (1 + 4 x 0.026), 0.026 being its
// relative standard error for normal z. Without the d-major partial sums it is about 4 times that.
TEST_CASE("noise: the mixes scale holds a d-major accumulation", "[noise]") {
  ref::Config cfg;
  cfg.d = 1024;
  const std::size_t n = std::size_t(cfg.n), d = std::size_t(cfg.d), nd = n * d,
                    M = std::size_t(cfg.mix()), T = 32;
  oracles::OpCase c = oracles::generate_case(Op::mixes, cfg, T, 7, oracles::Precision::fp32());
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> unit(1, 2), jitter(-1, 1);
  std::vector<float>& x = c.inputs.at("x").data;
  std::vector<float>& W = c.params.at("hc_fn").data;
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t cc = 0; cc < d; ++cc) {
      const float v = unit(rng);
      for (std::size_t j = 0; j < n; ++j) x[t * nd + j * d + cc] = v * (1 + 0x1p-10f * jitter(rng));
    }
  for (std::size_t a = 0; a < M; ++a)
    for (std::size_t cc = 0; cc < d; ++cc) {
      const float w = (cc < d / 2 ? 1e-2f : -1e-2f) * unit(rng);
      for (std::size_t j = 0; j < n; ++j) W[a * nd + j * d + cc] = w * (1 + 0x1p-10f * jitter(rng));
    }
  oracles::Trace<float> got{{"mixes", {T, M}, std::vector<float>(T * M)}};
  for (std::size_t t = 0; t < T; ++t) {
    const float* xt = x.data() + t * nd;
    float ss = 0;
    for (std::size_t i = 0; i < nd; ++i) ss += xt[i] * xt[i];
    const float r = 1.0f / std::sqrt(ss / float(nd) + float(cfg.norm_eps));
    for (std::size_t a = 0; a < M; ++a) {
      float acc = 0;
      for (std::size_t cc = 0; cc < d; ++cc)
        for (std::size_t j = 0; j < n; ++j)
          acc = std::fma(W[a * nd + j * d + cc], xt[j * d + cc], acc);
      got[0].values[t * M + a] = acc * r;
    }
  }
  const oracles::NoiseModel m = oracles::noise_model(c, "mixes", got);
  REQUIRE(m.value.size() == T * M);
  const auto v = oracles::noise_judge(got[0].values.data(), m, M);
  CAPTURE(v.reason, v.z_max, v.z_rms);
  CHECK(v.elements == T * M);
  CHECK(v.state == oracles::State::pass);  // without them the tier flags it (rms 1.59)
  CHECK(v.z_rms <= 0.577 * (1 + 4 * 0.026));
}

// The comb's measured scale is never below the entry's half ulp: where every run the scale measures
// rounds to C's nearest float g (at d0 = |g - C| <= ulp(C) / 2), a kernel's result at g's
// neighbour is legitimate, and errs by at most d0 + ulp(g's side) <= 5 ulp(C) / 2 (2 ulp(C) where
// g is a power of two above C), z <= 5 < kNoiseMax. Small sizes and a small eps (n = 3, d = 7,
// 1e-12) converge to the fixed point in a few rounds: the runs often agree there, and a scale of
// d0 alone flagged variant:reciprocal_division's entries at z up to 65.8.
TEST_CASE("noise: the comb's scale admits the neighbours of the nearest float", "[noise]") {
  ref::Config cfg;
  cfg.n = 3;
  cfg.d = 7;
  cfg.hc_eps = 1e-12;
  const std::size_t nn = std::size_t(cfg.n * cfg.n), T = 1024;
  for (std::uint64_t seed = 1; seed <= 2; ++seed) {
    const oracles::OpCase c =
        oracles::generate_case(Op::split_sinkhorn, cfg, T, seed, oracles::Precision::fp32());
    const oracles::Trace<float> none{{"comb", {T, nn}, std::vector<float>(T * nn)}};
    const oracles::NoiseModel m = oracles::noise_model(c, "comb", none);
    REQUIRE(m.value.size() == T * nn);
    for (const float dir : {INFINITY, -INFINITY}) {
      std::vector<float> got(T * nn);
      for (std::size_t i = 0; i < got.size(); ++i) got[i] = std::nextafter(float(m.value[i]), dir);
      const auto v = oracles::noise_judge(got.data(), m, nn);
      CAPTURE(seed, dir, v.reason);
      CHECK(v.z_max <= 5);
    }
  }
}

// The root mean square rule needs (kNoiseMax / kNoiseRms)^2 = 16 independent elements: fewer, and
// one element inside the element limit could exceed it alone. A 2 x 2 comb over 2 tokens has 2
// (of its 8 entries' errors, the sums tie the rest): z = 1.6 everywhere is not judged by it there,
// and is over 16 independent elements.
TEST_CASE("noise: the root mean square is judged over 16 independent elements or more", "[noise]") {
  for (const auto& [elements, independent, flagged] :
       {std::tuple{8, 0.25, false}, {64, 0.25, true}, {15, 1.0, false}, {16, 1.0, true}}) {
    oracles::NoiseModel m;
    m.value.assign(std::size_t(elements), 1.0);
    m.scale.assign(std::size_t(elements), 1e-6);
    m.independent = independent;
    const std::vector<float> got(std::size_t(elements), float(1 + 1.6e-6));
    const auto v = oracles::noise_judge(got.data(), m, 4);
    CAPTURE(elements, independent, v.reason);
    CHECK(v.z_max < oracles::kNoiseMax);
    CHECK(v.z_rms > oracles::kNoiseRms);
    CHECK((v.state == oracles::State::fail) == flagged);
  }
}

// The backward pieces' sums over d (grad_pre_mix, grad_post, grad_comb; the boundary's
// grad_pre_mix over the streams it recomputes) computed here in the orders fp32 kernels use: every
// one within the tier (z at most 6, root mean square at most 1.5), and products of operands rounded
// to tf32 (a tensor core's single pass) flagged, though within the bounds on most cases
// (bench/README.md, "A second tier for the backward's sums over d").
TEST_CASE("noise: the backward's sums over d hold every usual fp32 order", "[noise]") {
  ref::Config cfg;
  cfg.d = 5120;
  const std::size_t n = std::size_t(cfg.n), d = std::size_t(cfg.d), T = 8;
  const auto tf32 = [](float v) {  // round to nearest, ties away (cvt.rna.tf32.f32)
    std::uint32_t b;
    std::memcpy(&b, &v, 4);
    b = (b + 0x1000u) & ~0x1fffu;
    std::memcpy(&v, &b, 4);
    return v;
  };
  using Order = std::function<float(const float*, const float*)>;
  const std::vector<std::pair<std::string, Order>> orders{
      {"forward",
       [&](const float* a, const float* b) {
         float s = 0;
         for (std::size_t i = 0; i < d; ++i) s += a[i] * b[i];
         return s;
       }},
      {"reverse fma",
       [&](const float* a, const float* b) {
         float s = 0;
         for (std::size_t i = d; i-- > 0;) s = std::fma(a[i], b[i], s);
         return s;
       }},
      {"pairwise",
       [&](const float* a, const float* b) {
         std::vector<float> t(d);
         for (std::size_t i = 0; i < d; ++i) t[i] = a[i] * b[i];
         for (std::size_t w = 1; w < d; w *= 2)
           for (std::size_t i = 0; i + w < d; i += 2 * w) t[i] += t[i + w];
         return t[0];
       }},
      {"256 strided threads with fma, then a tree",  // the CUDA kernels' block a token
       [&](const float* a, const float* b) {
         std::vector<float> lane(256, 0.0f);
         for (std::size_t i = 0; i < d; ++i) lane[i % 256] = std::fma(a[i], b[i], lane[i % 256]);
         for (std::size_t w = 128; w > 0; w /= 2)
           for (std::size_t l = 0; l < w; ++l) lane[l] += lane[l + w];
         return lane[0];
       }},
      {"tf32 products",
       [&](const float* a, const float* b) {
         float s = 0;
         for (std::size_t i = 0; i < d; ++i) s += tf32(a[i]) * tf32(b[i]);
         return s;
       }},
  };
  for (const auto& [op, stage] : {std::pair{Op::pre_backward, "grad_pre_mix"},
                                  {Op::post_backward, "grad_post"},
                                  {Op::post_backward, "grad_comb"},
                                  {Op::boundary_backward, "grad_pre_mix"}}) {
    const oracles::OpCase c = oracles::generate_case(op, cfg, T, 11, oracles::Precision::fp32());
    const float* up = c.input("upstream_y").data.data();
    // The boundary's new streams as a kernel recomputes them: x_k = post_k f + sum_j comb_jk R_j,
    // here with fma, last stream first (the model rounds them another way).
    std::vector<float> x;
    if (op == Op::boundary_backward) {
      const auto &f = c.input("f").data, &R = c.input("residual").data,
                 &post = c.input("post").data, &cb = c.input("comb").data;
      x.resize(T * n * d);
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t k = 0; k < n; ++k)
          for (std::size_t i = 0; i < d; ++i) {
            float v = post[t * n + k] * f[t * d + i];
            for (std::size_t j = n; j-- > 0;)
              v = std::fma(cb[(t * n + j) * n + k], R[(t * n + j) * d + i], v);
            x[(t * n + k) * d + i] = v;
          }
    }
    // The stage's rows a_i . b_j, as the model's comment lays them out.
    const bool pre = op != Op::post_backward, comb = std::string(stage) == "grad_comb";
    const float* a = pre ? up : comb ? c.input("residual").data.data() : c.input("f").data.data();
    const float* b = !pre ? up : x.empty() ? c.input("x").data.data() : x.data();
    const std::size_t na = comb ? n : 1;
    for (const auto& [name, sum] : orders) {
      oracles::Trace<float> got{{stage, {T, na * n}, std::vector<float>(T * na * n)}};
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t i = 0; i < na; ++i)
          for (std::size_t j = 0; j < n; ++j)
            got[0].values[(t * na + i) * n + j] = sum(a + (t * na + i) * d, b + (t * n + j) * d);
      const oracles::NoiseModel m = oracles::noise_model(c, stage, got);
      REQUIRE(m.value.size() == T * na * n);
      const auto v = oracles::noise_judge(got[0].values.data(), m, na * n);
      CAPTURE(stage, name, v.reason);
      CHECK(v.elements == T * na * n);
      CHECK((v.state == oracles::State::fail) == (name == "tf32 products"));
    }
  }
}

// RMSNorm's model against the fp32 forms kernels use, computed here: every one within the tier at
// every scale, and an eps of 1e-6 where 1e-20 is specified flagged at an rms of 0.3, where the
// bounds pass it (docs/semantics.md, "The second tier", RMSNorm).
TEST_CASE("noise: RMSNorm's scale holds every usual fp32 form and flags the usual eps", "[noise]") {
  ref::Config cfg;
  cfg.d = 5120;
  const std::size_t d = std::size_t(cfg.d), T = 32;
  struct Form {
    std::string name;
    std::function<float(const float*)> sum;  // of squares
    int rsqrt_ulps;                          // r moved by up to this many ulp (a GPU's rsqrtf: 2)
    bool division, weight_first, reciprocal_mean;
  };
  const auto forward = [&](const float* x) {
    float s = 0;
    for (std::size_t i = 0; i < d; ++i) s += x[i] * x[i];
    return s;
  };
  const auto lanes = [&](const float* x) {  // 256 strided threads with fma, then a tree
    std::vector<float> lane(256, 0.0f);
    for (std::size_t i = 0; i < d; ++i) lane[i % 256] = std::fma(x[i], x[i], lane[i % 256]);
    for (std::size_t w = 128; w > 0; w /= 2)
      for (std::size_t l = 0; l < w; ++l) lane[l] += lane[l + w];
    return lane[0];
  };
  const auto reverse_fma = [&](const float* x) {
    float s = 0;
    for (std::size_t i = d; i-- > 0;) s = std::fma(x[i], x[i], s);
    return s;
  };
  const std::vector<Form> forms{{"forward", forward, 0, false, false, false},
                                {"reverse fma", reverse_fma, 0, false, false, false},
                                {"lanes, rsqrt 2 ulp", lanes, 2, false, false, false},
                                {"forward, rsqrt 2 ulp", forward, 2, false, false, true},
                                {"division", forward, 0, true, false, false},
                                {"weight first", lanes, 1, false, true, true}};
  const auto run = [&](const oracles::OpCase& c, const Form& f, double eps) {
    const float *x = c.input("x").data.data(), *w = c.param("weight").data.data();
    oracles::Trace<float> got{{"y", {T, d}, std::vector<float>(T * d)}};
    for (std::size_t t = 0; t < T; ++t) {
      const float* xt = x + t * d;
      const float S = f.sum(xt);
      const float q = (f.reciprocal_mean ? S * (1.0f / float(d)) : S / float(d)) + float(eps);
      const float r = ulps(1.0f / std::sqrt(q), f.rsqrt_ulps * (t % 3 == 0 ? -1 : 1));
      for (std::size_t i = 0; i < d; ++i)
        got[0].values[t * d + i] = f.division       ? w[i] * (xt[i] / std::sqrt(q))
                                   : f.weight_first ? (w[i] * xt[i]) * r
                                                    : w[i] * (xt[i] * r);
    }
    return got;
  };
  for (const float rms : {0.003f, 0.3f, 1.0f, 40.0f}) {
    oracles::OpCase c = oracles::generate_case(Op::rmsnorm, cfg, T, 3, oracles::Precision::fp32());
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal(0, 1);
    for (float& v : c.inputs.at("x").data) v = rms * normal(rng);
    for (const Form& f : forms) {
      const oracles::Trace<float> got = run(c, f, cfg.norm_eps);
      const oracles::NoiseModel m = oracles::noise_model(c, "y", got);
      REQUIRE(m.value.size() == T * d);
      const auto v = oracles::noise_judge(got[0].values.data(), m, d);
      CAPTURE(rms, f.name, v.reason);
      CHECK(v.state == oracles::State::pass);
      CHECK(v.rms_limit == oracles::kNoiseRms);  // 32 tokens: judged in root mean square
      if (rms == 0.3f && f.name == "lanes, rsqrt 2 ulp") {
        const oracles::Trace<float> bad = run(c, f, 1e-6);
        const auto b = oracles::noise_judge(bad[0].values.data(), m, d);
        CAPTURE(b.reason);
        CHECK(b.state == oracles::State::fail);  // its bounds pass it (python/tests/test_judge.py)
      }
    }
  }
}

// Data whose rounding is biased: every square's residue below the ulp of [64, 128) is just under
// half of it, so each addition there rounds down. A 16-lane kernel's lane sums live in that binade
// and err together, beyond the sequential orders' deviations (z 2.99, root mean square 2.87 before
// such tokens were left unmodelled; bench/README.md, "RMSNorm under the second tier").
TEST_CASE("noise: RMSNorm leaves tokens whose rounding is biased unmodelled", "[noise]") {
  ref::Config cfg;
  cfg.d = 5120;
  const std::size_t d = std::size_t(cfg.d), T = 16, L = 16;
  oracles::OpCase c = oracles::generate_case(Op::rmsnorm, cfg, T, 3, oracles::Precision::fp32());
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> unit(0.2f, 0.3f);
  std::vector<float>& x = c.inputs.at("x").data;
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t i = 0; i < d; ++i) {
      const float sign = rng() % 2 ? 1.0f : -1.0f;
      if (i < L) {
        x[t * d + i] = 8 * sign;
        continue;
      }
      for (;;) {
        const float v = unit(rng), r = std::fmod(v * v, 0x1p-17f) / 0x1p-17f;
        if (r > 0.45f && r < 0.5f) {
          x[t * d + i] = sign * v;
          break;
        }
      }
    }
  const float* w = c.param("weight").data.data();
  oracles::Trace<float> got{{"y", {T, d}, std::vector<float>(T * d)}};
  for (std::size_t t = 0; t < T; ++t) {
    const float* xt = x.data() + t * d;
    std::vector<float> lane(L, 0.0f);
    for (std::size_t i = 0; i < d; ++i) lane[i % L] += xt[i] * xt[i];
    for (std::size_t s = L / 2; s > 0; s /= 2)
      for (std::size_t l = 0; l < s; ++l) lane[l] += lane[l + s];
    const float r = 1.0f / std::sqrt(lane[0] / float(d) + float(cfg.norm_eps));
    for (std::size_t i = 0; i < d; ++i) got[0].values[t * d + i] = w[i] * (xt[i] * r);
  }
  const oracles::NoiseModel m = oracles::noise_model(c, "y", got);
  REQUIRE(m.value.size() == T * d);
  const auto v = oracles::noise_judge(got[0].values.data(), m, d);
  CAPTURE(v.reason);
  CHECK(v.state == oracles::State::pass);
  CHECK(v.elements < T * d);  // the biased tokens are not judged by the tier
}
