// The kernel signatures, declared once: every backend (cpu, cpu-fused, cuda, plug-in) implements
// this table. All tensors are fp32 in host memory, row-major, with the layouts of
// fixtures/README.md
// ([T, n, d] streams, [T, M] mixes, [T, n] weights, [T, n, n] comb with comb[t, j, k] carrying
// stream j into stream k). A backend that is not compiled in throws NotCompiled.
#pragma once

#include <cmath>
#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mhc::impl {

// Whether the projection of n d terms on the tensor cores in split tf32 stays inside the fp32
// model's bound (docs/semantics.md, "The tensor-core projection"): at most 236 u of each 32-column
// chunk's sum of magnitudes, plus the chunk sums' round-to-nearest adds, against the smallest fp32
// bound, the probabilistic 8 sqrt(n d) u. From d = 272 at n = 4; never below n d = 1078.
inline bool tensor_cores_within_fp32(int n, int d) {
  const double adds = std::ceil(d / 32.0) + n - 1;
  return 8 * std::sqrt(double(n) * double(d)) >= 236 + 8 * std::sqrt(adds);
}

// Number formats a kernel declares, part by part (docs/semantics.md, "Precision models").
enum class Format { fp32, tf32, bf16, fp16 };

struct KernelConfig {
  int n = 4, d = 5120, iters = 20;
  float hc_eps = 1e-6f, norm_eps = 1e-20f;
  Format streams = Format::fp32;        // stream tensors (hc_pre and hc_post outputs) stored in
  Format mixes = Format::fp32;          // the mixes stored in, before the split reads them
  Format coefficients = Format::fp32;   // pre, post and comb stored in
  Format products = Format::fp32;       // the mixes projection's operands rounded to
  Format accumulation = Format::fp32;   // the mixes projection's running sum rounded to
  Format intermediates = Format::fp32;  // each result inside hc_pre, hc_post, RMSNorm, mixes
  unsigned threads = 0;                 // 0: one per core
  int mix() const { return (2 + n) * n; }
};

// The sublayer boundary (docs/semantics.md, "The sublayer boundary"): hc_post of sublayer k,
// then, for the new streams, mixes + split_sinkhorn (the coefficients of sublayer k+1's site) and
// hc_pre with the reading weights `pre_mix` computed earlier.
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

// The whole Block (docs/semantics.md, "The Block"): sublayer shapes, fp32 weights (names as in
// fixtures/README.md), and the output of every stage ("Stage names"), [N = B*T tokens, ...].
struct BlockShape {
  int heads = 8, head_dim = 64, experts = 8, top_k = 2, inter = 512;
  float route_scale = 1.0f;
};
struct BlockWeights {
  const float *attn_hc_fn, *attn_hc_base, *attn_hc_scale;
  const float *ffn_hc_fn, *ffn_hc_base, *ffn_hc_scale;
  const float *attn_norm, *ffn_norm;
  const float *wq, *wk, *wv, *wo;
  const float *router, *router_bias;
  const float *w1, *w2, *w3;
  const float *shared_w1, *shared_w2, *shared_w3;
};
struct BlockStages {
  float *attn_mixes, *attn_pre, *attn_post, *attn_comb, *attn_in, *attn_normed, *attn_out;
  float* x_mid;
  float *ffn_mixes, *ffn_pre, *ffn_post, *ffn_comb, *ffn_in, *ffn_normed, *ffn_out;
  float* ffn_experts;  // [N, k] the chosen experts, as the kernel exposes its routing
  float *x_out, *next_pre_mix;
};

// The stages of the Block's backward ("Stage names"): the gradient of each forward stage a
// training step holds, [N = B*T tokens, ...], ending with those of x and pre_mix.
struct BlockGradStages {
  float *ffn_grad_out, *ffn_grad_normed, *ffn_grad_in, *ffn_grad_mixes, *grad_x_mid;
  float *attn_grad_out, *attn_grad_normed, *attn_grad_in, *attn_grad_mixes;
  float *grad_x, *grad_pre_mix;
};
// The boundary's backward (Backend::Backward::boundary): the forward's inputs, its saved new
// streams x and mixes, and the upstream gradients of its outputs; the gradients of its inputs
// and parameters (summed over tokens).
struct BoundaryBackwardIn {
  BoundaryIn forward;
  const float *x, *mixes;
  const float *g_x, *g_y, *g_mixes, *g_pre, *g_post, *g_comb;
};
struct BoundaryBackwardOut {
  float *d_f, *d_residual, *d_post, *d_comb, *d_pre_mix, *d_hc_fn, *d_hc_scale, *d_hc_base;
};
struct Backend {
  std::string name;  // what --kernel takes: "cpu", "plugin:PATH"
  std::string description;
  std::function<void(const KernelConfig&, std::size_t T, const float* x, const float* hc_fn,
                     float* mixes)>
      mixes;
  std::function<void(const KernelConfig&, std::size_t T, const float* mixes, const float* hc_scale,
                     const float* hc_base, float* pre, float* post, float* comb)>
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
  // x [B*T, n, d], pre_mix [B*T, n]; attention is causal within each of the B sequences.
  std::function<void(const KernelConfig&, const BlockShape&, std::size_t B, std::size_t T,
                     const float* x, const float* pre_mix, const BlockWeights&, const BlockStages&)>
      block;
  // Needs a CUDA context (ours on the GPU, a plug-in's MHC_MEMORY_DEVICE): a worker process
  // forked from the harness can run it only while the harness itself holds none (cuda_in_use()).
  bool device = false;
  // Backward kernels (docs/semantics.md, "The backward pass"): given a piece's inputs and the
  // upstream gradients g_* of its outputs, the gradients d_* of its inputs ([T, ...]) and of its
  // parameters (summed over the T tokens). The backward of the mixes op (projection and split)
  // and of the boundary are composed from these. Empty: the backend has none.
  struct Backward {
    std::function<void(const KernelConfig&, std::size_t T, const float* x, const float* hc_fn,
                       const float* g_mixes, float* d_x, float* d_hc_fn)>
        mixes;  // the projection alone: mixes = rms(x)^-1 hc_fn x
    std::function<void(const KernelConfig&, std::size_t T, const float* mixes,
                       const float* hc_scale, const float* hc_base, const float* g_pre,
                       const float* g_post, const float* g_comb, float* d_mixes, float* d_hc_scale,
                       float* d_hc_base)>
        split_sinkhorn;
    std::function<void(const KernelConfig&, std::size_t T, const float* x, const float* pre_mix,
                       const float* g_y, float* d_x, float* d_pre_mix)>
        hc_pre;
    std::function<void(const KernelConfig&, std::size_t T, const float* f, const float* residual,
                       const float* post, const float* comb, const float* g_y, float* d_f,
                       float* d_residual, float* d_post, float* d_comb)>
        hc_post;
    std::function<void(const KernelConfig&, std::size_t T, const float* x, const float* weight,
                       const float* g_y, float* d_x, float* d_weight)>
        rmsnorm;
    // The boundary's; empty: composed from the pieces' by the driver (runner::run_backward).
    std::function<void(const KernelConfig&, std::size_t T, const BoundaryBackwardIn&,
                       const BoundaryBackwardOut&)>
        boundary;
    // The Block's (make_block_backward's signature); empty: make_block_backward of these pieces.
    std::function<void(const KernelConfig&, const BlockShape&, std::size_t B, std::size_t T,
                       const float* x, const float* pre_mix, const BlockWeights&,
                       const BlockStages& forward, const float* g_x_out,
                       const float* g_next_pre_mix, const BlockGradStages&)>
        block;
  } backward;
  // What a baseline knows it by, wherever it was loaded from: "plugin:" and the name in a
  // plug-in's table; empty for ours (their name).
  std::string baseline_name;
};

// Block-level choices of the block kernels: the defaults are the semantics; the others are the
// mutation self-test's wrong Blocks.
struct BlockKnobs {
  bool fused_boundary = false;  // the attn -> ffn boundary through the backend's boundary kernel
  bool shifted_pre = true;      // each sublayer reads with the previous one's weights
  bool causal = true;
  bool attn_norm = true, ffn_norm = true;
  bool normalise_routing = true;
  int comb_transposed_site = -1;  // 0: attn, 1: ffn
  // Whether a knob departs from the Block's semantics (fused_boundary is a legitimate choice).
  bool deviates() const {
    return !shifted_pre || !causal || !attn_norm || !ffn_norm || !normalise_routing ||
           comb_transposed_site >= 0;
  }
};
// Choices of the CPU backward kernels: the defaults are the semantics and the straightforward
// order; the others are the mutation self-test's legitimate and wrong backwards.
struct BackwardKnobs {
  // The order of the parameters' gradient sums over tokens; shuffled: a new order every run, as
  // atomic adds give (a non-deterministic kernel).
  enum class Order { forward, reverse, shuffled };
  Order order = Order::forward;
  bool den_eps = true;           // each Sinkhorn step's derivative divides by its sum + eps
  bool comb_transposed = false;  // hc_post's comb gradient written transposed
  bool post_factor2 = true;      // the post weights' gradient with the forward's factor 2
  bool mean_term = true;         // RMSNorm's and the projection's d x with the statistic's term
  // Through every Sinkhorn step; as if converged (every step's derivative taken at the last
  // iterate of its kind); through the last round only (the earlier steps passed through).
  enum class Sinkhorn { unrolled, converged, last_round };
  Sinkhorn sinkhorn = Sinkhorn::unrolled;
  // The Sinkhorn's iterates recomputed from the softmax when the backward reaches each step
  // (checkpointing) rather than stored, their line sums in the other order.
  bool recompute = false;
  // The Block's backward: the routing weights' gradient through the router (false: the weights
  // treated as constants, as a detach() gives); the FFN's reading weights' gradient to the attn
  // site's pre it read with (false: to the FFN site's own, as if pre were not shifted).
  bool routing = true, shifted_pre = true;
  // Each token's sums over d of hc_pre's and hc_post's weight gradients: one after the other,
  // last to first, pairwise, or in 32 strided lanes with fma then a tree over the lanes (as a
  // warp sums them); tf32_products rounds both operands of their products to tf32 first (a
  // tensor core's single pass, undeclared).
  enum class Sums { forward, reverse, pairwise, lanes };
  Sums sums = Sums::forward;
  bool tf32_products = false;
  // The forward's mixes as the split's backward reads them: saved narrower than fp32 (as an
  // autocast region saves activations) is undeclared.
  Format saved_mixes = Format::fp32;
  // The boundary's gradient of its new streams, the sum of three shares (the upstream's, hc_pre's
  // and the projection's): each share stored as the streams and summed in fp32 (the driver
  // composes the pieces so), kept in fp32 (one fused kernel), or stored and summed in the streams'
  // format (an autograd in that format).
  enum class NewStreams { stored, kept, accumulated };
  NewStreams new_streams = NewStreams::stored;
  bool deviates() const {
    return !den_eps || comb_transposed || !post_factor2 || !mean_term ||
           sinkhorn != Sinkhorn::unrolled || !routing || !shifted_pre;
  }
  bool chosen() const {
    return deviates() || order != Order::forward || recompute || sums != Sums::forward ||
           tf32_products || saved_mixes != Format::fp32 || new_streams != NewStreams::stored;
  }
  bool block_only() const { return !routing || !shifted_pre; }  // deviates in a Block's alone
};

// The sublayers of a Block (docs/semantics.md, "Stand-in sublayers") on N = B*T tokens of width
// d, host arrays: causal attention within each of the B sequences, and the MoE (ffn.out, and the
// chosen experts [N, k]).
struct Sublayers {
  std::function<void(const KernelConfig&, const BlockShape&, const BlockKnobs&, std::size_t B,
                     std::size_t T, const float* h, const BlockWeights&, float* out)>
      attention;
  std::function<void(const KernelConfig&, const BlockShape&, const BlockKnobs&, std::size_t N,
                     const float* h, const BlockWeights&, float* out, float* experts)>
      moe;
  // Their backward (docs/semantics.md, "The Block's backward"): the gradient of h for the
  // gradient g of the output, the weights' not taken; the MoE with the experts the forward chose.
  // cpu_sublayers() has them; cuda_sublayers() does not (the GPU's backward is its own issue), and
  // make_block_backward refuses sublayers without them (NotCompiled).
  std::function<void(const KernelConfig&, const BlockShape&, const BlockKnobs&, std::size_t B,
                     std::size_t T, const float* h, const BlockWeights&, const float* g,
                     float* d_h)>
      attention_backward;
  // routing: with the routing weights' gradient (false: the weights held constant).
  std::function<void(const KernelConfig&, const BlockShape&, const BlockKnobs&, bool routing,
                     std::size_t N, const float* h, const BlockWeights&, const float* experts,
                     const float* g, float* d_h)>
      moe_backward;
};
Sublayers cpu_sublayers();   // straightforward fp32 loops
Sublayers cuda_sublayers();  // cuBLAS SGEMM and our kernels (impl/cuda/block.cu)

// A Block kernel built from a backend's pieces (mixes, split, hc_pre, hc_post, rmsnorm, boundary)
// and the given sublayers.
std::function<void(const KernelConfig&, const BlockShape&, std::size_t, std::size_t, const float*,
                   const float*, const BlockWeights&, const BlockStages&)>
make_block(const Backend& pieces, const BlockKnobs& knobs, Sublayers sub = cpu_sublayers());

// The Block's backward from a backend's backward pieces and the sublayers' backward: given the
// Block's forward stages (as its block kernel wrote them) and the gradients of x_out and
// next_pre_mix ([N, n, d], [N, n]), every backward stage. The mHC parameters' gradients are
// computed and not returned.
std::function<void(const KernelConfig&, const BlockShape&, std::size_t B, std::size_t T,
                   const float* x, const float* pre_mix, const BlockWeights&,
                   const BlockStages& forward, const float* g_x_out, const float* g_next_pre_mix,
                   const BlockGradStages&)>
make_block_backward(const Backend& pieces, Sublayers sub = cpu_sublayers(),
                    const BackwardKnobs& knobs = {});

struct NotCompiled : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The backends of this build, and lookup by name (nullptr when unknown). The lookup also knows
// the mutation self-test's kernels, "variant:NAME" and "mutant:NAME" (impl/variants.hpp), and
// loads plug-ins, "plugin:PATH" (impl/plugin.hpp; throws PluginError when PATH cannot be loaded).
const std::vector<const Backend*>& backends();      // the CPU ones: always usable
const std::vector<const Backend*>& gpu_backends();  // cuda, cuda-fused: need a device
const Backend* find_backend(const std::string& name);

const Backend& cpu();        // the straightforward port: one plain pass per piece
const Backend& cpu_fused();  // vectorisable, threaded over tokens; single-pass boundary

// Round to the nearest bf16 value (ties to even), kept in a float. NaN stays NaN.
float round_bf16(float x);
// Round to the nearest tf32 value (10 explicit mantissa bits, ties to even), kept in a float.
float round_tf32(float x);
// Round to the nearest fp16 value (10 explicit mantissa bits, subnormals below 2^-14, infinite
// beyond 65504), kept in a float.
float round_fp16(float x);
// Round to the nearest value of f (fp32: x itself).
float round_to(Format f, float x);

}  // namespace mhc::impl
