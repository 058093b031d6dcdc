// The oracle of one whole Block at the V4.1 stream width with small sublayers (n=4, d=5120,
// H=8, dh=64, E=8, k=2, I=512): the float64 reference in tokens/s, the bound-carrying oracle in
// tokens/s, and the MPFR (256-bit) reference on a sample of tokens in seconds per token.
// Usage: mhc-bench-block [tokens] [mpfr_tokens] [repeats]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/scalars.hpp"
#include "timing.hpp"

using namespace mhc;

using bench::median_seconds;

int main(int argc, char** argv) {
  const std::size_t T = argc > 1 ? std::size_t(std::atol(argv[1])) : 16;
  const std::size_t Tm = argc > 2 ? std::size_t(std::atol(argv[2])) : 1;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  const ref::BlockConfig b;  // H=8, dh=64, E=8, k=2, I=512
  const auto c = oracles::generate_block_case(oracles::Op::block, ref::v41(), b, 1, T, 1,
                                              oracles::Precision::fp32());
  std::printf(
      "one Block, n=4 d=5120 H=%d dh=%d E=%d k=%d I=%d, one sequence of %zu tokens, "
      "%d repeats (median), one thread (attention couples a sequence's positions)\n",
      b.heads, b.head_dim, b.experts, b.top_k, b.inter, T, repeats);
  const double s64 = median_seconds(repeats, [&] { oracles::evaluate_op<double>(c, 1); });
  std::printf("%-40s %10.3f s %12.1f tokens/s\n", "float64 reference (compensated sums)", s64,
              double(T) / s64);
  // Two cores: sequences are independent, so two sequences of T tokens run on two threads.
  const auto c2 = oracles::generate_block_case(oracles::Op::block, ref::v41(), b, 1, T, 2,
                                               oracles::Precision::fp32());
  const double s64x2 = median_seconds(repeats, [&] {
    std::thread other([&] { oracles::evaluate_op<double>(c2, 1); });
    oracles::evaluate_op<double>(c, 1);
    other.join();
  });
  std::printf("%-40s %10.3f s %12.1f tokens/s\n", "float64 reference, 2 sequences on 2 threads",
              s64x2, 2 * double(T) / s64x2);
  const double sb =
      median_seconds(repeats, [&] { oracles::oracle_trace(c, 1, oracles::ErrorModel::rigorous); });
  std::printf("%-40s %10.3f s %12.1f tokens/s\n", "bound-carrying oracle (rigorous)", sb,
              double(T) / sb);
  const double sbx2 = median_seconds(repeats, [&] {
    std::thread other([&] { oracles::oracle_trace(c2, 1, oracles::ErrorModel::rigorous); });
    oracles::oracle_trace(c, 1, oracles::ErrorModel::rigorous);
    other.join();
  });
  std::printf("%-40s %10.3f s %12.1f tokens/s\n", "bound-carrying, 2 sequences on 2 threads", sbx2,
              2 * double(T) / sbx2);
  num::set_mpfr_bits(256);
  const auto cm = oracles::generate_block_case(oracles::Op::block, ref::v41(), b, 1, Tm, 1,
                                               oracles::Precision::fp32());
  const double sm = median_seconds(1, [&] { oracles::evaluate_op<num::mpfr>(cm, 1); });
  std::printf("%-40s %10.3f s %12.2f s/token (%zu tokens)\n", "MPFR 256-bit reference", sm,
              sm / double(Tm), Tm);
  return 0;
}
