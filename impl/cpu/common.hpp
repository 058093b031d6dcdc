// Pieces shared by the CPU backends: rounding to storage formats, per-token split_sinkhorn, and a
// token-parallel loop.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "mhc/impl/kernels.hpp"

namespace mhc::impl::cpu_detail {

inline float store(const KernelConfig& c, float v) {
  return round_to(c.streams, v);
}
inline float operand(const KernelConfig& c, float v) {
  return round_to(c.products, v);
}
// Rounds a coefficient (pre, post, comb) to its storage.
inline auto coefficient(const KernelConfig& c) {
  return [f = c.coefficients](float v) { return round_to(f, v); };
}
// An intermediate result of hc_pre, hc_post, RMSNorm or the mixes, rounded as declared.
inline float step(const KernelConfig& c, float v) {
  return round_to(c.intermediates, v);
}
// Throw NotCompiled unless the intermediates, or also the mixes and the coefficients, are in fp32
// (for the backends that do not implement those narrower).
inline void need_fp32_intermediates(const KernelConfig& c, const std::string& backend) {
  if (c.intermediates != Format::fp32)
    throw NotCompiled(backend + " keeps the intermediates of the pieces in fp32 only");
}
inline void need_fp32_stages(const KernelConfig& c, const char* backend) {
  if (c.mixes != Format::fp32 || c.coefficients != Format::fp32)
    throw NotCompiled(std::string(backend) + " stores the mixes and coefficients in fp32 only");
  need_fp32_intermediates(c, backend);
}

// One token of hc_split_sinkhorn, in fp32, in the order of the seeds' kernel.
inline void split_token(const KernelConfig& c, const float* m, const float* s, const float* b,
                        float* pre, float* post, float* comb) {
  const int n = c.n;
  const float eps = c.hc_eps;
  for (int j = 0; j < n; ++j) pre[j] = 1.0f / (1.0f + std::exp(-(m[j] * s[0] + b[j]))) + eps;
  for (int j = 0; j < n; ++j)
    post[j] = 2.0f * (1.0f / (1.0f + std::exp(-(m[n + j] * s[1] + b[n + j]))));
  float* C = comb;
  for (int i = 0; i < n * n; ++i) C[i] = m[2 * n + i] * s[2] + b[2 * n + i];
  for (int j = 0; j < n; ++j) {
    float mx = C[j * n];
    for (int k = 1; k < n; ++k) mx = std::max(mx, C[j * n + k]);
    float rs = 0;
    for (int k = 0; k < n; ++k) rs += (C[j * n + k] = std::exp(C[j * n + k] - mx));
    for (int k = 0; k < n; ++k) C[j * n + k] = C[j * n + k] / rs + eps;
  }
  auto columns = [&] {
    for (int k = 0; k < n; ++k) {
      float cs = 0;
      for (int j = 0; j < n; ++j) cs += C[j * n + k];
      for (int j = 0; j < n; ++j) C[j * n + k] = C[j * n + k] / (cs + eps);
    }
  };
  columns();
  for (int it = 1; it < c.iters; ++it) {
    for (int j = 0; j < n; ++j) {
      float rs = 0;
      for (int k = 0; k < n; ++k) rs += C[j * n + k];
      for (int k = 0; k < n; ++k) C[j * n + k] = C[j * n + k] / (rs + eps);
    }
    columns();
  }
}

// fn(t) for t in [0, T), contiguous ranges of tokens per thread.
template <class Fn>
void parallel_tokens(unsigned threads, std::size_t T, Fn fn) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = unsigned(std::min<std::size_t>(threads, T));
  if (threads <= 1) {
    for (std::size_t t = 0; t < T; ++t) fn(t);
    return;
  }
  std::vector<std::thread> pool;
  const std::size_t chunk = (T + threads - 1) / threads;
  for (unsigned w = 0; w < threads; ++w)
    pool.emplace_back([=, &fn] {
      for (std::size_t t = w * chunk; t < std::min(T, (w + 1) * chunk); ++t) fn(t);
    });
  for (auto& th : pool) th.join();
}

}  // namespace mhc::impl::cpu_detail

namespace mhc::impl {
// The CPU backward kernels (impl/cpu/backward.cpp): parameter gradients summed over tokens in one
// pass, or threaded in per-range partial sums.
Backend::Backward cpu_backward(const BackwardKnobs& knobs, bool threaded);
}  // namespace mhc::impl
