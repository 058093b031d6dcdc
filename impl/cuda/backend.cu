// The CUDA backends: one kernel per piece, the single-pass fused boundary, and the four-launch
// boundary as a baseline. fp32 arithmetic (FFMA, --fmad=true: contraction is a legitimate choice
// the bounds cover); stream tensors (x, residual, f, y) stored as fp32 or bf16.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "check.cuh"
#include "mhc/impl/cuda.hpp"

namespace mhc::impl {
namespace {


using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;
constexpr int kMaxN = 8, kMaxM = (2 + kMaxN) * kMaxN;

struct Dims {
  int n, d, iters;
  float hc_eps, norm_eps;
  __host__ __device__ int M() const { return (2 + n) * n; }
};
Dims dims(const KernelConfig& c) { return {c.n, c.d, c.iters, c.hc_eps, c.norm_eps}; }

__device__ inline float ld(const float* p, std::size_t i) { return p[i]; }
__device__ inline float ld(const bf16* p, std::size_t i) { return __bfloat162float(p[i]); }
__device__ inline void st(float* p, std::size_t i, float v) { p[i] = v; }
__device__ inline void st(bf16* p, std::size_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(bf16 v) { return __bfloat162float(v); }
__device__ inline float zero(const float*) { return 0.0f; }
__device__ inline bf16 zero(const bf16*) { return __float2bfloat16_rn(0.0f); }
__device__ inline float rounded(const float*, float v) { return v; }
__device__ inline float rounded(const bf16*, float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

__device__ float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

// One token of hc_split_sinkhorn, in registers and local memory (n <= 8).
__device__ void split_token(const Dims& c, const float* m, const float* s, const float* b,
                            float* pre, float* post, float* comb) {
  const int n = c.n;
  const float eps = c.hc_eps;
  for (int j = 0; j < n; ++j) {
    pre[j] = sigmoid(m[j] * s[0] + b[j]) + eps;
    post[j] = 2.0f * sigmoid(m[n + j] * s[1] + b[n + j]);
  }
  float C[kMaxN * kMaxN];
  for (int j = 0; j < n; ++j) {
    float mx = -INFINITY;
    for (int k = 0; k < n; ++k) {
      C[j * n + k] = m[2 * n + j * n + k] * s[2] + b[2 * n + j * n + k];
      mx = fmaxf(mx, C[j * n + k]);
    }
    float rs = 0;
    for (int k = 0; k < n; ++k) rs += (C[j * n + k] = expf(C[j * n + k] - mx));
    for (int k = 0; k < n; ++k) C[j * n + k] = C[j * n + k] / rs + eps;
  }
  for (int it = 0; it < c.iters; ++it) {
    if (it > 0)
      for (int j = 0; j < n; ++j) {
        float rs = 0;
        for (int k = 0; k < n; ++k) rs += C[j * n + k];
        for (int k = 0; k < n; ++k) C[j * n + k] = C[j * n + k] / (rs + eps);
      }
    for (int k = 0; k < n; ++k) {
      float cs = 0;
      for (int j = 0; j < n; ++j) cs += C[j * n + k];
      for (int j = 0; j < n; ++j) C[j * n + k] = C[j * n + k] / (cs + eps);
    }
  }
  for (int i = 0; i < n * n; ++i) comb[i] = C[i];
}

// Many tokens per block: one thread per token.
__global__ void split_kernel(Dims c, std::size_t T, const float* mixes, const float* s,
                             const float* b, float* pre, float* post, float* comb) {
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const std::size_t n = std::size_t(c.n);
  split_token(c, mixes + t * std::size_t(c.M()), s, b, pre + t * n, post + t * n, comb + t * n * n);
}

// Sum of `count` values per thread over the block; result in out[0..count) of thread 0.
template <int COUNT>
__device__ void block_sum(float* v, float* shared /* [COUNT][32] */) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  constexpr int count = COUNT;
#pragma unroll
  for (int i = 0; i < count; ++i) {
    float x = v[i];
    for (int o = 16; o > 0; o /= 2) x += __shfl_down_sync(0xffffffffu, x, o);
    if (lane == 0) shared[i * 32 + warp] = x;
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int i = 0; i < count; ++i) {
      float x = 0;
      for (int w = 0; w < warps; ++w) x += shared[i * 32 + w];
      v[i] = x;
    }
  __syncthreads();
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
  for (std::size_t j = 0; j < n; ++j) acc += comb[(t * n + j) * n + k] * ld(R, (t * n + j) * d + cc);
  st(y, i, acc);
}

template <class T>
__global__ void rmsnorm_kernel(Dims c, const T* x, const float* g, T* y) {
  __shared__ float shared[32];
  const std::size_t d = std::size_t(c.d), t = blockIdx.x;
  float ss[1] = {0};
  for (std::size_t i = threadIdx.x; i < d; i += blockDim.x) ss[0] += ld(x, t * d + i) * ld(x, t * d + i);
  block_sum<1>(ss, shared);
  __shared__ float r;
  if (threadIdx.x == 0) r = 1.0f / sqrtf(ss[0] / float(d) + c.norm_eps);
  __syncthreads();
  for (std::size_t i = threadIdx.x; i < d; i += blockDim.x) st(y, t * d + i, g[i] * (ld(x, t * d + i) * r));
}

// hc_fn [24, n*d] repacked as [n*d, 24] for the single pass: a chunk of columns is then one
// contiguous block (a weight layout, made once per call; 2 MB at the V4.1 sizes). Within a
// column, the four groups of 6 rows that phase B's lanes take are stored as their first four
// rows (16 floats: one aligned float4 per group) and then their last two (8 floats: a float2).
__global__ void pack_hc_fn(std::size_t nd, const float* W, float* Wt) {
  const std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= nd * 24) return;
  const int p = int(e % 24);
  const int row = p < 16 ? (p / 4) * 6 + p % 4 : ((p - 16) / 2) * 6 + 4 + (p - 16) % 2;
  Wt[e] = W[std::size_t(row) * nd + e / 24];
}

// The single-pass boundary, tiled like the skinny product it mostly is ([T, n*d] x [n*d, M]):
// a block takes 32 tokens and walks the columns in chunks of 32. Phase A (a warp per 8 tokens,
// a lane per column): hc_post, the store of the new streams, hc_pre and the sum of squares, with
// the chunk of new streams kept in shared memory; the chunk of hc_fn (packed) is staged there
// too. Phase B, register-tiled: warp k takes stream k of the chunk, each lane 4 tokens (tg,
// tg+8, ..) x 6 rows (24 accumulators; per pair of columns 4 + 4 shared loads feed 48 FMAs,
// without bank conflicts); the four warps' partial products are added at the end. n = 4 only; D > 0 fixes d at compile time (the V4.1 width), so
// that the addresses of a warp's 8 tokens are one register plus constant offsets.
template <class T, int D>
__global__ void __launch_bounds__(128) boundary_tiled(Dims c, std::size_t tokens, const T* f, const T* R,
                                                      const float* post, const float* comb,
                                                      const float* pre_mix, const float* Wt,
                                                      const float* scale, const float* base, T* x, T* y,
                                                      float* mixes, float* pre, float* postout,
                                                      float* combout) {
  // XS = 130: rows 8 bytes aligned, and the rows tg + 8j of the 8 token groups in distinct banks.
  constexpr int N = 4, M = 24, TB = 32, CW = 32, XS = N * CW + 2, CO = N + N * N + N;
  static_assert(N * TB * M <= TB * XS, "the partial products reuse the chunk's buffer");
  static_assert(N * CW * M % (4 * 128) == 0, "the hc_fn chunk splits evenly over the threads");
  static_assert(CW % 2 == 0 && XS % 2 == 0, "phase B reads columns in pairs");
  __shared__ __align__(16) float xs[TB * XS];     // new streams of the chunk, padded rows
  __shared__ __align__(16) float ws[2][N * CW * M];  // hc_fn chunks (double buffer), [k*CW + l][a]
  __shared__ float coef[TB * CO];                 // post, comb, pre_mix per token
  __shared__ float sumsq[TB];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int tg = lane / 4, rg = lane % 4;  // phase B: tokens tg + 8j, rows 6*rg..
  const std::size_t t0 = std::size_t(blockIdx.x) * TB;
  const int nt = int(min(std::size_t(TB), tokens - t0));
  const std::size_t d = D > 0 ? std::size_t(D) : std::size_t(c.d);
  for (int e = int(threadIdx.x); e < TB * CO; e += int(blockDim.x)) {
    const int tb = e / CO, i = e % CO;
    const std::size_t t = t0 + std::size_t(tb);
    float v = 0;
    if (tb < nt) v = i < N ? post[t * N + std::size_t(i)]
                   : i < N + N * N ? comb[t * N * N + std::size_t(i - N)]
                                   : pre_mix[t * N + std::size_t(i - N - N * N)];
    coef[e] = v;
  }
  __syncthreads();
  float acc[4][6];
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int r = 0; r < 6; ++r) acc[j][r] = 0;
  float ss[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  // The next chunk's inputs are on their way during the current chunk's products: f and the N
  // residual streams of this warp's 8 tokens into registers, the hc_fn chunk into the other
  // shared buffer (cp.async, zero-filled past the last column).
  T fin[8], rin[8][N];  // raw: converted where used, so that no instruction waits on them here
  auto load = [&](std::size_t c0, float* wdst) {
    const int cols = int(min(std::size_t(CW), d - c0));
    const std::size_t cc = c0 + std::size_t(lane);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int tb = warp + 4 * i;
      const std::size_t t = t0 + std::size_t(tb);
      const bool in = tb < nt && lane < cols;
      fin[i] = in ? f[t * d + cc] : zero(f);
#pragma unroll
      for (int j = 0; j < N; ++j) rin[i][j] = in ? R[(t * N + std::size_t(j)) * d + cc] : zero(R);
    }
    // Stream k's columns c0.. of the packed hc_fn are CW*M contiguous floats.
#pragma unroll
    for (int u = 0; u < N * CW * M / 4 / 128; ++u) {
      const int e = int(threadIdx.x) + 128 * u;
      const int k = e / (CW * M / 4), q = e % (CW * M / 4), l = q / (M / 4);
      const float* src = l < cols ? Wt + (std::size_t(k) * d + c0) * M + 4 * q : Wt;
      const unsigned dst = unsigned(__cvta_generic_to_shared(wdst + 4 * e));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                   "r"(l < cols ? 16 : 0));
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  load(0, ws[0]);
  int buf = 0;
  for (std::size_t c0 = 0; c0 < d; c0 += CW, buf ^= 1) {
    const int cols = int(min(std::size_t(CW), d - c0));
    const std::size_t cc = c0 + std::size_t(lane);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int tb = warp + 4 * i;
      float* xrow = xs + tb * XS;
      if (tb < nt && lane < cols) {
        const std::size_t t = t0 + std::size_t(tb);
        const float* co = coef + tb * CO;
        float yv = 0;
#pragma unroll
        for (int k = 0; k < N; ++k) {
          float v = co[k] * to_float(fin[i]);
#pragma unroll
          for (int j = 0; j < N; ++j) v += co[N + j * N + k] * to_float(rin[i][j]);
          v = rounded(x, v);
          st(x, (t * N + std::size_t(k)) * d + cc, v);
          xrow[k * CW + lane] = v;
          ss[i] += v * v;
          yv += co[N + N * N + k] * v;
        }
        st(y, t * d + cc, yv);
      } else {
#pragma unroll
        for (int k = 0; k < N; ++k) xrow[k * CW + lane] = 0;
      }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    if (c0 + CW < d) load(c0 + CW, ws[buf ^ 1]);
    const float* xb = xs + tg * XS + warp * CW;
    const float* wb = ws[buf] + warp * CW * M;
#pragma unroll 2
    for (int l = 0; l < CW; l += 2) {
      float2 xv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) xv[j] = *reinterpret_cast<const float2*>(xb + 8 * j * XS + l);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float4 wa = *reinterpret_cast<const float4*>(wb + (l + h) * M + 4 * rg);
        const float2 wc = *reinterpret_cast<const float2*>(wb + (l + h) * M + 16 + 2 * rg);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float xj = h ? xv[j].y : xv[j].x;
          acc[j][0] += wa.x * xj;
          acc[j][1] += wa.y * xj;
          acc[j][2] += wa.z * xj;
          acc[j][3] += wa.w * xj;
          acc[j][4] += wc.x * xj;
          acc[j][5] += wc.y * xj;
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    float v = ss[i];
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) sumsq[warp + 4 * i] = v;
  }
  float* part = xs;  // [warp][token][row]
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int r = 0; r < 6; ++r) part[(warp * TB + tg + 8 * j) * M + 6 * rg + r] = acc[j][r];
  __syncthreads();
  if (int(threadIdx.x) < nt) {
    const int tb = int(threadIdx.x);
    const std::size_t t = t0 + std::size_t(tb);
    const float rr = 1.0f / sqrtf(sumsq[tb] / float(std::size_t(N) * d) + c.norm_eps);
    float m[M];
    for (int a = 0; a < M; ++a) {
      const float p = ((part[(0 * TB + tb) * M + a] + part[(1 * TB + tb) * M + a]) +
                       part[(2 * TB + tb) * M + a]) + part[(3 * TB + tb) * M + a];
      mixes[t * M + std::size_t(a)] = m[a] = p * rr;
    }
    split_token(c, m, scale, base, pre + t * N, postout + t * N, combout + t * N * N);
  }
}

unsigned blocks_for(std::size_t count, unsigned threads) { return unsigned((count + threads - 1) / threads); }

// Device copies of host arrays, and the way back; stream tensors as T.
template <class E>
struct Dev {
  E* p = nullptr;
  std::size_t n = 0;
  explicit Dev(std::size_t count) : n(count) {
    if (count) MHC_CUDA_CHECK(cudaMalloc(&p, count * sizeof(E)));
  }
  ~Dev() {
    if (p) cudaFree(p);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

std::uint16_t to_bf16_bits(float v) {  // the host's bf16 of an exact bf16 value, or the poison
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  if (u == 0x7FC0DEADu) return 0x7FDEu;  // a bf16 NaN payload that marks "never written"
  return std::uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16_bits(std::uint16_t b) {
  if (b == 0x7FDEu) {
    float p;
    const std::uint32_t u = 0x7FC0DEADu;
    std::memcpy(&p, &u, 4);
    return p;
  }
  const std::uint32_t u = std::uint32_t(b) << 16;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

template <class E>
void up(Dev<E>& d, const float* h) {
  if (!d.n) return;
  if constexpr (std::is_same<E, float>::value) {
    MHC_CUDA_CHECK(cudaMemcpy(d.p, h, d.n * sizeof(float), cudaMemcpyHostToDevice));
  } else {
    std::vector<std::uint16_t> b(d.n);
    for (std::size_t i = 0; i < d.n; ++i) b[i] = to_bf16_bits(h[i]);
    MHC_CUDA_CHECK(cudaMemcpy(d.p, b.data(), d.n * 2, cudaMemcpyHostToDevice));
  }
}
template <class E>
void down(float* h, const Dev<E>& d) {
  if (!d.n) return;
  if constexpr (std::is_same<E, float>::value) {
    MHC_CUDA_CHECK(cudaMemcpy(h, d.p, d.n * sizeof(float), cudaMemcpyDeviceToHost));
  } else {
    std::vector<std::uint16_t> b(d.n);
    MHC_CUDA_CHECK(cudaMemcpy(b.data(), d.p, d.n * 2, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < d.n; ++i) h[i] = from_bf16_bits(b[i]);
  }
}
// An output: the host's (poisoned) buffer goes up first, so an element the kernel never writes
// comes back as poison.
template <class E>
struct Out : Dev<E> {
  float* host;
  Out(float* h, std::size_t count) : Dev<E>(count), host(h) { up(*this, h); }
  void back() { down(host, *this); }
};
template <class E>
struct In : Dev<E> {
  In(const float* h, std::size_t count) : Dev<E>(count) { up(*this, h); }
};

void need_device(const KernelConfig& k) {
  if (cuda_device_count() == 0) throw NotCompiled("no CUDA device");
  if (k.n > kMaxN) throw NotCompiled("the CUDA kernels take n <= 8");
}
void sync() { MHC_CUDA_CHECK(cudaDeviceSynchronize()); }

template <class S>
void run_mixes(const KernelConfig& k, std::size_t T, const float* x, const float* W, float* out) {
  const Dims c = dims(k);
  const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), M = std::size_t(c.M());
  In<S> dx(x, T * nd);
  In<float> dw(W, M * nd);
  Out<float> dout(out, T * M);
  if (T) mixes_kernel<S><<<unsigned(T), kThreads>>>(c, dx.p, dw.p, dout.p);
  MHC_CUDA_LAUNCHED();
  sync();
  dout.back();
}

void run_split(const KernelConfig& k, std::size_t T, const float* m, const float* s,
               const float* b, float* pre, float* post, float* comb) {
  const Dims c = dims(k);
  const std::size_t n = std::size_t(c.n), M = std::size_t(c.M());
  In<float> dm(m, T * M), ds(s, 3), db(b, M);
  Out<float> dpre(pre, T * n), dpost(post, T * n), dcomb(comb, T * n * n);
  if (T) split_kernel<<<blocks_for(T, 128), 128>>>(c, T, dm.p, ds.p, db.p, dpre.p, dpost.p, dcomb.p);
  MHC_CUDA_LAUNCHED();
  sync();
  dpre.back();
  dpost.back();
  dcomb.back();
}

template <class S>
void run_pre(const KernelConfig& k, std::size_t T, const float* x, const float* p, float* y) {
  const Dims c = dims(k);
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  In<S> dx(x, T * n * d);
  In<float> dp(p, T * n);
  Out<S> dy(y, T * d);
  if (T) pre_kernel<S><<<blocks_for(T * d, kThreads), kThreads>>>(c, T * d, dx.p, dp.p, dy.p);
  MHC_CUDA_LAUNCHED();
  sync();
  dy.back();
}

template <class S>
void run_post(const KernelConfig& k, std::size_t T, const float* f, const float* R,
              const float* post, const float* comb, float* y) {
  const Dims c = dims(k);
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  In<S> df(f, T * d), dr(R, T * n * d);
  In<float> dpo(post, T * n), dc(comb, T * n * n);
  Out<S> dy(y, T * n * d);
  if (T) post_kernel<S><<<blocks_for(T * n * d, kThreads), kThreads>>>(c, T * n * d, df.p, dr.p, dpo.p, dc.p, dy.p);
  MHC_CUDA_LAUNCHED();
  sync();
  dy.back();
}

template <class S>
void run_rmsnorm(const KernelConfig& k, std::size_t T, const float* x, const float* g, float* y) {
  const Dims c = dims(k);
  const std::size_t d = std::size_t(c.d);
  In<S> dx(x, T * d);
  In<float> dg(g, d);
  Out<S> dy(y, T * d);
  if (T) rmsnorm_kernel<S><<<unsigned(T), kThreads>>>(c, dx.p, dg.p, dy.p);
  MHC_CUDA_LAUNCHED();
  sync();
  dy.back();
}

// The boundary on device arrays: fused (one launch) or the four-launch baseline.
template <class S>
void boundary_device(const Dims& c, std::size_t T, bool fused, const S* f, const S* R,
                     const float* post, const float* comb, const float* pre_mix, const float* W,
                     const float* scale, const float* base, S* x, S* y, float* mixes, float* pre,
                     float* postout, float* combout) {
  if (!T) return;
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  if (fused && c.n == 4) {  // the single pass, on hc_fn packed into a buffer kept for the process
    static std::mutex mu;
    static float* packed = nullptr;
    static std::size_t capacity = 0;
    std::lock_guard<std::mutex> lock(mu);
    const std::size_t count = n * d * 24;
    if (count > capacity) {
      if (packed) MHC_CUDA_CHECK(cudaFree(packed));
      MHC_CUDA_CHECK(cudaMalloc(&packed, count * sizeof(float)));
      capacity = count;
    }
    pack_hc_fn<<<blocks_for(count, kThreads), kThreads>>>(n * d, W, packed);
    MHC_CUDA_LAUNCHED();
    auto tiled = c.d == 5120 ? boundary_tiled<S, 5120> : boundary_tiled<S, 0>;
    tiled<<<blocks_for(T, 32), 128>>>(c, T, f, R, post, comb, pre_mix, packed, scale, base, x, y, mixes, pre,
                                      postout, combout);
    MHC_CUDA_LAUNCHED();
    return;
  }
  post_kernel<S><<<blocks_for(T * n * d, kThreads), kThreads>>>(c, T * n * d, f, R, post, comb, x);
  MHC_CUDA_LAUNCHED();
  mixes_kernel<S><<<unsigned(T), kThreads>>>(c, x, W, mixes);
  MHC_CUDA_LAUNCHED();
  split_kernel<<<blocks_for(T, 128), 128>>>(c, T, mixes, scale, base, pre, postout, combout);
  MHC_CUDA_LAUNCHED();
  pre_kernel<S><<<blocks_for(T * d, kThreads), kThreads>>>(c, T * d, x, pre_mix, y);
  MHC_CUDA_LAUNCHED();
}

template <class S>
void run_boundary(const KernelConfig& k, std::size_t T, const BoundaryIn& in, const BoundaryOut& out,
                  bool fused) {
  const Dims c = dims(k);
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d), M = std::size_t(c.M());
  In<S> df(in.f, T * d), dr(in.residual, T * n * d);
  In<float> dpo(in.post, T * n), dc(in.comb, T * n * n), dpm(in.pre_mix, T * n),
      dw(in.hc_fn, M * n * d), ds(in.hc_scale, 3), db(in.hc_base, M);
  Out<S> dx(out.x, T * n * d), dy(out.y, T * d);
  Out<float> dm(out.mixes, T * M), dpre(out.pre, T * n), dpost(out.post, T * n), dcomb(out.comb, T * n * n);
  boundary_device<S>(c, T, fused, df.p, dr.p, dpo.p, dc.p, dpm.p, dw.p, ds.p, db.p, dx.p, dy.p, dm.p,
                     dpre.p, dpost.p, dcomb.p);
  sync();
  dx.back();
  dy.back();
  dm.back();
  dpre.back();
  dpost.back();
  dcomb.back();
}

Backend make(bool fused) {
  Backend b;
  b.name = fused ? "cuda-fused" : "cuda";
  b.description = fused ? "CUDA, single-pass fused boundary (n = 4; others fall back to four launches)"
                        : "CUDA, one kernel per piece; the boundary as four launches";
  auto streams = [](const KernelConfig& k) { return k.bf16_streams; };
  b.mixes = [=](const KernelConfig& k, std::size_t T, const float* x, const float* W, float* o) {
    need_device(k);
    if (k.arith == Arith::tf32) throw NotCompiled("the CUDA kernels have no tf32 variant");
    streams(k) ? run_mixes<bf16>(k, T, x, W, o) : run_mixes<float>(k, T, x, W, o);
  };
  b.split_sinkhorn = [](const KernelConfig& k, std::size_t T, const float* m, const float* s,
                        const float* bb, float* pre, float* post, float* comb) {
    need_device(k);
    run_split(k, T, m, s, bb, pre, post, comb);
  };
  b.hc_pre = [=](const KernelConfig& k, std::size_t T, const float* x, const float* p, float* y) {
    need_device(k);
    streams(k) ? run_pre<bf16>(k, T, x, p, y) : run_pre<float>(k, T, x, p, y);
  };
  b.hc_post = [=](const KernelConfig& k, std::size_t T, const float* f, const float* R,
                  const float* post, const float* comb, float* y) {
    need_device(k);
    streams(k) ? run_post<bf16>(k, T, f, R, post, comb, y) : run_post<float>(k, T, f, R, post, comb, y);
  };
  b.rmsnorm = [=](const KernelConfig& k, std::size_t T, const float* x, const float* g, float* y) {
    need_device(k);
    streams(k) ? run_rmsnorm<bf16>(k, T, x, g, y) : run_rmsnorm<float>(k, T, x, g, y);
  };
  b.boundary = [=](const KernelConfig& k, std::size_t T, const BoundaryIn& in, const BoundaryOut& out) {
    need_device(k);
    if (k.arith == Arith::tf32) throw NotCompiled("the CUDA kernels have no tf32 variant");
    streams(k) ? run_boundary<bf16>(k, T, in, out, fused) : run_boundary<float>(k, T, in, out, fused);
  };
  return b;
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

std::string cuda_device_name() {
  if (cuda_device_count() == 0) return "no CUDA device";
  cudaDeviceProp p{};
  MHC_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  return p.name;
}

void* cuda_alloc(std::size_t bytes) {
  void* p = nullptr;
  if (bytes) MHC_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}
void cuda_free(void* p) noexcept {
  if (p) cudaFree(p);
}
void cuda_copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes) MHC_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void cuda_copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) MHC_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

namespace {
// The whole Block: this backend's mHC pieces (cuda-fused crosses the attention-to-FFN boundary in
// its single pass) and the GPU sublayers.
Backend with_block(Backend b, bool fused) {
  BlockKnobs knobs;
  knobs.fused_boundary = fused;
  b.block = make_block(b, knobs, cuda_sublayers());
  return b;
}
}  // namespace

const Backend& cuda() {
  static const Backend b = with_block(make(false), false);
  return b;
}
const Backend& cuda_fused() {
  static const Backend b = with_block(make(true), true);
  return b;
}

BoundaryTiming cuda_bench_boundary(std::size_t T, bool use_bf16, int repeats) {
  need_device(KernelConfig{});
  BoundaryTiming r;
  r.tokens = T;
  r.bf16 = use_bf16;
  const Dims c{4, 5120, 20, 1e-6f, 1e-20f};
  const std::size_t n = 4, d = 5120, M = 24, es = use_bf16 ? 2 : 4;
  r.bytes_per_token = double((2 * n + 2) * d * es);
  // Enough copies of the streams that every repetition reads data past the 60 MB L2.
  const std::size_t per_copy = T * (2 * n + 2) * d * es;
  const int copies = int(std::max<std::size_t>(1, (256u << 20) / std::max<std::size_t>(per_copy, 1)));
  const std::size_t elems = T * (n * d) * std::size_t(copies);
  Dev<std::uint8_t> f(T * d * es * std::size_t(copies)), R(elems * es), x(elems * es), y(T * d * es * std::size_t(copies));
  MHC_CUDA_CHECK(cudaMemset(f.p, 0x3c, f.n));
  MHC_CUDA_CHECK(cudaMemset(R.p, 0x3c, R.n));
  Dev<float> post(T * n), comb(T * n * n), pm(T * n), W(M * n * d), s(3), b(M), mixes(T * M), pre(T * n),
      po(T * n), co(T * n * n);
  std::vector<float> h(M * n * d, 0.001f);
  MHC_CUDA_CHECK(cudaMemcpy(W.p, h.data(), W.n * 4, cudaMemcpyHostToDevice));
  for (auto* v : {&post, &comb, &pm, &s, &b}) {
    std::vector<float> one(v->n, 0.25f);
    MHC_CUDA_CHECK(cudaMemcpy(v->p, one.data(), v->n * 4, cudaMemcpyHostToDevice));
  }
  cudaEvent_t e0, e1;
  MHC_CUDA_CHECK(cudaEventCreate(&e0));
  MHC_CUDA_CHECK(cudaEventCreate(&e1));
  auto time = [&](auto launch) {
    launch(0);  // warm-up
    MHC_CUDA_CHECK(cudaDeviceSynchronize());
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
    std::sort(ms.begin(), ms.end());
    return double(ms[ms.size() / 2]);
  };
  auto run = [&](bool fused) {
    return [&, fused](int k) {
      const std::size_t off = std::size_t(k);
      if (use_bf16)
        boundary_device<bf16>(c, T, fused, reinterpret_cast<bf16*>(f.p) + off * T * d,
                              reinterpret_cast<bf16*>(R.p) + off * T * n * d, post.p, comb.p, pm.p, W.p, s.p, b.p,
                              reinterpret_cast<bf16*>(x.p) + off * T * n * d, reinterpret_cast<bf16*>(y.p) + off * T * d,
                              mixes.p, pre.p, po.p, co.p);
      else
        boundary_device<float>(c, T, fused, reinterpret_cast<float*>(f.p) + off * T * d,
                               reinterpret_cast<float*>(R.p) + off * T * n * d, post.p, comb.p, pm.p, W.p, s.p, b.p,
                               reinterpret_cast<float*>(x.p) + off * T * n * d, reinterpret_cast<float*>(y.p) + off * T * d,
                               mixes.p, pre.p, po.p, co.p);
    };
  };
  r.fused_ms = time(run(true));
  r.baseline_ms = time(run(false));
  // Device-to-device copy of 1 GiB: bytes read + written per second.
  const std::size_t bytes = std::size_t(1) << 30;
  Dev<std::uint8_t> a(bytes), bb(bytes);
  const double copy_ms = time([&](int) { MHC_CUDA_CHECK(cudaMemcpyAsync(bb.p, a.p, bytes, cudaMemcpyDeviceToDevice)); });
  r.copy_gbps = 2.0 * double(bytes) / (copy_ms * 1e-3) / 1e9;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return r;
}

}  // namespace mhc::impl
