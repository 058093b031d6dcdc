// cuda-fused's boundary in one pass (boundary_tc), with the projection on the tensor cores, and
// its launch in a configuration (launch_tc, shipped_tc) with hc_fn packed once (TcWeights). A
// header because the benchmark's sweep (bench/cuda_boundary_timing.cu) instantiates other
// configurations of the same kernel. Everything here has internal linkage: each .cu that launches
// it has its own instantiations and its own workspace.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "buffers.cuh"
#include "bulk.cuh"
#include "check.cuh"
#include "device.cuh"
#include "stage_layout.hpp"

namespace mhc::impl::cuda_detail {
namespace {

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

// hc_fn [24, n*d] repacked for the tensor-core single pass, one contiguous block per chunk of 32
// columns ([chunk][stream k][...], so that a block copies a chunk with constant strides): per
// stream, the B fragments of mma.m16n8k8 in the order the warp reads them, [kstep s][n-tile]
// [lane][2] (lane = 4g + t holds rows 8*tile + g, columns 8s + 2t and 8s + 2t + 1 as k = t and
// t + 4: the sum runs over the columns in any order, and this one makes a lane's two A elements
// adjacent), zero past column d so that a chunk is always whole.
__global__ void pack_hc_fn_mma(std::size_t n, std::size_t d, std::size_t chunks32, const float* W,
                               float* Wp) {
  const std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * chunks32 * 768) return;
  const int q = int(e % 768), h = q % 2, lane = (q / 2) % 32, tile = (q / 64) % 3, s = q / 192;
  const std::size_t k = (e / 768) % n, chunk = e / (768 * n);
  const std::size_t col = chunk * 32 + std::size_t(8 * s + 2 * (lane % 4) + h);
  const std::size_t row = std::size_t(8 * tile + lane / 4);
  Wp[e] = col < d ? W[row * n * d + k * d + col] : 0.0f;
}

// Two adjacent columns of a stream tensor, rounded to T: one 8-byte (fp32) or 4-byte (bf16)
// access where the width D is fixed and even, else two checked scalar ones. A bf16 pair is a
// 32-bit word, the first column in the low half, widened by shifts and masks and rounded by one
// cvt.rn.bf16x2 (the instruction __float22bfloat162_rn issues): the library's pair type costs
// two byte permutes a pair on top (bench/README.md, "Fewer instructions a bf16 pair").
template <class T>
struct Pair;
template <>
struct Pair<float> {
  using type = float2;
};
template <>
struct Pair<bf16> {
  using type = std::uint32_t;
};
__device__ inline float2 to_float2(float2 v) {
  return v;
}
__device__ inline float2 to_float2(std::uint32_t w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u));
}
__device__ inline float2 from_float2(float2 v, const float*) {
  return v;
}
__device__ inline std::uint32_t from_float2(float2 v, const bf16*) {
  std::uint32_t w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(w) : "f"(v.y), "f"(v.x));
  return w;
}
__device__ inline float half_of(float2 v, int k) {
  return k == 0 ? v.x : v.y;
}
__device__ inline bf16 half_of(std::uint32_t w, int k) {
  return __ushort_as_bfloat16(static_cast<unsigned short>(k == 0 ? w : w >> 16));
}
template <int D, class T>
__device__ inline void store_pair(T* p, std::size_t i, typename Pair<T>::type v, std::size_t col,
                                  std::size_t d) {
  using P = typename Pair<T>::type;
  if (D > 0 && D % 2 == 0) {
    *reinterpret_cast<P*>(p + i) = v;
    return;
  }
  if (col < d) p[i] = half_of(v, 0);
  if (col + 1 < d) p[i + 1] = half_of(v, 1);
}

// The streams a token and the mixes a token (hc_fn's rows) that boundary_tc and tc_finish_kernel
// are written for (launch_tc's callers check n).
constexpr int kTcN = 4, kTcM = 2 * kTcN + kTcN * kTcN;

// The single pass with the projection on the tensor cores, in a pipeline of STAGES chunks of CW
// columns (a multiple of 32), TB tokens a block:
// - the pipeline (TcPipeline): each chunk of the block's tokens (f and the n residual streams, and
//   hc_fn's columns) is copied into a stage of shared memory with cp.async, STAGES - 1 chunks
//   ahead of the one in use;
// - phase A (tc_phase_a): hc_post, the store of the new streams, hc_pre, the sum of squares;
// - phase B (tc_phase_b): the projection of the new streams on hc_fn with mma.m16n8k8 on tf32
//   parts, split so that it is fp32-accurate (the 3xTF32 scheme);
// - the epilogue (tc_epilogue): the partial products summed per token into the workspace;
// - then a kernel of its own (tc_finish_kernel): the sums over the splits, the mixes normalised,
//   split_sinkhorn.
// The split products and the tensor cores' accumulation (each 32 columns summed from zero, then
// fp32 adds) stay within the fp32 model's bound of the projection: the derivation, and what
// test_cuda checks of the tensor cores, in docs/semantics.md, "The tensor-core projection".
// At small token counts a token range's columns are split over S blocks (the grid's y), whose
// sums are added in split order (tc_finish_kernel). The arithmetic of a token depends on S alone,
// not on TB, CW, STAGES or PF: every configuration gives the same bits at the same S
// (mhc-bench-cuda's sweep checks it).
template <class T, int TB_, int CW_>
struct TcLayout {
  static constexpr int N = kTcN, M = kTcM, TB = TB_, CW = CW_, CO = N + N * N + N;
  static constexpr int kThreads = 4 * TB;  // phase A: 8 tokens a warp; phase B: 32 tokens a warp
  static constexpr int NW = kThreads / 32;
  // A token's rows f, R_0..R_3 (CW each), padded so that the A fragments' rows g = 0..7 fall in
  // distinct banks (a stride of 8 mod 32 words for fp32 pairs; 20 or 4 for bf16 pairs at
  // CW = 32 or 64), each row 16-byte aligned.
  using Rows = PaddedRows<int(sizeof(T)), TB, CW>;
  static constexpr int TS = Rows::TS;
  static constexpr int kStreamBytes = Rows::kBytes;
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

// The block's coefficients into shared memory: post, comb, pre_mix per token (zero past the last).
template <int TB, int CO, int N, int NT>
__device__ __forceinline__ void tc_coefficients(float* coef, const float* post, const float* comb,
                                                const float* pre_mix, std::size_t t0, int nt) {
  static_assert(TB * CO % NT == 0, "whole rounds");
  float v[TB * CO / NT];  // every load issued before the first store: one round trip
#pragma unroll
  for (int r = 0; r < TB * CO / NT; ++r) {
    const int e = int(threadIdx.x) + NT * r, tb = e / CO, i = e % CO;
    const std::size_t t = t0 + std::size_t(tb);
    v[r] = 0;
    if (tb < nt)
      v[r] = i < N           ? __ldg(post + t * N + std::size_t(i))
             : i < N + N * N ? __ldg(comb + t * N * N + std::size_t(i - N))
                             : __ldg(pre_mix + t * N + std::size_t(i - N - N * N));
  }
#pragma unroll
  for (int r = 0; r < TB * CO / NT; ++r) coef[int(threadIdx.x) + NT * r] = v[r];
}

// A chunk's base address as the compiler cannot see through: the copies from it keep constant
// offsets (immediates), rather than one base a copy, each hoisted out of the loop and moved by
// the chunk (a 64-bit multiply-add a copy and a chunk; bench/README.md, "Fewer instructions a
// bf16 pair").
template <class P>
__device__ __forceinline__ void opaque(P*& p) {
  asm volatile("" : "+l"(p));
}

// The copies of the block's chunks into the stages. Completion is tracked by commit groups, so
// no thread waits on registers still in flight; a thread's copies are the same in every chunk
// but for the column offset, so their addresses are formed once. A row of a chunk is only
// CW * sizeof(T) bytes, and its next piece is asked for a chunk later, so DRAM would see small
// scattered reads: PF = 128 or 256 asks L2 to fetch the aligned block of that many bytes around
// each copy (cp.async's L2 prefetch size), so that DRAM serves a neighbouring piece of the row
// with it. The hint is not an access: it cannot fault past an allocation.
template <class T, int D, int STAGES, int TB, int CW, int PF>
struct TcPipeline {
  using L = TcLayout<T, TB, CW>;
  static constexpr int N = L::N, TS = L::TS, NT = L::kThreads;
  static constexpr bool kAsync = D > 0 && D % CW == 0;  // whole chunks: 16-byte copies
  static constexpr int kVec = 16 / int(sizeof(T));      // elements per 16-byte copy
  // The 16-byte copies of a chunk's streams: thread x takes piece x mod VPR of the rows f,
  // R_0..R_3 of tokens x / VPR + TPS j (zero-filled past the last token).
  static constexpr int VPR = CW / kVec, TPS = NT / VPR, SWEEPS = kAsync ? TB / TPS : 1;
  static_assert(!kAsync || (NT % VPR == 0 && TB % TPS == 0), "the copies cover the rows once");
  static_assert(PF == 0 || PF == 128 || PF == 256, "cp.async's L2 prefetch sizes");

  unsigned char* smem;
  const T* f;
  const T* R;
  const float* Wp;
  std::size_t t0, d, chunks;
  int nt;
  const T* fsrc[SWEEPS];
  const T* rsrc[SWEEPS];
  unsigned soff[SWEEPS], sbytes[SWEEPS];
  unsigned smem0;

  __device__ __forceinline__ TcPipeline(unsigned char* smem_, const T* f_, const T* R_,
                                        const float* Wp_, std::size_t t0_, int nt_, std::size_t d_,
                                        std::size_t chunks_)
      : smem(smem_), f(f_), R(R_), Wp(Wp_), t0(t0_), d(d_), chunks(chunks_), nt(nt_) {
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
    smem0 = unsigned(__cvta_generic_to_shared(smem));
  }

  __device__ __forceinline__ T* streams(int st) const {
    return reinterpret_cast<T*>(smem + st * L::kStageBytes);
  }
  __device__ __forceinline__ float* w(int st) const {
    return reinterpret_cast<float*>(smem + st * L::kStageBytes + L::kStreamBytes);
  }

  // Chunk `ch` into stage `st`: the rows of f and R (zero past the last token and column), and
  // hc_fn's packed chunk (contiguous, always whole). One commit group per call, empty from chunk
  // `chunks` on (the end of the block's range).
  __device__ __forceinline__ void fetch(std::size_t ch, int st) const {
    if (ch < chunks) {
      const std::size_t c0 = ch * CW;
      const unsigned sbase = smem0 + unsigned(st * L::kStageBytes);
      if (kAsync) {
#pragma unroll
        for (int j = 0; j < SWEEPS; ++j) {
          const T* fb = fsrc[j] + c0;
          const T* rb = rsrc[j] + c0;
          opaque(fb), opaque(rb);
#pragma unroll
          for (int r = 0; r < 5; ++r) {
            const T* src = r == 0 ? fb : rb + std::size_t(r - 1) * d;
            const unsigned dst = sbase + soff[j] + unsigned(r * CW * int(sizeof(T)));
            if (PF == 256)
              asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst),
                           "l"(src), "r"(sbytes[j]));
            else if (PF == 128)
              asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst),
                           "l"(src), "r"(sbytes[j]));
            else
              asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                           "r"(sbytes[j]));
          }
        }
      } else {  // any width: plain loads
        T* sx = streams(st);
        for (int e = int(threadIdx.x); e < TB * 5 * CW; e += NT) {
          const int tb = e / (5 * CW), r = (e / CW) % 5, l = e % CW;
          const std::size_t t = t0 + std::size_t(tb), col = c0 + std::size_t(l);
          T v = zero(f);
          if (tb < nt && col < d)
            v = r == 0 ? f[t * d + col] : R[(t * N + std::size_t(r - 1)) * d + col];
          sx[tb * TS + r * CW + l] = v;
        }
      }
      const float* wsrc = Wp + ch * std::size_t(L::kWFloats) + 4 * threadIdx.x;
      opaque(wsrc);
      const unsigned wdst = sbase + unsigned(L::kStreamBytes) + 16 * threadIdx.x;
#pragma unroll
      for (int j = 0; j < L::kWFloats / (4 * NT); ++j)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(wdst + 16 * NT * j),
                     "l"(wsrc + 4 * NT * j));
    }
    asm volatile("cp.async.commit_group;\n" ::);
  }
  // The oldest chunk in flight has landed (for this thread: a barrier follows).
  __device__ __forceinline__ static void wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
  }
  __device__ __forceinline__ static void drain() {
    asm volatile("cp.async.wait_group 0;\n" ::);
  }
};

// Phase A on the chunk in stage sx, whose rows sit as Rows says (TB / 8 warps; PhaseA: which
// tokens and columns a lane takes): hc_post, the new streams (they also replace the residual in
// the stage), hc_pre, and each token's sum of squares into ss[i]. The new streams and y are
// stored to x and y, or with STAGED the stage keeps them (y in f's row, read before) for tensor
// stores. A pass takes CWP of the chunk's columns from column c0 (each token's columns in order).
template <class T, int D, int TB, int CW, class Rows, bool STAGED, int CWP = CW>
__device__ __forceinline__ void tc_phase_a(T* sx, const float* coef, T* x, T* y, std::size_t t0,
                                           int nt, std::size_t ch, std::size_t d, float (&ss)[4],
                                           int c0 = 0) {
  using L = TcLayout<T, TB, CW>;
  using P = typename Pair<T>::type;
  constexpr int N = L::N, CO = L::CO, NW = L::NW;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int cp = PhaseA::col(lane);
  const std::size_t cc0 = ch * CW + std::size_t(c0 + cp);
  // Token PhaseA::token(i) of the block: its streams at xl + 2 i NW N d, its y at yl + 2 i NW d.
  const int tb0 = PhaseA::token(warp, NW, lane, 0);
  T* xl = STAGED ? nullptr : x + (t0 + std::size_t(tb0)) * N * d + cc0;
  T* yl = STAGED ? nullptr : y + (t0 + std::size_t(tb0)) * d + cc0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int tb = PhaseA::token(warp, NW, lane, i);
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
    for (int c32 = 0; c32 < CWP; c32 += 32) {
      const std::size_t cc = cc0 + std::size_t(c32);
      auto row = [&](int r) { return reinterpret_cast<P*>(sx + Rows::at(tb, r, c0 + c32 + cp)); };
      const float2 fv = to_float2(*row(0));
      float2 rv[N];
#pragma unroll
      for (int j = 0; j < N; ++j) rv[j] = to_float2(*row(1 + j));
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
        const P pv = from_float2(v, sx);  // as stored
        if (!STAGED)
          store_pair<D>(xl, std::size_t(2 * NW * i * N + kk) * d + std::size_t(c32), pv, cc, d);
        *row(1 + kk) = pv;
        v = to_float2(pv);
        ss[i] += v.x * v.x;
        ss[i] += v.y * v.y;
        yv.x += co[N + N * N + kk] * v.x;
        yv.y += co[N + N * N + kk] * v.y;
      }
      if (STAGED)
        *row(0) = from_float2(yv, sx);
      else
        store_pair<D>(yl, std::size_t(2 * NW * i) * d + std::size_t(c32), from_float2(yv, sx), cc,
                      d);
    }
  }
}

// Phase B on the chunk's new streams in stage sx (rows as Rows says; PhaseB: which elements a
// lane reads) and hc_fn's chunk w: warp w multiplies the new stream k = w mod 4 of 32 of the
// chunk's tokens, 32 columns at a time ([32 tokens x 32 columns]), by hc_fn's ([32 x 24]), on tf32
// parts a ~ ah + al, b ~ bh + bl (split_tf32) as ah bl + al bh + ah bh; bf16 streams are tf32
// values already (al = 0: two products). Each 32 columns are summed from zero, then added to the
// running sums acc in fp32. A pass takes CWP of the chunk's columns from column c0.
template <class T, int TB, int CW, class Rows, int CWP = CW>
__device__ __forceinline__ void tc_phase_b(const T* sx, const float* w, float (&acc)[2][3][4],
                                           int c0 = 0) {
  using L = TcLayout<T, TB, CW>;
  constexpr int N = L::N;
  constexpr bool fp32 = std::is_same<T, float>::value;  // bf16 values are tf32 values
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int k = warp % N, grp = warp / N;  // stream k of tokens 32 grp ..
#pragma unroll
  for (int c32 = c0; c32 < c0 + CWP; c32 += 32) {  // each 32 columns summed from zero
    const float* wb = w + ((c32 / 32) * N + k) * L::kWSub;
    float part[2][3][4] = {};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      std::uint32_t bh[3][2], bl[3][2];
#pragma unroll
      for (int b = 0; b < 3; ++b) {
        const float2 wv = reinterpret_cast<const float2*>(wb)[(s * 3 + b) * 32 + lane];
        split_tf32(wv.x, bh[b][0], bl[b][0]);
        split_tf32(wv.y, bh[b][1], bl[b][1]);
      }
#pragma unroll
      for (int a = 0; a < 2; ++a) {
        // a0, a2 (k = t, t + 4: columns 8s + 2t, +1) of rows g and g + 8: one access each.
        const int col = c32 + PhaseB::col(lane, s);
        const T* xa = sx + Rows::at(PhaseB::token(grp, lane, a, 0), 1 + k, col);
        const T* xa8 = sx + Rows::at(PhaseB::token(grp, lane, a, 1), 1 + k, col);
        std::uint32_t ah[4], al[4] = {0, 0, 0, 0};
        if (fp32) {
          const float2 r0 = *reinterpret_cast<const float2*>(xa),
                       r1 = *reinterpret_cast<const float2*>(xa8);
          split_tf32(r0.x, ah[0], al[0]);
          split_tf32(r1.x, ah[1], al[1]);
          split_tf32(r0.y, ah[2], al[2]);
          split_tf32(r1.y, ah[3], al[3]);
        } else {  // bf16 pairs: the low half is the first column
          const std::uint32_t w0 = *reinterpret_cast<const std::uint32_t*>(xa);
          const std::uint32_t w1 = *reinterpret_cast<const std::uint32_t*>(xa8);
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
}

// The block's tokens finished from red ([token][M + 1]: the projection, streams summed, and the
// sum of squares): the mixes normalised, and split_sinkhorn with 16 lanes a token, lane 4j + k
// holding comb[j, k]. Each lane does the operations split_token does for its element, in the same
// order; the row and column sums gather their four terms by shuffles and add them in index order.
// One thread a token serialises its 16 divisions a step (bench/README.md, "From a decode
// step").
template <int N, int M, int NT>
__device__ __forceinline__ void tc_finish(const Dims& c, const float* red, std::size_t t0, int nt,
                                          std::size_t d, const float* scale, const float* base,
                                          float* mixes, float* pre, float* postout,
                                          float* combout) {
  static_assert(N * N == 16 && M == 2 * N + 16, "two tokens a warp");
  constexpr unsigned all = 0xffffffffu;
  const int l = int(threadIdx.x) % 16, j = l / N, k = l % N;
  const float eps = c.hc_eps;
  auto row_sum = [&](float v) {  // sum over k of row j, in order
    float r = __shfl_sync(all, v, N * j, 16);
    for (int q = 1; q < N; ++q) r += __shfl_sync(all, v, N * j + q, 16);
    return r;
  };
  auto col_sum = [&](float v) {  // sum over j of column k, in order
    float r = __shfl_sync(all, v, k, 16);
    for (int q = 1; q < N; ++q) r += __shfl_sync(all, v, N * q + k, 16);
    return r;
  };
  for (int tb0 = 0; tb0 < nt; tb0 += NT / 16) {  // the same trip count in every lane
    const int tb = tb0 + int(threadIdx.x) / 16;
    const bool on = tb < nt;
    const float* r = red + (on ? tb : 0) * (M + 1);
    const std::size_t t = t0 + std::size_t(tb);
    const float rr = 1.0f / sqrtf(r[M] / float(std::size_t(N) * d) + c.norm_eps);
    const float mc = r[2 * N + l] * rr;
    if (on) mixes[t * M + std::size_t(2 * N + l)] = mc;
    if (l < 2 * N) {
      const float m = r[l] * rr;
      if (on) {
        mixes[t * M + std::size_t(l)] = m;
        if (l < N)
          pre[t * N + std::size_t(l)] = sigmoid(m * scale[0] + base[l]) + eps;
        else
          postout[t * N + std::size_t(l - N)] = 2.0f * sigmoid(m * scale[1] + base[l]);
      }
    }
    float C = mc * scale[2] + base[2 * N + l];
    float mx = C;
    for (int o = 1; o < N; o *= 2) mx = fmaxf(mx, __shfl_xor_sync(all, mx, o, 16));
    C = expf(C - mx);
    C = C / row_sum(C) + eps;
    for (int it = 0; it < c.iters; ++it) {
      if (it > 0) C = C / (row_sum(C) + eps);
      C = C / (col_sum(C) + eps);
    }
    if (on) combout[t * N * N + std::size_t(l)] = C;
  }
}

// The barrier of the threads that compute: the block's, or with a producer warp (WS, the last
// warp) that of the first NT threads.
template <bool WS, int NT>
__device__ __forceinline__ void tc_sync() {
  if constexpr (WS)
    sync_threads_of<NT>();
  else
    __syncthreads();
}

// tc_finish_kernel is launched as a programmatic dependent of the single pass: once every block
// of the pass has called release_finish (after its main loop), the finishing blocks may start and
// wait in griddepcontrol.wait until the pass has ended and its stores are visible. So the second
// launch overlaps the pass's epilogue instead of following it; the wait is what orders the sums.
__device__ __forceinline__ void release_finish() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// After the block's last chunk (the stages no longer in use): the sums of squares over each half
// warp, the four streams' partial products through shared memory (reusing the stages), summed
// per token ((k0 + k1) + k2) + k3, stored in the block's slice of `partial` ([S][ranges][TB]
// [M + 1]), which tc_finish_kernel adds over the S splits and finishes.
template <class T, int TB, int CW, bool WS = false>
__device__ __forceinline__ void tc_epilogue(unsigned char* smem, float* sumsq, const float (&ss)[4],
                                            const float (&acc)[2][3][4], int nt, float* partial) {
  using L = TcLayout<T, TB, CW>;
  constexpr int N = L::N, M = L::M, NW = L::NW, NT = L::kThreads;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int g = lane / 4, tq = lane % 4;
  const int k = warp % N, grp = warp / N;
  release_finish();
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // over each half warp: its token of round i
    float v = ss[i];
    for (int o = 8; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o, 16);
    if (lane % 16 == 0) sumsq[PhaseA::token(warp, NW, lane, i)] = v;
  }
  tc_sync<WS, NT>();  // every warp is done with the stages
  // [stream][token][row]; fragment r: token g (+8 for r >= 2), row 2 tq (+1 for odd r)
  float* part = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int b = 0; b < 3; ++b)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        part[(k * TB + 32 * grp + 16 * a + g + 8 * (r / 2)) * M + 8 * b + 2 * tq + r % 2] =
            acc[a][b][r];
  tc_sync<WS, NT>();
  float* mine =
      partial + (std::size_t(blockIdx.y) * gridDim.x + blockIdx.x) * std::size_t(TB * (M + 1));
  for (int e = int(threadIdx.x); e < nt * (M + 1); e += NT) {
    const int tb = e / (M + 1), a = e % (M + 1);
    mine[e] = a == M ? sumsq[tb]
                     : ((part[(0 * TB + tb) * M + a] + part[(1 * TB + tb) * M + a]) +
                        part[(2 * TB + tb) * M + a]) +
                           part[(3 * TB + tb) * M + a];
  }
}

// The boundary's tokens finished, 8 a block of 128 threads: each token's sums added over the S
// splits in split order (the slices of a split copied into shared memory together, all copies in
// flight at once, then each sum from them), then tc_finish. A kernel of its own, so that a block
// of boundary_tc does not hold its multiprocessor through 20 Sinkhorn rounds on its 32 tokens, and
// every token of a small batch is finished in one pass on its own 16 lanes.
template <int TB>
__global__ void __launch_bounds__(128)
    tc_finish_kernel(Dims c, std::size_t tokens, int S, const float* partial, const float* scale,
                     const float* base, float* mixes, float* pre, float* postout, float* combout) {
  constexpr int N = kTcN, M = kTcM, NT = 128, G = NT / 16, SLICE = G * (M + 1), KB = 40;
  static_assert(TB % G == 0 && SLICE % 4 == 0, "a block's tokens: one range, 16-byte slices");
  __shared__ __align__(16) float buf[KB * SLICE];  // KB splits' slices at a time
  __shared__ float red[SLICE];
  const std::size_t t0 = std::size_t(blockIdx.x) * G;
  const int nt = int(min(std::size_t(G), tokens - t0)), count = nt * (M + 1);
  const int per = (count + 3) / 4;  // 16-byte copies a split
  const std::size_t ranges = (tokens + TB - 1) / TB, stride = ranges * std::size_t(TB * (M + 1));
  const float* src =
      partial + (t0 / TB) * std::size_t(TB * (M + 1)) + (t0 % TB) * std::size_t(M + 1);
  const unsigned sbuf = unsigned(__cvta_generic_to_shared(buf));
  float v[2] = {0, 0};  // elements threadIdx.x and + 128 (count <= 200)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // the pass has ended (release_finish)
  for (int s0 = 0; s0 < S; s0 += KB) {
    const int nb = min(KB, S - s0);
    for (int e = int(threadIdx.x); e < nb * per; e += NT) {
      const int sp = e / per, q = e % per;
      asm volatile(
          "cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sbuf + unsigned(16 * (sp * per + q))),
          "l"(src + std::size_t(s0 + sp) * stride + std::size_t(4 * q)));
    }
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int e = int(threadIdx.x) + NT * r;
      if (e >= count) continue;
      for (int j0 = 0; j0 < nb; j0 += 8) {  // 8 loads in flight, added in split order
        float q[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) q[j] = j0 + j < nb ? buf[4 * (j0 + j) * per + e] : 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (j0 + j < nb) v[r] = s0 + j0 + j == 0 ? q[j] : v[r] + q[j];
      }
    }
    __syncthreads();  // before the next batch overwrites buf
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int e = int(threadIdx.x) + NT * r;
    if (e < count) red[e] = v[r];
  }
  __syncthreads();
  tc_finish<N, M, NT>(c, red, t0, nt, std::size_t(c.d), scale, base, mixes, pre, postout, combout);
}

// The chunks [ch0, ch1) of this block's split: split blockIdx.y of gridDim.y takes its share of
// the 128-column groups, so that where the splits cut does not depend on CW. Unsplit (a kernel
// of its own, whose main loop has constant bounds): every chunk.
template <bool SPLIT, int CW>
struct TcChunks {
  std::size_t ch0, ch1;
  __device__ __forceinline__ explicit TcChunks(std::size_t d) {
    const std::size_t chunks = (d + CW - 1) / CW, groups = (d + 127) / 128;
    ch0 = SPLIT ? min(chunks, groups * blockIdx.y / gridDim.y * (128 / CW)) : 0;
    ch1 = !SPLIT || blockIdx.y + 1 == gridDim.y
              ? chunks
              : min(chunks, groups * (blockIdx.y + 1) / gridDim.y * (128 / CW));
  }
};

template <class T, int D, int STAGES, int TB, int CW, int PF, bool SPLIT>
__global__ void __launch_bounds__(TcLayout<T, TB, CW>::kThreads,
                                  TcLayout<T, TB, CW>::blocks(STAGES))
    boundary_tc(Dims c, std::size_t tokens, const T* f, const T* R, const float* post,
                const float* comb, const float* pre_mix, const float* Wp, T* x, T* y,
                float* partial) {
  using L = TcLayout<T, TB, CW>;
  using Pipe = TcPipeline<T, D, STAGES, TB, CW, PF>;
  // A fixed width stores pairs unchecked (store_pair), so it must be whole chunks.
  static_assert(D == 0 || (Pipe::kAsync && D % 2 == 0), "a fixed width is a multiple of CW");
  static_assert(L::N * TB * L::M * 4 <= STAGES * L::kStageBytes,
                "the partial products reuse the stages");
  static_assert(L::CO % 4 == 0, "coefficients are read as float4");
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ __align__(16) float coef[TB * L::CO];  // post, comb, pre_mix per token
  __shared__ float sumsq[TB];
  const std::size_t t0 = std::size_t(blockIdx.x) * TB;
  const int nt = int(min(std::size_t(TB), tokens - t0));
  const std::size_t d = D > 0 ? std::size_t(D) : std::size_t(c.d);
  const TcChunks<SPLIT, CW> range(d);
  const std::size_t ch0 = range.ch0, ch1 = range.ch1;
  const Pipe pipe(smem, f, R, Wp, t0, nt, d, ch1);
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) pipe.fetch(ch0 + std::size_t(st), st);
  // After the first copies are asked for, so that their latencies overlap.
  tc_coefficients<TB, L::CO, L::N, L::kThreads>(coef, post, comb, pre_mix, t0, nt);
  float acc[2][3][4] = {};  // [m-tile][n-tile][fragment]: the running sums, fp32 adds
  float ss[4] = {0, 0, 0, 0};
  for (std::size_t ch = ch0; ch < ch1; ++ch) {
    const int st = int((ch - ch0) % STAGES);
    Pipe::wait();     // chunk ch has landed
    __syncthreads();  // ... for every thread; and the stage refilled next is no longer read
    pipe.fetch(ch + STAGES - 1, int((ch - ch0 + STAGES - 1) % STAGES));
    tc_phase_a<T, D, TB, CW, typename L::Rows, false>(pipe.streams(st), coef, x, y, t0, nt, ch, d,
                                                      ss);
    __syncthreads();  // the chunk's new streams are in the stage
    tc_phase_b<T, TB, CW, typename L::Rows>(pipe.streams(st), pipe.w(st), acc);
    // A compiler fence: without it work of the next chunk is moved up into this one, which costs
    // registers and spills (bench/README.md, "The boundary on the GPU").
    asm volatile("" ::: "memory");
  }
  Pipe::drain();
  tc_epilogue<T, TB, CW>(smem, sumsq, ss, acc, nt, partial);
}

// A stage of boundary_tc_tma: the chunk's rows where tensor copies write them (SwizzledBoxes),
// then hc_fn's packed chunk. The stages start 1024-byte aligned (the swizzle's period), so the
// dynamic shared memory asks for 1 KB more to align its start.
template <class T, int TB, int CW>
struct TmaStage {
  using Rows = SwizzledBoxes<int(sizeof(T)), TB, CW>;
  static constexpr int kStreamBytes = Rows::kBytes;
  static constexpr int kBytes = kStreamBytes + 4 * TcLayout<T, TB, CW>::kWFloats;
  static constexpr int smem(int stages) { return stages * kBytes + 1024; }
  // Blocks a multiprocessor holds, as TcLayout::blocks counts them.
  static constexpr int blocks(int stages) {
    const int b = 233472 / (smem(stages) + TB * (TcLayout<T, TB, CW>::CO + 1) * 4 + 1024);
    return b < 1 ? 1 : b;
  }
  static_assert(kBytes % 1024 == 0, "every stage 1024-byte aligned");
};

// The stream tensors as tensor maps (stream_map): f and y [T][d], R and x [T][N][d], in boxes of
// one row of TB tokens and 128 bytes of columns, 128-byte swizzled.
struct TcMaps {
  CUtensorMap f, R, x, y;
};

// boundary_tc with tensor copies and a producer warp (warp specialisation): the same phases and
// arithmetic, so the same bits at the same split, on stages whose data the first thread of the
// last warp moves. It fills a stage with tensor copies (a box a row and 128 bytes of columns,
// zero past the last token) and a bulk copy of hc_fn's chunk, counted on the stage's "full"
// barrier. The computing warps wait on it; phase A leaves x and y in the stage (STAGED), and
// once every warp's phase A is done (a barrier of their own) one thread arrives on "staged". The
// producer then stores x and y with tensor stores (clipped at the last token) while phase B reads
// the stage, and refills it once phase B is done ("empty", an arrival a thread) and its stores have
// read it. The computing warps meet once a chunk and never wait for a copy they did not need,
// and the copies run up to STAGES chunks ahead. Whole chunks only.
template <class T, int D, int STAGES, int TB, int CW, bool SPLIT>
__global__ void __launch_bounds__(TcLayout<T, TB, CW>::kThreads + 32,
                                  TmaStage<T, TB, CW>::blocks(STAGES))
    boundary_tc_tma(Dims c, std::size_t tokens, const __grid_constant__ TcMaps maps,
                    const float* post, const float* comb, const float* pre_mix, const float* Wp,
                    float* partial) {
  using L = TcLayout<T, TB, CW>;
  using St = TmaStage<T, TB, CW>;
  using Rows = typename St::Rows;
  constexpr int N = L::N, NT = L::kThreads, PC = Rows::PC;
  static_assert(D > 0 && D % CW == 0, "whole chunks");
  static_assert(sizeof(T) == 2, "bf16 streams: fp32's phase B reads would conflict (2-way)");
  static_assert(N * TB * L::M * 4 <= STAGES * St::kBytes, "the partial products reuse the stages");
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(16) float coef[TB * L::CO];
  __shared__ float sumsq[TB];
  __shared__ __align__(8) std::uint64_t bars[3 * STAGES];  // full, staged, empty: a stage each
  unsigned char* smem = smem_raw + (1024u - smem_addr(smem_raw) % 1024u) % 1024u;
  const std::size_t t0 = std::size_t(blockIdx.x) * TB;
  const int nt = int(min(std::size_t(TB), tokens - t0));
  constexpr std::size_t d = std::size_t(D);
  const TcChunks<SPLIT, CW> range(d);
  const std::size_t ch0 = range.ch0, n = range.ch1 - range.ch0;
  const unsigned s0 = smem_addr(smem), b0 = smem_addr(bars);
  const auto full = [&](int st) { return b0 + 8u * unsigned(st); };
  const auto staged = [&](int st) { return b0 + 8u * unsigned(STAGES + st); };
  const auto empty = [&](int st) { return b0 + 8u * unsigned(2 * STAGES + st); };
  if (threadIdx.x == 0) {
    for (int st = 0; st < STAGES; ++st) {
      bar_init(full(st), 1);
      bar_init(staged(st), 1);
      bar_init(empty(st), NT);
    }
    bar_init_fence();
  }
  __syncthreads();
  const int tok = int(t0);  // a tensor copy's coordinates are 32-bit
  // Chunk j of the block's range: its column, its stage, and the parity of its stage's barriers.
  const auto col = [&](std::size_t j, int p) { return int(ch0 + j) * CW + p * PC; };
  const auto stage = [](std::size_t j) { return int(j % STAGES); };
  const auto parity = [](std::size_t j) { return unsigned(j / STAGES) & 1u; };
  if (int(threadIdx.x) >= NT) {  // the producer warp
    if (int(threadIdx.x) == NT) {
      const auto load = [&](std::size_t j) {
        const unsigned base = s0 + unsigned(stage(j) * St::kBytes), bar = full(stage(j));
        bar_expect(bar, unsigned(St::kBytes));  // a box's bytes count whole, zeros included
#pragma unroll
        for (int p = 0; p < Rows::P; ++p) {
          tensor_load2(base + unsigned(Rows::box(0, p)), &maps.f, col(j, p), tok, bar);
#pragma unroll
          for (int k = 0; k < N; ++k)
            tensor_load3(base + unsigned(Rows::box(1 + k, p)), &maps.R, col(j, p), k, tok, bar);
        }
        bulk_load(base + unsigned(St::kStreamBytes), Wp + (ch0 + j) * std::size_t(L::kWFloats),
                  4u * L::kWFloats, bar);
      };
      for (std::size_t j = 0; j < n && j < STAGES; ++j) load(j);
      for (std::size_t j = 0; j < n; ++j) {
        const unsigned base = s0 + unsigned(stage(j) * St::kBytes);
        bar_wait(staged(stage(j)), parity(j));  // chunk j's x and y are in its stage
#pragma unroll
        for (int p = 0; p < Rows::P; ++p) {
          tensor_store2(&maps.y, col(j, p), tok, base + unsigned(Rows::box(0, p)));
#pragma unroll
          for (int k = 0; k < N; ++k)
            tensor_store3(&maps.x, col(j, p), k, tok, base + unsigned(Rows::box(1 + k, p)));
        }
        bulk_commit();
        if (j + STAGES < n) {
          bar_wait(empty(stage(j)), parity(j));  // phase B is done with the stage
          bulk_wait_read();                      // and so are the stores
          load(j + STAGES);
        }
      }
      bulk_wait_read();
    }
    __syncwarp();  // the warp meets the barrier as one (bar.sync is .aligned)
    release_finish();
    sync_threads_of<NT + 32, 2>();            // the epilogue may reuse the stages
    if (int(threadIdx.x) == NT) bulk_wait();  // x and y written before the block ends
    return;
  }
  tc_coefficients<TB, L::CO, L::N, NT>(coef, post, comb, pre_mix, t0, nt);
  sync_threads_of<NT>();
  float acc[2][3][4] = {};
  float ss[4] = {0, 0, 0, 0};
  for (std::size_t j = 0; j < n; ++j) {
    T* sx = reinterpret_cast<T*>(smem + stage(j) * St::kBytes);
    bar_wait(full(stage(j)), parity(j));  // chunk j has landed
    // A pass a box of columns, not unrolled: at CW = 128 the whole chunk at once spills.
#pragma unroll 1
    for (int c = 0; c < CW; c += PC)
      tc_phase_a<T, D, TB, CW, Rows, true, PC>(sx, coef, nullptr, nullptr, t0, nt, ch0 + j, d, ss,
                                               c);
    fence_async_smem();     // phase A's stores to the stage before the tensor stores and refill
    sync_threads_of<NT>();  // the chunk's x and y are in the stage
    if (threadIdx.x == 0) bar_arrive(staged(stage(j)));
#pragma unroll 1
    for (int c = 0; c < CW; c += PC)
      tc_phase_b<T, TB, CW, Rows, PC>(
          sx, reinterpret_cast<const float*>(smem + stage(j) * St::kBytes + St::kStreamBytes), acc,
          c);
    bar_arrive(empty(stage(j)));    // each thread after its reads: what racecheck can check
    asm volatile("" ::: "memory");  // as in boundary_tc
  }
  sync_threads_of<NT + 32, 2>();  // with the producer: its stores have read the stages
  tc_epilogue<T, TB, CW, true>(smem, sumsq, ss, acc, nt, partial);
}

// hc_fn packed for boundary_tc (pack_hc_fn_mma), padded to whole 128 columns so that every
// configuration (32, 64 or 128 columns a chunk) reads whole chunks. A weight: packed once, when
// hc_fn is on the device, and passed to every launch.
struct TcWeights {
  int n, d;
  std::size_t chunks32;
  Dev<float> packed;
  TcWeights(const Dims& c, const float* W)  // W [M, n*d] on the device
      : n(c.n),
        d(c.d),
        chunks32((std::size_t(c.d) + 127) / 128 * 4),
        packed(std::size_t(c.n) * chunks32 * 768) {
    pack(W);
  }
  void pack(const float* W) {  // one launch
    pack_hc_fn_mma<<<blocks_for(packed.n, kThreads), kThreads>>>(std::size_t(n), std::size_t(d),
                                                                 chunks32, W, packed.p);
    MHC_CUDA_LAUNCHED();
  }
};

// cuda_fused_poison_sums (tests only): NaN into the sums' workspace before each pass.
std::atomic<bool> g_poison_sums{false};

// The sums of every token range and split ([S][ranges][TB][M + 1]), kept for the process and
// grown as needed.
struct TcWork {
  float* partial = nullptr;
  std::size_t partials = 0;
  void reserve(std::size_t p) {
    if (p <= partials) return;
    if (partial) MHC_CUDA_CHECK(cudaFree(partial));
    partial = nullptr;
    partials = 0;
    MHC_CUDA_CHECK(cudaMalloc(&partial, p * sizeof(float)));
    partials = p;
  }
};

// The single pass in one configuration on T tokens, in `splits` blocks per token range (0: as
// many as fill the multiprocessors once at this configuration's occupancy, with at least 128
// columns a split; 1 once the token ranges alone fill them), then tc_finish_kernel; returns the
// split it used (a token's bits depend on it alone). The workspace is shared, so the lock is held
// until the launches, on the one (default) stream. TMA: with tensor copies and a producer warp
// (boundary_tc_tma; the stream tensors 16-byte aligned).
template <class S, int D, int STAGES, int TB, int CW, int PF, bool TMA>
int launch_tc(const Dims& c, std::size_t T, const S* f, const S* R, const float* post,
              const float* comb, const float* pre_mix, const TcWeights& w, const float* scale,
              const float* base, S* x, S* y, float* mixes, float* pre, float* postout,
              float* combout, int splits) {
  using L = TcLayout<S, TB, CW>;
  static_assert(128 % CW == 0, "TcWeights pads hc_fn to whole chunks of this width");
  if (w.n != c.n || w.d != c.d)
    throw std::invalid_argument("launch_tc: hc_fn packed for another shape");
  if (D > 0 && c.d != D)  // the kernel's loops run to D
    throw std::invalid_argument("launch_tc: instantiated for another width");
  constexpr int bytes = [] {
    if constexpr (TMA)
      return TmaStage<S, TB, CW>::smem(STAGES);
    else
      return STAGES * L::kStageBytes;
  }();
  constexpr int threads = L::kThreads + (TMA ? 32 : 0);
  const auto kernel = [](auto split) {
    if constexpr (TMA)
      return boundary_tc_tma<S, D, STAGES, TB, CW, decltype(split)::value>;
    else
      return boundary_tc<S, D, STAGES, TB, CW, PF, decltype(split)::value>;
  };
  const auto whole = kernel(std::false_type{}), split = kernel(std::true_type{});
  static const int slots = [&] {  // once: the stages exceed the default 48 KB
    for (auto k : {whole, split})
      MHC_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    int sms = 0, per_sm = 0, dev = 0;
    MHC_CUDA_CHECK(cudaGetDevice(&dev));
    MHC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    MHC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, whole, threads, bytes));
    return std::max(1, sms * per_sm);
  }();
  const std::size_t ranges = (T + TB - 1) / TB;
  std::size_t S_ = splits > 0 ? std::size_t(splits)
                              : std::min(std::max<std::size_t>(1, std::size_t(slots) / ranges),
                                         std::max<std::size_t>(1, std::size_t(c.d) / 128));
  S_ = std::min(S_, (std::size_t(c.d) + 127) / 128);  // every split has columns
  static std::mutex mu;
  static TcWork work;
  std::lock_guard<std::mutex> lock(mu);
  work.reserve(S_ * ranges * std::size_t(TB * (L::M + 1)));
  if (g_poison_sums.load())
    MHC_CUDA_CHECK(cudaMemsetAsync(work.partial, 0xFF, work.partials * sizeof(float)));
  const dim3 grid{unsigned(ranges), unsigned(S_)};
  if constexpr (TMA) {
    constexpr int PC = TmaStage<S, TB, CW>::Rows::PC;
    const TcMaps maps{stream_map(f, 1, std::size_t(c.d), T, PC, TB),
                      stream_map(R, kTcN, std::size_t(c.d), T, PC, TB),
                      stream_map(x, kTcN, std::size_t(c.d), T, PC, TB),
                      stream_map(y, 1, std::size_t(c.d), T, PC, TB)};
    (S_ > 1 ? split : whole)<<<grid, threads, bytes>>>(c, T, maps, post, comb, pre_mix, w.packed.p,
                                                       work.partial);
  } else {
    (S_ > 1 ? split : whole)<<<grid, threads, bytes>>>(c, T, f, R, post, comb, pre_mix, w.packed.p,
                                                       x, y, work.partial);
  }
  MHC_CUDA_LAUNCHED();
  cudaLaunchAttribute dependent{};
  dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t finish{};
  finish.gridDim = dim3(unsigned((T + 7) / 8));
  finish.blockDim = dim3(128);
  finish.attrs = &dependent;
  finish.numAttrs = 1;
  MHC_CUDA_CHECK(cudaLaunchKernelEx(&finish, tc_finish_kernel<TB>, c, T, int(S_),
                                    static_cast<const float*>(work.partial), scale, base, mixes,
                                    pre, postout, combout));
  MHC_CUDA_LAUNCHED();
  return int(S_);
}

template <class S>
using TcLaunch = int (*)(const Dims&, std::size_t, const S*, const S*, const float*, const float*,
                         const float*, const TcWeights&, const float*, const float*, S*, S*, float*,
                         float*, float*, float*, int);

// A configuration of boundary_tc: tokens a block, columns a chunk, pipeline stages, L2 prefetch
// size in bytes (0: none; cp.async copies only), and whether tensor copies from a producer warp
// fill the stages (boundary_tc_tma).
template <int TB_, int CW_, int STAGES_, int PF_, bool TMA_ = false>
struct TcConfig {
  static constexpr int TB = TB_, CW = CW_, STAGES = STAGES_, PF = PF_;
  static constexpr bool TMA = TMA_;
  static_assert(!TMA || PF == 0, "tensor copies ask L2 for 256 bytes through their map");
};
template <class S, int D, class C>
constexpr TcLaunch<S> tc_launch() {
  return launch_tc<S, D, C::STAGES, C::TB, C::CW, C::PF, C::TMA>;
}

// The configuration cuda-fused runs, per stream type: the fastest of mhc-bench-cuda's sweep on
// the H200 (bench/README.md, "The boundary on the GPU"), which is also the sweep's reference.
// bf16 at a fixed width runs boundary_tc_tma from kTmaTokens tokens, in the fastest of TmaShapes
// on the device (launch_tma_fastest): the same bits at the same split, and there the split is 1
// in each (132 multiprocessors).
template <class S>
struct ShippedTc;
template <>
struct ShippedTc<float> : TcConfig<32, 64, 2, 0> {};
template <>
struct ShippedTc<bf16> : TcConfig<32, 64, 2, 256> {};
using TmaTc = TcConfig<64, 64, 3, 0, true>;
// The tensor-copy shapes that led the sweep on one device or another: TmaTc on the H200, 128
// columns or 3 stages of 32 tokens on the H100 (bench/README.md, "A quarter of the registers").
using TmaShapes = std::tuple<TmaTc, TcConfig<32, 128, 2, 0, true>, TcConfig<32, 64, 3, 0, true>>;
constexpr int kTmaShapes = int(std::tuple_size<TmaShapes>::value);
constexpr std::size_t kTmaTokens = 16384;
template <std::size_t... I>
constexpr int tma_widest(std::index_sequence<I...>) {
  return std::max({std::tuple_element_t<I, TmaShapes>::CW...});
}
template <class S, int D>  // the tensor copies take bf16 streams in whole chunks of every shape
constexpr bool kTmaFits =
    D > 0 &&
    D % tma_widest(std::make_index_sequence<kTmaShapes>{}) == 0 && std::is_same<S, bf16>::value;
template <class S, int D>
constexpr bool runs_tma(std::size_t tokens) {
  return kTmaFits<S, D> && tokens >= kTmaTokens;
}
// A configuration's name, as the benchmark shows it: "tb32 cw64 s2 L2:256".
template <class C>
std::string tc_name() {
  std::string s = "tb" + std::to_string(C::TB) + " cw" + std::to_string(C::CW) + " s" +
                  std::to_string(C::STAGES);
  if (C::PF) s += " L2:" + std::to_string(C::PF);
  if (C::TMA) s += " tma";
  return s;
}
template <std::size_t... I>
std::array<std::string, kTmaShapes> tma_names(std::index_sequence<I...>) {
  return {tc_name<std::tuple_element_t<I, TmaShapes>>()...};
}
template <class S, int D, std::size_t... I>
constexpr std::array<TcLaunch<S>, kTmaShapes> tma_launches(std::index_sequence<I...>) {
  return {tc_launch<S, D, std::tuple_element_t<I, TmaShapes>>()...};
}
template <class S, int D>
constexpr auto kTmaLaunches = tma_launches<S, D>(std::make_index_sequence<kTmaShapes>{});
// The shape the process settled on (-1: none yet), per stream type and width.
template <class S, int D>
std::atomic<int> g_tma_shape{-1};
// TmaShapes' fastest on this device, found by the first call on its first kTmaTokens tokens (a
// bounded cost at any T): each shape runs once untimed, then the shapes take turns in rounds,
// each rotated by one from the last, until kWarmMs + kTimedMs of calls in all and kMinRounds
// counted; rounds that start within the first kWarmMs are not counted (clocks and power settle as
// under a model's load). Those at TmaTc's split, which give TmaTc's bits, compete on their median
// (a shape the device cannot launch does not). The first call's outputs, and every later call's,
// are the fastest's (bench/README.md, "The tensor-copy shape, chosen again").
template <class S, int D>
int launch_tma_fastest(const Dims& c, std::size_t T, const S* f, const S* R, const float* post,
                       const float* comb, const float* pre_mix, const TcWeights& w,
                       const float* scale, const float* base, S* x, S* y, float* mixes, float* pre,
                       float* postout, float* combout, int splits) {
  const auto run = [&](int i, std::size_t tokens) {
    return kTmaLaunches<S, D>[std::size_t(i)](c, tokens, f, R, post, comb, pre_mix, w, scale, base,
                                              x, y, mixes, pre, postout, combout, splits);
  };
  static std::once_flag once;
  std::call_once(once, [&] {
    constexpr float kWarmMs = 25, kTimedMs = 50;
    constexpr int kMinRounds = 7, kMaxRounds = 1000;  // kMaxRounds: however fast the calls
    const std::size_t timed = std::min(T, kTmaTokens);
    int split[kTmaShapes];
    for (int i = 0; i < kTmaShapes; ++i) {
      try {
        split[i] = run(i, timed);        // untimed: a kernel's first launch sets its attributes
      } catch (const std::exception&) {  // a shape this device cannot launch is no candidate
        if (i == 0) throw;
        split[i] = -1;
      }
    }
    cudaEvent_t e0, e1;
    MHC_CUDA_CHECK(cudaEventCreate(&e0));
    MHC_CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> ms[kTmaShapes];
    float spent = 0;
    for (int r = 0, rounds = 0;
         rounds < kMinRounds || (spent < kWarmMs + kTimedMs && r < kMaxRounds); ++r) {
      const bool counted = spent >= kWarmMs || r >= kMaxRounds / 2;
      rounds += counted;
      for (int j = 0; j < kTmaShapes; ++j) {
        const int i = (r + j) % kTmaShapes;
        if (split[i] != split[0]) continue;
        float t = 0;
        MHC_CUDA_CHECK(cudaEventRecord(e0));
        run(i, timed);
        MHC_CUDA_CHECK(cudaEventRecord(e1));
        MHC_CUDA_CHECK(cudaEventSynchronize(e1));
        MHC_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        spent += t;
        if (counted) ms[i].push_back(t);
      }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    const auto median = [&](int i) {
      auto& v = ms[i];
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      return v[v.size() / 2];
    };
    int best = 0;
    for (int i = 1; i < kTmaShapes; ++i)
      if (split[i] == split[0] && median(i) < median(best)) best = i;
    g_tma_shape<S, D> = best;
  });
  return run(g_tma_shape<S, D>.load(), T);
}
// What cuda-fused launches on T tokens; `shape` >= 0 (bf16 at a fixed width only): that one of
// TmaShapes at every token count, so that the tests judge each shape at every split.
template <class S, int D>
constexpr TcLaunch<S> shipped_tc(std::size_t tokens, int shape = -1) {
  if constexpr (kTmaFits<S, D>) {
    if (shape >= 0) return kTmaLaunches<S, D>[std::size_t(shape)];
    if (runs_tma<S, D>(tokens)) return launch_tma_fastest<S, D>;
  }
  return tc_launch<S, D, ShippedTc<S>>();
}

}  // namespace
}  // namespace mhc::impl::cuda_detail
