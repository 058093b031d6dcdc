// Bulk copies between global and shared memory and the transaction barriers that track them
// (sm_90, PTX ISA: cp.async.bulk, mbarrier): a producer warp asks for a stage's bytes and the
// warps that use it wait on its barrier, with no block barrier. Shared-memory addresses are
// 32-bit (__cvta_generic_to_shared); a bulk copy's addresses and size are multiples of 16 bytes.
#pragma once

#include <cuda_runtime.h>

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
// `bytes` at global src into L2, for a later copy.
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
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
// A barrier of the first `threads` threads of the block (id 1: __syncthreads has 0), for warps
// that work while a producer warp does not take part.
template <int THREADS>
__device__ __forceinline__ void sync_threads_of() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(THREADS) : "memory");
}

}  // namespace mhc::impl::cuda_detail
