// Benchmark of the sublayer boundary at the V4.1 sizes: the bound-carrying oracle, the double
// oracle, and the two fp32 CPU kernels. Times are medians of repeats with std::chrono's steady
// clock; inputs are generated once per size.
// Usage: mhc-bench-boundary [tokens] [repeats] [threads] [oracle|kernels] (the last, for profiling)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "mhc/oracles/ops.hpp"
#include "mhc/runner/driver.hpp"
#include "mhc/runner/judge.hpp"
#include "timing.hpp"

using namespace mhc;

using bench::median_seconds;

int main(int argc, char** argv) {
  runner::keep_freed_memory();
  const std::size_t T = argc > 1 ? std::size_t(std::atol(argv[1])) : 512;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const unsigned threads =
      argc > 3 ? unsigned(std::atoi(argv[3])) : std::thread::hardware_concurrency();
  const std::string only = argc > 4 ? argv[4] : "";
  const ref::Config cfg = ref::v41();
  const auto c =
      oracles::generate_case(oracles::Op::boundary, cfg, T, 1, oracles::Precision::fp32());
  std::printf("boundary n=%d d=%d iters=%d, %zu tokens, %d repeats (median), %u threads\n", cfg.n,
              cfg.d, cfg.iters, T, repeats, threads);
  std::printf("%-34s %12s %14s\n", "what", "median s", "tokens/s");
  auto row = [&](const char* what, double s) {
    std::printf("%-34s %12.4f %14.0f\n", what, s, double(T) / s);
    std::fflush(stdout);
  };
  if (only != "kernels") {
    row("oracle, bound-carrying (fp32 model)",
        median_seconds(repeats, [&] { oracles::oracle_trace(c, threads); }));
    if (only == "oracle") return 0;
    row("oracle, double (compensated)",
        median_seconds(repeats, [&] { oracles::evaluate_op<double>(c, threads); }));
  }
  const double port = median_seconds(repeats, [&] { runner::run_kernel(impl::cpu(), c, 1); });
  row("kernel cpu (port, 1 thread)", port);
  const double fused1 =
      median_seconds(repeats, [&] { runner::run_kernel(impl::cpu_fused(), c, 1); });
  row("kernel cpu-fused (1 thread)", fused1);
  const double fusedN =
      median_seconds(repeats, [&] { runner::run_kernel(impl::cpu_fused(), c, threads); });
  row("kernel cpu-fused (all threads)", fusedN);
  std::printf("speedup of cpu-fused over cpu: %.2fx on 1 thread, %.2fx on %u threads\n",
              port / fused1, port / fusedN, threads);
  return 0;
}
