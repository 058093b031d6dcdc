// Bulk and tensor copies between global and shared memory and the transaction barriers that
// track them (sm_90, PTX ISA: cp.async.bulk, cp.async.bulk.tensor, mbarrier): a producer warp
// asks for a stage's bytes and the warps that use it wait on its barrier, with no block barrier.
// Shared-memory addresses are 32-bit (__cvta_generic_to_shared); a bulk copy's addresses and size
// are multiples of 16 bytes. The tensor maps that tensor copies read are encoded on the host
// (stream_map).
#pragma once

#include <cuda.h>  // CUtensorMap and its enums only: the encoder is found through the runtime
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "check.cuh"

namespace mhc::impl::cuda_detail {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return unsigned(__cvta_generic_to_shared(p));
}
// A barrier of `count` arrivals a phase; then, before any thread or copy uses it,
// bar_init_fence() and a block barrier.
__device__ __forceinline__ void bar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void bar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// One arrival that also expects `bytes` more of copies before the phase completes.
__device__ __forceinline__ void bar_expect(unsigned bar, unsigned bytes) {
  asm volatile(
      "{\n .reg .b64 s;\n mbarrier.arrive.expect_tx.shared::cta.b64 s, [%0], %1;\n}\n" ::"r"(bar),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void bar_arrive(unsigned bar) {
  asm volatile("{\n .reg .b64 s;\n mbarrier.arrive.shared::cta.b64 s, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
// Until the phase of parity `parity` (0 for the first, 1 for the second, ...) has completed. A
// wait of more than 2^34 ns (17 s of the device's clock) can only be a barrier that never
// completes (a copy never issued, bytes miscounted): it traps, so that the launch fails instead of
// hanging.
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
  for (long long start = -1;;) {
    unsigned done;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (done) return;
    long long now;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(now));
    if (start < 0)
      start = now;
    else if (now - start > (1ll << 34))
      __trap();
  }
}

// This thread's writes to shared memory ordered before later bulk copies into it (a copy is
// another proxy than the thread's stores).
__device__ __forceinline__ void fence_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// `bytes` from global src to shared dst, counted on barrier bar when they land.
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes,
                                          unsigned bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
// `bytes` from shared src to global dst, in this thread's bulk group (bulk_commit, then
// bulk_wait_read before src is overwritten, bulk_wait before the block ends).
__device__ __forceinline__ void bulk_store(void* dst, unsigned src, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
// Tensor copies of the box at coordinates (c0, c1[, c2]) of a tensor map (innermost first), into
// shared dst counted on barrier bar, or from shared src in this thread's bulk group. Boxes past
// the tensor's bounds are zero-filled when loaded (their bytes still count) and clipped when
// stored.
__device__ __forceinline__ void tensor_load2(unsigned dst, const CUtensorMap* map, int c0, int c1,
                                             unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tensor_load3(unsigned dst, const CUtensorMap* map, int c0, int c1,
                                             int c2, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tensor_store2(const CUtensorMap* map, int c0, int c1,
                                              unsigned src) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map),
      "r"(c0), "r"(c1), "r"(src)
      : "memory");
}
__device__ __forceinline__ void tensor_store3(const CUtensorMap* map, int c0, int c1, int c2,
                                              unsigned src) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
          map),
      "r"(c0), "r"(c1), "r"(c2), "r"(src)
      : "memory");
}

// Named barrier ID (not 0: __syncthreads has it) of the first THREADS threads of the block, for
// warps that work while a producer warp does not take part (or for them and the producer).
template <int THREADS, int ID = 1>
__device__ __forceinline__ void sync_threads_of() {
  static_assert(ID > 0 && ID < 16 && THREADS % 32 == 0, "a named barrier of whole warps");
  asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(THREADS) : "memory");
}

// The driver's tensor-map encoder, through the runtime (no link to the driver library).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_encoder() {
  static const auto fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    MHC_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                    cudaEnableDefault, &q));
    if (!p || q != cudaDriverEntryPointSuccess)
      throw std::runtime_error("the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// The tensor map of stream tensor p of elements E: [T][d] (rows = 1: f, y) or [T][rows][d] (R, x),
// in boxes of box_cols columns, box_rows rows and box_tokens tokens. A box of 128 bytes of columns
// can be 128-byte swizzled (SwizzledBoxes); L2 is asked for 256 bytes a miss. The tensor must be
// 16-byte aligned with rows of a multiple of 16 bytes.
template <class E>
CUtensorMap stream_map(const E* p, int rows, std::size_t d, std::size_t T, int box_cols,
                       int box_tokens, int box_rows = 1, bool swizzle = true) {
  static_assert(sizeof(E) == 2 || sizeof(E) == 4, "bf16 or fp32 elements");
  constexpr std::size_t es = sizeof(E);
  if (reinterpret_cast<std::uintptr_t>(p) % 16 || d * es % 16)
    throw std::invalid_argument("stream_map: tensor copies need 16-byte aligned rows");
  if (box_rows < 1 || box_rows > rows)
    throw std::invalid_argument("stream_map: a box of more rows than the tensor has");
  const cuuint64_t dims[3] = {cuuint64_t(d), cuuint64_t(rows), cuuint64_t(T)};
  const cuuint64_t strides[2] = {cuuint64_t(d * es), cuuint64_t(std::size_t(rows) * d * es)};
  const cuuint32_t box[3] = {cuuint32_t(box_cols), cuuint32_t(box_rows), cuuint32_t(box_tokens)};
  const cuuint32_t ones[3] = {1, 1, 1};
  // rows = 1: the rank-2 map (d, T), whose token stride is strides[0].
  const cuuint64_t dims2[2] = {dims[0], dims[2]};
  const cuuint32_t box2[2] = {box[0], box[2]};
  CUtensorMap m;
  const CUresult e = tensor_encoder()(
      &m, es == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
      rows == 1 ? 2 : 3, const_cast<E*>(p), rows == 1 ? dims2 : dims, strides,
      rows == 1 ? box2 : box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
      swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (e != CUDA_SUCCESS)
    throw std::runtime_error("stream_map: cuTensorMapEncodeTiled failed (CUresult " +
                             std::to_string(int(e)) + ")");
  return m;
}

}  // namespace mhc::impl::cuda_detail
