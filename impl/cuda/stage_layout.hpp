// Where boundary_tc's kernels keep a chunk's stream rows in a shared-memory stage, and which
// elements a lane reads in phase A and phase B: plain C++, so that a host test
// (impl/tests/test_stage_layout.cpp) checks on any machine that the layouts are bijective and
// that every warp's shared-memory access is free of bank conflicts.
//
// A stage holds, for TB tokens and CW columns of one chunk, the rows r = 0 (f) and r = 1..4
// (R_0..R_3, replaced by the new streams in phase A). at(tb, r, col) is the element offset of
// (token tb, row r, column col) from the stage's start, in elements of SZ bytes.
#pragma once

#if defined(__CUDACC__)
#define MHC_HD __host__ __device__
#else
#define MHC_HD
#endif

namespace mhc::impl::cuda_detail {

// The rows of a token one after the other, f, R_0..R_3, CW each, padded so that phase B's rows
// g = 0..7 fall in distinct banks (boundary_tc's cp.async copies write any layout).
template <int SZ, int TB, int CW>
struct PaddedRows {
  static constexpr int TS = 5 * CW + 8;  // elements a token
  static constexpr int kBytes = TB * TS * SZ;
  MHC_HD static constexpr int at(int tb, int r, int col) { return tb * TS + r * CW + col; }
};

// The boxes that tensor copies write: a box is one row r of TB tokens and one panel of
// PC = 128 / SZ columns (128 bytes), token-major, written with the copies' 128-byte swizzle (the
// 16-byte piece q of the box's row tb lands at piece q ^ (tb mod 8); the stage 1024-byte
// aligned). Boxes in the order [r][panel]. The swizzle spreads rows tb = 0..7 of one column over
// all 8 pieces of a 128-byte line, so phase B's eight tokens and phase A's two tokens 4 apart
// read distinct banks.
template <int SZ, int TB, int CW>
struct SwizzledBoxes {
  static constexpr int PC = 128 / SZ, P = CW / PC;  // columns a panel, panels a chunk
  static constexpr int kBox = TB * 128;             // bytes a box
  static constexpr int kBytes = 5 * P * kBox;
  static_assert(CW % PC == 0 && TB % 8 == 0, "whole panels, whole swizzle periods");
  MHC_HD static constexpr int box(int r, int p) { return (r * P + p) * kBox; }  // bytes
  MHC_HD static constexpr int at(int tb, int r, int col) {
    const int b = (col % PC) * SZ;  // byte within the panel's row
    return (box(r, col / PC) + tb * 128 + (((b / 16) ^ (tb % 8)) * 16) + b % 16) / SZ;
  }
};

// Phase A, warp `warp` of NW (4 or 8), lane `lane`: round i (0..3) takes a token of each half
// warp h, lane 16 h + p columns 2p and 2p + 1 of each 32. The two halves' tokens are 4 apart, so
// that their rows fall in different banks (padded rows at TB = 64; swizzled boxes, whose swizzle
// repeats every 8 tokens); round i adds 2 NW tokens.
struct PhaseA {
  MHC_HD static constexpr int token(int warp, int nw, int lane, int i) {
    return warp % 4 + 4 * (lane / 16) + 8 * (warp / 4) + 2 * nw * i;
  }
  MHC_HD static constexpr int col(int lane) { return 2 * (lane % 16); }  // + c32
};
// Phase B's A fragment of mma.m16n8k8 (lane 4 g + t): of the warp's 32 tokens, tile a (0, 1)
// rows g and g + 8 (e = 0, 1), columns 8 s + 2 t and 8 s + 2 t + 1 of each 32.
struct PhaseB {
  MHC_HD static constexpr int token(int grp, int lane, int a, int e) {
    return 32 * grp + 16 * a + lane / 4 + 8 * e;
  }
  MHC_HD static constexpr int col(int lane, int s) { return 8 * s + 2 * (lane % 4); }  // + c32
};

}  // namespace mhc::impl::cuda_detail
