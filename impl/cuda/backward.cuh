// The CUDA backends' backward kernels of the pieces (impl/cuda/backward.cu), fp32, on host arrays.
#pragma once

#include "mhc/impl/kernels.hpp"

namespace mhc::impl::cuda_detail {

// The parameters' gradients summed over tokens in token order (atomics false: deterministic) or
// by atomic adds; `need` checks the configuration and the device before each call.
Backend::Backward cuda_backward(bool atomics, void (*need)(const KernelConfig&));

}  // namespace mhc::impl::cuda_detail
