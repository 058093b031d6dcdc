// The CUDA backends' backward kernels of the pieces (impl/cuda/backward.cu), fp32 arithmetic on
// fp32 or bf16 streams: on device arrays (asynchronous, on the default stream) and as the
// Backend's functions on host arrays.
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

// The pieces' backward on device arrays, as Backend::Backward's (kernels.hpp), with stream tensors
// of type S (float, or bf16: read as bf16, stream gradients stored rounded to nearest even; all
// else fp32). The parameters' gradients are summed over tokens in token order (atomics false:
// deterministic, a separate pass) or by atomic adds; dparams of the split is [3 + M]: d hc_scale,
// then d hc_base. Instantiated for float and bf16.
template <class S>
void pre_backward_dev(const Dims& c, std::size_t T, const S* x, const float* p, const S* g, S* dx,
                      float* dp);
// G: the upstream gradient's type, S for the piece, float for the boundary's fp32 workspace.
template <class S, class G>
void post_backward_dev(const Dims& c, std::size_t T, const S* f, const S* R, const float* post,
                       const float* comb, const G* g, S* df, S* dR, float* dpost, float* dcomb);
template <class S>
void rmsnorm_backward_dev(const Dims& c, std::size_t T, const S* x, const float* w, const S* g,
                          S* dx, float* dw, bool atomics, BackwardWork& work);
template <class S>
void mixes_backward_dev(const Dims& c, std::size_t T, const S* x, const float* W, const float* g,
                        S* dx, float* dW, bool atomics, BackwardWork& work);
void split_backward_dev(const Dims& c, std::size_t T, const float* m, const float* s,
                        const float* b, const float* g_pre, const float* g_post,
                        const float* g_comb, float* dm, float* dparams, bool atomics,
                        BackwardWork& work);

// The boundary's backward on device arrays, composed from the pieces' as runner::run_backward
// composes it, from the forward's saved x (the new streams) and mixes; g_*: the upstream
// gradients of the boundary's outputs; d_*: the gradients of its inputs and parameters (d_params:
// d hc_scale [3], then d hc_base [M]). The stream tensors are S; the gradient of x between the
// pieces stays fp32 (the workspace), as the fused boundary keeps it.
template <class S>
struct BoundaryBackwardDev {
  const S *f, *residual;
  const float *post, *comb, *pre_mix, *hc_fn, *hc_scale, *hc_base;
  const S* x;
  const float* mixes;
  const S *g_x, *g_y;
  const float *g_mixes, *g_pre, *g_post, *g_comb;
  S *d_f, *d_residual;
  float *d_post, *d_comb, *d_pre_mix, *d_hc_fn, *d_params;
};
template <class S>
void boundary_backward_dev(const Dims& c, std::size_t T, const BoundaryBackwardDev<S>& a,
                           bool atomics, BackwardWork& work);

// The Backend's backward table over these; `need` checks the configuration and the device first.
Backend::Backward cuda_backward(bool atomics, void (*need)(const KernelConfig&));

}  // namespace mhc::impl::cuda_detail
