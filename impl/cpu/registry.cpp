#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "mhc/impl/cuda.hpp"
#include "mhc/impl/kernels.hpp"
#include "mhc/impl/plugin.hpp"
#include "mhc/impl/variants.hpp"

namespace mhc::impl {

const std::vector<const Backend*>& backends() {
  static const std::vector<const Backend*> all{&cpu(), &cpu_fused()};
  return all;
}

const std::vector<const Backend*>& gpu_backends() {
  static const std::vector<const Backend*> all{&cuda(), &cuda_fused()};
  return all;
}

const Backend* find_backend(const std::string& name) {
  if (is_plugin(name)) return &load_plugin(name.substr(7));
  for (const Backend* b : backends())
    if (b->name == name) return b;
  for (const Backend* b : gpu_backends())
    if (b->name == name) return b;
  static const std::vector<Backend> self_test = [] {
    std::vector<Backend> v;
    for (const auto& var : variant_catalogue()) v.push_back(make_backend(var));
    return v;
  }();
  for (const Backend& b : self_test)
    if (b.name == name) return &b;
  return nullptr;
}

namespace {
float round_bits(float x, int drop) {
  if (std::isnan(x)) return x;
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  const std::uint32_t half = (1u << (drop - 1)) - 1, lsb = (u >> drop) & 1u;
  u = (u + half + lsb) & ~((1u << drop) - 1);  // ties to even; carries into the exponent
  std::memcpy(&x, &u, 4);
  return x;
}
}  // namespace

float round_bf16(float x) {
  return round_bits(x, 16);
}
float round_tf32(float x) {
  return round_bits(x, 13);
}
float round_fp16(float x) {
  if (!std::isfinite(x) || x == 0) return x;
  // The spacing of fp16 values at |x|: 2^(e - 10) for 2^e <= |x|, at least 2^-24 (subnormals).
  const double ax = std::fabs(double(x));
  const double spacing = std::ldexp(1.0, std::max(std::ilogb(ax), -14) - 10);
  const double r = std::nearbyint(double(x) / spacing) * spacing;  // ties to even
  return std::fabs(r) > 65504 ? std::copysign(INFINITY, x) : float(r);
}
float round_to(Format f, float x) {
  switch (f) {
    case Format::tf32:
      return round_tf32(x);
    case Format::bf16:
      return round_bf16(x);
    case Format::fp16:
      return round_fp16(x);
    case Format::fp32:
      break;
  }
  return x;
}

}  // namespace mhc::impl
