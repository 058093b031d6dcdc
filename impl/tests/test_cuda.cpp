// The CUDA backends against the oracle: every op, the pieces' backward, the whole Block and a
// stack, fp32 and bf16 streams, with outputs poisoned on the device; and the tensor cores'
// arithmetic that the bound of cuda-fused's projection assumes. Without a device: exit 77 (CTest:
// skipped). Arguments select runs by name (usage()), so that a sanitizer, slower than a
// device's time limit on the whole, can take the runs in parts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "mhc/impl/cuda.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/verdict.hpp"
#include "mhc/runner/driver.hpp"
#include "mhc/runner/judge.hpp"

using namespace mhc;

namespace {

// What cuda-fused's bound assumes of the tensor cores (impl/cuda/boundary_tc.cuh): one
// mma.m16n8k8 on tf32 values multiplies exactly and forms c + the 8 products within
// 9 * 2^-23 (|c| + sum |products|). Checked on exact single products, on random operands spread
// over 2^-20..2^20 with fp32 accumulators, and on sums a truncating accumulator cuts; against
// long double (64-bit significands: exact here to far below the bound). Returns 1 on failure.
int tensor_core_arithmetic() {
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-20, 20), sign(0, 1), col(0, 7);
  auto tf32 = [&] {
    return impl::round_tf32(std::ldexp(mant(rng), expo(rng)) * (sign(rng) ? -1.0f : 1.0f));
  };
  auto fp32 = [&] { return std::ldexp(mant(rng), expo(rng)) * (sign(rng) ? -1.0f : 1.0f); };
  float a[128], b[64], c[128], d[128];
  int inexact = 0;
  double worst = 0;  // largest |d - exact| / bound
  auto judge = [&] {
    impl::cuda_mma_tf32(a, b, c, d);
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j) {
        long double exact = (long double)c[i * 8 + j], mag = std::fabs(exact);
        for (int k = 0; k < 8; ++k) {
          const long double p = (long double)a[i * 8 + k] * (long double)b[k * 8 + j];
          exact += p;
          mag += std::fabs(p);
        }
        const double bound = double(9 * std::ldexp(mag, -23));
        const double err = double(std::fabs((long double)d[i * 8 + j] - exact));
        worst = std::max(worst, bound > 0 ? err / bound : (err > 0 ? HUGE_VAL : 0.0));
      }
  };
  for (int trial = 0; trial < 100; ++trial) {  // one product a row, no accumulator: exact
    for (auto& v : b) v = tf32();
    for (int i = 0; i < 16; ++i) {
      const int k = col(rng);
      for (int kk = 0; kk < 8; ++kk) a[i * 8 + kk] = kk == k ? tf32() : 0.0f;
    }
    for (auto& v : c) v = 0;
    impl::cuda_mma_tf32(a, b, c, d);
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j) {
        float p = 0;
        for (int k = 0; k < 8; ++k) p += a[i * 8 + k] * b[k * 8 + j];  // one nonzero term: exact
        inexact += d[i * 8 + j] != p;
      }
  }
  for (int trial = 0; trial < 200; ++trial) {  // random operands and accumulators
    for (auto& v : a) v = tf32();
    for (auto& v : b) v = tf32();
    for (auto& v : c) v = fp32();
    judge();
  }
  for (int trial = 0; trial < 8; ++trial) {  // c = 1 and eight products of 2^-25 (1 + small)
    for (auto& v : a) v = std::ldexp(1.0f, -12);
    for (auto& v : b) v = std::ldexp(1.0f + float(trial) / 1024, -13);
    for (auto& v : c) v = 1.0f;
    judge();
  }
  const bool ok = inexact == 0 && worst <= 1;
  std::printf(
      "%-4s tensor cores: %d of 12800 single products inexact; largest |d - exact| / "
      "(9 * 2^-23 (|c| + sum |ab|)) = %.3g\n",
      ok ? "ok" : "FAIL", inexact, worst);
  return ok ? 0 : 1;
}

void usage(std::FILE* to) {
  std::fprintf(
      to,
      "usage: test_cuda [--list] [TEXT...]\n"
      "Runs the CUDA backends against the oracle, one line a run (\"ok   cuda-fused "
      "boundary  bf16  d=5120  pass\").\n"
      "With TEXTs, only the runs whose name (the line between ok/FAIL and the verdict,\n"
      "runs of spaces as one) contains one of them: test_cuda 'cuda-fused block bf16' "
      "'tensor cores'.\n"
      "--list prints the names of the runs it would take, and runs nothing (no device "
      "needed).\n"
      "Exit 0 all pass, 1 a run failed, 2 a bad argument or a TEXT that no run has (before "
      "anything runs), 77 no device.\n");
}

// Which runs to take: every run, or those whose name contains one of the texts; each text
// remembers whether a run had it. Dry (the names only): no run is taken, and with `print` the
// names that would be are printed.
struct Selection {
  std::vector<std::string> texts;
  std::vector<bool> seen;
  bool dry = false, print = false;
  static std::string squeezed(const std::string& s) {
    std::string out;
    for (char ch : s)
      if (ch != ' ' || (!out.empty() && out.back() != ' ')) out += ch;
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
  }
  bool operator()(const std::string& name) {
    const std::string sq = squeezed(name);
    bool any = texts.empty();
    for (std::size_t i = 0; i < texts.size(); ++i)
      if (sq.find(texts[i]) != std::string::npos) any = seen[i] = true;
    if (dry && any && print) std::printf("%s\n", sq.c_str());
    return any && !dry;
  }
};

// printf into a std::string (the names are short).
template <class... A>
std::string format(const char* fmt, A... a) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, a...);
  return buf;
}

// Every run that `take` takes, one line each; the exit status (0 all pass, 1 a run failed).
int run_all(Selection& take) {
  int failures = 0, runs = 0;
  // A run's line, "ok" or "FAIL", the name, then what follows it.
  const auto count = [&](bool ok, const std::string& line) {
    ++runs;
    failures += ok ? 0 : 1;
    std::printf("%-4s %s\n", ok ? "ok" : "FAIL", line.c_str());
  };
  // A case judged against the oracle: its verdict after the name, and each failing stage's reason.
  const auto judged = [&](const impl::Backend& b, const auto& c, const std::string& name) {
    const auto v = runner::judge(b, c, runner::Judging{}).verdict;
    count(v.state != oracles::State::fail,
          name + " " + oracles::state_name(v.state) + " " + v.first_divergent);
    for (const auto& st : v.stages)
      if (st.state == oracles::State::fail)
        std::printf("     %s: %s\n", st.stage.c_str(), st.reason.c_str());
  };
  if (take("tensor cores")) {
    failures += tensor_core_arithmetic();
    ++runs;
  }
  for (const auto* b : impl::gpu_backends())
    for (oracles::Op op : oracles::all_ops())
      for (oracles::Precision prec : {oracles::Precision::fp32(), oracles::Precision::bf16()})
        for (int d : {5120, 37, 300}) {  // 300: a run-time width, several chunks (the tensor cores)
          const auto name =
              format("%-10s %-15s %-5s d=%-5d", b->name.c_str(), oracles::op_name(op).c_str(),
                     oracles::precision_name(prec).c_str(), d);
          if (!take(name)) continue;
          ref::Config cfg;
          cfg.d = d;
          judged(*b, oracles::generate_case(op, cfg, 33, 5 + std::uint64_t(d), prec), name);
        }
  // The backward kernels, fp32 and bf16 streams (bf16: stream inputs and upstream gradients read
  // as bf16, stream gradients stored rounded; the boundary's gradient of x between the pieces
  // fp32): cuda sums the parameters' gradients over tokens in a fixed order, cuda-fused with atomic
  // adds; the boundary's backward is composed from the pieces'. 600 tokens: the sums over tokens in
  // several 256-token ranges (the last partial), then the ranges. d = 37: bf16's d_x a column a
  // thread (two where d is even).
  for (const auto* b : impl::gpu_backends())
    for (oracles::Op op : oracles::backward_ops())
      for (oracles::Precision prec : {oracles::Precision::fp32(), oracles::Precision::bf16()})
        for (const auto& [d, T] :
             {std::pair<int, std::size_t>{5120, 33}, {130, 33}, {37, 33}, {130, 600}}) {
          const auto name =
              format("%-10s %-23s %-5s d=%-5d T=%-4zu", b->name.c_str(),
                     oracles::op_name(op).c_str(), oracles::precision_name(prec).c_str(), d, T);
          if (!take(name)) continue;
          ref::Config cfg;
          cfg.d = d;
          judged(*b, oracles::generate_case(op, cfg, T, 17 + std::uint64_t(d), prec), name);
        }
  // cuda-fused's boundary with its columns split over blocks (cuda_fused_splits): every split
  // against the oracle, from one block per token range to one per 128 columns (more are clamped),
  // and the same bits in two runs at the device's own choice (the finishing kernel adds the
  // splits in split order); unsplit and at 40 splits, judged with the splits' sums poisoned
  // before the pass: the finishing kernel starts before the pass ends (a programmatic dependent
  // launch), and one that read a sum before its block stored it gives NaN, where the workspace
  // would otherwise hold the previous call's identical sum. 72 tokens: 3 ranges, one partial.
  // d = 6000: 47 splits, more than the finishing kernel copies at once. bf16 at d = 5120 again in
  // each shape with tensor copies (cuda_fused_tensor_copies: boundary_tc_tma, which cuda-fused
  // runs from 16384 tokens in the shape its first call timed fastest), whose bits must also be
  // those of cp.async's kernel.
  const auto same_bits = [](const oracles::Trace<float>& a, const oracles::Trace<float>& b) {
    bool same = a.size() == b.size();
    for (std::size_t i = 0; same && i < a.size(); ++i)
      same = a[i].values.size() == b[i].values.size() &&
             std::memcmp(a[i].values.data(), b[i].values.data(),
                         a[i].values.size() * sizeof(float)) == 0;
    return same;
  };
  std::vector<std::pair<int, int>> widths_shapes{{5120, -1}, {130, -1}, {6000, -1}};
  const auto shapes = impl::cuda_fused_tensor_copy_shapes();
  for (int i = 0; i < int(shapes.size()); ++i) widths_shapes.emplace_back(5120, i);
  for (oracles::Precision prec : {oracles::Precision::fp32(), oracles::Precision::bf16()})
    for (const auto& [d, shape] : widths_shapes) {
      const bool tma = shape >= 0;
      if (tma && prec != oracles::Precision::bf16()) continue;
      ref::Config cfg;
      cfg.d = d;
      const std::string copies = tma ? " tensor copies " + shapes[std::size_t(shape)] : "";
      const auto at = format("cuda-fused boundary %-5s d=%-5d%s",
                             oracles::precision_name(prec).c_str(), d, copies.c_str());
      std::vector<std::pair<int, bool>> chosen;  // splits, sums poisoned
      for (int splits : {1, 2, 3, 17, 40, 1000})
        if (take(at + format(" splits=%-4d", splits))) chosen.emplace_back(splits, false);
      for (int splits : {1, 40})  // unsplit, and many blocks storing sums
        if (take(at + format(" splits=%-4d sums poisoned", splits)))
          chosen.emplace_back(splits, true);
      const std::string twice = at + (tma ? " the bits of cp.async" : " the same bits twice");
      const bool bits = take(twice);
      if (chosen.empty() && !bits) continue;
      const auto c = oracles::generate_case(oracles::Op::boundary, cfg, 72, 11, prec);
      impl::cuda_fused_tensor_copies(shape);
      for (const auto& [splits, poisoned] : chosen) {
        impl::cuda_fused_splits(splits);
        impl::cuda_fused_poison_sums(poisoned);
        judged(impl::cuda_fused(), c,
               at + format(" splits=%-4d%s", splits, poisoned ? " sums poisoned" : ""));
        impl::cuda_fused_poison_sums(false);
      }
      impl::cuda_fused_splits(0);
      if (bits) {  // against cp.async at one split for both: the device's own may differ
        if (tma) impl::cuda_fused_splits(17);
        const auto a = runner::run_kernel(impl::cuda_fused(), c, 0);
        impl::cuda_fused_tensor_copies(-1);
        const auto b = runner::run_kernel(impl::cuda_fused(), c, 0);
        impl::cuda_fused_splits(0);
        count(same_bits(a, b), twice);
      }
      impl::cuda_fused_tensor_copies(-1);
    }
  // The split's backward at n = 4 runs 16 lanes a token where a block's steps fit in shared memory
  // (up to 38 rounds), a thread a token past that: both judged, at 38 and 40 rounds, and the
  // lanes' bits must be the thread's (cuda_split_backward_one_thread) at 7, 20 and 38 rounds
  // (cuda's: cuda-fused adds the parameters' gradients atomically, in no fixed order). 33 tokens:
  // the last block of 8 part full.
  for (const auto* b : impl::gpu_backends())
    for (int iters : {7, 20, 38, 40}) {
      const auto at = format("%-10s split_sinkhorn_backward iters=%-2d", b->name.c_str(), iters);
      const bool judge = take(at + " judged"),
                 bits = b == &impl::cuda() && iters <= 38 && take(at + " lanes' bits");
      if (!judge && !bits) continue;
      ref::Config cfg;
      cfg.iters = iters;
      const auto c = oracles::generate_case(oracles::Op::split_sinkhorn_backward, cfg, 33,
                                            29 + std::uint64_t(iters), oracles::Precision::fp32());
      if (judge) judged(*b, c, at + " judged");
      if (bits) {
        const auto lanes = runner::run_kernel(*b, c, 0);
        impl::cuda_split_backward_one_thread(true);
        const auto thread = runner::run_kernel(*b, c, 0);
        impl::cuda_split_backward_one_thread(false);
        const bool same = same_bits(lanes, thread);
        count(same, at + " lanes' bits" + (same ? "" : ": differ from a thread a token's"));
      }
    }
  // The whole Block (and a stack of two) on the GPU: cuBLAS sublayers and our mHC kernels, at the
  // V4.1 stream width with small sublayers, and small everything with two sequences.
  for (const auto* b : impl::gpu_backends())
    for (oracles::Precision prec : {oracles::Precision::fp32(), oracles::Precision::bf16()})
      for (int d : {5120, 48}) {
        ref::Config cfg;
        cfg.d = d;
        ref::BlockConfig bc;
        if (d < 100) {  // 2 heads of 8, 4 experts (k = 2) of width 16
          bc.heads = 2;
          bc.head_dim = 8;
          bc.experts = 4;
          bc.inter = 16;
        }
        for (oracles::Op op : oracles::block_ops()) {
          const auto name =
              format("%-10s %-15s %-5s d=%-5d", b->name.c_str(), oracles::op_name(op).c_str(),
                     oracles::precision_name(prec).c_str(), d);
          if (!take(name)) continue;
          bc.layers = op == oracles::Op::stack ? 2 : 1;
          judged(*b, oracles::generate_block_case(op, cfg, bc, 2, 3, 7, prec), name);
        }
      }
  if (!take.dry) std::printf("%d runs, %d failed\n", runs, failures);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Selection take;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    if (a == "--list") {
      take.print = true;
      continue;
    }
    if (a.empty() || a[0] == '-' || Selection::squeezed(a).empty()) {
      std::fprintf(stderr, "test_cuda: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
    take.texts.push_back(Selection::squeezed(a));
  }
  take.seen.assign(take.texts.size(), false);
  take.dry = true;  // the names first: a text that no run has is refused before anything runs
  run_all(take);
  for (std::size_t i = 0; i < take.texts.size(); ++i)
    if (!take.seen[i]) {
      std::fprintf(stderr, "test_cuda: no run's name contains '%s' (test_cuda --list)\n",
                   take.texts[i].c_str());
      return 2;
    }
  if (take.print) return 0;
  take.dry = false;
  // A line a run, even into a file: a sanitizer run cut by a time limit shows how far it got.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (impl::cuda_device_count() == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  std::printf("device: %s\n", impl::cuda_device_name().c_str());
  return run_all(take);
}
