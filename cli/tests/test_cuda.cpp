// The CUDA backends against the oracle: every op, the whole Block and a stack, fp32 and bf16
// streams, with outputs poisoned on the device. Without a device: exit 77 (CTest: skipped).
#include <cstdio>
#include <string>

#include "driver.hpp"
#include "mhc/impl/cuda.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/verdict.hpp"

using namespace mhc;

int main() {
  if (impl::cuda_device_count() == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  std::printf("device: %s\n", impl::cuda_device_name().c_str());
  int failures = 0, runs = 0;
  for (const auto* b : impl::gpu_backends())
    for (oracles::Op op : oracles::all_ops())
      for (const char* prec : {"fp32", "bf16"})
        for (int d : {5120, 37}) {
          ref::Config cfg;
          cfg.d = d;
          const auto c = oracles::generate_case(op, cfg, 33, 5 + std::uint64_t(d), prec);
          const auto got = driver::run_kernel(*b, c, 0);
          const auto v = oracles::compare(got, oracles::oracle_trace(c, 0, oracles::ErrorModel::standard, {}, &got));
          ++runs;
          const bool ok = v.state != oracles::State::fail;
          failures += ok ? 0 : 1;
          std::printf("%-4s %-10s %-15s %-5s d=%-5d %s %s\n", ok ? "ok" : "FAIL", b->name.c_str(),
                      oracles::op_name(op).c_str(), prec, d, oracles::state_name(v.state).c_str(),
                      v.first_divergent.c_str());
        }
  // The whole Block (and a stack of two) on the GPU: cuBLAS sublayers and our mHC kernels, at the
  // V4.1 stream width with small sublayers, and small everything with two sequences.
  for (const auto* b : impl::gpu_backends())
    for (const char* prec : {"fp32", "bf16"})
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
          bc.layers = op == oracles::Op::stack ? 2 : 1;
          const auto c = oracles::generate_block_case(op, cfg, bc, 2, 3, 7, prec);
          const auto j = driver::run_and_judge(*b, c, oracles::ErrorModel::standard, 0);
          ++runs;
          const bool ok = j.verdict.state != oracles::State::fail;
          failures += ok ? 0 : 1;
          std::printf("%-4s %-10s %-15s %-5s d=%-5d %s %s\n", ok ? "ok" : "FAIL", b->name.c_str(),
                      oracles::op_name(op).c_str(), prec, d, oracles::state_name(j.verdict.state).c_str(),
                      j.verdict.first_divergent.c_str());
          if (!ok)
            for (const auto& s : j.verdict.stages)
              if (s.state == oracles::State::fail) std::printf("     %s: %s\n", s.stage.c_str(), s.reason.c_str());
        }
      }
  std::printf("%d runs, %d failed\n", runs, failures);
  return failures ? 1 : 0;
}
