// The CUDA backends against the oracle: every op, fp32 and bf16 streams, with outputs poisoned on
// the device. Without a device: exit 77 (CTest: skipped).
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
  // An output the kernel never writes must be caught: poison survives the device round trip.
  std::printf("%d runs, %d failed\n", runs, failures);
  return failures ? 1 : 0;
}
