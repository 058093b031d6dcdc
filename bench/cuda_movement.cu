// What the fused boundary's data movement alone reaches (cuda_boundary_timing.hpp,
// cuda_bench_movement): bf16 streams at n = 4, d = 5120, each token's rows R_0..R_3 and f copied
// into shared-memory stages and stored back unchanged as x and y. Work items are (a group of CW
// columns, TB tokens); a persistent grid gives each block a contiguous range of items, token-major
// (the shipped kernel's order) or group-major (column-stationary). Two ways to fill the stages:
// - cp.async from every thread, STAGES - 1 items ahead, a block barrier an item: the shipped
//   kernel's pipeline. With hc_fn, an item's packed hc_fn columns come in with it (token-major, as
//   the shipped stages hold them) or once a group (group-major: resident while the group lasts);
// - bulk copies issued by one producer warp (warp specialisation): a row piece a copy, or one
//   tensor copy (TMA) of the item's R and one of its f; each stage has a transaction barrier that
//   the consumer warps wait on and an arrival barrier that frees it, and no block barrier. The
//   consumers store with 16-byte stores, or one lane a tensor store; ARITH > 0 adds that many
//   dependent fused multiply-adds an element, to show whether arithmetic overlaps the copies.
// Experiments, not a kernel: the figures and what they decided are in bench/README.md.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>

#include "cuda/buffers.cuh"
#include "cuda/bulk.cuh"
#include "cuda/check.cuh"
#include "cuda_boundary_timing.hpp"
#include "cuda_timing.cuh"

namespace mhc::bench {
namespace {

using namespace mhc::impl::cuda_detail;
using u16 = std::uint16_t;
constexpr int kN = 4, kM = 24, kD = 5120;

// The bulk kernel's options.
enum : unsigned { kGroupMajor = 1, kWithW = 2, kTensor = 4, kBulkStore = 8 };

// A block's items [i0, i1) of `chunks` x `groups`, and item w's group and token chunk.
struct Items {
  std::size_t chunks, groups, i0, i1;
  __device__ Items(std::size_t T, int TB, int CW)
      : chunks(T / std::size_t(TB)), groups(std::size_t(kD / CW)) {
    const std::size_t all = chunks * groups;
    i0 = all * blockIdx.x / gridDim.x;
    i1 = all * (blockIdx.x + 1) / gridDim.x;
  }
  __device__ void at(std::size_t w, bool group_major, std::size_t& g, std::size_t& c) const {
    if (group_major)
      g = w / chunks, c = w % chunks;
    else
      c = w / groups, g = w % groups;
  }
};

// Row r of an item's stage: R rows [token][stream] first (the layout a tensor copy of the box
// (CW, 4, TB) gives), then f's rows; the global element where its piece starts, in the inputs
// (from_f: f, else R) or the outputs (y, else x).
__device__ __forceinline__ std::size_t row_at(int r, int TB, std::size_t t0, std::size_t col,
                                              bool& is_f) {
  is_f = r >= kN * TB;
  if (is_f) return (t0 + std::size_t(r - kN * TB)) * kD + col;
  return (t0 * kN + std::size_t(r)) * kD + col;  // token t0 + r / 4, stream r % 4
}

template <int PF>
__device__ __forceinline__ void cp16(unsigned dst, const void* src) {
  if (PF == 256)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

// The shipped kernel's pipeline, without its arithmetic: STAGES - 1 items in flight.
template <int TB, int CW, int STAGES, int PF, bool GROUP_MAJOR, bool WITH_W>
__global__ void __launch_bounds__(128)
    move_cp_async(std::size_t T, const u16* f, const u16* R, const float* W, u16* x, u16* y) {
  constexpr int kRow = CW * 2, kStage = TB * 5 * kRow, kW = WITH_W ? kN * CW * kM * 4 : 0;
  constexpr int kWStage = GROUP_MAJOR ? 0 : kW;  // hc_fn in each stage, or resident
  extern __shared__ __align__(128) unsigned char smem[];
  const Items it(T, TB, CW);
  const unsigned s0 = unsigned(__cvta_generic_to_shared(smem));
  std::size_t wgroup = ~std::size_t(0);
  auto fetch = [&](std::size_t w, int st) {
    if (w < it.i1) {
      std::size_t g, c;
      it.at(w, GROUP_MAJOR, g, c);
      if (WITH_W && GROUP_MAJOR && g != wgroup && wgroup != ~std::size_t(0)) {
        asm volatile("cp.async.wait_group 0;\n" ::);  // the old group's copies, before replacing
        __syncthreads();                              // its resident hc_fn (every thread alike)
      }
      const unsigned base = s0 + unsigned((GROUP_MAJOR ? kW : 0) + st * (kStage + kWStage));
      constexpr int kPerRow = kRow / 16;
      for (int e = int(threadIdx.x); e < kStage / 16; e += 128) {
        bool is_f;
        const std::size_t at = row_at(e / kPerRow, TB, c * TB, g * CW + 8 * (e % kPerRow), is_f);
        cp16<PF>(base + unsigned(16 * e), (is_f ? f : R) + at);
      }
      if (WITH_W && (!GROUP_MAJOR || g != wgroup)) {  // packed hc_fn: contiguous a group
        wgroup = g;
        const float* src = W + g * std::size_t(kW / 4);
        const unsigned dst = GROUP_MAJOR ? s0 : base + unsigned(kStage);
        for (int e = int(threadIdx.x); e < kW / 16; e += 128) cp16<0>(dst + 16 * e, src + 4 * e);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  for (int st = 0; st < STAGES - 1; ++st) fetch(it.i0 + std::size_t(st), st);
  for (std::size_t w = it.i0; w < it.i1; ++w) {
    const int st = int((w - it.i0) % STAGES);
    asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
    __syncthreads();
    fetch(w + STAGES - 1, int((w - it.i0 + STAGES - 1) % STAGES));
    std::size_t g, c;
    it.at(w, GROUP_MAJOR, g, c);
    const auto* sx = reinterpret_cast<const std::uint32_t*>(smem + (GROUP_MAJOR ? kW : 0) +
                                                            st * (kStage + kWStage));
    for (int e = int(threadIdx.x); e < kStage / 4; e += 128) {  // a pair a thread, as phase A
      bool is_f;
      const std::size_t at = row_at(e / (CW / 2), TB, c * TB, g * CW + 2 * (e % (CW / 2)), is_f);
      *reinterpret_cast<std::uint32_t*>((is_f ? y : x) + at) = sx[e];
    }
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
}

// ARITH dependent fused multiply-adds on each of a piece's 8 bf16 values, summed.
template <int ARITH>
__device__ __forceinline__ float arith(uint4 v) {
  const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
  float a[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = __uint_as_float(w[i] << 16);
    a[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
#pragma unroll
  for (int r = 0; r < ARITH; ++r)
#pragma unroll
    for (int i = 0; i < 8; ++i) a[i] = fmaf(a[i], 0.999f, 0.5f);
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

struct Maps {  // f and y: (d, T); R and x: (d, 4, T)
  CUtensorMap f, R, y, x;
};

// Warp-specialised: warp NCW issues the copies, warps 0..NCW-1 store.
template <int TB, int CW, int STAGES, int NCW, unsigned OPT, int ARITH>
__global__ void __launch_bounds__(32 * (NCW + 1))
    move_bulk(std::size_t T, const u16* f, const u16* R, const float* W, u16* x, u16* y,
              float* sink, const __grid_constant__ Maps maps) {
  constexpr bool kGroup = OPT & kGroupMajor, kTens = OPT & kTensor, kBStore = OPT & kBulkStore;
  constexpr int kRow = CW * 2, kRows = 5 * TB, kStreams = kRows * kRow;
  constexpr int kW = OPT & kWithW ? kN * CW * kM * 4 : 0, kWStage = kGroup ? 0 : kW;
  constexpr int kStage = kStreams + kWStage, kBase = kGroup ? kW : 0;
  static_assert(kRow % 16 == 0 && kStage % 128 == 0 && kW % 128 == 0, "aligned pieces");
  static_assert(!kTens || (CW <= 256 && TB <= 256), "a tensor copy's box is at most 256 a side");
  extern __shared__ __align__(128) unsigned char smem[];  // stages, then the barriers
  const Items it(T, TB, CW);
  const unsigned s0 = smem_addr(smem);
  const unsigned b0 = s0 + unsigned(kBase + STAGES * kStage);  // full, then empty
  const auto full = [&](int st) { return b0 + 8u * unsigned(st); };
  const auto empty = [&](int st) { return b0 + 8u * unsigned(STAGES + st); };
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  if (threadIdx.x == 0) {
    for (int st = 0; st < STAGES; ++st) {
      bar_init(full(st), 1);
      bar_init(empty(st), NCW);
    }
    bar_init_fence();
  }
  __syncthreads();
  const std::size_t items = it.i1 - it.i0;
  if (warp == NCW) {  // the producer
    std::size_t wgroup = ~std::size_t(0);
    for (std::size_t j = 0; j < items; ++j) {
      const int st = int(j % STAGES);
      if (j >= STAGES) bar_wait(empty(st), unsigned(j / STAGES - 1) & 1u);
      std::size_t g, c;
      it.at(it.i0 + j, kGroup, g, c);
      const bool w_in = kW > 0 && (!kGroup || g != wgroup);
      if (kGroup && w_in && j > 0)  // the resident hc_fn is replaced once every item before is done
        for (std::size_t q = j >= STAGES ? j - STAGES + 1 : 0; q < j; ++q)
          bar_wait(empty(int(q % STAGES)), unsigned(q / STAGES) & 1u);
      wgroup = g;
      const unsigned dst = s0 + unsigned(kBase + st * kStage);
      if (lane == 0) bar_expect(full(st), unsigned(kStreams + (w_in ? kW : 0)));
      __syncwarp();
      if (kTens) {
        if (lane == 0) {
          tensor_load3(dst, &maps.R, int(g * CW), 0, int(c * TB), full(st));
          tensor_load2(dst + unsigned(kN * TB * kRow), &maps.f, int(g * CW), int(c * TB), full(st));
        }
      } else {
        for (int r = lane; r < kRows; r += 32) {
          bool is_f;
          const std::size_t at = row_at(r, TB, c * TB, g * CW, is_f);
          bulk_load(dst + unsigned(r * kRow), (is_f ? f : R) + at, kRow, full(st));
        }
      }
      if (w_in && lane == 0)
        bulk_load(kGroup ? s0 : dst + unsigned(kStreams), W + g * std::size_t(kW / 4), kW,
                  full(st));
    }
    return;
  }
  float acc = 0;
  for (std::size_t j = 0; j < items; ++j) {
    const int st = int(j % STAGES);
    bar_wait(full(st), unsigned(j / STAGES) & 1u);
    std::size_t g, c;
    it.at(it.i0 + j, kGroup, g, c);
    const unsigned src = s0 + unsigned(kBase + st * kStage);
    const auto* sx = reinterpret_cast<const uint4*>(smem + kBase + st * kStage);
    if (ARITH > 0 || !kBStore)
      for (int e = int(threadIdx.x); e < kStreams / 16; e += 32 * NCW) {
        const uint4 v = sx[e];
        if (ARITH > 0) acc += arith<ARITH>(v);
        if (!kBStore) {
          bool is_f;
          const std::size_t at =
              row_at(e / (kRow / 16), TB, c * TB, g * CW + 8 * (e % (kRow / 16)), is_f);
          *reinterpret_cast<uint4*>((is_f ? y : x) + at) = v;
        }
      }
    if (kBStore && warp == 0) {
      if (kTens) {
        if (lane == 0) {
          tensor_store3(&maps.x, int(g * CW), 0, int(c * TB), src);
          tensor_store2(&maps.y, int(g * CW), int(c * TB), src + unsigned(kN * TB * kRow));
        }
      } else {
        for (int r = lane; r < kRows; r += 32) {
          bool is_f;
          const std::size_t at = row_at(r, TB, c * TB, g * CW, is_f);
          bulk_store((is_f ? y : x) + at, src + unsigned(r * kRow), kRow);
        }
      }
      bulk_commit();
      bulk_wait_read();  // the stage is read
    }
    __syncwarp();
    if (lane == 0) bar_arrive(empty(st));
  }
  if (kBStore && warp == 0) bulk_wait();
  if (ARITH > 0) sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__global__ void fill_bits(u16* p, std::size_t count, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < count;
       i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = u16((i * 2654435761u + seed) >> 7);
}
__global__ void count_differing(const u16* a, const u16* b, std::size_t count,
                                unsigned long long* bad) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < count;
       i += std::size_t(gridDim.x) * blockDim.x)
    if (a[i] != b[i]) atomicAdd(bad, 1ull);
}

int multiprocessors() {
  int dev = 0, sms = 0;
  MHC_CUDA_CHECK(cudaGetDevice(&dev));
  MHC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

struct Movement {
  std::size_t T;
  Dev<u16> f, R, x, y;
  Dev<float> W, sink;
  Dev<unsigned long long> bad;
  const std::function<void(const MovementTiming&)>& row;
  int sms, repeats;
  Movement(std::size_t tokens, int reps, const std::function<void(const MovementTiming&)>& out)
      : T(tokens),
        f(T * kD),
        R(T * kN * kD),
        x(R.n),
        y(f.n),
        W(std::size_t(kM) * kN * kD),
        sink(std::size_t(multiprocessors()) * 2048),  // a float a resident thread
        bad(1),
        row(out),
        sms(multiprocessors()),
        repeats(reps) {
    fill_bits<<<1024, 256>>>(f.p, f.n, 1);
    fill_bits<<<1024, 256>>>(R.p, R.n, 2);
    MHC_CUDA_LAUNCHED();
    MHC_CUDA_CHECK(cudaMemset(W.p, 0, W.n * 4));
    sync();
  }
  // A box of (CW, TB) of a (d, T) tensor, or (CW, 4, TB) of a (d, 4, T) one, unswizzled.
  CUtensorMap map(u16* p, bool streams, int CW, int TB) const {
    return stream_map(p, streams ? kN : 1, kD, T, CW, TB, streams ? kN : 1, false);
  }
  // Times kernel k (a persistent grid: the multiprocessors times its occupancy), then checks
  // that one call on cleared outputs gives x = R and y = f.
  template <class K, class... A>
  void time(std::string name, K k, int threads, int smem, A... args) {
    if (smem > 227 * 1024) throw std::logic_error(name + ": more shared memory than a block has");
    MHC_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int per_sm = 0;
    MHC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, threads, smem));
    const unsigned blocks = unsigned(sms * (per_sm > 0 ? per_sm : 1));
    auto call = [&] {
      k<<<blocks, threads, smem>>>(T, f.p, R.p, W.p, x.p, y.p, args...);
      MHC_CUDA_LAUNCHED();
    };
    MovementTiming r;
    r.name = std::move(name);
    r.blocks_per_sm = per_sm;
    r.smem_bytes = smem;
    r.ms = median_ms(repeats, 1, [&](int) { call(); });
    MHC_CUDA_CHECK(cudaMemset(x.p, 0, x.n * 2));
    MHC_CUDA_CHECK(cudaMemset(y.p, 0, y.n * 2));
    MHC_CUDA_CHECK(cudaMemset(bad.p, 0, sizeof(unsigned long long)));
    call();
    count_differing<<<1024, 256>>>(x.p, R.p, x.n, bad.p);
    count_differing<<<1024, 256>>>(y.p, f.p, y.n, bad.p);
    MHC_CUDA_LAUNCHED();
    unsigned long long differing = 1;
    MHC_CUDA_CHECK(cudaMemcpy(&differing, bad.p, sizeof differing, cudaMemcpyDeviceToHost));
    r.moved = differing == 0;
    row(r);
  }
  template <int TB, int CW, int STAGES, int PF, bool GROUP_MAJOR, bool WITH_W>
  void cp_async() {
    constexpr int kW = WITH_W ? kN * CW * kM * 4 : 0;
    const int smem = STAGES * TB * 5 * CW * 2 + (GROUP_MAJOR ? 1 : STAGES) * kW;
    std::string name = "cp.async tb" + std::to_string(TB) + " cw" + std::to_string(CW) + " s" +
                       std::to_string(STAGES) + (PF ? " L2:" + std::to_string(PF) : "") +
                       (GROUP_MAJOR ? " group-major" : "") + (WITH_W ? " +hc_fn" : "");
    time(name, move_cp_async<TB, CW, STAGES, PF, GROUP_MAJOR, WITH_W>, 128, smem);
  }
  template <int TB, int CW, int STAGES, int NCW, unsigned OPT, int ARITH = 0>
  void bulk() {
    constexpr int kW = OPT & kWithW ? kN * CW * kM * 4 : 0;
    const int smem = STAGES * (TB * 5 * CW * 2 + 16) + (OPT & kGroupMajor ? 1 : STAGES) * kW;
    std::string name = std::string(OPT & kTensor ? "tensor" : "bulk") + " tb" + std::to_string(TB) +
                       " cw" + std::to_string(CW) + " s" + std::to_string(STAGES) + " w" +
                       std::to_string(NCW) + (OPT & kGroupMajor ? " group-major" : "") +
                       (OPT & kWithW ? " +hc_fn" : "") + (OPT & kBulkStore ? " bulk-store" : "") +
                       (ARITH ? " fma" + std::to_string(ARITH) : "");
    Maps maps{};
    if (OPT & kTensor)
      maps = {map(f.p, false, CW, TB), map(R.p, true, CW, TB), map(y.p, false, CW, TB),
              map(x.p, true, CW, TB)};
    time(name, move_bulk<TB, CW, STAGES, NCW, OPT, ARITH>, 32 * (NCW + 1), smem, sink.p, maps);
  }
};

}  // namespace

void cuda_bench_movement(std::size_t T, int repeats,
                         const std::function<void(const MovementTiming&)>& row) {
  if (repeats < 1) throw std::invalid_argument("cuda_bench_movement: repeats must be at least 1");
  if (impl::cuda_device_count() == 0)
    throw std::runtime_error("cuda_bench_movement: no CUDA device");
  if (T == 0 || T % 64) throw std::invalid_argument("cuda_bench_movement: tokens a multiple of 64");
  Movement m(T, repeats, row);
  constexpr unsigned G = kGroupMajor, Wt = kWithW, Tn = kTensor, BS = kBulkStore;
  // The shipped pipeline's data movement (bench/README.md's knockouts), and longer pieces.
  m.cp_async<32, 64, 2, 256, false, false>();
  m.cp_async<32, 64, 2, 256, false, true>();
  m.cp_async<32, 128, 2, 256, false, false>();
  m.cp_async<32, 256, 2, 256, false, false>();
  m.cp_async<16, 256, 2, 0, true, true>();
  m.cp_async<8, 512, 3, 0, true, false>();
  // A producer warp: a copy a row piece, or tensor copies.
  m.bulk<32, 64, 4, 4, 0>();
  m.bulk<32, 64, 4, 4, Tn>();
  m.bulk<32, 64, 4, 4, Tn | BS>();
  m.bulk<32, 64, 4, 4, Tn | Wt>();
  m.bulk<32, 64, 3, 4, Tn | Wt>();
  m.bulk<32, 64, 4, 8, Tn | Wt>();
  m.bulk<32, 64, 4, 4, Tn | Wt, 8>();
  m.bulk<32, 64, 4, 4, Tn | Wt, 24>();
  m.bulk<32, 128, 3, 4, Tn>();
  m.bulk<32, 128, 2, 4, Tn | Wt>();
  m.bulk<16, 128, 3, 4, Tn | Wt>();
  m.bulk<16, 128, 3, 4, Tn | Wt, 8>();
  m.bulk<32, 256, 2, 4, Tn>();
  m.bulk<16, 256, 4, 4, Tn>();
  m.bulk<8, 256, 3, 4, Tn | Wt | G>();
  m.bulk<32, 128, 3, 4, Tn | Wt | G>();
  m.bulk<32, 128, 3, 4, Tn | Wt | G, 8>();
  m.cp_async<32, 64, 2, 256, false, false>();  // the first row again: the run's spread
}

}  // namespace mhc::bench
