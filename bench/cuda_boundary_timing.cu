// The CUDA boundary's timings (cuda_boundary_timing.hpp): cuda-fused's kernel in the shipped
// configuration against the four-launch baseline, and the sweep of the kernel's configurations,
// instantiated here from impl/cuda/boundary_tc.cuh.
#include "cuda_boundary_timing.hpp"
#include "cuda_timing.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/backward.cuh"
#include "cuda/boundary_tc.cuh"
#include "cuda/buffers.cuh"
#include "cuda/check.cuh"
#include "cuda/device.cuh"
#include "cuda/pieces.cuh"
#include "mhc/impl/cuda.hpp"

namespace mhc::bench {
namespace {

using namespace mhc::impl::cuda_detail;

void need_device(const char* what, int repeats) {
  if (repeats < 1) throw std::invalid_argument(std::string(what) + ": repeats must be at least 1");
  if (impl::cuda_device_count() == 0)
    throw std::runtime_error(std::string(what) + ": no CUDA device");
}

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

// The boundary's device data at n = 4, d = 5120 for T tokens: the stream tensors and packed
// hc_fn in enough copies that every repetition reads data past the 60 MB L2, the rest once.
struct BenchData {
  static constexpr std::size_t n = 4, d = 5120, M = 24;
  const Dims c{4, 5120, 20, 1e-6f, 1e-20f};
  std::size_t T, es;
  int copies;
  Dev<std::uint8_t> f, R, x, y;
  Dev<float> post, comb, pm, W, s, b, mixes, pre, po, co;
  BenchData(std::size_t tokens, bool bf16_streams)
      : T(tokens),
        es(bf16_streams ? 2 : 4),
        copies(int(std::max<std::size_t>(
            1, (256u << 20) / std::max<std::size_t>(T * (2 * n + 2) * d * es, 1)))),
        f(T * d * es * std::size_t(copies)),
        R(T * n * d * es * std::size_t(copies)),
        x(R.n),
        y(f.n),
        post(T * n),
        comb(T * n * n),
        pm(T * n),
        W(M * n * d),
        s(3),
        b(M),
        mixes(T * M),
        pre(T * n),
        po(T * n),
        co(T * n * n) {
    std::uint32_t seed = 1;
    auto fill = [&](auto* p, std::size_t count, float lo, float hi) {
      fill_uniform<<<blocks_for(count, kThreads), kThreads>>>(p, count, seed++, lo, hi);
      MHC_CUDA_LAUNCHED();
    };
    if (bf16_streams) {
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
    for (int i = 0; i < std::min(copies, 128); ++i) packed.emplace_back(new TcWeights(c, W.p));
    sync();
  }
  std::vector<std::unique_ptr<TcWeights>> packed;
  // Every byte a call reads and writes: the streams, the coefficients in and out, hc_fn.
  double bytes() const {
    return double(T) * double((2 * n + 2) * d * es + (2 * n + 2 * n * n + 2 * n + M) * 4) +
           double(M * n * d * 4);
  }
  // cuda-fused's boundary on copy k of the streams and hc_fn.
  template <class S>
  int run(TcLaunch<S> launch, int k, int splits = 0) {
    const std::size_t off = std::size_t(k);
    return launch(c, T, reinterpret_cast<S*>(f.p) + off * T * d,
                  reinterpret_cast<S*>(R.p) + off * T * n * d, post.p, comb.p, pm.p,
                  *packed[std::size_t(k) % packed.size()], s.p, b.p,
                  reinterpret_cast<S*>(x.p) + off * T * n * d,
                  reinterpret_cast<S*>(y.p) + off * T * d, mixes.p, pre.p, po.p, co.p, splits);
  }
  // The four-launch baseline (hc_fn as it comes).
  template <class S>
  void run_baseline(int k) {
    const std::size_t off = std::size_t(k);
    boundary_four_launches<S>(c, T, reinterpret_cast<S*>(f.p) + off * T * d,
                              reinterpret_cast<S*>(R.p) + off * T * n * d, post.p, comb.p, pm.p,
                              W.p, s.p, b.p, reinterpret_cast<S*>(x.p) + off * T * n * d,
                              reinterpret_cast<S*>(y.p) + off * T * d, mixes.p, pre.p, po.p, co.p);
  }
  // Every output set to all-ones bytes (NaN), so that an output a call leaves unwritten shows.
  void poison() {
    for (auto* v : {&x, &y}) MHC_CUDA_CHECK(cudaMemset(v->p, 0xFF, v->n));
    for (auto* v : {&mixes, &pre, &po, &co}) MHC_CUDA_CHECK(cudaMemset(v->p, 0xFF, v->n * 4));
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

__global__ void empty_kernel() {}

// The device's launch latency (an empty kernel) and copy bandwidth (1 GiB device to device, bytes
// read + written a second), timed like the calls.
void measure_floor(int repeats, DeviceFloor& r) {
  r.launch_ms = median_ms(repeats, 1, [](int) {
    empty_kernel<<<1, 32>>>();
    MHC_CUDA_LAUNCHED();
  });
  const std::size_t bytes = std::size_t(1) << 30;
  Dev<std::uint8_t> a(bytes), b(bytes);
  const double copy_ms = median_ms(repeats, 1, [&](int) {
    MHC_CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice));
  });
  r.copy_gbps = 2.0 * double(bytes) / (copy_ms * 1e-3) / 1e9;
}

template <class S>
struct Timed {
  std::string name;
  TcLaunch<S> launch;
};
template <class S, class C>
Timed<S> timed() {
  return {tc_name<C>(), tc_launch<S, 5120, C>()};
}
// The configurations the sweep compares on T tokens: the shipped one first, the reference of the
// bits; where that is TmaTc, ShippedTc (cp.async) next.
template <class S>
std::vector<Timed<S>> tc_configs(std::size_t T) {
  const bool tma = runs_tma<S, 5120>(T);
  std::vector<Timed<S>> v{
      {"shipped (" + (tma ? std::string("fastest tma shape") : tc_name<ShippedTc<S>>()) + ")",
       shipped_tc<S, 5120>(T)}};
  if (tma) v.push_back(timed<S, ShippedTc<S>>());
  if constexpr (std::is_same<S, float>::value)
    for (auto t : {timed<S, TcConfig<32, 32, 3, 256>>(), timed<S, TcConfig<32, 32, 3, 0>>(),
                   timed<S, TcConfig<32, 64, 2, 256>>(), timed<S, TcConfig<64, 32, 2, 256>>()})
      v.push_back(t);
  else
    for (auto t :
         {timed<S, TcConfig<32, 32, 2, 0>>(), timed<S, TcConfig<32, 32, 2, 128>>(),
          timed<S, TcConfig<32, 32, 3, 256>>(), timed<S, TcConfig<32, 64, 2, 0>>(),
          timed<S, TcConfig<64, 32, 2, 256>>(), timed<S, TcConfig<32, 64, 2, 0, true>>(),
          timed<S, TcConfig<32, 64, 3, 0, true>>(), timed<S, TcConfig<32, 64, 4, 0, true>>(),
          timed<S, TcConfig<32, 128, 2, 0, true>>(), timed<S, TcConfig<64, 64, 2, 0, true>>(),
          timed<S, TcConfig<64, 64, 3, 0, true>>()})
      v.push_back(t);
  return v;
}

template <class S>
std::vector<TcTiming> sweep(std::size_t T, int repeats, int splits) {
  BenchData data(T, !std::is_same<S, float>::value);
  std::vector<TcTiming> out;
  const auto configs = tc_configs<S>(T);
  // The shipped configuration's outputs at each split a configuration used: with splits = 0 the
  // launch picks its split from its occupancy, and a token's bits depend on the split alone.
  std::map<int, std::vector<std::uint8_t>> shipped;
  for (const auto& cfg : configs) {
    data.poison();
    TcTiming t;
    t.name = cfg.name;
    t.splits = data.run<S>(cfg.launch, 0, splits);
    sync();
    const auto got = data.outputs();
    if (!shipped.count(t.splits)) {
      data.poison();
      data.run<S>(configs.front().launch, 0, t.splits);
      sync();
      shipped[t.splits] = data.outputs();
    }
    t.same_bits = got == shipped[t.splits];
    t.ms = median_ms(repeats, data.copies, [&](int k) { data.run<S>(cfg.launch, k, splits); });
    out.push_back(t);
  }
  return out;
}

// The boundary backward on stream tensors of type S (f, R, x, g_x, g_y, d_f, d_R; the rest fp32).
template <class S>
BackwardTiming backward_timing(std::size_t T, bool atomics, int repeats) {
  constexpr std::size_t n = 4, d = 5120, nd = n * d, M = 24, es = sizeof(S);
  const Dims c{4, 5120, 20, 1e-6f, 1e-20f};
  BackwardTiming r;
  r.tokens = T;
  r.bf16 = !std::is_same<S, float>::value;
  r.atomics = atomics;
  r.bytes = double(T) * double((3 + 3 * n) * d * es) + double(2 * M * nd * 4);
  // The per-token tensors in enough copies that every call reads past the 60 MB L2.
  const int copies = int(std::max<std::size_t>(1, (256u << 20) / (T * (3 + 4 * n) * d * es)));
  const std::size_t C = std::size_t(copies);
  Dev<S> f(C * T * d), R(C * T * nd), x(C * T * nd), gx(C * T * nd), gy(C * T * d), df(C * T * d),
      dR(C * T * nd);
  Dev<float> small(T * (6 * n + 3 * n * n + 2 * M));                // the 11 tensors taken below
  Dev<float> W(M * nd), dW(M * nd), params(3 + M), dparams(3 + M);  // params: hc_scale, hc_base
  std::uint32_t seed = 11;
  auto fill = [&](auto& v) {
    fill_uniform<<<blocks_for(v.n, kThreads), kThreads>>>(v.p, v.n, seed++, -0.5f, 0.5f);
    MHC_CUDA_LAUNCHED();
  };
  fill(f);
  fill(R);
  fill(x);
  fill(gx);
  fill(gy);
  fill(small);
  fill(W);
  fill(params);
  sync();
  // The small per-token tensors, carved out of `small` (values only matter for speed).
  float* at = small.p;
  auto take = [&](std::size_t count) {
    float* p = at;
    at += count;
    return p;
  };
  float *post = take(T * n), *comb = take(T * n * n), *pre_mix = take(T * n), *mixes = take(T * M),
        *g_pre = take(T * n), *g_post = take(T * n), *g_comb = take(T * n * n),
        *g_mixes = take(T * M), *d_post = take(T * n), *d_comb = take(T * n * n),
        *d_pre_mix = take(T * n);
  BackwardWork work;
  auto run = [&](int k) {
    const std::size_t o = std::size_t(k) * T;
    const BoundaryBackwardDev<S> a{
        f.p + o * d, R.p + o * nd, post,         comb,   pre_mix,       W.p,
        params.p,    params.p + 3, x.p + o * nd, mixes,  gx.p + o * nd, gy.p + o * d,
        g_mixes,     g_pre,        g_post,       g_comb, df.p + o * d,  dR.p + o * nd,
        d_post,      d_comb,       d_pre_mix,    dW.p,   dparams.p};
    boundary_backward_dev<S>(c, T, a, atomics, work);
  };
  r.ms = median_ms(repeats, copies, run);
  measure_floor(repeats, r);
  return r;
}

}  // namespace

BoundaryTiming cuda_bench_boundary(std::size_t T, bool use_bf16, int repeats) {
  need_device("cuda_bench_boundary", repeats);
  BoundaryTiming r;
  r.tokens = T;
  r.bf16 = use_bf16;
  BenchData data(T, use_bf16);
  r.bytes_per_token = double((2 * data.n + 2) * data.d * data.es);
  r.bytes = data.bytes();
  auto time = [&](auto&& f32, auto&& b16) {
    return median_ms(repeats, data.copies, [&](int k) { use_bf16 ? b16(k) : f32(k); });
  };
  // cuda-fused's launch at d = 5120: split as shipped, unsplit, and unsplit with hc_fn repacked
  // in the call; and the baseline's four launches.
  const auto f32 = shipped_tc<float, 5120>(T);
  const auto b16 = shipped_tc<bf16, 5120>(T);
  const auto fused = [&](int k) {
    if (use_bf16)
      data.run<bf16>(b16, k);
    else
      data.run<float>(f32, k);
  };
  r.fused_ms = median_ms(repeats, data.copies, fused);
  // queued: 5 rounds of at least 10 calls and 2 ms of them (at most 200 calls)
  const QueuedTiming q =
      queued_ms(5, int(std::min(200.0, std::max(10.0, 2.0 / r.fused_ms))), data.copies, fused);
  r.queued_ms = q.device_ms;
  r.host_ms = q.host_ms;
  r.unsplit_ms =
      time([&](int k) { data.run<float>(f32, k, 1); }, [&](int k) { data.run<bf16>(b16, k, 1); });
  auto repack = [&](int k) { data.packed[std::size_t(k) % data.packed.size()]->pack(data.W.p); };
  r.repack_ms = time([&](int k) { repack(k), data.run<float>(f32, k, 1); },
                     [&](int k) { repack(k), data.run<bf16>(b16, k, 1); });
  r.baseline_ms =
      time([&](int k) { data.run_baseline<float>(k); }, [&](int k) { data.run_baseline<bf16>(k); });
  measure_floor(repeats, r);
  {  // the call's bytes copied (half read, half written), rotated over 256 MB (past L2)
    const std::size_t half = std::size_t(r.bytes / 2);
    const int copies = int(std::max<std::size_t>(1, (std::size_t(256) << 20) / half));
    Dev<std::uint8_t> a(half * std::size_t(copies)), b(a.n);
    r.same_copy_ms = median_ms(repeats, copies, [&](int k) {
      const std::size_t at = half * std::size_t(k);
      MHC_CUDA_CHECK(cudaMemcpyAsync(b.p + at, a.p + at, half, cudaMemcpyDeviceToDevice));
    });
  }
  return r;
}

BackwardTiming cuda_bench_backward(std::size_t T, bool use_bf16, bool atomics, int repeats) {
  need_device("cuda_bench_backward", repeats);
  if (T == 0) throw std::invalid_argument("cuda_bench_backward: at least one token");
  return use_bf16 ? backward_timing<bf16>(T, atomics, repeats)
                  : backward_timing<float>(T, atomics, repeats);
}

std::uint64_t cuda_boundary_digest(std::size_t T, bool use_bf16, int splits) {
  need_device("cuda_boundary_digest", 1);
  BenchData data(T, use_bf16);
  data.poison();
  if (use_bf16)
    data.run<bf16>(shipped_tc<bf16, 5120>(T), 0, splits);
  else
    data.run<float>(shipped_tc<float, 5120>(T), 0, splits);
  sync();
  std::uint64_t h = 14695981039346656037ull;
  for (std::uint8_t b : data.outputs()) h = (h ^ b) * 1099511628211ull;
  return h;
}

bool cuda_first_call_same_bits(std::size_t T) {
  need_device("cuda_first_call_same_bits", 1);
  if (!runs_tma<bf16, 5120>(T))
    throw std::invalid_argument("cuda_first_call_same_bits: tensor copies run from " +
                                std::to_string(kTmaTokens) + " tokens, got " + std::to_string(T));
  if (g_tma_shape<bf16, 5120>.load() >= 0)
    throw std::logic_error("cuda_first_call_same_bits: not the process's first such call");
  BenchData data(T, true);
  data.poison();
  const int split = data.run<bf16>(shipped_tc<bf16, 5120>(T), 0);
  sync();
  const auto first = data.outputs();
  data.poison();
  data.run<bf16>(tc_launch<bf16, 5120, ShippedTc<bf16>>(), 0, split);
  sync();
  return first == data.outputs();
}

std::string cuda_fused_tma_shape() {
  const int i = g_tma_shape<bf16, 5120>.load();
  return i < 0 ? "" : tma_names(std::make_index_sequence<kTmaShapes>{})[std::size_t(i)];
}

DeviceFloor cuda_device_floor(int repeats) {
  need_device("cuda_device_floor", repeats);
  DeviceFloor r;
  measure_floor(repeats, r);
  return r;
}

std::vector<TcTiming> cuda_bench_boundary_sweep(std::size_t T, bool use_bf16, int repeats,
                                                int splits) {
  need_device("cuda_bench_boundary_sweep", repeats);
  return use_bf16 ? sweep<bf16>(T, repeats, splits) : sweep<float>(T, repeats, splits);
}

}  // namespace mhc::bench
