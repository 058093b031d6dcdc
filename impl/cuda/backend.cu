// The CUDA backends: one kernel per piece, the single-pass fused boundary, and the four-launch
// boundary as a baseline. fp32 arithmetic (FFMA, --fmad=true: contraction is a legitimate choice
// the bounds cover; the fused boundary's projection on the tensor cores, split so that it stays
// within the fp32 bounds: see boundary_tc); stream tensors (x, residual, f, y) stored as fp32 or
// bf16.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
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
__device__ inline float zero(const float*) { return 0.0f; }
__device__ inline bf16 zero(const bf16*) { return __float2bfloat16_rn(0.0f); }

__device__ float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

// One token of hc_split_sinkhorn, in registers and local memory (n <= 8); NN > 0 fixes n at
// compile time, so that everything stays in registers.
template <int NN = 0>
__device__ void split_token(const Dims& c, const float* m, const float* s, const float* b,
                            float* pre, float* post, float* comb) {
  const int n = NN > 0 ? NN : c.n;
  const float eps = c.hc_eps;
  for (int j = 0; j < n; ++j) {
    pre[j] = sigmoid(m[j] * s[0] + b[j]) + eps;
    post[j] = 2.0f * sigmoid(m[n + j] * s[1] + b[n + j]);
  }
  float C[(NN > 0 ? NN : kMaxN) * (NN > 0 ? NN : kMaxN)];
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

// v ~ hi + lo as tf32 operands: hi is v rounded to nearest (ties away), lo the exact remainder
// cut to tf32: |v - hi - lo| < 2^-10 |v - hi| <= 2^-21 |v|. Integer operations (cvt.rna is an
// instruction sequence here); v finite.
__device__ inline void split_tf32(float v, std::uint32_t& hi, std::uint32_t& lo) {
  hi = (__float_as_uint(v) + 0x1000u) & 0xFFFFE000u;
  lo = __float_as_uint(v - __uint_as_float(hi)) & 0xFFFFE000u;
}
// c += a b on the tensor cores: a [16 x 8] row-major and b [8 x 8] column-major tf32 fragments,
// c [16 x 8] fp32 (PTX ISA, mma.m16n8k8 .tf32).
__device__ inline void mma_tf32(float* c, const std::uint32_t* a, const std::uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One mma for the tests (cuda_mma_tf32): one warp, the fragments of boundary_tc.
__global__ void mma_probe(const float* a, const float* b, const float* c, float* d) {
  const int lane = int(threadIdx.x), g = lane / 4, t = lane % 4;
  const std::uint32_t af[4] = {__float_as_uint(a[g * 8 + t]), __float_as_uint(a[(g + 8) * 8 + t]),
                               __float_as_uint(a[g * 8 + t + 4]), __float_as_uint(a[(g + 8) * 8 + t + 4])};
  const std::uint32_t bf[2] = {__float_as_uint(b[t * 8 + g]), __float_as_uint(b[(t + 4) * 8 + g])};
  float cf[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  mma_tf32(cf, af, bf);
  d[g * 8 + 2 * t] = cf[0];
  d[g * 8 + 2 * t + 1] = cf[1];
  d[(g + 8) * 8 + 2 * t] = cf[2];
  d[(g + 8) * 8 + 2 * t + 1] = cf[3];
}


// hc_fn [24, n*d] repacked for the tensor-core single pass, one contiguous block per chunk of 32
// columns ([chunk][stream k][...], so that a block copies a chunk with constant strides): per
// stream, the B fragments of mma.m16n8k8 in the order the warp reads them, [kstep s][n-tile]
// [lane][2] (lane = 4g + t holds rows 8*tile + g, columns 8s + 2t and 8s + 2t + 1 as k = t and
// t + 4: the sum runs over the columns in any order, and this one makes a lane's two A elements
// adjacent), zero past column d so that a chunk is always whole.
__global__ void pack_hc_fn_mma(std::size_t n, std::size_t d, std::size_t chunks32, const float* W, float* Wp) {
  const std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * chunks32 * 768) return;
  const int q = int(e % 768), h = q % 2, lane = (q / 2) % 32, tile = (q / 64) % 3, s = q / 192;
  const std::size_t k = (e / 768) % n, chunk = e / (768 * n);
  const std::size_t col = chunk * 32 + std::size_t(8 * s + 2 * (lane % 4) + h);
  const std::size_t row = std::size_t(8 * tile + lane / 4);
  Wp[e] = col < d ? W[row * n * d + k * d + col] : 0.0f;
}

// Two adjacent columns of a stream tensor, rounded to T: one 8-byte (fp32) or 4-byte (bf16)
// access where the width D is fixed and even, else two checked scalar ones.
template <class T> struct Pair;
template <> struct Pair<float> { using type = float2; };
template <> struct Pair<bf16> { using type = __nv_bfloat162; };
__device__ inline float2 to_float2(float2 v) { return v; }
__device__ inline float2 to_float2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ inline float2 from_float2(float2 v, const float*) { return v; }
__device__ inline __nv_bfloat162 from_float2(float2 v, const bf16*) { return __float22bfloat162_rn(v); }
template <int D, class T>
__device__ inline void store_pair(T* p, std::size_t i, typename Pair<T>::type v, std::size_t col, std::size_t d) {
  using P = typename Pair<T>::type;
  if (D > 0 && D % 2 == 0) {
    *reinterpret_cast<P*>(p + i) = v;
    return;
  }
  if (col < d) p[i] = v.x;
  if (col + 1 < d) p[i + 1] = v.y;
}

// The single pass with the projection on the tensor cores, in a pipeline of STAGES chunks of CW
// columns (a multiple of 32). Each chunk of a block's TB tokens (f and the n residual streams,
// and hc_fn's columns) is copied into a stage of shared memory with cp.async, STAGES - 1 chunks
// ahead of the one in use (completion is tracked by groups, so no thread waits on registers still
// in flight); a thread's copies are the same in every chunk but for the column offset, so their
// addresses are formed once. A row of a chunk is only CW * sizeof(T) bytes, and its next piece is
// asked for a chunk later, so DRAM would see small scattered reads: PF = 128 or 256 asks L2 to
// fetch the aligned block of that many bytes around each copy (cp.async's L2 prefetch size), so
// that DRAM serves a neighbouring piece of the row with it. The hint is not an access: it cannot
// fault past an allocation.
// Phase A (TB / 8 warps; lane 16 h + p: columns 2p, 2p+1 of each 32 of tokens warp +
// (TB / 8) (2i + h)): hc_post, the store of the new streams (which also replace the residual in
// the stage), hc_pre and the sum of squares.
// Phase B: warp w multiplies the new stream k = w mod 4 of 32 of the chunk's tokens, 32 columns
// at a time ([32 tokens x 32 columns]), by hc_fn's ([32 x 24]) with mma.m16n8k8 on tf32 parts,
// fp32-accurate by splitting (the 3xTF32 scheme): a ~ ah + al, b ~ bh + bl (split_tf32) and
// a b ~ ah bl + al bh + ah bh. bf16 streams are tf32 values already (al = 0: two products).
//
// Why this stays inside the fp32 model's bound of the projection (u = 2^-24, S = sum |a b|):
// - the dropped and cut parts: |a b - (ah bh + ah bl + al bh)| <= 5 * 2^-22 |a b| = 20 u |a b|
//   (8 u with al = 0);
// - assumed of the tensor cores (and checked by test_cuda): products of tf32
//   values are exact and each mma's c + sum of K = 8 products is formed with at least fp32's 24
//   bits relative to its largest addend, so within (K + 1) 2^-23 (|c| + sum |products|), as
//   reported for these units by Fasi, Higham, Mikaitis & Pranesh (2021). That rounding may be
//   biased (truncation), so each 32 columns start from zero (<= 12 chained mma: <= 12 * 18 u of
//   their S) and their result is added to the running sum with an fp32 add, round to nearest;
// - total <= 236 u S plus the fp32 sum of the 640 results of 32 columns (chains of <= 163 adds): below
//   gamma_20480(u) S (rigorous) and below Higham & Mary's 8 sqrt(20480) u S = 1145 u S
//   (probabilistic), whose independence assumption then concerns only the round-to-nearest adds
//   (8 sqrt(163) u S = 102 u S).
// The arithmetic of a token does not depend on TB, CW, STAGES or PF: every configuration gives
// the same bits. test_cuda checks the tensor cores' assumption (tensor_core_arithmetic) and, with
// `mhc-verify check --kernel cuda-fused`, the outputs against the oracle;
// variant:tensor_core_projection (impl/cpu/variant.cpp) forms the projection this way with the
// least accurate accumulation assumed, and the mutation self-test passes it in CI.
template <class T, int TB_, int CW_>
struct TcLayout {
  static constexpr int N = 4, M = 24, TB = TB_, CW = CW_, CO = N + N * N + N;
  static constexpr int kThreads = 4 * TB;  // phase A: 8 tokens a warp; phase B: 32 tokens a warp
  // A token's rows f, R_0..R_3 (CW each), padded so that the A fragments' rows g = 0..7 fall in
  // distinct banks (a stride of 8 mod 32 words for fp32 pairs; 20 or 4 for bf16 pairs at
  // CW = 32 or 64), each row 16-byte aligned.
  static constexpr int TS = 5 * CW + 8;
  static constexpr int kStreamBytes = TB * TS * int(sizeof(T));
  static constexpr int kWFloats = N * CW * M;  // CW / 32 chunks of packed hc_fn
  static constexpr int kWSub = 32 * M;         // one stream's 32 columns
  static constexpr int kStageBytes = kStreamBytes + 4 * kWFloats;
  static_assert(TB % 32 == 0 && CW % 32 == 0, "phase B takes 32 tokens and columns a warp");
  // Blocks a multiprocessor holds (228 KB of shared memory, 1 KB of it reserved per block), so
  // that registers are allotted for as many.
  static constexpr int blocks(int stages) {
    const int b = 233472 / (stages * kStageBytes + TB * (CO + 1) * 4 + 1024);
    return b < 1 ? 1 : b > 8 ? 8 : b;
  }
  static_assert(kStreamBytes % 16 == 0, "hc_fn's part of a stage starts 16-byte aligned");
  static_assert(kWFloats % (4 * kThreads) == 0, "hc_fn's chunk is copied in whole rounds");
};

template <class T, int D, int STAGES, int TB, int CW_, int PF>
__global__ void __launch_bounds__(TcLayout<T, TB, CW_>::kThreads, TcLayout<T, TB, CW_>::blocks(STAGES))
    boundary_tc(Dims c, std::size_t tokens, const T* f, const T* R, const float* post,
                const float* comb, const float* pre_mix, const float* Wp, const float* scale,
                const float* base, T* x, T* y, float* mixes, float* pre, float* postout,
                float* combout) {
  using L = TcLayout<T, TB, CW_>;
  constexpr int N = L::N, M = L::M, CW = L::CW, CO = L::CO, TS = L::TS, NT = L::kThreads;
  constexpr int NW = NT / 32;
  constexpr bool fp32 = std::is_same<T, float>::value;  // bf16 values are tf32 values
  constexpr bool kAsync = D > 0 && D % CW == 0;          // whole chunks: 16-byte copies
  // A fixed width stores pairs unchecked (store_pair), so it must be whole chunks.
  static_assert(D == 0 || (kAsync && D % 2 == 0), "a fixed width is a multiple of CW");
  static_assert(PF == 0 || PF == 128 || PF == 256, "cp.async's L2 prefetch sizes");
  constexpr int kVec = 16 / int(sizeof(T));               // elements per 16-byte copy
  static_assert(N * TB * M * 4 <= STAGES * L::kStageBytes, "the partial products reuse the stages");
  static_assert(CO % 4 == 0, "coefficients are read as float4");
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ __align__(16) float coef[TB * CO];  // post, comb, pre_mix per token
  __shared__ float sumsq[TB];
  auto stream_of = [&](int st) { return reinterpret_cast<T*>(smem + st * L::kStageBytes); };
  auto w_of = [&](int st) { return reinterpret_cast<float*>(smem + st * L::kStageBytes + L::kStreamBytes); };
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int g = lane / 4, tq = lane % 4;            // fragment coordinates
  const int h = lane / 16, cp = 2 * (lane % 16);    // phase A
  const int k = warp % N, grp = warp / N;           // phase B: stream k of tokens 32 grp ..
  const std::size_t t0 = std::size_t(blockIdx.x) * TB;
  const int nt = int(min(std::size_t(TB), tokens - t0));
  const std::size_t d = D > 0 ? std::size_t(D) : std::size_t(c.d);
  const std::size_t chunks = (d + CW - 1) / CW;
  for (int e = int(threadIdx.x); e < TB * CO; e += NT) {
    const int tb = e / CO, i = e % CO;
    const std::size_t t = t0 + std::size_t(tb);
    float v = 0;
    if (tb < nt) v = i < N ? post[t * N + std::size_t(i)]
                   : i < N + N * N ? comb[t * N * N + std::size_t(i - N)]
                                   : pre_mix[t * N + std::size_t(i - N - N * N)];
    coef[e] = v;
  }
  // The 16-byte copies of a chunk's streams: thread x takes piece x mod VPR of the rows f,
  // R_0..R_3 of tokens x / VPR + TPS j (zero-filled past the last token).
  constexpr int VPR = CW / kVec, TPS = NT / VPR, SWEEPS = kAsync ? TB / TPS : 1;
  static_assert(!kAsync || (NT % VPR == 0 && TB % TPS == 0), "the copies cover the rows once");
  const T* fsrc[SWEEPS];
  const T* rsrc[SWEEPS];
  unsigned soff[SWEEPS], sbytes[SWEEPS];
  if (kAsync)
#pragma unroll
    for (int j = 0; j < SWEEPS; ++j) {
      const int tb = int(threadIdx.x) / VPR + TPS * j, q = int(threadIdx.x) % VPR;
      const std::size_t t = t0 + std::size_t(min(tb, nt - 1));
      fsrc[j] = f + t * d + std::size_t(q * kVec);
      rsrc[j] = R + t * N * d + std::size_t(q * kVec);
      soff[j] = unsigned((tb * TS + q * kVec) * int(sizeof(T)));
      sbytes[j] = tb < nt ? 16u : 0u;
    }
  const unsigned smem0 = unsigned(__cvta_generic_to_shared(smem));
  // Chunk `ch` into stage `st`: the rows of f and R (zero past the last token and column), and
  // hc_fn's packed chunk (contiguous, always whole). One commit group per call, empty past the end.
  auto fetch = [&](std::size_t ch, int st) {
    if (ch < chunks) {
      const std::size_t c0 = ch * CW;
      const unsigned sbase = smem0 + unsigned(st * L::kStageBytes);
      if (kAsync) {
#pragma unroll
        for (int j = 0; j < SWEEPS; ++j)
#pragma unroll
          for (int r = 0; r < 5; ++r) {
            const T* src = (r == 0 ? fsrc[j] : rsrc[j] + std::size_t(r - 1) * d) + c0;
            const unsigned dst = sbase + soff[j] + unsigned(r * CW * int(sizeof(T)));
            if (PF == 256)
              asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(sbytes[j]));
            else if (PF == 128)
              asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(sbytes[j]));
            else
              asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(sbytes[j]));
          }
      } else {  // any width: plain loads
        T* sx = stream_of(st);
        for (int e = int(threadIdx.x); e < TB * 5 * CW; e += NT) {
          const int tb = e / (5 * CW), r = (e / CW) % 5, l = e % CW;
          const std::size_t t = t0 + std::size_t(tb), col = c0 + std::size_t(l);
          T v = zero(f);
          if (tb < nt && col < d) v = r == 0 ? f[t * d + col] : R[(t * N + std::size_t(r - 1)) * d + col];
          sx[tb * TS + r * CW + l] = v;
        }
      }
      const float* wsrc = Wp + ch * std::size_t(L::kWFloats);
#pragma unroll
      for (int j = 0; j < L::kWFloats / (4 * NT); ++j) {
        const int e = int(threadIdx.x) + NT * j;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                         sbase + unsigned(L::kStreamBytes + 16 * e)),
                     "l"(wsrc + 4 * e));
      }
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) fetch(std::size_t(st), st);
  float acc[2][3][4] = {};  // [m-tile][n-tile][fragment]: the running sums, fp32 adds
  float ss[4] = {0, 0, 0, 0};
  using P = typename Pair<T>::type;
  for (std::size_t ch = 0; ch < chunks; ++ch) {
    const int st = int(ch % STAGES);
    asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));  // chunk ch has landed
    __syncthreads();  // ... for every thread; and the stage refilled next is no longer read
    fetch(ch + STAGES - 1, int((ch + STAGES - 1) % STAGES));
    T* sx = stream_of(st);
    const std::size_t cc0 = ch * CW + std::size_t(cp);
    // Token warp + NW (h + 2i) of the block: its streams at xl + 2 i NW N d, its y at yl + 2 i NW d.
    T* xl = x + (t0 + std::size_t(warp + NW * h)) * N * d + cc0;
    T* yl = y + (t0 + std::size_t(warp + NW * h)) * d + cc0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int tb = warp + NW * (2 * i + h);
      if (tb >= nt) continue;  // its rows in the stage are zero
      float co[CO];
#pragma unroll
      for (int q = 0; q < CO / 4; ++q) {
        const float4 v4 = reinterpret_cast<const float4*>(coef + tb * CO)[q];
        co[4 * q] = v4.x;
        co[4 * q + 1] = v4.y;
        co[4 * q + 2] = v4.z;
        co[4 * q + 3] = v4.w;
      }
#pragma unroll
      for (int c32 = 0; c32 < CW; c32 += 32) {
        const std::size_t cc = cc0 + std::size_t(c32);
        T* row = sx + tb * TS + c32 + cp;
        const float2 fv = to_float2(*reinterpret_cast<const P*>(row));
        float2 rv[N];
#pragma unroll
        for (int j = 0; j < N; ++j) rv[j] = to_float2(*reinterpret_cast<const P*>(row + (1 + j) * CW));
        float2 yv = make_float2(0, 0);
#pragma unroll
        for (int kk = 0; kk < N; ++kk) {
          float2 v = make_float2(co[kk] * fv.x, co[kk] * fv.y);
#pragma unroll
          for (int j = 0; j < N; ++j) {
            v.x += co[N + j * N + kk] * rv[j].x;
            v.y += co[N + j * N + kk] * rv[j].y;
          }
          if (!(D > 0 && D % 2 == 0)) {  // columns past d: zero in the stage and the sums
            if (cc >= d) v.x = 0;
            if (cc + 1 >= d) v.y = 0;
          }
          const P pv = from_float2(v, row);  // as stored
          store_pair<D>(xl, std::size_t(2 * NW * i * N + kk) * d + std::size_t(c32), pv, cc, d);
          *reinterpret_cast<P*>(row + (1 + kk) * CW) = pv;
          v = to_float2(pv);
          ss[i] += v.x * v.x;
          ss[i] += v.y * v.y;
          yv.x += co[N + N * N + kk] * v.x;
          yv.y += co[N + N * N + kk] * v.y;
        }
        store_pair<D>(yl, std::size_t(2 * NW * i) * d + std::size_t(c32), from_float2(yv, row), cc, d);
      }
    }
    __syncthreads();  // the chunk's new streams are in the stage
#pragma unroll
    for (int c32 = 0; c32 < CW; c32 += 32) {  // each 32 columns summed from zero
      const T* xb = sx + 32 * grp * TS + (1 + k) * CW + c32;
      const float* wb = w_of(st) + ((c32 / 32) * N + k) * L::kWSub;
      float part[2][3][4] = {};
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        std::uint32_t bh[3][2], bl[3][2];
#pragma unroll
        for (int b = 0; b < 3; ++b) {
          const float2 w = reinterpret_cast<const float2*>(wb)[(s * 3 + b) * 32 + lane];
          split_tf32(w.x, bh[b][0], bl[b][0]);
          split_tf32(w.y, bh[b][1], bl[b][1]);
        }
#pragma unroll
        for (int a = 0; a < 2; ++a) {
          // a0, a2 (k = tq, tq + 4: columns 8s + 2tq, +1) of rows g and g + 8: one access each.
          const T* xa = xb + (16 * a + g) * TS + 8 * s + 2 * tq;
          std::uint32_t ah[4], al[4] = {0, 0, 0, 0};
          if (fp32) {
            const float2 r0 = *reinterpret_cast<const float2*>(xa), r1 = *reinterpret_cast<const float2*>(xa + 8 * TS);
            split_tf32(r0.x, ah[0], al[0]);
            split_tf32(r1.x, ah[1], al[1]);
            split_tf32(r0.y, ah[2], al[2]);
            split_tf32(r1.y, ah[3], al[3]);
          } else {  // bf16 pairs: the low half is the first column
            const std::uint32_t w0 = *reinterpret_cast<const std::uint32_t*>(xa);
            const std::uint32_t w1 = *reinterpret_cast<const std::uint32_t*>(xa + 8 * TS);
            ah[0] = w0 << 16;
            ah[1] = w1 << 16;
            ah[2] = w0 & 0xFFFF0000u;
            ah[3] = w1 & 0xFFFF0000u;
          }
#pragma unroll
          for (int b = 0; b < 3; ++b) {  // the small products first
            mma_tf32(part[a][b], ah, bl[b]);
            if (fp32) mma_tf32(part[a][b], al, bh[b]);
            mma_tf32(part[a][b], ah, bh[b]);
          }
        }
      }
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < 3; ++b)
#pragma unroll
          for (int r = 0; r < 4; ++r) acc[a][b][r] += part[a][b][r];
    }
    // Without this compiler fence work of the next chunk is moved up into this one; with bf16 and
    // 32 columns a chunk the kernel then needs 128 registers and spills 28 bytes instead of using
    // 115 (and more at 64 tokens a block).
    asm volatile("" ::: "memory");
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // over each half warp: token warp + NW (2i + h)
    float v = ss[i];
    for (int o = 8; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o, 16);
    if (lane % 16 == 0) sumsq[warp + NW * (2 * i + h)] = v;
  }
  __syncthreads();  // every warp is done with the stages
  float* part = reinterpret_cast<float*>(smem);  // [stream][token][row]; fragment r: token g (+8
                                                 // for r >= 2), row 2 tq (+1 for odd r)
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int b = 0; b < 3; ++b)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        part[(k * TB + 32 * grp + 16 * a + g + 8 * (r / 2)) * M + 8 * b + 2 * tq + r % 2] = acc[a][b][r];
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
    split_token<N>(c, m, scale, base, pre + t * N, postout + t * N, combout + t * N * N);
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

// The single pass in one configuration: hc_fn packed for it (into a buffer kept for the process,
// under a lock held until the launch so that concurrent callers do not repack it in between),
// then boundary_tc.
template <class S, int D, int STAGES, int TB, int CW, int PF>
void launch_tc(const Dims& c, std::size_t T, const S* f, const S* R, const float* post,
               const float* comb, const float* pre_mix, const float* W, const float* scale,
               const float* base, S* x, S* y, float* mixes, float* pre, float* postout,
               float* combout) {
  using L = TcLayout<S, TB, CW>;
  static std::mutex mu;
  static float* packed = nullptr;
  static std::size_t capacity = 0;
  std::lock_guard<std::mutex> lock(mu);
  const std::size_t chunks32 = (std::size_t(c.d) + CW - 1) / CW * (CW / 32);  // whole stages
  const std::size_t count = std::size_t(c.n) * chunks32 * 768;
  if (count > capacity) {
    if (packed) MHC_CUDA_CHECK(cudaFree(packed));
    packed = nullptr;
    capacity = 0;
    MHC_CUDA_CHECK(cudaMalloc(&packed, count * sizeof(float)));
    capacity = count;
  }
  pack_hc_fn_mma<<<blocks_for(count, kThreads), kThreads>>>(std::size_t(c.n), std::size_t(c.d), chunks32, W, packed);
  MHC_CUDA_LAUNCHED();
  constexpr int bytes = STAGES * L::kStageBytes;
  static const bool shared_set = [] {  // once: the stages exceed the default 48 KB
    MHC_CUDA_CHECK(cudaFuncSetAttribute(boundary_tc<S, D, STAGES, TB, CW, PF>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return true;
  }();
  (void)shared_set;
  boundary_tc<S, D, STAGES, TB, CW, PF><<<blocks_for(T, TB), L::kThreads, bytes>>>(
      c, T, f, R, post, comb, pre_mix, packed, scale, base, x, y, mixes, pre, postout, combout);
  MHC_CUDA_LAUNCHED();
}

// The configuration cuda-fused runs, per stream type. Measured on the H200 with mhc-bench-cuda's
// sweep (bench/README.md): the L2 prefetch size and, for bf16, 64 columns a chunk (128-byte rows)
// are what moved the bandwidth.
template <class S>
using TcLaunch = void (*)(const Dims&, std::size_t, const S*, const S*, const float*, const float*,
                          const float*, const float*, const float*, const float*, S*, S*, float*,
                          float*, float*, float*);
template <class S, int D>
constexpr TcLaunch<S> shipped_tc() {
  if constexpr (std::is_same<S, float>::value)
    return launch_tc<S, D, 3, 32, 32, 256>;
  else
    return launch_tc<S, D, 2, 32, 64, 256>;
}

// The boundary on device arrays: fused (one launch) or the four-launch baseline.
template <class S>
void boundary_device(const Dims& c, std::size_t T, bool fused, const S* f, const S* R,
                     const float* post, const float* comb, const float* pre_mix, const float* W,
                     const float* scale, const float* base, S* x, S* y, float* mixes, float* pre,
                     float* postout, float* combout) {
  if (!T) return;
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  if (fused && c.n == 4) {
    (c.d == 5120 ? shipped_tc<S, 5120>() : shipped_tc<S, 0>())(c, T, f, R, post, comb, pre_mix, W, scale, base,
                                                              x, y, mixes, pre, postout, combout);
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
  b.description = fused ? "CUDA, single-pass fused boundary, projection on the tensor cores in split tf32 (n = 4; others fall back to four launches)"
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

void cuda_mma_tf32(const float* a, const float* b, const float* c, float* d) {
  need_device(KernelConfig{});
  In<float> da(a, 128), db(b, 64), dc(c, 128);
  Out<float> dd(d, 128);
  mma_probe<<<1, 32>>>(da.p, db.p, dc.p, dd.p);
  MHC_CUDA_LAUNCHED();
  sync();
  dd.back();
}

namespace {
// Reproducible values in [lo, hi) for the benchmark's inputs: a hash of the index and the seed.
template <class E>
__global__ void fill_uniform(E* p, std::size_t count, std::uint32_t seed, float lo, float hi) {
  const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  std::uint32_t v = (std::uint32_t(i) * 0x9E3779B9u) ^ std::uint32_t(i >> 32) ^ seed;
  v ^= v >> 16;
  v *= 0x7FEB352Du;
  v ^= v >> 15;
  v *= 0x846CA68Bu;
  v ^= v >> 16;
  st(p, i, lo + (hi - lo) * (float(v >> 8) * (1.0f / 16777216.0f)));
}

// The boundary's device data at n = 4, d = 5120 for T tokens: the stream tensors in enough
// copies that every repetition reads data past the 60 MB L2, the rest once.
struct BenchData {
  static constexpr std::size_t n = 4, d = 5120, M = 24;
  const Dims c{4, 5120, 20, 1e-6f, 1e-20f};
  std::size_t T, es;
  int copies;
  Dev<std::uint8_t> f, R, x, y;
  Dev<float> post, comb, pm, W, s, b, mixes, pre, po, co;
  BenchData(std::size_t tokens, bool half)
      : T(tokens), es(half ? 2 : 4),
        copies(int(std::max<std::size_t>(1, (256u << 20) / std::max<std::size_t>(T * (2 * n + 2) * d * es, 1)))),
        f(T * d * es * std::size_t(copies)), R(T * n * d * es * std::size_t(copies)), x(R.n), y(f.n),
        post(T * n), comb(T * n * n), pm(T * n), W(M * n * d), s(3), b(M), mixes(T * M), pre(T * n),
        po(T * n), co(T * n * n) {
    std::uint32_t seed = 1;
    auto fill = [&](auto* p, std::size_t count, float lo, float hi) {
      fill_uniform<<<blocks_for(count, kThreads), kThreads>>>(p, count, seed++, lo, hi);
      MHC_CUDA_LAUNCHED();
    };
    if (half) {
      fill(reinterpret_cast<bf16*>(f.p), f.n / 2, -1, 1);
      fill(reinterpret_cast<bf16*>(R.p), R.n / 2, -1, 1);
    } else {
      fill(reinterpret_cast<float*>(f.p), f.n / 4, -1, 1);
      fill(reinterpret_cast<float*>(R.p), R.n / 4, -1, 1);
    }
    fill(post.p, post.n, 0, 2);
    fill(comb.p, comb.n, 0, 0.5f);
    fill(pm.p, pm.n, 0, 1);
    fill(W.p, W.n, -0.01f, 0.01f);
    fill(s.p, s.n, 0.5f, 1.5f);
    fill(b.p, b.n, -1, 1);
    sync();
  }
  // The boundary on copy k of the streams.
  template <class S, class Launch>
  void run(Launch launch, int k) {
    const std::size_t off = std::size_t(k);
    launch(c, T, reinterpret_cast<S*>(f.p) + off * T * d, reinterpret_cast<S*>(R.p) + off * T * n * d, post.p,
           comb.p, pm.p, W.p, s.p, b.p, reinterpret_cast<S*>(x.p) + off * T * n * d,
           reinterpret_cast<S*>(y.p) + off * T * d, mixes.p, pre.p, po.p, co.p);
  }
  // Every output of copy 0, as bytes.
  std::vector<std::uint8_t> outputs() const {
    std::vector<std::uint8_t> all;
    auto take = [&](const void* p, std::size_t bytes) {
      const std::size_t at = all.size();
      all.resize(at + bytes);
      MHC_CUDA_CHECK(cudaMemcpy(all.data() + at, p, bytes, cudaMemcpyDeviceToHost));
    };
    take(x.p, T * n * d * es);
    take(y.p, T * d * es);
    for (const auto* v : {&mixes, &pre, &po, &co}) take(v->p, v->n * 4);
    return all;
  }
};

// Median time in ms of `repeats` calls of launch(i % copies) after a warm-up (CUDA events).
template <class F>
double median_ms(int repeats, int copies, F launch) {
  cudaEvent_t e0, e1;
  MHC_CUDA_CHECK(cudaEventCreate(&e0));
  MHC_CUDA_CHECK(cudaEventCreate(&e1));
  launch(0);
  sync();
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

template <class S>
struct TcConfig {
  const char* name;
  TcLaunch<S> launch;
};
// The configurations the sweep compares, the shipped one first.
template <class S>
std::vector<TcConfig<S>> tc_configs() {
  if constexpr (std::is_same<S, float>::value)
    return {{"shipped (tb32 cw32 s3 L2:256)", shipped_tc<S, 5120>()},
            {"tb32 cw32 s3", launch_tc<S, 5120, 3, 32, 32, 0>},
            {"tb32 cw32 s3 L2:128", launch_tc<S, 5120, 3, 32, 32, 128>},
            {"tb32 cw64 s2", launch_tc<S, 5120, 2, 32, 64, 0>},
            {"tb32 cw64 s2 L2:256", launch_tc<S, 5120, 2, 32, 64, 256>},
            {"tb64 cw32 s2 L2:256", launch_tc<S, 5120, 2, 64, 32, 256>}};
  else
    return {{"shipped (tb32 cw64 s2 L2:256)", shipped_tc<S, 5120>()},
            {"tb32 cw32 s2", launch_tc<S, 5120, 2, 32, 32, 0>},
            {"tb32 cw32 s2 L2:128", launch_tc<S, 5120, 2, 32, 32, 128>},
            {"tb32 cw64 s2", launch_tc<S, 5120, 2, 32, 64, 0>},
            {"tb64 cw32 s2 L2:256", launch_tc<S, 5120, 2, 64, 32, 256>}};
}

template <class S>
std::vector<TcTiming> sweep(std::size_t T, int repeats) {
  BenchData data(T, !std::is_same<S, float>::value);
  std::vector<TcTiming> out;
  std::vector<std::uint8_t> first;
  for (const auto& cfg : tc_configs<S>()) {
    for (auto* v : {&data.x, &data.y}) MHC_CUDA_CHECK(cudaMemset(v->p, 0xFF, v->n));
    for (auto* v : {&data.mixes, &data.pre, &data.po, &data.co}) MHC_CUDA_CHECK(cudaMemset(v->p, 0xFF, v->n * 4));
    data.run<S>(cfg.launch, 0);
    sync();
    const auto got = data.outputs();
    if (first.empty()) first = got;
    TcTiming t;
    t.name = cfg.name;
    t.same_bits = got == first;
    t.ms = median_ms(repeats, data.copies, [&](int k) { data.run<S>(cfg.launch, k); });
    out.push_back(t);
  }
  return out;
}
}  // namespace

BoundaryTiming cuda_bench_boundary(std::size_t T, bool use_bf16, int repeats) {
  if (repeats < 1) throw std::invalid_argument("cuda_bench_boundary: repeats must be at least 1");
  need_device(KernelConfig{});
  BoundaryTiming r;
  r.tokens = T;
  r.bf16 = use_bf16;
  BenchData data(T, use_bf16);
  r.bytes_per_token = double((2 * data.n + 2) * data.d * data.es);
  auto time = [&](bool fused) {
    auto launch = [fused](const Dims& c, std::size_t tokens, auto... a) { boundary_device(c, tokens, fused, a...); };
    return median_ms(repeats, data.copies, [&](int k) {
      if (use_bf16)
        data.run<bf16>(launch, k);
      else
        data.run<float>(launch, k);
    });
  };
  r.fused_ms = time(true);
  r.baseline_ms = time(false);
  // Device-to-device copy of 1 GiB: bytes read + written per second.
  const std::size_t bytes = std::size_t(1) << 30;
  Dev<std::uint8_t> a(bytes), bb(bytes);
  const double copy_ms = median_ms(repeats, 1, [&](int) {
    MHC_CUDA_CHECK(cudaMemcpyAsync(bb.p, a.p, bytes, cudaMemcpyDeviceToDevice));
  });
  r.copy_gbps = 2.0 * double(bytes) / (copy_ms * 1e-3) / 1e9;
  return r;
}

std::vector<TcTiming> cuda_bench_boundary_sweep(std::size_t T, bool use_bf16, int repeats) {
  if (repeats < 1) throw std::invalid_argument("cuda_bench_boundary_sweep: repeats must be at least 1");
  need_device(KernelConfig{});
  return use_bf16 ? sweep<bf16>(T, repeats) : sweep<float>(T, repeats);
}

}  // namespace mhc::impl
