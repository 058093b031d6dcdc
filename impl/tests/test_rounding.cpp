// bf16 and tf32 rounding: round to nearest, ties to even, on hand-picked bit patterns.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "mhc/impl/kernels.hpp"

namespace {
float bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
}  // namespace

TEST_CASE("round_bf16: nearest, ties to even", "[rounding]") {
  using mhc::impl::round_bf16;
  CHECK(bits_of(round_bf16(bits(0x3F808000u))) == 0x3F800000u);  // tie, even below stays
  CHECK(bits_of(round_bf16(bits(0x3F818000u))) == 0x3F820000u);  // tie, odd rounds up to even
  CHECK(bits_of(round_bf16(bits(0x3F808001u))) == 0x3F810000u);  // just above half rounds up
  CHECK(bits_of(round_bf16(bits(0x3F807FFFu))) == 0x3F800000u);  // just below half rounds down
  CHECK(round_bf16(1.0f) == 1.0f);
  CHECK(std::isinf(round_bf16(bits(0x7F7FFFFFu))));  // FLT_MAX rounds past the largest bf16
  CHECK(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(bits_of(round_bf16(-0.0f)) == 0x80000000u);
}

TEST_CASE("round_tf32: 10 mantissa bits, ties to even", "[rounding]") {
  using mhc::impl::round_tf32;
  CHECK(bits_of(round_tf32(bits(0x3F801000u))) == 0x3F800000u);  // tie at bit 12, even stays
  CHECK(bits_of(round_tf32(bits(0x3F803000u))) == 0x3F804000u);  // tie, odd rounds up
  CHECK(bits_of(round_tf32(bits(0x3F801001u))) == 0x3F802000u);
  CHECK(round_tf32(0.5f) == 0.5f);
}
