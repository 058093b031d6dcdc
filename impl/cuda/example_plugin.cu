// An example CUDA plug-in (impl/plugin/include/mhc/plugin/mhc_plugin.h, MHC_MEMORY_DEVICE): hc_pre
// and hc_post as a user's first CUDA kernels would be, one thread per output element. The harness
// passes device pointers; each entry point synchronises before it returns.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "mhc/plugin/mhc_plugin.h"

namespace {

__device__ float stored(float v, int bf16) {
  return bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

__global__ void pre_kernel(int n, int d, unsigned long long T, const float* x, const float* p,
                           float* y, int bf16) {
  const unsigned long long i = blockIdx.x * 256ull + threadIdx.x;
  if (i >= T * unsigned(d)) return;
  const unsigned long long t = i / unsigned(d), c = i % unsigned(d);
  float acc = 0;
  for (int j = 0; j < n; ++j) acc += p[t * n + j] * x[(t * n + j) * d + c];
  y[i] = stored(acc, bf16);
}

__global__ void post_kernel(int n, int d, unsigned long long T, const float* f, const float* r,
                            const float* post, const float* comb, float* y, int bf16) {
  const unsigned long long i = blockIdx.x * 256ull + threadIdx.x;
  if (i >= T * unsigned(n) * unsigned(d)) return;
  const unsigned long long c = i % unsigned(d), k = (i / unsigned(d)) % unsigned(n),
                           t = i / (unsigned(d) * unsigned(n));
  float acc = post[t * n + k] * f[t * d + c];
  for (int j = 0; j < n; ++j) acc += comb[(t * n + j) * n + k] * r[(t * n + j) * d + c];
  y[i] = stored(acc, bf16);
}

int finish(char* err, size_t size) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return 0;
  std::snprintf(err, size, "CUDA: %s", cudaGetErrorString(e));
  return 1;
}

unsigned blocks(unsigned long long count) {
  return unsigned((count + 255) / 256);
}

int hc_pre(const mhc_config* c, const float* x, const float* p, float* y, char* err, size_t size) {
  const unsigned long long count = c->tokens * unsigned(c->d);
  if (count) pre_kernel<<<blocks(count), 256>>>(c->n, c->d, c->tokens, x, p, y, c->bf16_streams);
  return finish(err, size);
}

int hc_post(const mhc_config* c, const float* f, const float* r, const float* post,
            const float* comb, float* y, char* err, size_t size) {
  const unsigned long long count = c->tokens * unsigned(c->n) * unsigned(c->d);
  if (count)
    post_kernel<<<blocks(count), 256>>>(c->n, c->d, c->tokens, f, r, post, comb, y,
                                        c->bf16_streams);
  return finish(err, size);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const mhc_plugin* mhc_plugin_v1(void) {
  static const mhc_plugin table = {MHC_PLUGIN_ABI_VERSION,
                                   "example-cuda",
                                   "hc_pre and hc_post in CUDA, device memory",
                                   MHC_MEMORY_DEVICE,
                                   nullptr,
                                   nullptr,
                                   hc_pre,
                                   hc_post,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr};
  return &table;
}
