// The `cuda` backend's kernels, one per piece: fp32 arithmetic, stream tensors stored as fp32 or
// bf16. Each Backend call copies its host arrays up, launches, checks, and copies back.
#include <cuda_runtime.h>

#include <cstddef>

#include "buffers.cuh"
#include "check.cuh"
#include "device.cuh"
#include "pieces.cuh"

namespace mhc::impl::cuda_detail {
namespace {

// Many tokens per block: one thread per token.
__global__ void split_kernel(Dims c, std::size_t T, const float* mixes, const float* s,
                             const float* b, float* pre, float* post, float* comb) {
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const std::size_t n = std::size_t(c.n);
  split_token(c, mixes + t * std::size_t(c.M()), s, b, pre + t * n, post + t * n, comb + t * n * n);
}

// mixes: one block per token; each thread a strided share of the n*d values, all M rows.
template <class T>
__global__ void mixes_kernel(Dims c, const T* x, const float* W, float* out) {
  __shared__ float shared[(kMaxM + 1) * 32];
  const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), M = std::size_t(c.M());
  const T* xt = x + std::size_t(blockIdx.x) * nd;
  float acc[kMaxM + 1] = {};
  for (std::size_t i = threadIdx.x; i < nd; i += blockDim.x) {
    const float v = ld(xt, i);
    acc[kMaxM] += v * v;
    for (std::size_t a = 0; a < M; ++a) acc[a] += W[a * nd + i] * v;
  }
  block_sum<kMaxM + 1>(acc, shared);  // rows past M are zero
  if (threadIdx.x == 0) {
    const float r = 1.0f / sqrtf(acc[kMaxM] / float(nd) + c.norm_eps);
    for (std::size_t a = 0; a < M; ++a) out[std::size_t(blockIdx.x) * M + a] = acc[a] * r;
  }
}

template <class T>
__global__ void pre_kernel(Dims c, std::size_t count, const T* x, const float* p, T* y) {
  const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const std::size_t d = std::size_t(c.d), n = std::size_t(c.n), t = i / d, cc = i % d;
  float acc = 0;
  for (std::size_t j = 0; j < n; ++j) acc += p[t * n + j] * ld(x, (t * n + j) * d + cc);
  st(y, i, acc);
}

template <class T>
__global__ void post_kernel(Dims c, std::size_t count, const T* f, const T* R, const float* post,
                            const float* comb, T* y) {
  const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const std::size_t d = std::size_t(c.d), n = std::size_t(c.n);
  const std::size_t t = i / (n * d), k = (i / d) % n, cc = i % d;
  float acc = post[t * n + k] * ld(f, t * d + cc);
  for (std::size_t j = 0; j < n; ++j)
    acc += comb[(t * n + j) * n + k] * ld(R, (t * n + j) * d + cc);
  st(y, i, acc);
}

template <class T>
__global__ void rmsnorm_kernel(Dims c, const T* x, const float* g, T* y) {
  __shared__ float shared[32];
  const std::size_t d = std::size_t(c.d), t = blockIdx.x;
  float ss[1] = {0};
  for (std::size_t i = threadIdx.x; i < d; i += blockDim.x)
    ss[0] += ld(x, t * d + i) * ld(x, t * d + i);
  block_sum<1>(ss, shared);
  __shared__ float r;
  if (threadIdx.x == 0) r = 1.0f / sqrtf(ss[0] / float(d) + c.norm_eps);
  __syncthreads();
  for (std::size_t i = threadIdx.x; i < d; i += blockDim.x)
    st(y, t * d + i, g[i] * (ld(x, t * d + i) * r));
}

template <class S>
void mixes_on(const KernelConfig& k, std::size_t T, const float* x, const float* W, float* out) {
  const Dims c = dims(k);
  const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), M = std::size_t(c.M());
  In<S> dx(x, T * nd);
  In<float> dw(W, M * nd);
  Out<float> dout(out, T * M);
  if (T) mixes_kernel<S><<<unsigned(T), kThreads>>>(c, dx.p, dw.p, dout.p);
  MHC_CUDA_LAUNCHED();
  sync_back(dout);
}

template <class S>
void pre_on(const KernelConfig& k, std::size_t T, const float* x, const float* p, float* y) {
  const Dims c = dims(k);
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  In<S> dx(x, T * n * d);
  In<float> dp(p, T * n);
  Out<S> dy(y, T * d);
  if (T) pre_kernel<S><<<blocks_for(T * d, kThreads), kThreads>>>(c, T * d, dx.p, dp.p, dy.p);
  MHC_CUDA_LAUNCHED();
  sync_back(dy);
}

template <class S>
void post_on(const KernelConfig& k, std::size_t T, const float* f, const float* R,
             const float* post, const float* comb, float* y) {
  const Dims c = dims(k);
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  In<S> df(f, T * d), dr(R, T * n * d);
  In<float> dpo(post, T * n), dc(comb, T * n * n);
  Out<S> dy(y, T * n * d);
  if (T)
    post_kernel<S><<<blocks_for(T * n * d, kThreads), kThreads>>>(c, T * n * d, df.p, dr.p, dpo.p,
                                                                  dc.p, dy.p);
  MHC_CUDA_LAUNCHED();
  sync_back(dy);
}

template <class S>
void rmsnorm_on(const KernelConfig& k, std::size_t T, const float* x, const float* g, float* y) {
  const Dims c = dims(k);
  const std::size_t d = std::size_t(c.d);
  In<S> dx(x, T * d);
  In<float> dg(g, d);
  Out<S> dy(y, T * d);
  if (T) rmsnorm_kernel<S><<<unsigned(T), kThreads>>>(c, dx.p, dg.p, dy.p);
  MHC_CUDA_LAUNCHED();
  sync_back(dy);
}

}  // namespace

void run_mixes(const KernelConfig& k, std::size_t T, const float* x, const float* W, float* out) {
  k.streams == Format::bf16 ? mixes_on<bf16>(k, T, x, W, out) : mixes_on<float>(k, T, x, W, out);
}

void run_split(const KernelConfig& k, std::size_t T, const float* m, const float* s, const float* b,
               float* pre, float* post, float* comb) {
  const Dims c = dims(k);
  const std::size_t n = std::size_t(c.n), M = std::size_t(c.M());
  In<float> dm(m, T * M), ds(s, 3), db(b, M);
  Out<float> dpre(pre, T * n), dpost(post, T * n), dcomb(comb, T * n * n);
  if (T)
    split_kernel<<<blocks_for(T, 128), 128>>>(c, T, dm.p, ds.p, db.p, dpre.p, dpost.p, dcomb.p);
  MHC_CUDA_LAUNCHED();
  sync_back(dpre, dpost, dcomb);
}

void run_pre(const KernelConfig& k, std::size_t T, const float* x, const float* p, float* y) {
  k.streams == Format::bf16 ? pre_on<bf16>(k, T, x, p, y) : pre_on<float>(k, T, x, p, y);
}

void run_post(const KernelConfig& k, std::size_t T, const float* f, const float* R,
              const float* post, const float* comb, float* y) {
  k.streams == Format::bf16 ? post_on<bf16>(k, T, f, R, post, comb, y)
                            : post_on<float>(k, T, f, R, post, comb, y);
}

void run_rmsnorm(const KernelConfig& k, std::size_t T, const float* x, const float* g, float* y) {
  k.streams == Format::bf16 ? rmsnorm_on<bf16>(k, T, x, g, y) : rmsnorm_on<float>(k, T, x, g, y);
}

template <class S>
void boundary_four_launches(const Dims& c, std::size_t T, const S* f, const S* R, const float* post,
                            const float* comb, const float* pre_mix, const float* W,
                            const float* scale, const float* base, S* x, S* y, float* mixes,
                            float* pre, float* postout, float* combout) {
  if (!T) return;
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  post_kernel<S><<<blocks_for(T * n * d, kThreads), kThreads>>>(c, T * n * d, f, R, post, comb, x);
  MHC_CUDA_LAUNCHED();
  mixes_kernel<S><<<unsigned(T), kThreads>>>(c, x, W, mixes);
  MHC_CUDA_LAUNCHED();
  split_kernel<<<blocks_for(T, 128), 128>>>(c, T, mixes, scale, base, pre, postout, combout);
  MHC_CUDA_LAUNCHED();
  pre_kernel<S><<<blocks_for(T * d, kThreads), kThreads>>>(c, T * d, x, pre_mix, y);
  MHC_CUDA_LAUNCHED();
}
template void boundary_four_launches<float>(const Dims&, std::size_t, const float*, const float*,
                                            const float*, const float*, const float*, const float*,
                                            const float*, const float*, float*, float*, float*,
                                            float*, float*, float*);
template void boundary_four_launches<bf16>(const Dims&, std::size_t, const bf16*, const bf16*,
                                           const float*, const float*, const float*, const float*,
                                           const float*, const float*, bf16*, bf16*, float*, float*,
                                           float*, float*);

}  // namespace mhc::impl::cuda_detail
