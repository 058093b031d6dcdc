// The kernel signatures, declared once: every backend (cpu, cpu-fused, cuda, plug-in) implements
// this table. All tensors are fp32 in host memory, row-major, with the layouts of SPEC section 6
// ([T, n, d] streams, [T, M] mixes, [T, n] weights, [T, n, n] comb with comb[t, j, k] carrying
// stream j into stream k). A backend that is not compiled in throws NotCompiled.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mhc::impl {

enum class Arith { fp32, tf32 };  // tf32: operands of the mixes projection rounded to tf32

struct KernelConfig {
  int n = 4, d = 5120, iters = 20;
  float hc_eps = 1e-6f, norm_eps = 1e-20f;
  Arith arith = Arith::fp32;
  bool bf16_streams = false;  // stream tensors (hc_pre and hc_post outputs) stored as bf16 values
  unsigned threads = 0;       // 0: one per core
  int mix() const { return (2 + n) * n; }
};

// The sublayer boundary (SPEC section 3): hc_post of sublayer k, then, for the new streams,
// mixes + split_sinkhorn (the coefficients of sublayer k+1's site) and hc_pre with the reading
// weights `pre_mix` computed earlier.
struct BoundaryIn {
  const float* f;         // [T, d]    sublayer k's output
  const float* residual;  // [T, n, d] streams before sublayer k
  const float* post;      // [T, n]    sublayer k's writing weights
  const float* comb;      // [T, n, n]
  const float* pre_mix;   // [T, n]    reading weights of sublayer k+1
  const float* hc_fn;     // [M, n*d]  the next site's parameters
  const float* hc_scale;  // [3]
  const float* hc_base;   // [M]
};
struct BoundaryOut {
  float* x;      // [T, n, d] new streams
  float* y;      // [T, d]    sublayer k+1's input, hc_pre(x, pre_mix)
  float* mixes;  // [T, M]
  float* pre;    // [T, n]    the next site's coefficients
  float* post;   // [T, n]
  float* comb;   // [T, n, n]
};

struct Backend {
  std::string name;
  std::string description;
  std::function<void(const KernelConfig&, std::size_t T, const float* x, const float* hc_fn,
                     float* mixes)>
      mixes;
  std::function<void(const KernelConfig&, std::size_t T, const float* mixes,
                     const float* hc_scale, const float* hc_base, float* pre, float* post,
                     float* comb)>
      split_sinkhorn;
  std::function<void(const KernelConfig&, std::size_t T, const float* x, const float* pre_mix,
                     float* y)>
      hc_pre;
  std::function<void(const KernelConfig&, std::size_t T, const float* f, const float* residual,
                     const float* post, const float* comb, float* y)>
      hc_post;
  std::function<void(const KernelConfig&, std::size_t T, const float* x, const float* weight,
                     float* y)>
      rmsnorm;
  std::function<void(const KernelConfig&, std::size_t T, const BoundaryIn&, const BoundaryOut&)>
      boundary;
};

struct NotCompiled : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The backends of this build, and lookup by name (nullptr when unknown). The lookup also knows
// the mutation self-test's kernels, "variant:NAME" and "mutant:NAME" (impl/variants.hpp).
const std::vector<const Backend*>& backends();
const Backend* find_backend(const std::string& name);

const Backend& cpu();        // the straightforward port: one plain pass per piece
const Backend& cpu_fused();  // vectorisable, threaded over tokens; single-pass boundary

// Round to the nearest bf16 value (ties to even), kept in a float. NaN stays NaN.
float round_bf16(float x);
// Round to the nearest tf32 value (10 explicit mantissa bits, ties to even), kept in a float.
float round_tf32(float x);

}  // namespace mhc::impl
