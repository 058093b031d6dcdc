// The fused boundary kernel on the GPU against the four-launch baseline and the device-to-device
// copy bandwidth, at n=4, d=5120, and the sweep of the fused kernel's configurations, each checked
// to give the shipped one's bits (exit 1 if one does not). Usage: mhc-bench-cuda [repeats]
#include <cstdio>
#include <cstdlib>
#include <map>
#include <utility>

#include "cuda_boundary_timing.hpp"
#include "mhc/impl/cuda.hpp"

int main(int argc, char** argv) {
  using namespace mhc::impl;
  using namespace mhc::bench;
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 50;
  if (repeats < 1) {
    std::fprintf(stderr, "mhc-bench-cuda: repeats must be a positive integer, got '%s'\n", argv[1]);
    return 2;
  }
  if (cuda_device_count() == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  std::printf(
      "device %s; boundary n=4 d=5120; CUDA events, median of %d after a warm-up; "
      "bytes (2n+2)*d per token\n",
      cuda_device_name().c_str(), repeats);
  std::printf("%-6s %7s %10s %10s %10s %10s %9s %8s\n", "dtype", "tokens", "fused ms", "base ms",
              "fused GB/s", "copy GB/s", "fraction", "speedup");
  std::map<std::pair<bool, std::size_t>, BoundaryTiming> runs;
  for (bool bf16 : {false, true})
    for (std::size_t T : {4096u, 16384u, 65536u}) {
      const auto r = runs[{bf16, T}] = cuda_bench_boundary(T, bf16, repeats);
      const double gbps = r.bytes_per_token * double(T) / (r.fused_ms * 1e-3) / 1e9;
      std::printf("%-6s %7zu %10.4f %10.4f %10.1f %10.1f %9.2f %8.2f\n", bf16 ? "bf16" : "fp32", T,
                  r.fused_ms, r.baseline_ms, gbps, r.copy_gbps, gbps / r.copy_gbps,
                  r.baseline_ms / r.fused_ms);
    }
  // The fused kernel's configurations on the same boundary (same method; the copy bandwidth of
  // the table above), the shipped one first.
  std::printf(
      "\nconfigurations of the fused kernel (tb: tokens a block, cw: columns a chunk, s: stages, "
      "L2: cp.async's L2 prefetch size), random inputs; same: outputs bit-identical to the "
      "first\n");
  std::printf("%-6s %7s %-30s %10s %9s %5s\n", "dtype", "tokens", "config", "ms", "fraction",
              "same");
  int differing = 0;
  for (bool bf16 : {false, true})
    for (std::size_t T : {16384u, 65536u}) {
      const auto& r = runs[{bf16, T}];
      for (const auto& v : cuda_bench_boundary_sweep(T, bf16, repeats)) {
        const double gbps = r.bytes_per_token * double(T) / (v.ms * 1e-3) / 1e9;
        std::printf("%-6s %7zu %-30s %10.4f %9.2f %5s\n", bf16 ? "bf16" : "fp32", T, v.name.c_str(),
                    v.ms, gbps / r.copy_gbps, v.same_bits ? "yes" : "NO");
        differing += v.same_bits ? 0 : 1;
      }
    }
  // A configuration is only a different schedule of the same arithmetic: different bits are a bug.
  if (differing) std::printf("FAIL: %d configurations differ from the shipped one\n", differing);
  return differing ? 1 : 0;
}
