// The CUDA backends' backward kernels of the pieces (docs/semantics.md, "The backward pass"),
// fp32 arithmetic: the closed forms of impl/cpu/backward.cpp, one block a token for the reductions
// over d (and 16 lanes a token, or one thread, for the Sinkhorn's unrolled backward). The
// parameters' gradients are sums over tokens, formed either in token order by a separate pass over
// every parameter (deterministic: the same bits in every run) or with atomic adds as each token
// is done (the order the device happens to run in, as a training kernel's atomics give). Stream
// tensors are S, float or bf16: the stream inputs and upstream gradients read with ld, the stream
// gradients stored with st (rounded to nearest even); mixes, coefficients, parameters and their
// gradients fp32.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "backward.cuh"
#include "buffers.cuh"
#include "check.cuh"
#include "device.cuh"

namespace mhc::impl::cuda_detail {
namespace {

// out[r * count + i] = the sum in token order of per_token[t * count + i] over the r-th range of
// `span` tokens (the grid's y); with one range, the deterministic sum over tokens itself.
__global__ void sum_tokens(std::size_t T, std::size_t span, std::size_t count,
                           const float* per_token, float* out) {
  const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const std::size_t t0 = std::size_t(blockIdx.y) * span, t1 = t0 + span < T ? t0 + span : T;
  float acc = 0;
  for (std::size_t t = t0; t < t1; ++t) acc += per_token[t * count + i];
  out[std::size_t(blockIdx.y) * count + i] = acc;
}

// y_c = sum_j p_j x_jc: d_x_jc = p_j g_c, d_p_j = sum_c g_c x_jc. A block a token.
template <class S>
__global__ void pre_backward_kernel(Dims c, const S* x, const float* p, const S* g, S* dx,
                                    float* dp) {
  __shared__ float shared[kMaxN * 32];
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d), t = blockIdx.x;
  float acc[kMaxN] = {};
  for (std::size_t cc = threadIdx.x; cc < d; cc += blockDim.x) {
    const float gv = ld(g, t * d + cc);
    for (std::size_t j = 0; j < n; ++j) {
      const float v = p[t * n + j] * gv;
      st(dx, (t * n + j) * d + cc, v);
      acc[j] += gv * ld(x, (t * n + j) * d + cc);
    }
  }
  block_sum<kMaxN>(acc, shared);
  if (threadIdx.x == 0)
    for (std::size_t j = 0; j < n; ++j) dp[t * n + j] = acc[j];
}

// y_kc = post_k f_c + sum_j comb_jk R_jc: d_f_c = sum_k post_k g_kc, d_R_jc = sum_k comb_jk g_kc,
// d_post_k = sum_c g_kc f_c, d_comb_jk = sum_c g_kc R_jc. A block a token; NN >= n streams, the
// loops unrolled to NN so that the sums stay in registers (indexed by n, they went to local
// memory). G: g's type (S in the piece, the fp32 workspace in the boundary). NN = 4 (n <= 4) is
// held to 64 registers: four blocks an SM, not two, hide more of the loads' latency
// (bench/README.md, "Four blocks an SM for hc_post's backward").
template <int NN, class S, class G>
__global__ void __launch_bounds__(kThreads, NN == 4 ? 4 : 1)
    post_backward_kernel(Dims c, const S* __restrict__ f, const S* __restrict__ R,
                         const float* __restrict__ post, const float* __restrict__ comb,
                         const G* __restrict__ g, S* __restrict__ df, S* __restrict__ dR,
                         float* __restrict__ dpost, float* __restrict__ dcomb) {
  constexpr int kSums = NN + NN * NN;
  __shared__ float shared[kSums * 32];
  const int n = c.n;
  const std::size_t d = std::size_t(c.d), t = blockIdx.x;
  const G* gt = g + t * std::size_t(n) * d;
  float pk[NN], cjk[NN * NN];
#pragma unroll
  for (int k = 0; k < NN; ++k) pk[k] = k < n ? post[t * n + k] : 0.0f;
#pragma unroll
  for (int j = 0; j < NN; ++j)
#pragma unroll
    for (int k = 0; k < NN; ++k)
      cjk[j * NN + k] = j < n && k < n ? comb[(t * n + j) * n + k] : 0.0f;
  float acc[kSums] = {};  // d_post[k], then d_comb[j NN + k]
  // Unrolled, with the pointers restrict, so that two columns' loads are issued before the stores.
#pragma unroll 2
  for (std::size_t cc = threadIdx.x; cc < d; cc += blockDim.x) {
    float gk[NN];
    float v = 0;
#pragma unroll
    for (int k = 0; k < NN; ++k)
      if (k < n) {
        gk[k] = ld(gt, k * d + cc);
        v += pk[k] * gk[k];
      }
    st(df, t * d + cc, v);
    const float fv = ld(f, t * d + cc);
#pragma unroll
    for (int k = 0; k < NN; ++k)
      if (k < n) acc[k] += gk[k] * fv;
#pragma unroll
    for (int j = 0; j < NN; ++j) {
      if (j >= n) break;
      const float rv = ld(R, (t * n + j) * d + cc);
      float w = 0;
#pragma unroll
      for (int k = 0; k < NN; ++k)
        if (k < n) {
          w += cjk[j * NN + k] * gk[k];
          acc[NN + j * NN + k] += gk[k] * rv;
        }
      st(dR, (t * n + j) * d + cc, w);
    }
  }
  block_sum<kSums>(acc, shared);
  if (threadIdx.x == 0)
    for (int j = 0; j < n; ++j) {
      dpost[t * n + j] = acc[j];
      for (int k = 0; k < n; ++k) dcomb[(t * n + j) * n + k] = acc[NN + j * NN + k];
    }
}

// y_i = w_i x_i r: d_x_i = r w_i g_i - (r^3 / d) x_i sum_j g_j w_j x_j; the token's share of
// d_w_i, g_i x_i r, added atomically or stored per token (dw_tok [T, d]). A block a token.
template <class S>
__global__ void rmsnorm_backward_kernel(Dims c, const S* x, const float* w, const S* g, S* dx,
                                        float* dw, float* dw_tok) {
  __shared__ float shared[2 * 32];
  __shared__ float r, gwx;
  const std::size_t d = std::size_t(c.d), t = blockIdx.x;
  const S* xt = x + t * d;
  const S* gt = g + t * d;
  float acc[2] = {0, 0};
  for (std::size_t i = threadIdx.x; i < d; i += blockDim.x) {
    acc[0] += ld(xt, i) * ld(xt, i);
    acc[1] += ld(gt, i) * w[i] * ld(xt, i);
  }
  block_sum<2>(acc, shared);
  if (threadIdx.x == 0) {
    r = 1.0f / sqrtf(acc[0] / float(d) + c.norm_eps);
    gwx = acc[1];
  }
  __syncthreads();
  for (std::size_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = r * w[i] * ld(gt, i) - r * r * r / float(d) * ld(xt, i) * gwx;
    st(dx, t * d + i, v);
    const float share = ld(gt, i) * ld(xt, i) * r;
    if (dw_tok)
      dw_tok[t * d + i] = share;
    else
      atomicAdd(dw + i, share);
  }
}

// mixes = r hc_fn x, r = (sum x^2 / nd + eps)^-1/2: d_x_i = r sum_a g_a hc_fn[a, i]
// - (r^3 / nd) x_i sum_a g_a dot_a. First, a block a token: the token's r and
// k = r^3 / nd sum_a g_a dot_a (the reductions over nd).
template <class S>
__global__ void mixes_backward_sums(Dims c, const S* x, const float* W, const float* g,
                                    float* r_tok, float* k_tok) {
  __shared__ float shared[(kMaxM + 1) * 32];
  const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), M = std::size_t(c.M());
  const std::size_t t = blockIdx.x;
  const S* xt = x + t * nd;
  const float* gt = g + t * M;
  float acc[kMaxM + 1] = {};  // dot_a, then the sum of squares
  for (std::size_t i = threadIdx.x; i < nd; i += blockDim.x) {
    const float v = ld(xt, i);
    acc[kMaxM] += v * v;
    for (std::size_t a = 0; a < M; ++a) acc[a] += W[a * nd + i] * v;
  }
  block_sum<kMaxM + 1>(acc, shared);
  if (threadIdx.x == 0) {
    const float r = 1.0f / sqrtf(acc[kMaxM] / float(nd) + c.norm_eps);
    float s = 0;
    for (std::size_t a = 0; a < M; ++a) s += gt[a] * acc[a];
    r_tok[t] = r;
    k_tok[t] = r * r * r / float(nd) * s;
  }
}

// The boundary's version, a block a token: dot_a from the forward's mixes (r dot_a), so
// k = r^2 / nd sum_a g_a mixes_a and hc_fn is not read; and, from the same pass over x, hc_pre's
// d_pre_mix_j = sum_c g_y,c x_jc (NN >= n, as in post_backward_kernel).
template <int NN, class S>
__global__ void boundary_backward_sums(Dims c, const S* x, const float* mixes, const float* g,
                                       const S* g_y, float* r_tok, float* k_tok, float* dp) {
  __shared__ float shared[(NN + 1) * 32];
  const int n = c.n;
  const std::size_t d = std::size_t(c.d), M = std::size_t(c.M());
  const std::size_t t = blockIdx.x;
  const S* xt = x + t * std::size_t(n) * d;
  float acc[NN + 1] = {};  // d_pre_mix_j, then the sum of squares
  for (std::size_t cc = threadIdx.x; cc < d; cc += blockDim.x) {
    const float gv = ld(g_y, t * d + cc);
#pragma unroll
    for (int j = 0; j < NN; ++j)
      if (j < n) {
        const float v = ld(xt, j * d + cc);
        acc[NN] += v * v;
        acc[j] += gv * v;
      }
  }
  block_sum<NN + 1>(acc, shared);
  if (threadIdx.x == 0) {
    const float r = 1.0f / sqrtf(acc[NN] / float(std::size_t(n) * d) + c.norm_eps);
    float s = 0;
    for (std::size_t a = 0; a < M; ++a) s += g[t * M + a] * mixes[t * M + a];
    r_tok[t] = r;
    k_tok[t] = r * r / float(std::size_t(n) * d) * s;
    for (int j = 0; j < n; ++j) dp[t * n + j] = acc[j];
  }
}

// Then d_x over tiles of kTile tokens (the grid's y, striding past its limit) and CP adjacent
// columns a thread: the columns of hc_fn are read once a tile and held in registers (MM: the most
// weights, 24 for n = 4, so that occupancy is not spent on kMaxM); the tile's g, r and k are
// staged in shared memory, and each group of KB tokens' loads are issued before any of them is
// used, so that enough bytes are in flight. In the boundary, x's other gradients are added as the
// composition adds them, (g_x + d_x) + pre_j g_y,c. bf16 streams take two columns a thread (CP =
// 2, d even), so that a warp's loads are 128 bytes as fp32's are and each g from shared memory
// serves two columns; each column's arithmetic is the same as with one.
constexpr int kTile = 32, kBatch = 8;
template <int MM, int CP, int KB, class S, class D>
__device__ __forceinline__ void dx_columns(Dims c, std::size_t T, const S* x, const float* W,
                                           const float* g, const float* r_tok, const float* k_tok,
                                           const S* g_x, const float* pre_mix, const S* g_y,
                                           D* dx) {
  __shared__ float sg[kTile][MM];
  __shared__ float srk[2][kTile];
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d), nd = n * d;
  const std::size_t M = std::size_t(c.M());
  const std::size_t i = CP * (std::size_t(blockIdx.x) * blockDim.x + threadIdx.x);
  const bool live = i < nd;
  const std::size_t j = live ? i / d : 0, col = live ? i % d : 0;
  float w[CP][MM];
#pragma unroll
  for (int k = 0; k < CP; ++k)
#pragma unroll
    for (std::size_t a = 0; a < std::size_t(MM); ++a)
      w[k][a] = live && a < M ? W[a * nd + i + std::size_t(k)] : 0.0f;
  for (std::size_t t0 = std::size_t(blockIdx.y) * kTile; t0 < T;
       t0 += std::size_t(gridDim.y) * kTile) {
    const int m = int(T - t0 < std::size_t(kTile) ? T - t0 : kTile);
    __syncthreads();  // the previous tile's reads are done
    for (int e = int(threadIdx.x); e < kTile * MM; e += int(blockDim.x)) {
      const int tt = e / MM, a = e % MM;
      sg[tt][a] = tt < m && std::size_t(a) < M ? g[(t0 + tt) * M + std::size_t(a)] : 0.0f;
    }
    for (int e = int(threadIdx.x); e < kTile; e += int(blockDim.x)) {
      srk[0][e] = e < m ? r_tok[t0 + e] : 0.0f;
      srk[1][e] = e < m ? k_tok[t0 + e] : 0.0f;
    }
    __syncthreads();
    if (!live) continue;
    for (int b = 0; b < m; b += KB) {
      float xv[KB][CP], gx[KB][CP], pm[KB], gy[KB][CP];
#pragma unroll
      for (int u = 0; u < KB; ++u) {
        const std::size_t t = t0 + std::size_t(b + u);
        if (b + u >= m) break;
        ld_cols(x, t * nd + i, xv[u]);
        if (g_x) ld_cols(g_x, t * nd + i, gx[u]);
        if (pre_mix) {
          pm[u] = pre_mix[t * n + j];
          ld_cols(g_y, t * d + col, gy[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < KB; ++u) {
        const int tt = b + u;
        if (tt >= m) break;
        float out[CP];
#pragma unroll
        for (int k = 0; k < CP; ++k) {
          float v = 0;
#pragma unroll
          for (std::size_t a = 0; a < std::size_t(MM); ++a)
            if (a < M) v += sg[tt][a] * w[k][a];
          out[k] = srk[0][tt] * v - srk[1][tt] * xv[u][k];
          if (g_x) out[k] = gx[u][k] + out[k];
          if (pre_mix) out[k] += pm[u] * gy[u][k];
        }
        st_cols(dx, (t0 + std::size_t(tt)) * nd + i, out);
      }
    }
  }
}

template <int MM, class S, class D>
__global__ void mixes_backward_dx(Dims c, std::size_t T, const S* x, const float* W, const float* g,
                                  const float* r_tok, const float* k_tok, const S* g_x,
                                  const float* pre_mix, const S* g_y, D* dx) {
  dx_columns<MM, 1, kBatch>(c, T, x, W, g, r_tok, k_tok, g_x, pre_mix, g_y, dx);
}
// Held to two blocks an SM, 128 registers (bench/README.md, "The backward with bf16 streams").
template <class S, class D>
__global__ void __launch_bounds__(kThreads, 2)
    mixes_backward_dx_pairs(Dims c, std::size_t T, const S* x, const float* W, const float* g,
                            const float* r_tok, const float* k_tok, const S* g_x,
                            const float* pre_mix, const S* g_y, D* dx) {
  dx_columns<24, 2, kBatch / 2>(c, T, x, W, g, r_tok, k_tok, g_x, pre_mix, g_y, dx);
}

// d_x for T tokens (r_k: r, then k, a token each); g_x, pre_mix and g_y null for the piece alone.
template <class S, class D>
void launch_dx(const Dims& c, std::size_t T, const S* x, const float* W, const float* g,
               const float* r_k, const S* g_x, const float* pre_mix, const S* g_y, D* dx) {
  const std::size_t nd = std::size_t(c.n) * std::size_t(c.d);
  const unsigned tiles = unsigned(std::min<std::size_t>((T + kTile - 1) / kTile, 65535));
  if constexpr (std::is_same_v<S, bf16>)
    if (c.d % 2 == 0 && c.M() <= 24) {
      mixes_backward_dx_pairs<S, D><<<dim3(blocks_for(nd / 2, kThreads), tiles), kThreads>>>(
          c, T, x, W, g, r_k, r_k + T, g_x, pre_mix, g_y, dx);
      MHC_CUDA_LAUNCHED();
      return;
    }
  const dim3 grid(blocks_for(nd, kThreads), tiles);
  if (c.M() <= 24)
    mixes_backward_dx<24, S, D>
        <<<grid, kThreads>>>(c, T, x, W, g, r_k, r_k + T, g_x, pre_mix, g_y, dx);
  else
    mixes_backward_dx<kMaxM, S, D>
        <<<grid, kThreads>>>(c, T, x, W, g, r_k, r_k + T, g_x, pre_mix, g_y, dx);
  MHC_CUDA_LAUNCHED();
}

// d_hc_fn[a, i] = sum_t g_ta r_t x_ti over the y-th range of `span` tokens, in token order: a
// thread a column i and kGroup weights a (the grid's z), so x crosses memory once per group (24
// weights: once for n = 4). Each tile's g_ta r_t are formed once, in shared memory, and its kTile
// values of x loaded before they are used. Without atomics each range stores its sums in
// partial[y], summed in range order after; with them, each adds its sums to dW (zeroed first).
constexpr int kGroup = 24;
template <class S>
__global__ void __launch_bounds__(kThreads, 2)
    mixes_weight_grad(Dims c, std::size_t T, std::size_t span, const S* x, const float* g,
                      const float* r_tok, float* partial, float* dW) {
  __shared__ float sg[kTile][kGroup];
  const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), M = std::size_t(c.M());
  const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool live = i < nd;
  const std::size_t a0 = std::size_t(blockIdx.z) * kGroup;
  const int count = int(M - a0 < std::size_t(kGroup) ? M - a0 : kGroup);
  const std::size_t t0 = std::size_t(blockIdx.y) * span, t1 = t0 + span < T ? t0 + span : T;
  float acc[kGroup] = {};
  for (std::size_t b = t0; b < t1; b += kTile) {
    const int m = int(t1 - b < std::size_t(kTile) ? t1 - b : kTile);
    __syncthreads();  // the previous tile's reads are done
    for (int e = int(threadIdx.x); e < kTile * kGroup; e += int(blockDim.x)) {
      const int tt = e / kGroup, k = e % kGroup;
      sg[tt][k] =
          tt < m && k < count ? g[(b + tt) * M + a0 + std::size_t(k)] * r_tok[b + tt] : 0.0f;
    }
    __syncthreads();
    if (!live) continue;
    float xv[kTile];
#pragma unroll
    for (int tt = 0; tt < kTile; ++tt)
      xv[tt] = tt < m ? ld(x, (b + std::size_t(tt)) * nd + i) : 0.0f;
#pragma unroll
    for (int tt = 0; tt < kTile; ++tt) {
      if (tt >= m) break;
#pragma unroll
      for (int k = 0; k < kGroup; ++k)
        if (k < count) acc[k] += sg[tt][k] * xv[tt];
    }
  }
  if (!live) return;
#pragma unroll
  for (int k = 0; k < kGroup; ++k) {
    if (k >= count) break;
    const std::size_t e = (a0 + std::size_t(k)) * nd + i;
    if (partial)
      partial[std::size_t(blockIdx.y) * M * nd + e] = acc[k];
    else
      atomicAdd(dW + e, acc[k]);
  }
}

// One token of the split's backward, a thread a token: the forward recomputed with every
// Sinkhorn step's output (Y [steps][n n][T]) and denominators (D [steps][n][T]) kept in the
// workspace, then each step undone by its closed form; the token's shares of d hc_scale and
// d hc_base (3 + M) into its row of dp_tok, or added atomically. The general form (any n, any
// rounds); n = 4 runs split_backward_lanes where its steps fit.
__global__ void split_backward_kernel(Dims c, std::size_t T, const float* mixes, const float* s,
                                      const float* b, const float* g_pre, const float* g_post,
                                      const float* g_comb, float* dm, float* Y, float* D,
                                      float* dp_tok, float* ds, float* db) {
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= T) return;
  constexpr int NM = kMaxN;
  const int n = c.n, M = 2 * n + n * n, steps = 2 * c.iters - 1;
  const float eps = c.hc_eps;
  const float* m = mixes + t * std::size_t(M);
  float* dmt = dm + t * std::size_t(M);
  Y += t;  // element e of the token's iterates at Y[e T], its denominators at D[e T]:
  D += t;  // a warp's tokens side by side
  float dsc[3] = {0, 0, 0};
  auto param = [&](int i, float v) {  // d hc_base[i]
    if (dp_tok)
      dp_tok[t * std::size_t(3 + M) + std::size_t(3 + i)] = v;
    else
      atomicAdd(db + i, v);
  };
  for (int w = 0; w < 2; ++w)
    for (int j = 0; j < n; ++j) {
      const int i = w * n + j;
      const float sg = 1.0f / (1.0f + expf(-(m[i] * s[w] + b[i])));
      const float dz = (w ? 2.0f * g_post[t * n + j] : g_pre[t * n + j]) * sg * (1.0f - sg);
      dmt[i] = dz * s[w];
      dsc[w] += dz * m[i];
      param(i, dz);
    }
  float P[NM * NM], C[NM * NM], G[NM * NM];
  for (int j = 0; j < n; ++j) {
    float* p = P + j * n;
    for (int k = 0; k < n; ++k) p[k] = m[2 * n + j * n + k] * s[2] + b[2 * n + j * n + k];
    float mx = p[0], rs = 0;
    for (int k = 1; k < n; ++k) mx = fmaxf(mx, p[k]);
    for (int k = 0; k < n; ++k) rs += (p[k] = expf(p[k] - mx));
    for (int k = 0; k < n; ++k) p[k] /= rs;
  }
  for (int i = 0; i < n * n; ++i) C[i] = P[i] + eps;
  // Step st normalises rows (odd st) or columns; `at(a, e)`: element e of row or column a.
  auto forward = [&](int st, auto at) {
    for (int a = 0; a < n; ++a) {
      float sum = 0;
      for (int e = 0; e < n; ++e) sum += C[at(a, e)];
      const float den = sum + eps;
      D[std::size_t(st * n + a) * T] = den;
      for (int e = 0; e < n; ++e) C[at(a, e)] = C[at(a, e)] / den;
    }
    for (int i = 0; i < n * n; ++i) Y[std::size_t(st * n * n + i) * T] = C[i];
  };
  auto backward = [&](int st, auto at) {
    const float* y = Y + std::size_t(st * n * n) * T;
    for (int a = 0; a < n; ++a) {
      float gy = 0;
      for (int e = 0; e < n; ++e) gy += G[at(a, e)] * y[std::size_t(at(a, e)) * T];
      for (int e = 0; e < n; ++e) G[at(a, e)] = (G[at(a, e)] - gy) / D[std::size_t(st * n + a) * T];
    }
  };
  const auto row = [n](int a, int e) { return a * n + e; };
  const auto col = [n](int a, int e) { return e * n + a; };
  for (int st = 0; st < steps; ++st) {  // columns, then (rows, columns) per further round
    if (st % 2)
      forward(st, row);
    else
      forward(st, col);
  }
  for (int i = 0; i < n * n; ++i) G[i] = g_comb[t * std::size_t(n * n) + std::size_t(i)];
  for (int st = steps; st-- > 0;) {
    if (st % 2)
      backward(st, row);
    else
      backward(st, col);
  }
  for (int j = 0; j < n; ++j) {
    float gp = 0;
    for (int k = 0; k < n; ++k) gp += G[j * n + k] * P[j * n + k];
    for (int k = 0; k < n; ++k) {
      const int i = j * n + k, at = 2 * n + i;
      const float dl = P[i] * (G[i] - gp);
      dmt[at] = dl * s[2];
      dsc[2] += dl * m[at];
      param(at, dl);
    }
  }
  for (int w = 0; w < 3; ++w) {
    if (dp_tok)
      dp_tok[t * std::size_t(3 + M) + std::size_t(w)] = dsc[w];
    else
      atomicAdd(ds + w, dsc[w]);
  }
}

// split_backward_kernel at n = 4 with 16 lanes a token, lane 4j + k holding element (j, k), as
// tc_finish runs the forward: each lane does the thread's operations for its element, in the same
// order, so the bits are the thread's. A sum gathers its terms by shuffles and adds them from zero
// in index order; a sum of products takes both factors, as the thread's fused multiply-adds do.
// Each step's iterate and denominators stay in shared memory ([token][step][16 + 4]),
// kLanesTokens tokens a block. A token's thread took 57 us on an H100 (78 dependent steps of 16
// divisions; bench/README.md, "The split's backward on 16 lanes").
constexpr int kLanesTokens = 8;
std::atomic<bool> g_split_one_thread{false};  // cuda_split_backward_one_thread (tests only)
__global__ void __launch_bounds__(16 * kLanesTokens)
    split_backward_lanes(Dims c, std::size_t T, const float* mixes, const float* s, const float* b,
                         const float* g_pre, const float* g_post, const float* g_comb, float* dm,
                         float* dp_tok, float* ds, float* db) {
  constexpr int n = 4, M = 24, K = 20;  // K: a step's 16 iterates and 4 denominators
  constexpr unsigned all = 0xffffffffu;
  extern __shared__ float keep[];
  const int l = int(threadIdx.x) % 16, j = l / n, k = l % n, steps = 2 * c.iters - 1;
  const std::size_t t = std::size_t(blockIdx.x) * kLanesTokens + threadIdx.x / 16;
  const bool on = t < T;                  // every lane takes part in the shuffles,
  const std::size_t tr = on ? t : T - 1;  // reading a token that is there
  const float* m = mixes + tr * std::size_t(M);
  float* kept = keep + std::size_t(threadIdx.x / 16) * std::size_t(steps * K);
  const float eps = c.hc_eps;
  auto sum = [&](float v, int first, int stride) {  // over n lanes
    float r = 0;
    for (int q = 0; q < n; ++q) r += __shfl_sync(all, v, first + stride * q, 16);
    return r;
  };
  auto dot = [&](float u, float v, int first, int stride, int count) {
    float r = 0;
    for (int q = 0; q < count; ++q) {
      const int from = first + stride * q;
      r = fmaf(__shfl_sync(all, u, from, 16), __shfl_sync(all, v, from, 16), r);
    }
    return r;
  };
  auto param = [&](int i, float v) {  // d hc_base[i]
    if (!on) return;
    if (dp_tok)
      dp_tok[t * std::size_t(3 + M) + std::size_t(3 + i)] = v;
    else
      atomicAdd(db + i, v);
  };
  float dz = 0;  // pre's (lanes 0-3) and post's (4-7): row j = w of the first 8 lanes
  const int w = j < 2 ? j : 0;
  if (l < 2 * n) {
    const float sg = 1.0f / (1.0f + expf(-(m[l] * s[w] + b[l])));
    dz = (w ? 2.0f * g_post[tr * n + k] : g_pre[tr * n + k]) * sg * (1.0f - sg);
    if (on) dm[t * M + l] = dz * s[w];
    param(l, dz);
  }
  const float ds0 = dot(dz, m[l], 0, 1, n), ds1 = dot(dz, m[l], n, 1, n);
  const int at = 2 * n + l;
  float p = m[at] * s[2] + b[at];
  float mx = __shfl_sync(all, p, n * j, 16);
  for (int q = 1; q < n; ++q) mx = fmaxf(mx, __shfl_sync(all, p, n * j + q, 16));
  p = expf(p - mx);
  const float P = p / sum(p, n * j, 1);
  float C = P + eps;
  for (int st = 0; st < steps; ++st) {  // columns, then (rows, columns) per further round
    const bool rows = st % 2;
    const float den = (rows ? sum(C, n * j, 1) : sum(C, k, n)) + eps;
    if ((rows ? k : j) == 0) kept[st * K + 16 + (rows ? j : k)] = den;
    C = C / den;
    kept[st * K + l] = C;
  }
  __syncwarp();  // each lane reads its row's or column's denominator, which another lane kept
  float G = g_comb[tr * std::size_t(n * n) + std::size_t(l)];
  for (int st = steps; st-- > 0;) {
    const bool rows = st % 2;
    const float y = kept[st * K + l];
    const float gy = rows ? dot(G, y, n * j, 1, n) : dot(G, y, k, n, n);
    G = (G - gy) / kept[st * K + 16 + (rows ? j : k)];
  }
  const float dl = P * (G - dot(G, P, n * j, 1, n));
  if (on) dm[t * M + at] = dl * s[2];
  const float ds2 = dot(dl, m[at], 0, 1, n * n);
  param(at, dl);
  if (l < 3 && on) {  // d hc_scale
    const float v = l == 0 ? ds0 : l == 1 ? ds1 : ds2;
    if (dp_tok)
      dp_tok[t * std::size_t(3 + M) + std::size_t(l)] = v;
    else
      atomicAdd(ds + l, v);
  }
}

// out = a + b, elementwise: the mixes' gradient from the split and from the caller.
__global__ void add_kernel(std::size_t count, const float* a, const float* b, float* out) {
  const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i] = a[i] + b[i];
}

// The deterministic sums over tokens of per-token shares [T, count]: ranges of 256 tokens summed
// in order, then the ranges' sums in order (a fixed order, so the same bits every run; a few
// thousand dependent adds a thread rather than T). `ranges`: scratch of ceil(T / 256) * count.
void sum_over_tokens(std::size_t T, std::size_t count, const float* per_token, float* out,
                     float* ranges) {
  constexpr std::size_t kSpan = 256;
  const std::size_t R = (T + kSpan - 1) / kSpan;
  if (R <= 1) {
    sum_tokens<<<dim3(blocks_for(count, kThreads), 1), kThreads>>>(T, T, count, per_token, out);
    MHC_CUDA_LAUNCHED();
    return;
  }
  sum_tokens<<<dim3(blocks_for(count, kThreads), unsigned(R)), kThreads>>>(T, kSpan, count,
                                                                           per_token, ranges);
  MHC_CUDA_LAUNCHED();
  sum_tokens<<<dim3(blocks_for(count, kThreads), 1), kThreads>>>(R, R, count, ranges, out);
  MHC_CUDA_LAUNCHED();
}

// d_hc_fn from the mixes' gradient g and the tokens' r, in ranges of 256 tokens (at most 64
// ranges without atomics, to bound the partial sums' scratch; with atomics, at most 65535, the
// grid's y limit): each range's sums in token order, then the ranges' in range order, or added
// atomically as the ranges finish.
template <class S>
void hc_fn_grad(const Dims& c, std::size_t T, const S* x, const float* g, const float* r, float* dW,
                bool atomics, BackwardWork& work) {
  const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), M = std::size_t(c.M());
  const std::size_t count = M * nd;
  if (!T || atomics) MHC_CUDA_CHECK(cudaMemsetAsync(dW, 0, count * sizeof(float)));
  if (!T) return;
  const std::size_t span =
      std::max<std::size_t>(256, atomics ? (T + 65534) / 65535 : (T + 63) / 64);
  const std::size_t R = (T + span - 1) / span;
  float* partial = atomics ? nullptr : (R == 1 ? dW : work.get(work.ranges, R * count));
  mixes_weight_grad<S>
      <<<dim3(blocks_for(nd, kThreads), unsigned(R), unsigned((M + kGroup - 1) / kGroup)),
         kThreads>>>(c, T, span, x, g, r, partial, dW);
  MHC_CUDA_LAUNCHED();
  if (!atomics && R > 1) {
    sum_tokens<<<dim3(blocks_for(count, kThreads), 1), kThreads>>>(R, R, count, partial, dW);
    MHC_CUDA_LAUNCHED();
  }
}

}  // namespace

template <class S>
void pre_backward_dev(const Dims& c, std::size_t T, const S* x, const float* p, const S* g, S* dx,
                      float* dp) {
  if (!T) return;
  pre_backward_kernel<S><<<unsigned(T), kThreads>>>(c, x, p, g, dx, dp);
  MHC_CUDA_LAUNCHED();
}

template <class S, class G>
void post_backward_dev(const Dims& c, std::size_t T, const S* f, const S* R, const float* post,
                       const float* comb, const G* g, S* df, S* dR, float* dpost, float* dcomb) {
  if (!T) return;
  if (c.n <= 4)
    post_backward_kernel<4, S, G>
        <<<unsigned(T), kThreads>>>(c, f, R, post, comb, g, df, dR, dpost, dcomb);
  else
    post_backward_kernel<kMaxN, S, G>
        <<<unsigned(T), kThreads>>>(c, f, R, post, comb, g, df, dR, dpost, dcomb);
  MHC_CUDA_LAUNCHED();
}

template <class S>
void rmsnorm_backward_dev(const Dims& c, std::size_t T, const S* x, const float* w, const S* g,
                          S* dx, float* dw, bool atomics, BackwardWork& work) {
  const std::size_t d = std::size_t(c.d);
  if (atomics) MHC_CUDA_CHECK(cudaMemsetAsync(dw, 0, d * sizeof(float)));
  float* shares = atomics ? nullptr : work.get(work.shares, T * d);
  if (T) rmsnorm_backward_kernel<S><<<unsigned(T), kThreads>>>(c, x, w, g, dx, dw, shares);
  MHC_CUDA_LAUNCHED();
  if (!atomics) sum_over_tokens(T, d, shares, dw, work.get(work.ranges, (T + 255) / 256 * d));
}

template <class S>
void mixes_backward_dev(const Dims& c, std::size_t T, const S* x, const float* W, const float* g,
                        S* dx, float* dW, bool atomics, BackwardWork& work) {
  float* r = work.get(work.r, 2 * T);
  if (T) {
    mixes_backward_sums<S><<<unsigned(T), kThreads>>>(c, x, W, g, r, r + T);
    MHC_CUDA_LAUNCHED();
    launch_dx<S, S>(c, T, x, W, g, r, nullptr, nullptr, nullptr, dx);
  }
  hc_fn_grad(c, T, x, g, r, dW, atomics, work);
}

void split_backward_dev(const Dims& c, std::size_t T, const float* m, const float* s,
                        const float* b, const float* g_pre, const float* g_post,
                        const float* g_comb, float* dm, float* dparams, bool atomics,
                        BackwardWork& work) {
  const std::size_t n = std::size_t(c.n), M = std::size_t(c.M());
  const std::size_t steps = 2 * std::size_t(c.iters) - 1;
  float* shares = atomics ? nullptr : work.get(work.shares, T * (3 + M));
  if (atomics) MHC_CUDA_CHECK(cudaMemsetAsync(dparams, 0, (3 + M) * sizeof(float)));
  const std::size_t kept = kLanesTokens * steps * (n * n + n) * sizeof(float);
  if (T && n == 4 && kept <= 48 * 1024 && !g_split_one_thread.load()) {
    split_backward_lanes<<<unsigned((T + kLanesTokens - 1) / kLanesTokens), 16 * kLanesTokens,
                           kept>>>(c, T, m, s, b, g_pre, g_post, g_comb, dm, shares, dparams,
                                   dparams + 3);
  } else if (T) {
    float* Y = work.get(work.iterates, T * steps * n * n);
    float* D = work.get(work.denominators, T * steps * n);
    split_backward_kernel<<<blocks_for(T, 64), 64>>>(c, T, m, s, b, g_pre, g_post, g_comb, dm, Y, D,
                                                     shares, dparams, dparams + 3);
  }
  MHC_CUDA_LAUNCHED();
  if (!atomics)
    sum_over_tokens(T, 3 + M, shares, dparams, work.get(work.ranges, (T + 255) / 256 * (3 + M)));
}

// The gradient of x between the mixes' and hc_post's backward stays fp32 (work.dx), unrounded.
template <class S>
void boundary_backward_dev(const Dims& c, std::size_t T, const BoundaryBackwardDev<S>& a,
                           bool atomics, BackwardWork& work) {
  const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), M = std::size_t(c.M());
  float* dm = work.get(work.dm, T * M);
  float* dx = work.get(work.dx, T * nd);
  float* r = work.get(work.r, 2 * T);
  split_backward_dev(c, T, a.mixes, a.hc_scale, a.hc_base, a.g_pre, a.g_post, a.g_comb, dm,
                     a.d_params, atomics, work);
  if (T) {
    add_kernel<<<blocks_for(T * M, kThreads), kThreads>>>(T * M, dm, a.g_mixes, dm);
    MHC_CUDA_LAUNCHED();
    if (c.n <= 4)
      boundary_backward_sums<4, S>
          <<<unsigned(T), kThreads>>>(c, a.x, a.mixes, dm, a.g_y, r, r + T, a.d_pre_mix);
    else
      boundary_backward_sums<kMaxN, S>
          <<<unsigned(T), kThreads>>>(c, a.x, a.mixes, dm, a.g_y, r, r + T, a.d_pre_mix);
    MHC_CUDA_LAUNCHED();
    launch_dx<S, float>(c, T, a.x, a.hc_fn, dm, r, a.g_x, a.pre_mix, a.g_y, dx);
  }
  hc_fn_grad(c, T, a.x, dm, r, a.d_hc_fn, atomics, work);
  post_backward_dev<S, float>(c, T, a.f, a.residual, a.post, a.comb, dx, a.d_f, a.d_residual,
                              a.d_post, a.d_comb);
}

// The instantiations backward.cuh declares, for float and bf16 streams.
#define MHC_BACKWARD_DEV(S)                                                                       \
  template void pre_backward_dev<S>(const Dims&, std::size_t, const S*, const float*, const S*,   \
                                    S*, float*);                                                  \
  template void post_backward_dev<S, S>(const Dims&, std::size_t, const S*, const S*,             \
                                        const float*, const float*, const S*, S*, S*, float*,     \
                                        float*);                                                  \
  template void rmsnorm_backward_dev<S>(const Dims&, std::size_t, const S*, const float*,         \
                                        const S*, S*, float*, bool, BackwardWork&);               \
  template void mixes_backward_dev<S>(const Dims&, std::size_t, const S*, const float*,           \
                                      const float*, S*, float*, bool, BackwardWork&);             \
  template void boundary_backward_dev<S>(const Dims&, std::size_t, const BoundaryBackwardDev<S>&, \
                                         bool, BackwardWork&);
MHC_BACKWARD_DEV(float)
MHC_BACKWARD_DEV(bf16)
#undef MHC_BACKWARD_DEV
// The boundary's hc_post on bf16 streams takes the fp32 workspace (with float streams: <S, S>).
template void post_backward_dev<bf16, float>(const Dims&, std::size_t, const bf16*, const bf16*,
                                             const float*, const float*, const float*, bf16*, bf16*,
                                             float*, float*);

namespace {

// The Backend's functions on host arrays, with the stream tensors up and back as S.
template <class S>
void pre_on(const KernelConfig& k, std::size_t T, const float* x, const float* p, const float* g,
            float* dx, float* dp) {
  const Dims c = dims(k);
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  In<S> ix(x, T * n * d), ig(g, T * d);
  In<float> ip(p, T * n);
  Out<S> odx(dx, T * n * d);
  Out<float> odp(dp, T * n);
  pre_backward_dev<S>(c, T, ix.p, ip.p, ig.p, odx.p, odp.p);
  sync_back(odx, odp);
}

template <class S>
void post_on(const KernelConfig& k, std::size_t T, const float* f, const float* R,
             const float* post, const float* comb, const float* g, float* df, float* dR,
             float* dpost, float* dcomb) {
  const Dims c = dims(k);
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  In<S> i_f(f, T * d), iR(R, T * n * d), ig(g, T * n * d);
  In<float> ipo(post, T * n), ic(comb, T * n * n);
  Out<S> odf(df, T * d), odR(dR, T * n * d);
  Out<float> odp(dpost, T * n), odc(dcomb, T * n * n);
  post_backward_dev<S, S>(c, T, i_f.p, iR.p, ipo.p, ic.p, ig.p, odf.p, odR.p, odp.p, odc.p);
  sync_back(odf, odR, odp, odc);
}

template <class S>
void rmsnorm_on(const KernelConfig& k, std::size_t T, const float* x, const float* w,
                const float* g, float* dx, float* dw, bool atomics) {
  const Dims c = dims(k);
  const std::size_t d = std::size_t(c.d);
  In<S> ix(x, T * d), ig(g, T * d);
  In<float> iw(w, d);
  Out<S> odx(dx, T * d);
  Out<float> odw(dw, d);
  BackwardWork work;
  rmsnorm_backward_dev<S>(c, T, ix.p, iw.p, ig.p, odx.p, odw.p, atomics, work);
  sync_back(odx, odw);
}

template <class S>
void mixes_on(const KernelConfig& k, std::size_t T, const float* x, const float* W, const float* g,
              float* dx, float* dW, bool atomics) {
  const Dims c = dims(k);
  const std::size_t nd = std::size_t(c.n) * std::size_t(c.d), M = std::size_t(c.M());
  In<S> ix(x, T * nd);
  In<float> iW(W, M * nd), ig(g, T * M);
  Out<S> odx(dx, T * nd);
  Out<float> odW(dW, M * nd);
  BackwardWork work;
  mixes_backward_dev<S>(c, T, ix.p, iW.p, ig.p, odx.p, odW.p, atomics, work);
  sync_back(odx, odW);
}

template <class S>
void boundary_on(const KernelConfig& k, std::size_t T, const BoundaryBackwardIn& a,
                 const BoundaryBackwardOut& o, bool atomics) {
  const Dims c = dims(k);
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d), nd = n * d;
  const std::size_t M = std::size_t(c.M());
  const BoundaryIn& f = a.forward;
  In<S> i_f(f.f, T * d), iR(f.residual, T * nd), ix(a.x, T * nd), igx(a.g_x, T * nd),
      igy(a.g_y, T * d);
  In<float> ipo(f.post, T * n), ic(f.comb, T * n * n), ipm(f.pre_mix, T * n), iW(f.hc_fn, M * nd),
      is(f.hc_scale, 3), ib(f.hc_base, M), im(a.mixes, T * M), igm(a.g_mixes, T * M),
      igp(a.g_pre, T * n), igq(a.g_post, T * n), igc(a.g_comb, T * n * n);
  Out<S> odf(o.d_f, T * d), odR(o.d_residual, T * nd);
  Out<float> odpo(o.d_post, T * n), odc(o.d_comb, T * n * n), odpm(o.d_pre_mix, T * n),
      odW(o.d_hc_fn, M * nd);
  Dev<float> params(3 + M);
  BackwardWork work;
  boundary_backward_dev<S>(
      c, T, {i_f.p, iR.p,  ipo.p, ic.p,  ipm.p, iW.p,  is.p,   ib.p,  ix.p,   im.p,  igx.p,   igy.p,
             igm.p, igp.p, igq.p, igc.p, odf.p, odR.p, odpo.p, odc.p, odpm.p, odW.p, params.p},
      atomics, work);
  sync_back(odf, odR, odpo, odc, odpm, odW);
  std::vector<float> h(3 + M);
  MHC_CUDA_CHECK(cudaMemcpy(h.data(), params.p, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
  std::copy(h.begin(), h.begin() + 3, o.d_hc_scale);
  std::copy(h.begin() + 3, h.end(), o.d_hc_base);
}

}  // namespace

// Each function on the configuration's stream type: bf16, or fp32 (`need` refuses the others).
Backend::Backward cuda_backward(bool atomics, void (*need)(const KernelConfig&)) {
  Backend::Backward b;
  b.hc_pre = [need](const KernelConfig& k, std::size_t T, const float* x, const float* p,
                    const float* g, float* dx, float* dp) {
    need(k);
    k.streams == Format::bf16 ? pre_on<bf16>(k, T, x, p, g, dx, dp)
                              : pre_on<float>(k, T, x, p, g, dx, dp);
  };
  b.hc_post = [need](const KernelConfig& k, std::size_t T, const float* f, const float* R,
                     const float* post, const float* comb, const float* g, float* df, float* dR,
                     float* dpost, float* dcomb) {
    need(k);
    k.streams == Format::bf16 ? post_on<bf16>(k, T, f, R, post, comb, g, df, dR, dpost, dcomb)
                              : post_on<float>(k, T, f, R, post, comb, g, df, dR, dpost, dcomb);
  };
  b.rmsnorm = [atomics, need](const KernelConfig& k, std::size_t T, const float* x, const float* w,
                              const float* g, float* dx, float* dw) {
    need(k);
    k.streams == Format::bf16 ? rmsnorm_on<bf16>(k, T, x, w, g, dx, dw, atomics)
                              : rmsnorm_on<float>(k, T, x, w, g, dx, dw, atomics);
  };
  b.mixes = [atomics, need](const KernelConfig& k, std::size_t T, const float* x, const float* W,
                            const float* g, float* dx, float* dW) {
    need(k);
    k.streams == Format::bf16 ? mixes_on<bf16>(k, T, x, W, g, dx, dW, atomics)
                              : mixes_on<float>(k, T, x, W, g, dx, dW, atomics);
  };
  b.split_sinkhorn = [atomics, need](const KernelConfig& k, std::size_t T, const float* m,
                                     const float* s, const float* bb, const float* gp,
                                     const float* gq, const float* gc, float* dm, float* ds,
                                     float* db) {
    need(k);
    const Dims c = dims(k);
    const std::size_t n = std::size_t(c.n), M = std::size_t(c.M());
    In<float> im(m, T * M), is(s, 3), ib(bb, M), igp(gp, T * n), igq(gq, T * n), igc(gc, T * n * n);
    Out<float> odm(dm, T * M);
    Dev<float> params(3 + M);  // d hc_scale [3], then d hc_base [M]
    BackwardWork work;
    split_backward_dev(c, T, im.p, is.p, ib.p, igp.p, igq.p, igc.p, odm.p, params.p, atomics, work);
    sync_back(odm);
    std::vector<float> h(3 + M);
    MHC_CUDA_CHECK(
        cudaMemcpy(h.data(), params.p, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
    std::copy(h.begin(), h.begin() + 3, ds);
    std::copy(h.begin() + 3, h.end(), db);
  };
  // The boundary's, composed on the device (boundary_backward_dev).
  b.boundary = [atomics, need](const KernelConfig& k, std::size_t T, const BoundaryBackwardIn& a,
                               const BoundaryBackwardOut& o) {
    need(k);
    k.streams == Format::bf16 ? boundary_on<bf16>(k, T, a, o, atomics)
                              : boundary_on<float>(k, T, a, o, atomics);
  };
  return b;
}

}  // namespace mhc::impl::cuda_detail

namespace mhc::impl {
void cuda_split_backward_one_thread(bool on) {
  cuda_detail::g_split_one_thread = on;
}
}  // namespace mhc::impl
