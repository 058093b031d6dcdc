#include "mhc/oracles/scalars.hpp"

#include <mpfi.h>
#include <mpfr.h>

namespace mhc::num {
namespace {
// Boost's digits10 -> bits is d*1000/301 + 2 (detail/digits.hpp); invert it, rounding up.
unsigned digits10_for_bits(unsigned bits) {
  return bits <= 2 ? 1u : ((bits - 2) * 301u + 999u) / 1000u;
}
}  // namespace

unsigned set_mpfr_bits(unsigned bits) {
  mpfr::default_precision(digits10_for_bits(bits));
  return mpfr_bits();
}
unsigned set_mpfi_bits(unsigned bits) {
  mpfi::default_precision(digits10_for_bits(bits));
  return mpfi_bits();
}
unsigned mpfr_bits() {
  return unsigned(mpfr_get_prec(mpfr().backend().data()));
}
unsigned mpfi_bits() {
  return unsigned(mpfi_get_prec(mpfi().backend().data()));
}

void release_thread_caches() {
  mpfr_free_cache();
}

bool encloses(const mpfi& v, const mpfr& x) {
  return mpfi_is_inside_fr(x.backend().data(), v.backend().data()) > 0;
}

double rel_width(const mpfi& v) {
  const mpfr w = bmp::width(v).convert_to<mpfr>();
  const mpfr m = abs(bmp::median(v).convert_to<mpfr>());
  return m == 0 ? w.convert_to<double>() : mpfr(w / m).convert_to<double>();
}

}  // namespace mhc::num
