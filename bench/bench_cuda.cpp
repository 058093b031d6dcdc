// The fused boundary kernel on the GPU, n=4, d=5120, from a decode step's token counts to 65536:
// against its floor max(launch latency, bytes / copy bandwidth), the copy bandwidth, the kernel
// unsplit and with hc_fn repacked in every call, and the four-launch baseline; then the sweep of
// the fused kernel's configurations, each checked to give the shipped one's bits at the same
// split of the columns (exit 1 if one does not); and the boundary's backward against its floor,
// fp32 and bf16 streams.
// Usage: mhc-bench-cuda [repeats [table|sweep [TOKENS,...]|movement]] | digest | first-call
// [TOKENS]; with `table`, the two tables without the sweep; with `sweep`, the sweep and the rows
// of the first table that it needs (only at the token counts listed, of the sweep's own: a small
// size under compute-sanitizer); with `movement`, only what the boundary's data movement alone
// reaches (bf16, 16384 and 65536 tokens; exit 1 if a shape does not move every byte).
// mhc-bench-cuda digest: one line per dtype, token count and split of the outputs' digest, to
// compare two builds' bits.
// mhc-bench-cuda first-call [TOKENS]: the process's first bf16 call from 16384 tokens (default
// 16456: a last block part full) times the tensor-copy shapes on a prefix, then runs every token;
// exit 1 unless its outputs are cp.async's kernel's, bit for bit.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cuda_boundary_timing.hpp"
#include "mhc/impl/cuda.hpp"

namespace {

// The data movement alone, bf16 (cuda_bench_movement): the fraction of the copy bandwidth at
// (2n+2)d elements a token, as in the table.
int movement(int repeats) {
  using namespace mhc::bench;
  const DeviceFloor dev = cuda_device_floor(repeats);
  std::printf(
      "device %s; the boundary's data movement alone, bf16 streams, n=4 d=5120 (rows copied "
      "through shared memory and stored back unchanged); CUDA events, median of %d after 50 ms "
      "of calls; copy %.1f GB/s; fraction: (2n+2)*d elements a token / time / copy bandwidth\n",
      mhc::impl::cuda_device_name().c_str(), repeats, dev.copy_gbps);
  std::printf("%7s  %-46s %6s %8s %10s %9s %6s\n", "tokens", "shape", "blocks", "smem KB", "ms",
              "fraction", "moved");
  int failed = 0;
  for (std::size_t T : {16384u, 65536u})
    cuda_bench_movement(T, repeats, [&](const MovementTiming& r) {
      const double gbps = double(T) * 10 * 5120 * 2 / (r.ms * 1e-3) / 1e9;
      std::printf("%7zu  %-46s %4d/SM %8.1f %10.4f %9.2f %6s\n", T, r.name.c_str(), r.blocks_per_sm,
                  r.smem_bytes / 1024.0, r.ms, gbps / dev.copy_gbps, r.moved ? "yes" : "NO");
      std::fflush(stdout);
      failed += r.moved ? 0 : 1;
    });
  if (failed) std::printf("FAIL: %d shapes did not move every byte\n", failed);
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mhc::impl;
  using namespace mhc::bench;
  if (argc > 1 && std::string(argv[1]) == "digest") {
    if (cuda_device_count() == 0) {
      std::printf("SKIP: no CUDA device\n");
      return 77;
    }
    for (bool bf16 : {false, true})
      for (std::size_t T : {1u, 8u, 31u, 64u, 256u, 1024u, 4096u, 16384u})
        for (int splits : {0, 1, 3, 40})
          std::printf("digest %s %zu %d %016llx\n", bf16 ? "bf16" : "fp32", T, splits,
                      static_cast<unsigned long long>(cuda_boundary_digest(T, bf16, splits)));
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "first-call") {
    char* end = nullptr;
    const long long T = argc > 2 ? std::strtoll(argv[2], &end, 10) : 16456;
    if (argc > 3 || (argc > 2 && (*end || T < 16384 || T > 262144))) {  // 27 GB on the device
      std::fprintf(stderr,
                   "mhc-bench-cuda first-call: one token count from 16384 to 262144, got '%s'\n",
                   argv[argc - 1]);
      return 2;
    }
    if (cuda_device_count() == 0) {
      std::printf("SKIP: no CUDA device\n");
      return 77;
    }
    const bool same = cuda_first_call_same_bits(std::size_t(T));
    std::printf("%s: the first bf16 call at %lld tokens (shape %s, timed on a prefix) %s\n",
                same ? "PASS" : "FAIL", T, cuda_fused_tma_shape().c_str(),
                same ? "gives the bits of cp.async's kernel" : "DIFFERS from cp.async's kernel");
    return same ? 0 : 1;
  }
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 50;
  if (repeats < 1) {
    std::fprintf(stderr, "mhc-bench-cuda: repeats must be a positive integer, got '%s'\n", argv[1]);
    return 2;
  }
  const std::string mode = argc > 2 ? argv[2] : "";
  if (mode != "" && mode != "table" && mode != "sweep" && mode != "movement") {
    std::fprintf(stderr,
                 "mhc-bench-cuda: the second argument is 'table', 'sweep' or 'movement', got "
                 "'%s'\n",
                 argv[2]);
    return 2;
  }
  // The sweep's token counts, each with its split of the columns (0: the launch's own).
  // At 8 tokens a block has fewer tokens than its width (the stages' rows past the last).
  std::vector<std::pair<std::size_t, int>> swept = {
      {8, 40}, {256, 8}, {4096, 0}, {16384, 0}, {65536, 0}};
  if (argc > 3) {
    if (mode != "sweep") {
      std::fprintf(stderr, "mhc-bench-cuda: only `sweep` takes token counts, got '%s'\n", argv[3]);
      return 2;
    }
    std::vector<std::pair<std::size_t, int>> chosen;
    std::string list = argv[3];
    for (std::size_t at = 0; at <= list.size();) {
      const std::size_t end = std::min(list.find(',', at), list.size());
      const std::string item = list.substr(at, end - at);
      const auto it = std::find_if(swept.begin(), swept.end(),
                                   [&](const auto& w) { return std::to_string(w.first) == item; });
      if (it == swept.end()) {
        std::string have;
        for (const auto& w : swept) have += (have.empty() ? "" : ", ") + std::to_string(w.first);
        std::fprintf(stderr, "mhc-bench-cuda: the sweep's token counts are %s, got '%s'\n",
                     have.c_str(), item.c_str());
        return 2;
      }
      chosen.push_back(*it);
      at = end + 1;
    }
    swept = chosen;
  }
  const auto in_sweep = [&](std::size_t T) {
    return std::any_of(swept.begin(), swept.end(), [&](const auto& s) { return s.first == T; });
  };
  if (cuda_device_count() == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  if (mode == "movement") return movement(repeats);
  std::printf(
      "device %s; boundary n=4 d=5120; CUDA events, median of %d after 50 ms of calls, inputs and "
      "packed hc_fn rotated past L2\n"
      "fused: shipped (columns split over blocks at small token counts; bf16 with tensor copies "
      "from 16384 tokens, in the shape its first such call timed fastest); unsplit: one block a "
      "token range; repack: unsplit, hc_fn packed in the call (the call as before the split);\n"
      "floor: max(empty kernel, all bytes / copy bandwidth); fraction: (2n+2)*d stream elements "
      "a token / time / copy bandwidth; same copy: a device-to-device copy of all bytes (half "
      "read, half written), timed like the calls; queued: the device's time a call, calls queued "
      "back to back (median of 5 rounds); host: the host's time to queue a call (its clock, the "
      "same rounds)\n",
      cuda_device_name().c_str(), repeats);
  std::printf("%-6s %7s %9s %9s %9s %9s %9s %9s %7s %9s %9s %9s %9s %9s\n", "dtype", "tokens",
              "fused ms", "unsplit", "repack", "base ms", "floor ms", "launch", "/floor",
              "fraction", "copy GB/s", "same copy", "queued", "host");
  std::map<std::pair<bool, std::size_t>, BoundaryTiming> runs;
  for (bool bf16 : {false, true})
    for (std::size_t T : {1u, 8u, 64u, 256u, 1024u, 4096u, 16384u, 65536u}) {
      if (mode == "sweep" && !in_sweep(T)) continue;
      const auto r = runs[{bf16, T}] = cuda_bench_boundary(T, bf16, repeats);
      const double gbps = r.bytes_per_token * double(T) / (r.fused_ms * 1e-3) / 1e9;
      std::printf(
          "%-6s %7zu %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %7.2f %9.2f %9.1f %9.4f %9.4f %9.4f\n",
          bf16 ? "bf16" : "fp32", T, r.fused_ms, r.unsplit_ms, r.repack_ms, r.baseline_ms,
          r.floor_ms(), r.launch_ms, r.fused_ms / r.floor_ms(), gbps / r.copy_gbps, r.copy_gbps,
          r.same_copy_ms, r.queued_ms, r.host_ms);
      std::fflush(stdout);
    }
  if (!cuda_fused_tma_shape().empty())
    std::printf("fused bf16 from 16384 tokens: %s, the fastest tensor-copy shape here\n",
                cuda_fused_tma_shape().c_str());
  // The backward (composed from the pieces' kernels), fp32 and bf16 streams, deterministic and
  // with atomics.
  if (mode != "sweep") {
    std::printf(
        "\nboundary backward (fp32 arithmetic, from saved x and mixes; parameters' gradients "
        "summed in token order or by atomic adds); floor: max(empty kernel, (3+3n)*d stream "
        "elements a token + hc_fn and its gradient (fp32) / copy bandwidth)\n");
    std::printf("%-6s %-13s %7s %10s %10s %7s %9s\n", "dtype", "gradients", "tokens", "ms",
                "floor ms", "/floor", "fraction");
    for (bool bf16 : {false, true})
      for (bool atomics : {false, true})
        for (std::size_t T : {1u, 64u, 1024u, 16384u, 65536u}) {
          const auto r = cuda_bench_backward(T, bf16, atomics, repeats);
          std::printf("%-6s %-13s %7zu %10.4f %10.4f %7.2f %9.2f\n", bf16 ? "bf16" : "fp32",
                      atomics ? "atomics" : "deterministic", T, r.ms, r.floor_ms(),
                      r.ms / r.floor_ms(), r.bytes / (r.ms * 1e-3) / 1e9 / r.copy_gbps);
          std::fflush(stdout);
        }
  }
  if (mode == "table") return 0;
  // The fused kernel's configurations on the same boundary (same method; the copy bandwidth of
  // the table above), the shipped one first: with the launch's split at 4096, 16384 and 65536
  // tokens, and at 8 and 256 tokens with the columns of every configuration in the same 40 and 8
  // splits.
  std::printf(
      "\nconfigurations of the fused kernel (tb: tokens a block, cw: columns a chunk, s: stages, "
      "L2: cp.async's L2 prefetch size, tma: a producer warp's tensor copies; splits: blocks a "
      "token range, * where the launch chose it), random inputs; same: outputs bit-identical to "
      "the first configuration's at the same split\n");
  std::printf("%-6s %7s %6s %-30s %10s %9s %5s\n", "dtype", "tokens", "splits", "config", "ms",
              "fraction", "same");
  int differing = 0;
  for (bool bf16 : {false, true})
    for (auto [T, splits] : swept) {
      const auto& r = runs[{bf16, T}];
      for (const auto& v : cuda_bench_boundary_sweep(T, bf16, repeats, splits)) {
        const double gbps = r.bytes_per_token * double(T) / (v.ms * 1e-3) / 1e9;
        const std::string used = std::to_string(v.splits) + (splits ? "" : "*");
        std::printf("%-6s %7zu %6s %-30s %10.4f %9.2f %5s\n", bf16 ? "bf16" : "fp32", T,
                    used.c_str(), v.name.c_str(), v.ms, gbps / r.copy_gbps,
                    v.same_bits ? "yes" : "NO");
        differing += v.same_bits ? 0 : 1;
        std::fflush(stdout);
      }
    }
  // A configuration is only a different schedule of the same arithmetic: different bits are a bug.
  if (differing) std::printf("FAIL: %d configurations differ from the shipped one\n", differing);
  return differing ? 1 : 0;
}
