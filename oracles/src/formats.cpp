// The number formats, their rounding and the named declarations: data alone, so that the fixture
// reader's fuzz target links them without the oracle.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "mhc/oracles/bounded.hpp"
#include "mhc/oracles/generate.hpp"

namespace mhc::bnd {

const FormatInfo& format_info(Format f) {
  static const FormatInfo info[] = {
      {"fp32", 0x1.0p-24, 0x1.fffffep127, 0x1.0p-126},
      {"tf32", 0x1.0p-11, 0x1.ffep127, 0x1.0p-126},  // 10 explicit mantissa bits, fp32's range
      {"bf16", 0x1.0p-8, 0x1.fep127, 0x1.0p-126},    // 7 explicit mantissa bits, fp32's range
      {"fp16", 0x1.0p-11, 65504, 0x1.0p-14},         // 10 explicit mantissa bits, 5 exponent bits
  };
  return info[int(f)];
}

Format format_from_name(const std::string& name) {
  for (Format f : {Format::fp32, Format::tf32, Format::bf16, Format::fp16})
    if (name == format_info(f).name) return f;
  throw std::invalid_argument("unknown number format '" + name + "' (fp32, tf32, bf16, fp16)");
}

const std::vector<Part>& declaration_parts() {
  using F = Format;
  static const std::vector<F> stored = {F::fp32, F::bf16, F::fp16};
  static const std::vector<Part> parts = {
      {"inputs", &Declaration::inputs, stored, "stream tensors read (x, residual, f)"},
      {"weights", &Declaration::weights, stored, "parameters (hc_fn, hc_scale, hc_base, norms)"},
      {"mixes", &Declaration::mixes, stored, "the mixes, stored before the split"},
      {"coefficients", &Declaration::coefficients, stored, "pre, post, comb, stored before use"},
      {"streams", &Declaration::streams, stored, "stream tensors written"},
      {"products",
       &Declaration::products,
       {F::fp32, F::tf32, F::bf16, F::fp16},
       "the projection's operands"},
      {"accumulation", &Declaration::accumulation, {F::fp32, F::bf16}, "the projection's sums"},
      {"intermediates", &Declaration::intermediates, stored,
       "every result inside hc_pre, hc_post, RMSNorm and the mixes (eager frameworks)"},
  };
  return parts;
}

const std::vector<std::pair<std::string, Declaration>>& presets() {
  static const std::vector<std::pair<std::string, Declaration>> all = [] {
    Declaration tf32, bf16, bf16p, fp16;
    tf32.products = Format::tf32;
    bf16.streams = Format::bf16;
    bf16p.products = Format::bf16;
    fp16.inputs = fp16.weights = fp16.streams = fp16.products = Format::fp16;
    return std::vector<std::pair<std::string, Declaration>>{
        {"fp32", {}}, {"tf32", tf32}, {"bf16", bf16}, {"bf16-projection", bf16p}, {"fp16", fp16}};
  }();
  return all;
}

}  // namespace mhc::bnd

namespace mhc::oracles::gen {

float round_bf16(float x) {
  if (std::isnan(x)) return x;
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

float round_to(bnd::Format f, float x) {
  return f == bnd::Format::bf16 ? round_bf16(x) : f == bnd::Format::fp16 ? round_fp16(x) : x;
}

float round_fp16(float x) {
  if (!std::isfinite(x) || x == 0) return x;
  // The spacing of fp16 values at |x|: 2^(e - 10) for 2^e <= |x|, at least 2^-24 (subnormals).
  const double spacing = std::ldexp(1.0, std::max(std::ilogb(std::fabs(double(x))), -14) - 10);
  const double r = std::nearbyint(double(x) / spacing) * spacing;  // ties to even
  return std::fabs(r) > 65504 ? std::copysign(INFINITY, x) : float(r);
}

}  // namespace mhc::oracles::gen
