// Timings of the CUDA boundary kernels on device-resident data at n = 4, d = 5120 (CUDA events,
// median of `repeats` after 50 ms of calls; inputs rotated over several copies when they would fit
// in L2). bench/cuda_boundary_timing.cu; throws std::runtime_error without a CUDA device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mhc::bench {

// What bounds a call from below, measured on the device: an empty kernel's launch (timed like the
// calls) and the device-to-device copy bandwidth (bytes read + written a second); bytes: what the
// call must read and write at least.
struct DeviceFloor {
  double launch_ms = 0, copy_gbps = 0, bytes = 0;
  // The least time a call can take: max(launch latency, bytes / copy bandwidth).
  double floor_ms() const {
    return launch_ms > bytes / copy_gbps * 1e-6 ? launch_ms : bytes / copy_gbps * 1e-6;
  }
};

// The device's launch latency and copy bandwidth alone (bytes = 0), measured as for the calls.
DeviceFloor cuda_device_floor(int repeats);

// cuda-fused's single pass against the four-launch baseline, the copy bandwidth and the launch
// latency. hc_fn is packed once, outside the timed calls (a weight), and rotated over copies like
// the streams, so that small batches read it from DRAM as a model's layers would. fused_ms splits
// the columns at small token counts (the shipped choice); unsplit_ms is one block per 32 tokens,
// and repack_ms the same with hc_fn repacked in every call (the call as it was before the split).
// same_copy_ms: a device-to-device copy of the call's bytes (half read, half written), timed the
// same way: what moving them alone costs at this size, launch included. queued_ms and host_ms:
// the shipped call queued back to back (queued_ms in cuda_timing.cuh), the device's time a call
// and the host's time to queue one.
struct BoundaryTiming : DeviceFloor {  // bytes: streams, coefficients, hc_fn
  std::size_t tokens = 0;
  bool bf16 = false;
  double fused_ms = 0, unsplit_ms = 0, repack_ms = 0, baseline_ms = 0, same_copy_ms = 0;
  double queued_ms = 0, host_ms = 0;
  double bytes_per_token = 0;  // (2n + 2) d stream elements
};
BoundaryTiming cuda_bench_boundary(std::size_t tokens, bool bf16, int repeats);

// The CUDA boundary backward (impl/cuda/backward.cu, composed from the pieces', fp32 arithmetic)
// on T tokens, stream tensors fp32 or bf16, from saved x and mixes, its parameters' gradients
// summed in token order or by atomic adds. floor: max(an empty kernel's launch, the least traffic
// / copy bandwidth), the least traffic being that of a single pass recomputing x: f, R, the
// upstream x and y read and d f, d R written ((3 + 3n) d stream elements a token), hc_fn read and
// d hc_fn written (fp32). The composed kernels also read the saved x, and pass over the streams
// several times.
struct BackwardTiming : DeviceFloor {
  std::size_t tokens = 0;
  bool bf16 = false, atomics = false;
  double ms = 0;
};
BackwardTiming cuda_bench_backward(std::size_t tokens, bool bf16, bool atomics, int repeats);

// The fused kernel's configurations (tokens a block, columns a chunk, pipeline stages, L2
// prefetch size), the shipped one first, timed the same way on random inputs, all with `splits`
// splits of the columns (0: each its own choice); same_bits: every output equals the shipped
// configuration's, bit for bit (the arithmetic of a token depends on the split alone).
struct TcTiming {
  std::string name;
  double ms = 0;
  int splits = 0;          // the split the launch used
  bool same_bits = false;  // as the shipped configuration's at that split
};
std::vector<TcTiming> cuda_bench_boundary_sweep(std::size_t tokens, bool bf16, int repeats,
                                                int splits = 0);

// The tensor-copy shape the shipped launch chose for bf16 streams on this device, by timing its
// candidates on its first call of 16384 tokens or more ("" before such a call).
std::string cuda_fused_tma_shape();

// A 64-bit FNV-1a digest of every output of cuda-fused's shipped launch on the benchmark's inputs
// at T tokens with `splits` splits of the columns (0: the shipped choice), so that two builds of
// the kernel can be shown to give the same bits (`mhc-bench-cuda digest` in each).
std::uint64_t cuda_boundary_digest(std::size_t tokens, bool bf16, int splits);

// The process's first bf16 call of the shipped launch (shipped_tc, this file's instantiation of
// cuda-fused's code) at T tokens (T >= 16384; throws if a call has run the tensor copies
// already), which times the tensor-copy shapes on its first 16384 tokens and then runs all T:
// whether its outputs are those of cp.async's kernel (ShippedTc) at the same split, bit for bit,
// on the benchmark's inputs.
bool cuda_first_call_same_bits(std::size_t tokens);

// What the fused boundary's data movement alone reaches (bench/cuda_movement.cu): bf16 streams,
// T tokens (a multiple of 64), each token's rows copied through shared-memory stages and stored
// back unchanged, with no arithmetic (or the stated multiply-adds), in several shapes and ways of
// filling the stages, the first shape again last (the run's spread); `row` gets each as it is
// measured, so that a run cut short keeps what it measured. Inputs are used once a call
// (T >= 16384 is past the L2). moved: one call on cleared outputs gave x = R and y = f.
struct MovementTiming {
  std::string name;
  int blocks_per_sm = 0, smem_bytes = 0;
  double ms = 0;
  bool moved = false;
};
void cuda_bench_movement(std::size_t tokens, int repeats,
                         const std::function<void(const MovementTiming&)>& row);

}  // namespace mhc::bench
