// Timings of the CUDA boundary kernels on device-resident data at n = 4, d = 5120 (CUDA events,
// median of `repeats` after a warm-up; inputs rotated over several copies when they would fit in
// L2). bench/cuda_boundary_timing.cu; throws std::runtime_error without a CUDA device.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace mhc::bench {

// cuda-fused's single pass against the four-launch baseline, and the copy bandwidth.
struct BoundaryTiming {
  std::size_t tokens = 0;
  bool bf16 = false;
  double fused_ms = 0, baseline_ms = 0, copy_gbps = 0;  // copy: device-to-device, read + write
  double bytes_per_token = 0;                           // (2n + 2) d elements
};
BoundaryTiming cuda_bench_boundary(std::size_t tokens, bool bf16, int repeats);

// The fused kernel's configurations (tokens a block, columns a chunk, pipeline stages, L2
// prefetch size), the shipped one first, timed the same way on random inputs; same_bits: every
// output equals the shipped configuration's, bit for bit (the arithmetic of a token does not
// depend on the configuration).
struct TcTiming {
  std::string name;
  double ms = 0;
  bool same_bits = false;
};
std::vector<TcTiming> cuda_bench_boundary_sweep(std::size_t tokens, bool bf16, int repeats);

}  // namespace mhc::bench
