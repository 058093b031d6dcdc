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

}  // namespace mhc::impl
