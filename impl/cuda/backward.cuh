// The CUDA backends' backward kernels of the pieces (impl/cuda/backward.cu), fp32: on device
// arrays (asynchronous, on the default stream) and as the Backend's functions on host arrays.
#pragma once

#include <cstddef>
#include <memory>

#include "buffers.cuh"
#include "device.cuh"
#include "mhc/impl/kernels.hpp"

namespace mhc::impl::cuda_detail {

// Scratch of the backward kernels, grown as needed: the per-token shares of a deterministic
// parameter gradient, the mixes' r per token, the Sinkhorn's iterates and denominators.
struct BackwardWork {
  std::unique_ptr<Dev<float>> shares, ranges, r, iterates, denominators, dm, dx;
  float* get(std::unique_ptr<Dev<float>>& b, std::size_t count) {
    if (!b || b->n < count) b = std::make_unique<Dev<float>>(count);
    return b->p;
  }
};

// The pieces' backward on device arrays, as Backend::Backward's (kernels.hpp). The parameters'
// gradients are summed over tokens in token order (atomics false: deterministic, a separate pass)
// or by atomic adds; dparams of the split is [3 + M]: d hc_scale, then d hc_base.
void pre_backward_dev(const Dims& c, std::size_t T, const float* x, const float* p, const float* g,
                      float* dx, float* dp);
void post_backward_dev(const Dims& c, std::size_t T, const float* f, const float* R,
                       const float* post, const float* comb, const float* g, float* df, float* dR,
                       float* dpost, float* dcomb);
void rmsnorm_backward_dev(const Dims& c, std::size_t T, const float* x, const float* w,
                          const float* g, float* dx, float* dw, bool atomics, BackwardWork& work);
void mixes_backward_dev(const Dims& c, std::size_t T, const float* x, const float* W,
                        const float* g, float* dx, float* dW, bool atomics, BackwardWork& work);
void split_backward_dev(const Dims& c, std::size_t T, const float* m, const float* s,
                        const float* b, const float* g_pre, const float* g_post,
                        const float* g_comb, float* dm, float* dparams, bool atomics,
                        BackwardWork& work);

// The boundary's backward on device arrays, composed from the pieces' as runner::run_backward
// composes it, from the forward's saved x (the new streams) and mixes; g_*: the upstream
// gradients of the boundary's outputs; d_*: the gradients of its inputs and parameters (d_params:
// d hc_scale [3], then d hc_base [M]).
struct BoundaryBackwardDev {
  const float *f, *residual, *post, *comb, *pre_mix, *hc_fn, *hc_scale, *hc_base;
  const float *x, *mixes;
  const float *g_x, *g_y, *g_mixes, *g_pre, *g_post, *g_comb;
  float *d_f, *d_residual, *d_post, *d_comb, *d_pre_mix, *d_hc_fn, *d_params;
};
void boundary_backward_dev(const Dims& c, std::size_t T, const BoundaryBackwardDev& a, bool atomics,
                           BackwardWork& work);

// The Backend's backward table over these; `need` checks the configuration and the device first.
Backend::Backward cuda_backward(bool atomics, void (*need)(const KernelConfig&));

}  // namespace mhc::impl::cuda_detail
