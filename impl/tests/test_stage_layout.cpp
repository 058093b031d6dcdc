// The shared-memory layouts of boundary_tc's stages (impl/cuda/stage_layout.hpp), checked on the
// host: every element has its own place, the swizzled boxes sit where the tensor copies' 128-byte
// swizzle puts them, phase A and phase B together touch every element of a chunk once, and no
// warp's shared-memory access in either phase has a bank conflict.
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "../cuda/stage_layout.hpp"

namespace {

using namespace mhc::impl::cuda_detail;

// The 128-byte swizzle as the PTX ISA states it for an address in a 1024-byte aligned region:
// address bits [4, 7) (the 16-byte piece within a 128-byte line) XOR bits [7, 10) (the line's
// index mod 8).
constexpr int swizzle128(int a) {
  return a ^ (((a >> 7) & 7) << 4);
}

// A warp's shared-memory access: each lane's byte address, `width` bytes a lane. The hardware
// serves 128 bytes a pass: all 32 lanes for 4-byte accesses, 16 for 8-byte ones; within a pass,
// two different 4-byte words in one bank of 32 are a conflict. Returns the worst pass's number of
// distinct words in one bank (1: conflict-free).
int bank_ways(const std::vector<int>& addr, int width) {
  const int lanes_a_pass = 128 / width;
  int worst = 0;
  for (int p0 = 0; p0 < 32; p0 += lanes_a_pass) {
    std::map<int, std::set<int>> words;  // bank -> words
    for (int l = p0; l < p0 + lanes_a_pass; ++l)
      for (int b = 0; b < width; b += 4)
        words[(addr[std::size_t(l)] + b) / 4 % 32].insert((addr[std::size_t(l)] + b) / 4);
    for (const auto& [bank, w] : words) worst = std::max(worst, int(w.size()));
  }
  return worst;
}

// A layout's checks at element size SZ (4: fp32, 2: bf16), TB tokens, CW columns a chunk, with
// NW = TB / 8 warps (the kernels' 4 TB threads).
template <class Rows, int SZ, int TB, int CW>
void check_layout(const std::string& name) {
  INFO(name << " SZ=" << SZ << " TB=" << TB << " CW=" << CW);
  constexpr int NW = TB / 8;
  // Bijective: every (token, row, column) in its own place inside the stage.
  std::set<int> seen;
  for (int tb = 0; tb < TB; ++tb)
    for (int r = 0; r < 5; ++r)
      for (int col = 0; col < CW; ++col) {
        const int e = Rows::at(tb, r, col);
        REQUIRE(e >= 0);
        REQUIRE(e * SZ + SZ <= Rows::kBytes);
        REQUIRE(seen.insert(e).second);
      }
  // Phase A: over warps, rounds, lanes and each 32 columns, a lane's pair covers every
  // (token, column) once; each access (a pair of row r) is conflict-free.
  std::map<std::pair<int, int>, int> cover;
  for (int warp = 0; warp < NW; ++warp)
    for (int i = 0; i < 4; ++i)
      for (int c32 = 0; c32 < CW; c32 += 32)
        for (int r = 0; r < 5; ++r) {
          std::vector<int> addr;
          for (int lane = 0; lane < 32; ++lane) {
            const int tb = PhaseA::token(warp, NW, lane, i), col = c32 + PhaseA::col(lane);
            addr.push_back(Rows::at(tb, r, col) * SZ);
            REQUIRE(Rows::at(tb, r, col + 1) == Rows::at(tb, r, col) + 1);  // one access a pair,
            REQUIRE(Rows::at(tb, r, col) % 2 == 0);                         // aligned to its size
            if (r == 0) {
              ++cover[{tb, col}];
              ++cover[{tb, col + 1}];
            }
          }
          INFO("phase A: warp " << warp << " round " << i << " columns " << c32 << " row " << r);
          CHECK(bank_ways(addr, 2 * SZ) == 1);
        }
  CHECK(cover.size() == std::size_t(TB * CW));
  for (const auto& [at, times] : cover) REQUIRE(times == 1);
  // Phase B: warp grp * 4 + k reads stream k (row 1 + k) of tokens 32 grp..; over lanes, tiles,
  // fragment rows and steps it covers its 32 x CW elements once; each access is conflict-free.
  for (int grp = 0; grp < TB / 32; ++grp)
    for (int k = 0; k < 4; ++k) {
      std::map<std::pair<int, int>, int> cov;
      for (int c32 = 0; c32 < CW; c32 += 32)
        for (int s = 0; s < 4; ++s)
          for (int a = 0; a < 2; ++a)
            for (int e = 0; e < 2; ++e) {
              std::vector<int> addr;
              for (int lane = 0; lane < 32; ++lane) {
                const int tb = PhaseB::token(grp, lane, a, e), col = c32 + PhaseB::col(lane, s);
                addr.push_back(Rows::at(tb, 1 + k, col) * SZ);
                REQUIRE(Rows::at(tb, 1 + k, col + 1) == Rows::at(tb, 1 + k, col) + 1);
                REQUIRE(Rows::at(tb, 1 + k, col) % 2 == 0);
                ++cov[{tb, col}];
                ++cov[{tb, col + 1}];
              }
              INFO("phase B: stream " << k << " columns " << c32 << " step " << s << " tile " << a
                                      << " rows +" << 8 * e);
              CHECK(bank_ways(addr, 2 * SZ) == 1);
            }
      CHECK(cov.size() == std::size_t(32 * CW));
      for (const auto& [at, times] : cov) REQUIRE(times == 1);
    }
}

// Where the tensor copies put an element: box (r, panel) holds token tb's 128 bytes of the panel
// as its line tb, swizzled.
template <int SZ, int TB, int CW>
void check_boxes() {
  using B = SwizzledBoxes<SZ, TB, CW>;
  INFO("SZ=" << SZ << " TB=" << TB << " CW=" << CW);
  constexpr int PC = 128 / SZ;
  CHECK(B::kBytes == 5 * TB * CW * SZ);  // dense: no padding
  for (int r = 0; r < 5; ++r)
    for (int p = 0; p < CW / PC; ++p) {
      REQUIRE(B::box(r, p) % 1024 == 0);
      for (int tb = 0; tb < TB; ++tb)
        for (int j = 0; j < PC; ++j)
          REQUIRE(B::at(tb, r, p * PC + j) * SZ == B::box(r, p) + swizzle128(tb * 128 + j * SZ));
    }
}

}  // namespace

// The layouts the shipped configurations and boundary_tc_tma use (bf16 only: fp32's 8-byte reads
// in phase B take lines g = 0..3 a pass, which the 128-byte swizzle maps onto 4 of 8 pieces, a
// 2-way conflict).
TEST_CASE("stage layouts: bijective, every element read once, no bank conflicts", "[layout]") {
  check_layout<PaddedRows<4, 32, 32>, 4, 32, 32>("padded");
  check_layout<PaddedRows<4, 32, 64>, 4, 32, 64>("padded");
  check_layout<PaddedRows<2, 32, 32>, 2, 32, 32>("padded");
  check_layout<PaddedRows<2, 32, 64>, 2, 32, 64>("padded");
  check_layout<PaddedRows<4, 64, 32>, 4, 64, 32>("padded");
  check_layout<PaddedRows<2, 64, 32>, 2, 64, 32>("padded");
  check_layout<SwizzledBoxes<2, 32, 64>, 2, 32, 64>("swizzled");
  check_layout<SwizzledBoxes<2, 32, 128>, 2, 32, 128>("swizzled");
  check_layout<SwizzledBoxes<2, 64, 64>, 2, 64, 64>("swizzled");
}

TEST_CASE("swizzled boxes: where the tensor copies' 128-byte swizzle writes", "[layout]") {
  check_boxes<2, 32, 64>();
  check_boxes<2, 32, 128>();
  check_boxes<2, 64, 64>();
}
