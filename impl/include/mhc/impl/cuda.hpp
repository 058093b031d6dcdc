// The CUDA backends (impl/cuda): the mHC pieces, the single-pass fused boundary and the
// multi-kernel baseline, on the first CUDA device. Their Backend functions take host arrays
// (the harness's), copy them to the device (stream tensors as bf16 when the configuration says
// so), poison the outputs there, run, check every call and launch, and copy back.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "mhc/impl/kernels.hpp"

namespace mhc::impl {

// A failed CUDA call or launch: the call, file and line, and CUDA's message.
struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// 0 when CUDA is not compiled in or no device is present. Asked once, in a child process, so that
// asking does not initialize CUDA here.
int cuda_device_count();
std::string cuda_device_name();
// Whether this process has initialized CUDA to run a kernel (its children then cannot use it).
bool cuda_in_use();

// Device memory of device 0 for plug-ins that take it (checked; CudaError on failure,
// NotCompiled without CUDA). cuda_free(nullptr) does nothing.
void* cuda_alloc(std::size_t bytes);
void cuda_free(void* p) noexcept;
void cuda_copy_to_device(void* dst, const void* src, std::size_t bytes);
void cuda_copy_to_host(void* dst, const void* src, std::size_t bytes);

const Backend& cuda();        // one kernel per piece; the boundary as four launches (baseline)
const Backend& cuda_fused();  // the boundary in one pass over the streams

// cuda-fused's boundary splits each token range's columns over this many blocks (clamped to one
// per 128 columns); 0, the default: as many as fill the device once at small token counts, 1 at
// large ones. A token's bits depend on the split alone; the tests judge several.
void cuda_fused_splits(int splits);
// cuda-fused's bf16 boundary at d = 5120 runs boundary_tc_tma, whose stages a producer warp fills
// with tensor copies, from 16384 tokens (where it is faster), in whichever of its shapes its first
// such call timed fastest. `shape` (an index into cuda_fused_tensor_copy_shapes()) runs that
// shape at every token count, so that the tests judge each at every split; -1, the default, the
// shipped choice. Every shape gives the same bits at the same split.
void cuda_fused_tensor_copies(int shape);
// Tests only: cuda-fused's boundary fills the workspace of its splits' sums with NaN before each
// pass, so that a finishing kernel that read the sums before the pass stored them (its launch
// overlaps the pass) gives NaN rather than the previous call's identical sums.
void cuda_fused_poison_sums(bool on);
// Tests only: the split's backward at n = 4 runs a thread a token, as it does for other n and
// past 38 rounds, rather than 16 lanes a token, so that the tests can show both give the same bits.
void cuda_split_backward_one_thread(bool on);
// The shapes' names, "tb64 cw64 s3 tma" first (none without CUDA).
std::vector<std::string> cuda_fused_tensor_copy_shapes();

// One mma.m16n8k8 on tf32 operands, d = a b + c, as cuda-fused's projection issues it (same
// fragment layout): a [16 x 8] and c, d [16 x 8] row-major, b [8 x 8] with b[k * 8 + j]. The
// values of a and b should be tf32 values (low 13 bits zero). For the tests of the arithmetic
// that kernel's bound assumes of the tensor cores.
void cuda_mma_tf32(const float* a, const float* b, const float* c, float* d);

}  // namespace mhc::impl
