// The Block's sublayers on the GPU: the projections of attention and of the MoE experts through
// cuBLAS SGEMM (pedantic fp32: no TF32, no reduced-precision reductions), causal attention,
// SwiGLU and the expert combination in our own kernels. Routing (sigmoid scores, top-k with ties
// to the lower expert, weights) is decided on the host from the router logits computed on the
// device: N x E numbers. cuBLAS is loaded with dlopen when a Block first runs, so that nothing
// else needs the library (CI has nvcc and no GPU). Stream tensors come and go through host
// memory, where the harness judges every stage.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "check.cuh"
#include "mhc/impl/cuda.hpp"

namespace mhc::impl {
namespace {

// The few cuBLAS entry points used, resolved once from libcublas.
struct Cublas {
  using Create = cublasStatus_t (*)(cublasHandle_t*);
  using SetMath = cublasStatus_t (*)(cublasHandle_t, cublasMath_t);
  using Sgemm = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                   int, const float*, const float*, int, const float*, int,
                                   const float*, float*, int);
  Create create = nullptr;
  SetMath set_math = nullptr;
  Sgemm sgemm = nullptr;
  cublasHandle_t handle = nullptr;

  static const Cublas& get() {
    static const Cublas c = [] {
      Cublas k;
      void* h = nullptr;
      for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
        if ((h = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
      if (!h)
        throw NotCompiled("the GPU Block needs cuBLAS, and libcublas.so cannot be loaded here");
      k.create = reinterpret_cast<Create>(dlsym(h, "cublasCreate_v2"));
      k.set_math = reinterpret_cast<SetMath>(dlsym(h, "cublasSetMathMode"));
      k.sgemm = reinterpret_cast<Sgemm>(dlsym(h, "cublasSgemm_v2"));
      if (!k.create || !k.set_math || !k.sgemm) throw NotCompiled("libcublas lacks cublasSgemm_v2");
      if (k.create(&k.handle) != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasCreate failed");
      // fp32 as declared: no TF32 tensor cores, no reduced-precision reductions.
      if (k.set_math(k.handle, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS)
        throw CudaError("cublasSetMathMode(CUBLAS_PEDANTIC_MATH) failed");
      return k;
    }();
    return c;
  }
};

struct Buf {
  float* p = nullptr;
  std::size_t n = 0;
  explicit Buf(std::size_t count) : n(count) {
    if (count) MHC_CUDA_CHECK(cudaMalloc(&p, count * sizeof(float)));
  }
  Buf(const float* host, std::size_t count) : Buf(count) {
    if (count) MHC_CUDA_CHECK(cudaMemcpy(p, host, count * sizeof(float), cudaMemcpyHostToDevice));
  }
  ~Buf() {
    if (p) cudaFree(p);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void to_host(float* host) const {
    if (n) MHC_CUDA_CHECK(cudaMemcpy(host, p, n * sizeof(float), cudaMemcpyDeviceToHost));
  }
};

// out[t, r] = sum_i W[r, i] * in[t, i]: rows x m weights (row-major, as fixtures/README.md),
// `tokens` inputs.
void linear(const float* W, std::size_t rows, std::size_t m, const float* in, std::size_t tokens,
            float* out) {
  const Cublas& cb = Cublas::get();
  const float one = 1, zero = 0;
  // Column-major view: out^T (rows x tokens) = W (rows x m, stored as m x rows) * in^T.
  const cublasStatus_t s = cb.sgemm(cb.handle, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(tokens),
                                    int(m), &one, W, int(m), in, int(m), &zero, out, int(rows));
  if (s != CUBLAS_STATUS_SUCCESS)
    throw CudaError("cublasSgemm failed (status " + std::to_string(int(s)) + ")");
}

// One block per (query t, head, sequence): scores against the keys u <= t (all u when not
// causal), max-subtracted softmax, then the weighted sum of the values, as the formula reads.
__global__ void attention_kernel(int T, int H, int dh, int causal, const float* q, const float* k,
                                 const float* v, float* o) {
  extern __shared__ float p[];  // T scores, then a reduction scratch of blockDim.x
  float* red = p + T;
  const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int HD = H * dh, upto = causal ? t + 1 : T;
  const float* qt = q + (std::size_t(b) * T + t) * HD + h * dh;
  const float scale = sqrtf(float(dh));
  float mx = -INFINITY;
  for (int u = threadIdx.x; u < upto; u += blockDim.x) {
    const float* ku = k + (std::size_t(b) * T + u) * HD + h * dh;
    float acc = 0;
    for (int i = 0; i < dh; ++i) acc += qt[i] * ku[i];
    p[u] = acc / scale;
    mx = fmaxf(mx, p[u]);
  }
  red[threadIdx.x] = mx;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();
  float den = 0;
  for (int u = threadIdx.x; u < upto; u += blockDim.x) den += (p[u] = expf(p[u] - mx));
  red[threadIdx.x] = den;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  den = red[0];
  for (int i = threadIdx.x; i < dh; i += blockDim.x) {
    float acc = 0;
    for (int u = 0; u < upto; ++u)
      acc += (p[u] / den) * v[(std::size_t(b) * T + u) * HD + h * dh + i];
    o[(std::size_t(b) * T + t) * HD + h * dh + i] = acc;
  }
}

__global__ void swiglu_kernel(std::size_t count, float* a, const float* g) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i < count) a[i] = a[i] * (1.0f / (1.0f + expf(-a[i]))) * g[i];
}

// out[t, i] = sum_j weight[t, j] * res[expert[t, j], t, i] + shared[t, i]: the chosen experts only.
__global__ void combine_kernel(std::size_t N, int d, int K, const int* expert, const float* weight,
                               const float* res, const float* shared, float* out) {
  const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  if (i >= N * std::size_t(d)) return;
  const std::size_t t = i / std::size_t(d), c = i % std::size_t(d);
  float acc = 0;
  for (int j = 0; j < K; ++j)
    acc += weight[t * K + j] * res[(std::size_t(expert[t * K + j]) * N + t) * d + c];
  out[i] = acc + shared[i];
}

float stored(const KernelConfig& c, float v) {
  return round_to(c.streams, v);
}

void need(const KernelConfig& c) {
  if (cuda_device_count() == 0) throw NotCompiled("no CUDA device");
  if (c.products != Format::fp32 || c.accumulation != Format::fp32)
    throw NotCompiled("the GPU Block projects fp32 operands in fp32 only");
  if (c.streams != Format::fp32 && c.streams != Format::bf16)
    throw NotCompiled("the GPU Block stores streams in fp32 or bf16 only");
}

// SwiGLU expert on every token: a = silu(h W1^T) * (h W3^T), out = a W2^T (device buffers).
void expert(const KernelConfig& c, const BlockShape& s, std::size_t N, const float* h,
            const float* w1, const float* w2, const float* w3, Buf& a, Buf& g, float* out) {
  const std::size_t d = std::size_t(c.d), I = std::size_t(s.inter);
  linear(w1, I, d, h, N, a.p);
  linear(w3, I, d, h, N, g.p);
  const std::size_t count = N * I;
  swiglu_kernel<<<unsigned((count + 255) / 256), 256>>>(count, a.p, g.p);
  MHC_CUDA_LAUNCHED();
  linear(w2, d, I, a.p, N, out);
}

}  // namespace

Sublayers cuda_sublayers() {
  Sublayers s;
  s.attention = [](const KernelConfig& c, const BlockShape& sh, const BlockKnobs& kn, std::size_t B,
                   std::size_t T, const float* h, const BlockWeights& w, float* out) {
    need(c);
    const std::size_t d = std::size_t(c.d), HD = std::size_t(sh.heads) * std::size_t(sh.head_dim);
    const std::size_t N = B * T;
    Buf hd(h, N * d), wq(w.wq, HD * d), wk(w.wk, HD * d), wv(w.wv, HD * d), wo(w.wo, d * HD);
    Buf q(N * HD), k(N * HD), v(N * HD), o(N * HD), y(N * d);
    linear(wq.p, HD, d, hd.p, N, q.p);
    linear(wk.p, HD, d, hd.p, N, k.p);
    linear(wv.p, HD, d, hd.p, N, v.p);
    const unsigned threads = 128;
    const std::size_t smem = (T + threads) * sizeof(float);
    if (smem > 48 * 1024)
      MHC_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    attention_kernel<<<dim3(unsigned(T), unsigned(sh.heads), unsigned(B)), threads, smem>>>(
        int(T), sh.heads, sh.head_dim, kn.causal ? 1 : 0, q.p, k.p, v.p, o.p);
    MHC_CUDA_LAUNCHED();
    linear(wo.p, d, HD, o.p, N, y.p);
    y.to_host(out);
    for (std::size_t i = 0; i < N * d; ++i) out[i] = stored(c, out[i]);
  };
  s.moe = [](const KernelConfig& c, const BlockShape& sh, const BlockKnobs& kn, std::size_t N,
             const float* h, const BlockWeights& w, float* out, float* experts_out) {
    need(c);
    const std::size_t d = std::size_t(c.d), E = std::size_t(sh.experts), K = std::size_t(sh.top_k);
    const std::size_t I = std::size_t(sh.inter);
    Buf hd(h, N * d), router(w.router, E * d), logits(N * E);
    linear(router.p, E, d, hd.p, N, logits.p);
    std::vector<float> lg(N * E);
    logits.to_host(lg.data());
    // Routing, as the CPU kernel decides it: sigmoid scores, selection by score + bias with
    // ties to the lower expert, weights normalised over the chosen k and scaled.
    std::vector<int> chosen(N * K);
    std::vector<float> weight(N * K), score(E), sel(E);
    std::vector<std::size_t> order(E);
    for (std::size_t t = 0; t < N; ++t) {
      for (std::size_t e = 0; e < E; ++e) {
        score[e] = 1.0f / (1.0f + std::exp(-lg[t * E + e]));
        sel[e] = score[e] + w.router_bias[e];
      }
      std::iota(order.begin(), order.end(), std::size_t(0));
      std::stable_sort(order.begin(), order.end(),
                       [&](std::size_t x, std::size_t y) { return sel[x] > sel[y]; });
      float total = 0;
      for (std::size_t j = 0; j < K; ++j) total += score[order[j]];
      for (std::size_t j = 0; j < K; ++j) {
        const std::size_t e = order[j];
        chosen[t * K + j] = int(e);
        experts_out[t * K + j] = float(e);
        weight[t * K + j] =
            kn.normalise_routing ? sh.route_scale * score[e] / total : sh.route_scale * score[e];
      }
    }
    Buf a(N * I), g(N * I), shared(N * d), res(E * N * d), y(N * d), wt(weight.data(), N * K);
    int* ex = nullptr;
    MHC_CUDA_CHECK(cudaMalloc(&ex, N * K * sizeof(int)));
    struct Free {
      int* p;
      ~Free() { cudaFree(p); }
    } free_ex{ex};
    MHC_CUDA_CHECK(cudaMemcpy(ex, chosen.data(), N * K * sizeof(int), cudaMemcpyHostToDevice));
    {
      Buf w1(w.shared_w1, I * d), w2(w.shared_w2, d * I), w3(w.shared_w3, I * d);
      expert(c, sh, N, hd.p, w1.p, w2.p, w3.p, a, g, shared.p);
    }
    // Every expert on every token (dense: the sizes here are small); only the chosen combine.
    for (std::size_t e = 0; e < E; ++e) {
      if (std::find(chosen.begin(), chosen.end(), int(e)) == chosen.end()) continue;
      Buf w1(w.w1 + e * I * d, I * d), w2(w.w2 + e * d * I, d * I), w3(w.w3 + e * I * d, I * d);
      expert(c, sh, N, hd.p, w1.p, w2.p, w3.p, a, g, res.p + e * N * d);
    }
    const std::size_t count = N * d;
    combine_kernel<<<unsigned((count + 255) / 256), 256>>>(N, int(d), int(K), ex, wt.p, res.p,
                                                           shared.p, y.p);
    MHC_CUDA_LAUNCHED();
    y.to_host(out);
    for (std::size_t i = 0; i < count; ++i) out[i] = stored(c, out[i]);
  };
  return s;
}

}  // namespace mhc::impl
