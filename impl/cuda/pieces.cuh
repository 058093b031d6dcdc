// The `cuda` backend's kernels, one per piece (impl/cuda/pieces.cu): on host arrays for the
// Backend, and the boundary as four launches on device arrays (cuda-fused's fallback and the
// benchmark's baseline).
#pragma once

#include <cstddef>

#include "device.cuh"
#include "mhc/impl/kernels.hpp"

namespace mhc::impl::cuda_detail {

// Host arrays in and out; stream tensors on the device as the configuration stores them.
void run_mixes(const KernelConfig& k, std::size_t T, const float* x, const float* W, float* out);
void run_split(const KernelConfig& k, std::size_t T, const float* m, const float* s, const float* b,
               float* pre, float* post, float* comb);
void run_pre(const KernelConfig& k, std::size_t T, const float* x, const float* p, float* y);
void run_post(const KernelConfig& k, std::size_t T, const float* f, const float* R,
              const float* post, const float* comb, float* y);
void run_rmsnorm(const KernelConfig& k, std::size_t T, const float* x, const float* g, float* y);

// hc_post, mixes, split_sinkhorn and hc_pre as four launches on device arrays (S: float or bf16),
// in the order of the boundary's arguments; asynchronous.
template <class S>
void boundary_four_launches(const Dims& c, std::size_t T, const S* f, const S* R, const float* post,
                            const float* comb, const float* pre_mix, const float* W,
                            const float* scale, const float* base, S* x, S* y, float* mixes,
                            float* pre, float* postout, float* combout);
extern template void boundary_four_launches<float>(const Dims&, std::size_t, const float*,
                                                   const float*, const float*, const float*,
                                                   const float*, const float*, const float*,
                                                   const float*, float*, float*, float*, float*,
                                                   float*, float*);
extern template void boundary_four_launches<bf16>(const Dims&, std::size_t, const bf16*,
                                                  const bf16*, const float*, const float*,
                                                  const float*, const float*, const float*,
                                                  const float*, bf16*, bf16*, float*, float*,
                                                  float*, float*);

}  // namespace mhc::impl::cuda_detail
