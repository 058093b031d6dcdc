// Every CUDA call and launch of impl/cuda checked: a failure throws CudaError naming the call,
// the file and the line, and CUDA's message.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "mhc/impl/cuda.hpp"

namespace mhc::impl::cuda_detail {

inline void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess)
    throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " +
                    cudaGetErrorString(e));
}

}  // namespace mhc::impl::cuda_detail

#define MHC_CUDA_CHECK(x) ::mhc::impl::cuda_detail::check((x), #x, __FILE__, __LINE__)
#define MHC_CUDA_LAUNCHED() \
  ::mhc::impl::cuda_detail::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
