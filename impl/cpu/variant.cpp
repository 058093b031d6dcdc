// The configurable straightforward fp32 kernel of the mutation self-test (see variants.hpp).
// Deliberately plain: one token at a time, every choice a branch.
#include "mhc/impl/variants.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include "common.hpp"

namespace mhc::impl {
namespace {
using cpu_detail::coefficient;
using cpu_detail::need_fp32_intermediates;
using cpu_detail::store;

// tf32 operand bits of v as impl/cuda's split_tf32 forms them: hi to nearest (ties away), lo the
// exact remainder cut to tf32.
float tf32_hi(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  b = (b + 0x1000u) & 0xFFFFE000u;
  std::memcpy(&v, &b, 4);
  return v;
}
float tf32_cut(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  b &= 0xFFFFE000u;
  std::memcpy(&v, &b, 4);
  return v;
}
// One mma's c + p[0..8) as the least accurate tensor core the CUDA kernel's bound admits
// (docs/semantics.md, "The tensor-core projection", step 2): the (exact) addends cut toward zero
// to the 24-bit window of the largest, the sum cut to fp32.
float mma_sum(float c, const double* p) {
  double big = std::fabs(double(c));
  for (int i = 0; i < 8; ++i) big = std::max(big, std::fabs(p[i]));
  if (big == 0 || !std::isfinite(big)) {
    double s = double(c);
    for (int i = 0; i < 8; ++i) s += p[i];
    return float(s);
  }
  const double lsb = std::ldexp(1.0, std::ilogb(big) - 23);
  double s = std::trunc(double(c) / lsb) * lsb;
  for (int i = 0; i < 8; ++i) s += std::trunc(p[i] / lsb) * lsb;  // exact: multiples of lsb
  const float r = float(s);                                       // then toward zero
  return std::fabs(double(r)) > std::fabs(s) ? std::nextafter(r, 0.0f) : r;
}
// sum_i w[i] x[i] over n streams of d columns as cuda-fused's boundary_tc forms it: per stream,
// chunks of 32 columns summed from zero by chained mma over 8 columns (ah bl, al bh, ah bh),
// each chunk added in fp32; the streams' sums added in order.
float tc_dot(const float* w, const float* x, std::size_t n, std::size_t d) {
  float total = 0;
  for (std::size_t k = 0; k < n; ++k) {
    float acc = 0;
    for (std::size_t c0 = 0; c0 < d; c0 += 32) {
      float part = 0;
      for (std::size_t s0 = c0; s0 < std::min(d, c0 + 32); s0 += 8) {
        double p[3][8] = {};
        for (std::size_t i = s0; i < std::min(d, s0 + 8); ++i) {
          const float a = x[k * d + i], b = w[k * d + i];
          const float ah = tf32_hi(a), al = tf32_cut(a - ah), bh = tf32_hi(b),
                      bl = tf32_cut(b - bh);
          p[0][i - s0] = double(ah) * double(bl);
          p[1][i - s0] = double(al) * double(bh);
          p[2][i - s0] = double(ah) * double(bh);
        }
        for (const auto& q : p) part = mma_sum(part, q);
      }
      acc += part;
    }
    total = k ? total + acc : acc;
  }
  return total;
}

struct Kernel {
  Variant v;

  float sum(std::vector<float>& t) const {
    const std::size_t n = t.size();
    switch (v.sum) {
      case Variant::Sum::forward: {
        float s = 0;
        for (float x : t) s += x;
        return s;
      }
      case Variant::Sum::reverse: {
        float s = 0;
        for (std::size_t i = n; i-- > 0;) s += t[i];
        return s;
      }
      case Variant::Sum::pairwise: {
        for (std::size_t w = 1; w < n; w *= 2)
          for (std::size_t i = 0; i + w < n; i += 2 * w) t[i] += t[i + w];
        return n ? t[0] : 0.0f;
      }
      case Variant::Sum::blocked: {
        float total = 0;
        for (std::size_t b = 0; b < n; b += 32) {
          float s = 0;
          for (std::size_t i = b; i < std::min(n, b + 32); ++i) s += t[i];
          total += s;
        }
        return total;
      }
    }
    return 0;
  }
  // sum_i a[i] * b[i*sb]; acc: the running sum's format (the mixes projection's, declared or
  // bf16_accumulation's)
  float dot(const float* a, const float* b, std::size_t n, std::size_t sb = 1,
            Format acc = Format::fp32) const {
    if (acc != Format::fp32) {
      float s = 0;
      for (std::size_t i = 0; i < n; ++i) s = round_to(acc, s + a[i] * b[i * sb]);
      return s;
    }
    if (v.fma) {
      float s = 0;
      if (v.sum == Variant::Sum::reverse)
        for (std::size_t i = n; i-- > 0;) s = std::fma(a[i], b[i * sb], s);
      else
        for (std::size_t i = 0; i < n; ++i) s = std::fma(a[i], b[i * sb], s);
      return s;
    }
    std::vector<float> t(n);
    for (std::size_t i = 0; i < n; ++i) t[i] = a[i] * b[i * sb];
    return sum(t);
  }
  float div(float a, float b) const { return v.reciprocal ? a * (1.0f / b) : a / b; }
  float exp(float x) const {
    return ulp(v.exp2_exp ? std::exp2(x * 1.44269504088896341f) : std::exp(x), x);
  }
  // r one ulp up or down, or kept, as a hash of the argument's bits picks (ulp_math), inside the
  // function's range [lo, hi]: glibc's expf is within about half an ulp, a GPU's within 2 ulp.
  // (glibc's tanhf errs by up to 2.19 ulp already: tanh_sigmoid is that case.)
  float ulp(float r, float arg, float lo = 0, float hi = INFINITY) const {
    if (!v.ulp_math || !std::isfinite(r)) return r;
    std::uint32_t b;
    std::memcpy(&b, &arg, 4);
    std::uint64_t h = (b + 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    const int k = int(h % 3) - 1;
    return k == 0 ? r : std::clamp(std::nextafter(r, k > 0 ? INFINITY : -INFINITY), lo, hi);
  }
  // x with its mantissa cut to `bits` bits: an estimate of that accuracy (relative error up to
  // 2^-bits, always toward zero).
  static float cut(float x, int bits) {
    std::uint32_t b;
    std::memcpy(&b, &x, 4);
    b &= ~((1u << (23 - bits)) - 1u);
    std::memcpy(&x, &b, 4);
    return x;
  }
  float sigmoid(float z) const {
    if (v.tanh_sigmoid) return 0.5f * (1.0f + std::tanh(0.5f * z));
    const float e = exp(-z);
    return div(1.0f, 1.0f + (v.sigmoid_exp_bits ? cut(e, v.sigmoid_exp_bits) : e));
  }
  float normalise(float x, float s, Variant::Eps mode, float eps) const {
    if (v.sinkhorn_recip_bits) {  // a reciprocal estimate of that accuracy, no Newton step
      const float r =
          cut(1.0f / (mode == Variant::Eps::in_sum ? s + eps : s), v.sinkhorn_recip_bits);
      return mode == Variant::Eps::after ? x * r + eps : x * r;
    }
    switch (mode) {
      case Variant::Eps::in_sum:
        return div(x, s + eps);
      case Variant::Eps::after:
        return div(x, s) + eps;
      case Variant::Eps::none:
        break;
    }
    return div(x, s);
  }
  // A stream element stored as declared, or in the variant's own format.
  float stored(const KernelConfig& c, float x) const {
    return round_to(v.streams != Format::fp32 ? v.streams : c.streams, x);
  }
  float rscale(const float* x, std::size_t m, float eps, bool of_sum) const {
    const float ss = dot(x, x, m);
    const float q = (of_sum ? ss : div(ss, float(m))) + eps;
    const float r = ulp(div(1.0f, std::sqrt(q)), q);
    if (!v.rsqrt_estimate) return r;
    std::uint32_t b;  // a hardware estimate's accuracy: relative error up to 2^-11
    std::memcpy(&b, &r, 4);
    b &= 0xFFFFF000u;
    float e;
    std::memcpy(&e, &b, 4);
    return e;
  }

  // [n, d] stream-major as [d, n]: a sum over it runs column by column across the streams.
  static std::vector<float> column_major(const std::vector<float>& a, std::size_t n,
                                         std::size_t d) {
    std::vector<float> t(n * d);
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t cc = 0; cc < d; ++cc) t[cc * n + j] = a[j * d + cc];
    return t;
  }

  void mixes_token(const KernelConfig& c, const float* x, const float* W, float* out) const {
    const std::size_t n = std::size_t(c.n), d = std::size_t(c.d), nd = n * d;
    const std::size_t M = std::size_t(c.mix());
    if (v.rms == Variant::Rms::stream_mean) {
      for (std::size_t a = 0; a < M; ++a) {
        float acc = 0;
        for (std::size_t j = 0; j < n; ++j)
          acc += dot(W + a * nd + j * d, x + j * d, d) * rscale(x + j * d, d, c.norm_eps, false);
        out[a] = acc;
      }
      return;
    }
    const float r = rscale(x, nd, c.norm_eps, v.rms == Variant::Rms::token_sum);
    std::vector<float> xs(x, x + nd);
    if (v.d_major)
      for (std::size_t j = 0; j < n; ++j)
        for (std::size_t cc = 0; cc < d; ++cc) xs[cc * n + j] = x[j * d + cc];
    if (v.scale_first)
      for (float& e : xs) e *= r;
    if (v.d_major_order) xs = column_major(xs, n, d);  // the same products, another order
    for (std::size_t a = 0; a < M; ++a) {
      std::vector<float> w(W + a * nd, W + (a + 1) * nd);
      const Format operands = v.products != Format::fp32 ? v.products : c.products;
      for (std::size_t i = 0; i < nd; ++i) {
        w[i] = round_to(operands, w[i]);
        xs[i] = round_to(operands, xs[i]);
      }
      if (v.d_major_order) w = column_major(w, n, d);
      const float p = v.tensor_core && tensor_cores_within_fp32(int(n), int(d))
                          ? tc_dot(w.data(), xs.data(), n, d)
                          : dot(w.data(), xs.data(), nd, 1,
                                v.bf16_accumulation ? Format::bf16 : c.accumulation);
      out[a] = v.scale_first ? p : p * r;
    }
  }

  void split_token(const KernelConfig& c, const float* m, const float* s, const float* b,
                   float* pre, float* post, float* C) const {
    const int n = c.n;
    const float eps = c.hc_eps * v.hc_eps_scale;
    const float s0 = s[v.scales_swapped ? 1 : 0], s1 = s[v.scales_swapped ? 0 : 1];
    for (int j = 0; j < n; ++j) {
      pre[j] = sigmoid(m[j] * s0 + b[j]);
      if (v.pre_eps) pre[j] += eps;
      post[j] = sigmoid(m[n + j] * s1 + b[n + j]);
      if (v.post_factor2) post[j] *= 2.0f;
      if (v.post_eps) post[j] += eps;
    }
    std::vector<float> t(static_cast<std::size_t>(n));
    for (int j = 0; j < n; ++j) {
      float mx = -INFINITY;
      for (int k = 0; k < n; ++k)
        mx = std::max(mx, m[2 * n + j * n + k] * s[2] + b[2 * n + j * n + k]);
      if (v.no_max_subtraction) mx = 0;
      for (int k = 0; k < n; ++k)
        t[std::size_t(k)] = C[j * n + k] =
            exp(m[2 * n + j * n + k] * s[2] + b[2 * n + j * n + k] - mx);
      const float rs = sum(t);
      for (int k = 0; k < n; ++k) C[j * n + k] = normalise(C[j * n + k], rs, v.softmax_eps, eps);
    }
    auto rows = [&] {
      for (int j = 0; j < n; ++j) {
        for (int k = 0; k < n; ++k) t[std::size_t(k)] = C[j * n + k];
        const float rs = sum(t);
        for (int k = 0; k < n; ++k) C[j * n + k] = normalise(C[j * n + k], rs, v.row_eps, eps);
      }
    };
    auto cols = [&] {
      for (int k = 0; k < n; ++k) {
        for (int j = 0; j < n; ++j) t[std::size_t(j)] = C[j * n + k];
        const float cs = sum(t);
        for (int j = 0; j < n; ++j) C[j * n + k] = normalise(C[j * n + k], cs, v.col_eps, eps);
      }
    };
    if (v.first_row) rows();
    cols();
    for (int it = 1; it < c.iters + v.iters_delta; ++it) {
      rows();
      cols();
    }
  }

  void hc_pre_token(const KernelConfig& c, const float* x, const float* p, float* y) const {
    const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
    for (std::size_t cc = 0; cc < d; ++cc) y[cc] = stored(c, dot(p, x + cc, n, d));
  }

  void hc_post_token(const KernelConfig& c, const float* f, const float* R, const float* post,
                     const float* comb, float* y) const {
    const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
    std::vector<float> w(n + 1), col(n + 1);
    for (std::size_t k = 0; k < n; ++k) {
      w[0] = post[k];
      for (std::size_t j = 0; j < n; ++j)
        w[j + 1] = v.comb_transposed ? comb[k * n + j] : comb[j * n + k];
      for (std::size_t cc = 0; cc < d; ++cc) {
        col[0] = f[cc];
        for (std::size_t j = 0; j < n; ++j) col[j + 1] = R[j * d + cc];
        y[k * d + cc] = stored(c, dot(w.data(), col.data(), n + 1));
      }
    }
  }

  void rmsnorm_token(const KernelConfig& c, const float* x, const float* g, float* y) const {
    const std::size_t d = std::size_t(c.d);
    // The Rms deviations are the mixes' statistic's (ref::Semantics::rms), not RMSNorm's.
    const float r = rscale(x, d, c.norm_eps, false);
    for (std::size_t i = 0; i < d; ++i) y[i] = stored(c, g[i] * (x[i] * r));
  }
};

}  // namespace

std::string backend_name(const Variant& v) {
  return (v.wrong ? "mutant:" : "variant:") + v.name;
}

Backend make_backend(const Variant& v) {
  auto k = std::make_shared<Kernel>(Kernel{v});
  Backend b;
  b.name = backend_name(v);
  b.description =
      v.wrong ? "mutation self-test: a wrong kernel" : "mutation self-test: a legitimate kernel";
  b.mixes = [k](const KernelConfig& c, std::size_t T, const float* x, const float* W, float* out) {
    need_fp32_intermediates(c, backend_name(k->v));
    const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), M = std::size_t(c.mix());
    for (std::size_t t = 0; t < T; ++t) k->mixes_token(c, x + t * nd, W, out + t * M);
    const Format stored = k->v.mixes != Format::fp32 ? k->v.mixes : c.mixes;
    for (std::size_t i = 0; i < T * M; ++i) out[i] = round_to(stored, out[i]);
  };
  b.split_sinkhorn = [k](const KernelConfig& c, std::size_t T, const float* m, const float* s,
                         const float* bb, float* pre, float* post, float* comb) {
    const std::size_t n = std::size_t(c.n), M = std::size_t(c.mix());
    for (std::size_t t = 0; t < T; ++t)
      k->split_token(c, m + t * M, s, bb, pre + t * n, post + t * n, comb + t * n * n);
    for (float* w : {pre, post}) std::transform(w, w + T * n, w, coefficient(c));
    std::transform(comb, comb + T * n * n, comb, coefficient(c));
  };
  b.hc_pre = [k](const KernelConfig& c, std::size_t T, const float* x, const float* p, float* y) {
    need_fp32_intermediates(c, backend_name(k->v));
    const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
    for (std::size_t t = 0; t < T; ++t) k->hc_pre_token(c, x + t * n * d, p + t * n, y + t * d);
  };
  b.hc_post = [k](const KernelConfig& c, std::size_t T, const float* f, const float* R,
                  const float* post, const float* comb, float* y) {
    need_fp32_intermediates(c, backend_name(k->v));
    const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
    for (std::size_t t = 0; t < T; ++t)
      k->hc_post_token(c, f + t * d, R + t * n * d, post + t * n, comb + t * n * n, y + t * n * d);
  };
  b.rmsnorm = [k](const KernelConfig& c, std::size_t T, const float* x, const float* g, float* y) {
    need_fp32_intermediates(c, backend_name(k->v));
    const std::size_t d = std::size_t(c.d);
    for (std::size_t t = 0; t < T; ++t) k->rmsnorm_token(c, x + t * d, g, y + t * d);
  };
  b.boundary = [b](const KernelConfig& c, std::size_t T, const BoundaryIn& in,
                   const BoundaryOut& out) {
    b.hc_post(c, T, in.f, in.residual, in.post, in.comb, out.x);
    b.mixes(c, T, out.x, in.hc_fn, out.mixes);
    b.split_sinkhorn(c, T, out.mixes, in.hc_scale, in.hc_base, out.pre, out.post, out.comb);
    b.hc_pre(c, T, out.x, in.pre_mix, out.y);
  };
  b.block = make_block(b, v.block);
  b.backward = cpu_backward(v.backward, false);
  b.backward.block = make_block_backward(b, cpu_sublayers(), v.backward);
  return b;
}

const std::vector<Variant>& variant_catalogue() {
  static const std::vector<Variant> all = [] {
    std::vector<Variant> v;
    auto legit = [&v](const std::string& name, auto set) {
      Variant x;
      x.name = name;
      set(x);
      v.push_back(x);
    };
    auto wrong = [&v](const std::string& name, const std::string& explains, auto set) {
      Variant x;
      x.name = name;
      x.wrong = true;
      x.explains = explains;
      set(x);
      v.push_back(x);
    };
    using E = Variant::Eps;
    legit("reversed_sums", [](Variant& x) { x.sum = Variant::Sum::reverse; });
    legit("pairwise_sums", [](Variant& x) { x.sum = Variant::Sum::pairwise; });
    legit("blocked_sums", [](Variant& x) { x.sum = Variant::Sum::blocked; });
    legit("fma", [](Variant& x) { x.fma = true; });
    legit("fma_reversed", [](Variant& x) {
      x.fma = true;
      x.sum = Variant::Sum::reverse;
    });
    legit("reciprocal_division", [](Variant& x) { x.reciprocal = true; });
    legit("tanh_sigmoid", [](Variant& x) { x.tanh_sigmoid = true; });
    legit("exp2_exp", [](Variant& x) { x.exp2_exp = true; });
    legit("scale_before_projection", [](Variant& x) { x.scale_first = true; });
    legit("tensor_core_projection", [](Variant& x) { x.tensor_core = true; });
    legit("ulp_math", [](Variant& x) { x.ulp_math = true; });
    legit("d_major_sums", [](Variant& x) { x.d_major_order = true; });
    legit("all_choices", [](Variant& x) {
      x.sum = Variant::Sum::pairwise;
      x.reciprocal = x.tanh_sigmoid = x.exp2_exp = x.scale_first = true;
    });
    wrong("softmax_eps_inside", "softmax_eps_in_sum",
          [](Variant& x) { x.softmax_eps = E::in_sum; });
    wrong("softmax_without_eps", "softmax_eps_none", [](Variant& x) { x.softmax_eps = E::none; });
    wrong("col_eps_outside", "col_eps_after", [](Variant& x) { x.col_eps = E::after; });
    wrong("row_eps_outside", "row_eps_after", [](Variant& x) { x.row_eps = E::after; });
    wrong("col_without_eps", "col_eps_none", [](Variant& x) { x.col_eps = E::none; });
    wrong("row_without_eps", "row_eps_none", [](Variant& x) { x.row_eps = E::none; });
    wrong("first_division_row", "first_division_row", [](Variant& x) { x.first_row = true; });
    wrong("one_more_iteration", "iters+1", [](Variant& x) { x.iters_delta = 1; });
    wrong("one_less_iteration", "iters-1", [](Variant& x) { x.iters_delta = -1; });
    wrong("comb_transposed", "comb_transposed", [](Variant& x) { x.comb_transposed = true; });
    wrong("post_without_factor2", "post_without_factor2",
          [](Variant& x) { x.post_factor2 = false; });
    wrong("post_with_eps", "post_with_eps", [](Variant& x) { x.post_eps = true; });
    wrong("pre_without_eps", "pre_without_eps", [](Variant& x) { x.pre_eps = false; });
    wrong("scales_swapped", "scales_swapped", [](Variant& x) { x.scales_swapped = true; });
    wrong("rms_per_stream", "rms_per_stream",
          [](Variant& x) { x.rms = Variant::Rms::stream_mean; });
    wrong("rms_of_sum", "rms_of_sum", [](Variant& x) { x.rms = Variant::Rms::token_sum; });
    wrong("d_major_flattening", "d_major_flattening", [](Variant& x) { x.d_major = true; });
    wrong("hc_eps_x10", "hc_eps_x10", [](Variant& x) { x.hc_eps_scale = 10; });
    wrong("no_max_subtraction", "no_max_subtraction",
          [](Variant& x) { x.no_max_subtraction = true; });
    wrong("bf16_accumulation", "", [](Variant& x) { x.bf16_accumulation = true; });
    wrong("rsqrt_estimate", "", [](Variant& x) { x.rsqrt_estimate = true; });
    wrong("tf32_products_undeclared", "undeclared_products_tf32",
          [](Variant& x) { x.products = Format::tf32; });
    wrong("bf16_products_undeclared", "undeclared_products_bf16",
          [](Variant& x) { x.products = Format::bf16; });
    wrong("bf16_mixes_undeclared", "undeclared_mixes_bf16",
          [](Variant& x) { x.mixes = Format::bf16; });
    wrong("bf16_streams_undeclared", "undeclared_streams_bf16",
          [](Variant& x) { x.streams = Format::bf16; });
    wrong("sinkhorn_reciprocal_estimate", "", [](Variant& x) { x.sinkhorn_recip_bits = 18; });
    wrong("sigmoid_exp_estimate", "", [](Variant& x) { x.sigmoid_exp_bits = 19; });
    wrong("block_pre_not_shifted", "pre_not_shifted",
          [](Variant& x) { x.block.shifted_pre = false; });
    wrong("block_attention_not_causal", "attention_not_causal",
          [](Variant& x) { x.block.causal = false; });
    wrong("block_attn_norm_skipped", "attn_norm_skipped",
          [](Variant& x) { x.block.attn_norm = false; });
    wrong("block_routing_not_normalised", "routing_not_normalised",
          [](Variant& x) { x.block.normalise_routing = false; });
    wrong("block_comb_transposed_at_ffn", "comb_transposed_at_ffn",
          [](Variant& x) { x.block.comb_transposed_site = 1; });
    using O = BackwardKnobs::Order;
    using S = BackwardKnobs::Sinkhorn;
    legit("backward_reversed_tokens", [](Variant& x) { x.backward.order = O::reverse; });
    legit("backward_atomics", [](Variant& x) { x.backward.order = O::shuffled; });
    legit("backward_recomputed_iterates", [](Variant& x) { x.backward.recompute = true; });
    legit("backward_pairwise_sums",
          [](Variant& x) { x.backward.sums = BackwardKnobs::Sums::pairwise; });
    legit("backward_lane_sums", [](Variant& x) { x.backward.sums = BackwardKnobs::Sums::lanes; });
    legit("backward_new_streams_kept",
          [](Variant& x) { x.backward.new_streams = BackwardKnobs::NewStreams::kept; });
    legit("backward_new_streams_accumulated",
          [](Variant& x) { x.backward.new_streams = BackwardKnobs::NewStreams::accumulated; });
    wrong("backward_den_without_eps", "", [](Variant& x) { x.backward.den_eps = false; });
    wrong("backward_comb_transposed", "", [](Variant& x) { x.backward.comb_transposed = true; });
    wrong("backward_post_without_factor2", "post_without_factor2",
          [](Variant& x) { x.backward.post_factor2 = false; });
    wrong("backward_without_mean_term", "", [](Variant& x) { x.backward.mean_term = false; });
    wrong("backward_sinkhorn_converged", "",
          [](Variant& x) { x.backward.sinkhorn = S::converged; });
    wrong("backward_sinkhorn_last_round", "",
          [](Variant& x) { x.backward.sinkhorn = S::last_round; });
    wrong("backward_routing_detached", "", [](Variant& x) { x.backward.routing = false; });
    wrong("backward_pre_not_shifted", "", [](Variant& x) { x.backward.shifted_pre = false; });
    wrong("backward_tf32_products", "", [](Variant& x) { x.backward.tf32_products = true; });
    wrong("backward_bf16_saved_mixes", "",
          [](Variant& x) { x.backward.saved_mixes = Format::bf16; });
    return v;
  }();
  return all;
}

}  // namespace mhc::impl
