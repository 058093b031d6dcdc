// The oracle's number types, all through one header (expression templates off, so that the
// reference's plain loops see ordinary values). Each instantiation of the reference with one of
// these is an oracle power (docs/semantics.md, "Scalar customisation points"): double is the
// everyday oracle, quad and MPFR certify it, MPFI encloses the exact result.
#pragma once

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <boost/multiprecision/mpfi.hpp>
#include <boost/multiprecision/mpfr.hpp>
#include <string>

namespace mhc::num {

namespace bmp = boost::multiprecision;

using quad = bmp::cpp_bin_float_quad;                               // 113-bit significand, et_off
using mpfr = bmp::number<bmp::mpfr_float_backend<0>, bmp::et_off>;  // runtime precision
using mpfi = bmp::number<bmp::mpfi_float_backend<0>, bmp::et_off>;  // runtime precision

// Boost sets MPFR/MPFI precision in decimal digits, process-wide: set it before any thread starts
// and leave it. Returns the precision in bits that values then carry (at least `bits`).
unsigned set_mpfr_bits(unsigned bits);
unsigned set_mpfi_bits(unsigned bits);
unsigned mpfr_bits();  // precision of a default-constructed mpfr value
unsigned mpfi_bits();

template <class S>
struct scalar_traits;

template <>
struct scalar_traits<float> {
  static std::string name() { return "float"; }
  static unsigned bits() { return 24; }
  static double to_double(float v) { return double(v); }
};
template <>
struct scalar_traits<double> {
  static std::string name() { return "double"; }
  static unsigned bits() { return 53; }
  static double to_double(double v) { return v; }
};
template <>
struct scalar_traits<quad> {
  static std::string name() { return "quad"; }
  static unsigned bits() { return 113; }
  static double to_double(const quad& v) { return v.convert_to<double>(); }
};
template <>
struct scalar_traits<mpfr> {
  static std::string name() { return "mpfr"; }
  static unsigned bits() { return mpfr_bits(); }
  static double to_double(const mpfr& v) { return v.convert_to<double>(); }
};
template <>
struct scalar_traits<mpfi> {
  static std::string name() { return "mpfi"; }
  static unsigned bits() { return mpfi_bits(); }
  static double to_double(const mpfi& v) { return bmp::median(v).convert_to<double>(); }
};

// Whether the interval v encloses the value x (exactly, at x's precision).
bool encloses(const mpfi& v, const mpfr& x);
// Relative width (hi - lo) / |mid| of an interval; the absolute width where mid is 0.
double rel_width(const mpfi& v);

}  // namespace mhc::num
