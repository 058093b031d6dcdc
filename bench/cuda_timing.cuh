// Timing of device calls shared by the CUDA benchmarks (cuda_boundary_timing.cu, cuda_movement.cu).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "cuda/buffers.cuh"
#include "cuda/check.cuh"

namespace mhc::bench {

// Median time in ms of `repeats` calls of launch(i % copies) (CUDA events), after calls back to
// back for at least kWarmUp: the first calls of a series measured slower, and calls in a row
// draw the power a model's do, up to the device's cap, which lowers the clock (bench/README.md,
// "Warm-up to steady clocks").
constexpr auto kWarmUp = std::chrono::milliseconds(50);
template <class F>
double median_ms(int repeats, int copies, F launch) {
  cudaEvent_t e0, e1;
  MHC_CUDA_CHECK(cudaEventCreate(&e0));
  MHC_CUDA_CHECK(cudaEventCreate(&e1));
  launch(0);  // first call alone: lazy loading, workspaces
  impl::cuda_detail::sync();
  using clock = std::chrono::steady_clock;
  const auto warm = clock::now();
  for (int i = 0, batch = 1; clock::now() - warm < kWarmUp; batch *= 2) {  // batches: no gaps
    for (int j = 0; j < batch; ++j, ++i) launch(i % copies);
    impl::cuda_detail::sync();
  }
  std::vector<float> ms;
  for (int i = 0; i < repeats; ++i) {
    MHC_CUDA_CHECK(cudaEventRecord(e0));
    launch(i % copies);
    MHC_CUDA_CHECK(cudaEventRecord(e1));
    MHC_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    MHC_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return double(ms[ms.size() / 2]);
}

// `calls` calls of launch(i % copies) queued back to back, `rounds` times: the device's time a
// call (CUDA events around them) and the host's time to queue one (its clock around the same
// loop), each the median over the rounds. Where the two are close, the host's launches bound the
// call (bench/README.md, "Where a decode step's time goes"). After median_ms: no warm-up here.
struct QueuedTiming {
  double device_ms = 0, host_ms = 0;
};
template <class F>
QueuedTiming queued_ms(int rounds, int calls, int copies, F launch) {
  cudaEvent_t e0, e1;
  MHC_CUDA_CHECK(cudaEventCreate(&e0));
  MHC_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> device, host;
  for (int r = 0; r < rounds; ++r) {
    impl::cuda_detail::sync();
    MHC_CUDA_CHECK(cudaEventRecord(e0));
    const auto h0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) launch(i % copies);
    const auto h1 = std::chrono::steady_clock::now();
    MHC_CUDA_CHECK(cudaEventRecord(e1));
    MHC_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    MHC_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    device.push_back(double(t) / calls);
    host.push_back(std::chrono::duration<double, std::milli>(h1 - h0).count() / calls);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(device.begin(), device.end());
  std::sort(host.begin(), host.end());
  return {device[device.size() / 2], host[host.size() / 2]};
}

}  // namespace mhc::bench
