// What the per-piece kernels and the fused boundary share: the dimensions, the stream element
// types (fp32 or bf16, rounded to nearest even on the device), and one token of split_sinkhorn.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "mhc/impl/kernels.hpp"

namespace mhc::impl::cuda_detail {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;
constexpr int kMaxN = 8, kMaxM = (2 + kMaxN) * kMaxN;

struct Dims {
  int n, d, iters;
  float hc_eps, norm_eps;
  __host__ __device__ int M() const { return (2 + n) * n; }
};
inline Dims dims(const KernelConfig& c) {
  return {c.n, c.d, c.iters, c.hc_eps, c.norm_eps};
}

inline unsigned blocks_for(std::size_t count, unsigned threads) {
  return unsigned((count + threads - 1) / threads);
}

__device__ inline float ld(const float* p, std::size_t i) {
  return p[i];
}
__device__ inline float ld(const bf16* p, std::size_t i) {
  return __bfloat162float(p[i]);
}
__device__ inline void st(float* p, std::size_t i, float v) {
  p[i] = v;
}
__device__ inline void st(bf16* p, std::size_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}
// CP adjacent elements from i (aligned to CP): one 4- or 8-byte access for two.
template <int CP>
__device__ inline void ld_cols(const float* p, std::size_t i, float (&v)[CP]) {
  if constexpr (CP == 2) {
    const float2 q = *reinterpret_cast<const float2*>(p + i);
    v[0] = q.x;
    v[1] = q.y;
  } else {
    for (int k = 0; k < CP; ++k) v[k] = p[i + std::size_t(k)];
  }
}
template <int CP>
__device__ inline void ld_cols(const bf16* p, std::size_t i, float (&v)[CP]) {
  if constexpr (CP == 2) {
    const float2 q = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p + i));
    v[0] = q.x;
    v[1] = q.y;
  } else {
    for (int k = 0; k < CP; ++k) v[k] = ld(p, i + std::size_t(k));
  }
}
template <int CP>
__device__ inline void st_cols(float* p, std::size_t i, const float (&v)[CP]) {
  if constexpr (CP == 2)
    *reinterpret_cast<float2*>(p + i) = make_float2(v[0], v[1]);
  else
    for (int k = 0; k < CP; ++k) p[i + std::size_t(k)] = v[k];
}
template <int CP>
__device__ inline void st_cols(bf16* p, std::size_t i, const float (&v)[CP]) {
  if constexpr (CP == 2)
    *reinterpret_cast<__nv_bfloat162*>(p + i) = __floats2bfloat162_rn(v[0], v[1]);
  else
    for (int k = 0; k < CP; ++k) st(p, i + std::size_t(k), v[k]);
}

__device__ inline float zero(const float*) {
  return 0.0f;
}
__device__ inline bf16 zero(const bf16*) {
  return __float2bfloat16_rn(0.0f);
}

__device__ inline float sigmoid(float z) {
  return 1.0f / (1.0f + expf(-z));
}

// One token of hc_split_sinkhorn, in registers and local memory (n <= 8); NN > 0 fixes n at
// compile time, so that everything stays in registers.
template <int NN = 0>
__device__ void split_token(const Dims& c, const float* m, const float* s, const float* b,
                            float* pre, float* post, float* comb) {
  const int n = NN > 0 ? NN : c.n;
  const float eps = c.hc_eps;
  for (int j = 0; j < n; ++j) {
    pre[j] = sigmoid(m[j] * s[0] + b[j]) + eps;
    post[j] = 2.0f * sigmoid(m[n + j] * s[1] + b[n + j]);
  }
  float C[(NN > 0 ? NN : kMaxN) * (NN > 0 ? NN : kMaxN)];
  for (int j = 0; j < n; ++j) {
    float mx = -INFINITY;
    for (int k = 0; k < n; ++k) {
      C[j * n + k] = m[2 * n + j * n + k] * s[2] + b[2 * n + j * n + k];
      mx = fmaxf(mx, C[j * n + k]);
    }
    float rs = 0;
    for (int k = 0; k < n; ++k) rs += (C[j * n + k] = expf(C[j * n + k] - mx));
    for (int k = 0; k < n; ++k) C[j * n + k] = C[j * n + k] / rs + eps;
  }
  for (int it = 0; it < c.iters; ++it) {
    if (it > 0)
      for (int j = 0; j < n; ++j) {
        float rs = 0;
        for (int k = 0; k < n; ++k) rs += C[j * n + k];
        for (int k = 0; k < n; ++k) C[j * n + k] = C[j * n + k] / (rs + eps);
      }
    for (int k = 0; k < n; ++k) {
      float cs = 0;
      for (int j = 0; j < n; ++j) cs += C[j * n + k];
      for (int j = 0; j < n; ++j) C[j * n + k] = C[j * n + k] / (cs + eps);
    }
  }
  for (int i = 0; i < n * n; ++i) comb[i] = C[i];
}

// Sum of `count` values per thread over the block; result in out[0..count) of thread 0.
template <int COUNT>
__device__ void block_sum(float* v, float* shared /* [COUNT][32] */) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  constexpr int count = COUNT;
#pragma unroll
  for (int i = 0; i < count; ++i) {
    float x = v[i];
    for (int o = 16; o > 0; o /= 2) x += __shfl_down_sync(0xffffffffu, x, o);
    if (lane == 0) shared[i * 32 + warp] = x;
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int i = 0; i < count; ++i) {
      float x = 0;
      for (int w = 0; w < warps; ++w) x += shared[i * 32 + w];
      v[i] = x;
    }
  __syncthreads();
}

}  // namespace mhc::impl::cuda_detail
