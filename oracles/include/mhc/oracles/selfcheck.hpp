// Certification of the double oracle: the same reference evaluated in double, in MPFR and in
// MPFI on generated cases; the interval must enclose the MPFR value, and the double oracle must be
// at least 1e6 times more accurate than fp32's unit roundoff (so that its own error is invisible
// next to any fp32 error bound it will judge).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mhc/oracles/oracle.hpp"
#include "mhc/oracles/scalars.hpp"
#include "mhc/reference/config.hpp"

namespace mhc::oracles {

// u32 / 1e6, u32 = 2^-24: the double oracle's required relative accuracy.
constexpr double kOracleAccuracy = 0x1.0p-24 / 1e6;

struct StageCertificate {
  std::string stage;
  std::size_t elements = 0;
  double max_rel_err = 0;         // max |double - mpfr| / |mpfr| (0/0 counts 0)
  std::size_t worst = 0;          // flat index of that element
  double certified_rel_err = 0;   // max over elements of max(|double-lo|, |double-hi|) / |mpfr|
  double max_interval_width = 0;  // max relative width of the MPFI enclosures
  std::size_t not_enclosed = 0;   // elements whose MPFR value lies outside the MPFI interval
};

// A backward op's gradients in double (backward_trace) against the recorded backward of the
// reference in MPFR (rev::vjp over num::mpfr), measured in units of the fp32 bound each element
// is judged with: the double gradient must lie within 1e-6 of it (its own error then invisible
// next to any fp32 backward's bound).
struct BackwardCertificate {
  std::string stage;  // "<op>.<output>"
  std::size_t elements = 0;
  double max_over_bound = 0;  // max |double - mpfr| / fp32 bound
  std::size_t worst = 0;
};
constexpr double kBackwardAccuracy = 1e-6;

struct CaseCertificate {
  int index = 0;
  ref::Config cfg;
  std::size_t tokens = 0;
  std::uint64_t seed = 0;
  double seconds = 0;
  OracleStats oracle;  // conditioning seen and tokens that fell back to quad
  std::vector<StageCertificate> stages;
  std::vector<BackwardCertificate> backward;  // one backward op a case, its outputs
};

// Case i: even i at the V4.1 sizes (n=4, d=5120, 20 iterations, hc_eps=1e-6, norm_eps=1e-20),
// odd i a small random configuration (n in 1..8, d in 1..64, iters in 1..40, eps up to 1e-1).
ref::Config selfcheck_config(int i, std::uint64_t seed);

struct SelfcheckOptions {
  int cases = 16;  // every backward op at both sizes
  std::function<ref::Config(int, std::uint64_t)> config_of = selfcheck_config;
  std::uint64_t seed = 1;
  std::size_t v41_tokens =
      2;  // tokens per case at the V4.1 sizes (MPFR is ~100x slower than double)
  unsigned mpfr_bits = 256;
  unsigned mpfi_bits = 200;  // below mpfr_bits: the MPFR value's own error is then far inside
                             // the interval's outward rounding, so enclosure is a real check
  unsigned threads = 0;
};

struct SelfcheckResult {
  unsigned mpfr_bits = 0, mpfi_bits = 0;
  std::vector<CaseCertificate> cases;
  bool accurate = true;           // every stage's max_rel_err <= kOracleAccuracy
  bool enclosed = true;           // every MPFR value inside its MPFI interval
  bool backward_accurate = true;  // every max_over_bound <= kBackwardAccuracy
};

// One stage's certificate: the double values against MPFR values and MPFI enclosures.
StageCertificate certify(const std::string& stage, const std::vector<double>& dbl,
                         const std::vector<num::mpfr>& hp, const std::vector<num::mpfi>& iv);

// on_case sees each case as it is certified and returns false to stop there.
SelfcheckResult selfcheck(const SelfcheckOptions& opt,
                          const std::function<bool(const CaseCertificate&)>& on_case = {});

}  // namespace mhc::oracles
