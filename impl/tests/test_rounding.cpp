// bf16 and tf32 rounding: round to nearest, ties to even, on hand-picked bit patterns.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

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

// fp16 against its own value set: every finite fp16 decoded from its bits (sign, 5 exponent bits,
// 10 mantissa bits, subnormals below 2^-14), then each value, each midpoint between neighbours
// (ties to the even mantissa) and the floats just beside each midpoint must round where the set
// says; beyond the largest midpoint above 65504 lies infinity.
TEST_CASE("round_fp16: every value, midpoint and its neighbours", "[rounding]") {
  using mhc::impl::round_fp16;
  std::vector<double> v;  // the nonnegative finite fp16 values, ascending (bits 0x0000..0x7BFF)
  for (std::uint32_t h = 0; h < 0x7C00u; ++h) {
    const int e = int(h >> 10), m = int(h & 0x3FFu);
    v.push_back(e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
  }
  std::size_t checked = 0;
  for (std::size_t i = 0; i < v.size(); ++i)
    for (float s : {1.0f, -1.0f}) {
      const float x = s * float(v[i]), inf = s * INFINITY;
      CHECK(round_fp16(x) == x);
      const double next = i + 1 < v.size() ? v[i + 1] : 65536.0;  // 65536: the next step up
      const float mid = float(double(s) * (v[i] + next) / 2);     // exact in fp32
      const bool even = (i & 1u) == 0;                            // bits h = i: even mantissa
      const float low = x, high = i + 1 < v.size() ? s * float(next) : inf;
      CAPTURE(i, v[i], s);
      CHECK(round_fp16(mid) == (even ? low : high));
      CHECK(round_fp16(std::nextafter(mid, 0.0f)) == low);
      CHECK(round_fp16(std::nextafter(mid, inf)) == high);
      ++checked;
    }
  CHECK(checked == 2 * 0x7C00u);
  CHECK(std::isinf(round_fp16(1e6f)));
  CHECK(std::isnan(round_fp16(NAN)));
}
