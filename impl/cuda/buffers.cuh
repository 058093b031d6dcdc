// Device copies of the harness's host arrays and the way back: stream tensors go up as bf16 bits
// when the configuration stores them as bf16, and outputs go up poisoned first, so that an
// element a kernel never writes comes back as the poison.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "check.cuh"
#include "mhc/impl/kernels.hpp"

namespace mhc::impl::cuda_detail {

// Records that this process now holds a CUDA context (cuda_in_use()).
void mark_in_use() noexcept;

template <class E>
struct Dev {
  E* p = nullptr;
  std::size_t n = 0;
  explicit Dev(std::size_t count) : n(count) {
    mark_in_use();
    if (count) MHC_CUDA_CHECK(cudaMalloc(&p, count * sizeof(E)));
  }
  ~Dev() {
    if (p) cudaFree(p);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

// The harness's poison (a NaN payload that marks "never written") and its bf16 stand-in.
constexpr std::uint32_t kPoison = 0x7FC0DEADu;
constexpr std::uint16_t kPoisonBf16 = 0x7FDEu;

// bf16 bits of v rounded to nearest even (round_bf16, the one host rounding), or the poison's.
inline std::uint16_t to_bf16_bits(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  if (u == kPoison) return kPoisonBf16;
  const float r = round_bf16(v);
  std::memcpy(&u, &r, 4);
  if (std::isnan(v)) u |= 0x00400000u;  // quiet, so a payload in the low half stays a NaN
  return std::uint16_t(u >> 16);
}
inline float from_bf16_bits(std::uint16_t b) {
  const std::uint32_t u = b == kPoisonBf16 ? kPoison : std::uint32_t(b) << 16;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// Host fp32 to device E (float, or bf16 bits) and back.
template <class E>
void up(Dev<E>& d, const float* h) {
  if (!d.n) return;
  if constexpr (std::is_same<E, float>::value) {
    MHC_CUDA_CHECK(cudaMemcpy(d.p, h, d.n * sizeof(float), cudaMemcpyHostToDevice));
  } else {
    std::vector<std::uint16_t> b(d.n);
    for (std::size_t i = 0; i < d.n; ++i) b[i] = to_bf16_bits(h[i]);
    MHC_CUDA_CHECK(cudaMemcpy(d.p, b.data(), d.n * 2, cudaMemcpyHostToDevice));
  }
}
template <class E>
void down(float* h, const Dev<E>& d) {
  if (!d.n) return;
  if constexpr (std::is_same<E, float>::value) {
    MHC_CUDA_CHECK(cudaMemcpy(h, d.p, d.n * sizeof(float), cudaMemcpyDeviceToHost));
  } else {
    std::vector<std::uint16_t> b(d.n);
    MHC_CUDA_CHECK(cudaMemcpy(b.data(), d.p, d.n * 2, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < d.n; ++i) h[i] = from_bf16_bits(b[i]);
  }
}

// An output: the host's (poisoned) buffer goes up first.
template <class E>
struct Out : Dev<E> {
  float* host;
  Out(float* h, std::size_t count) : Dev<E>(count), host(h) { up(*this, h); }
  void back() { down(host, *this); }
};
template <class E>
struct In : Dev<E> {
  In(const float* h, std::size_t count) : Dev<E>(count) { up(*this, h); }
};

inline void sync() {
  MHC_CUDA_CHECK(cudaDeviceSynchronize());
}

// The device's work done, then the outputs copied back to their host arrays.
template <class... O>
void sync_back(O&... outs) {
  sync();
  (outs.back(), ...);
}

}  // namespace mhc::impl::cuda_detail
