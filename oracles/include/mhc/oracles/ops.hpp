// The operations a kernel is judged on (the fixture table of fixtures/README.md, plus the sublayer
// boundary), their Cases, and the oracle's Trace of them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mhc/oracles/bounded.hpp"
#include "mhc/oracles/pieces.hpp"
#include "mhc/reference/block.hpp"
#include "mhc/reference/config.hpp"
#include "mhc/reference/mhc.hpp"

namespace mhc::oracles {

enum class Op {
  split_sinkhorn,
  mixes,
  pre,
  post,
  rmsnorm,
  boundary,
  block,
  stack,
  split_sinkhorn_backward,
  mixes_backward,
  pre_backward,
  post_backward,
  rmsnorm_backward,
  boundary_backward,
  block_backward,
  stack_backward,
};
const std::vector<Op>& all_ops();             // the mHC pieces and their boundary
const std::vector<Op>& block_ops();           // the whole Block, and a stack of Blocks
const std::vector<Op>& backward_ops();        // the backward of each piece and of the boundary
const std::vector<Op>& block_backward_ops();  // the backward of the Block and of a stack
std::string op_name(Op op);
Op op_from_name(const std::string& name);  // throws std::invalid_argument naming the choices

// The op table: every op described once, its inputs, params and outputs with their shapes (the
// names and layouts of fixtures/README.md). Case generation, the oracle's and the driver's stage
// allocation, the fixture reader's schema and the CLI's lists are derived from it; adding an op
// touches the reference, this table and each backend (README, "Layout").
//
// Shapes are symbols resolved against a case: the trailing dimensions after the tokens ([T], or
// [B, T] for block and stack inputs and outputs); a param's whole shape.
enum class Dim { n, d, nd, M, three, heads_x_head_dim, experts, inter, top_k };
// How generate_case draws a tensor (oracles/include/mhc/oracles/generate.hpp).
enum class Draw {
  activations,          // gen::activations, a zero token now and then
  activations_if_eps,   // ... zero tokens only with norm_eps > 0 (the op takes an RMS of them)
  activations_nonzero,  // ... never a zero token
  mixes,
  pre_weights,
  post_weights,
  combs,
  hc_fn,
  hc_scale,
  hc_base,
  norm_weight,
  fan_in_gaussian,  // block weights: N(0, 1/last dimension)
  bias,             // block biases: N(0, 0.01)
  upstream,         // a backward's upstream gradient: uniform in [-1, 1]
};
struct TensorSpec {
  std::string name;
  std::vector<Dim> dims;
  Draw draw = Draw::activations;
  // An output: the params it depends on ("*": all of the op's). Judging only outputs that do not
  // read a param needs no value for it (the Python API then fills it with zeros).
  std::vector<std::string> reads{"*"};
  // false: an output with no token dimension, a parameter's gradient summed over the tokens.
  bool per_token = true;
  bool stream() const;  // an activation: stored as bf16 under the bf16 precision model
};
struct OpSpec {
  Op op;
  std::string name;
  std::vector<TensorSpec> inputs, params;  // in the order generate_case draws them
  std::vector<TensorSpec> outputs;         // in the order the op computes them (its Trace)
  bool whole = false;  // block, stack: inputs and outputs [B, T, ...]; params of each layer
  bool reads_iters = false, reads_hc_eps = false, reads_norm_eps = false;  // the config it reads
  // A backward op (derived from its forward's entry): inputs the forward's, then the upstream
  // gradient of each forward output ("upstream_<output>"); params the forward's; outputs the
  // gradient of each input ("grad_<input>", per token) and of each param ("grad_<param>", summed
  // over the tokens; a Block's or a stack's weights' are not taken). forward: the op it
  // differentiates (itself for a forward op).
  bool backward = false;
  Op forward = Op::boundary;
};
const std::vector<OpSpec>& op_table();  // all_ops(), then block_ops()
const OpSpec& op_spec(Op op);
std::vector<std::size_t> resolve(const std::vector<Dim>& dims, const ref::Config& c,
                                 const ref::BlockConfig& b = {});
// The stages of one Block in the order the reference computes them (a stack prefixes "L<l>."
// and ends with final_stages()); the params of one layer ("layers/<l>/" in a stack).
const std::vector<TensorSpec>& block_stages();
const std::vector<TensorSpec>& final_stages();
// The stages of one Block's backward (block_backward, stack_backward) in the order computed, the
// gradient of each forward stage that a training step holds (docs/semantics.md, "The Block's
// backward"); a stack prefixes "L<l>." and its output grad_x is L0.grad_x.
const std::vector<TensorSpec>& block_backward_stages();
const std::vector<TensorSpec>& layer_params();

struct OpCase;
// The named tensors of a case at its sizes, as fixtures and the Python API name them: inputs and
// outputs by their trailing dimensions (after the token dimensions: exactly [B, T] for block and
// stack, leading = 2; any number for the pieces, flattened to tokens, leading = -1), params by
// their whole shape (every layer's in a stack: "layers/<l>/...", and "final_norm/weight").
struct NamedShape {
  std::string name;
  std::vector<std::size_t> trailing;
  bool per_token = true;  // false: no token dimensions (a parameter's gradient): trailing is all
};
struct CaseLayout {
  std::vector<NamedShape> inputs, params, outputs;
  int leading = -1;
};
CaseLayout case_layout(const OpCase& header);
// The stages a block or stack case with captured sublayers (BlockConfig::captured_sublayers)
// takes from the capture instead of computing them: each layer's attn.out and ffn.out ("L<l>."
// in a stack). Empty otherwise.
std::vector<std::string> given_stages(const OpCase& header);
// The trailing dimensions of a block or stack Trace stage, from its name ("L1.ffn.pre" in a
// stack); empty if the op has no such stage.
std::vector<std::size_t> stage_trailing(const OpCase& header, const std::string& stage);
// The Trace stage an output of the op table names ("x" of a block is its stage "x_out"; a stack's
// outputs are its last layer's stages).
std::string stage_of_output(const OpCase& header, const std::string& output);
// Whether a Trace stage holds indices, not values: a Block's chosen experts ("ffn.experts",
// "L1.ffn.experts"), where 0 is an expert like any other.
bool index_stage(const std::string& stage);

// How many elements a case of these sizes holds (tokens: all of them, batch included), counted in
// double so that absurd sizes cannot overflow: its inputs, its params (every layer's), and the
// stages its Trace holds (every block stage of every layer for block and stack).
struct Elements {
  double inputs = 0, params = 0, stages = 0;
};
Elements case_elements(Op op, const ref::Config& c, const ref::BlockConfig& b, double tokens);

// The precision a kernel declares, part by part (docs/semantics.md, "Precision models"): a preset
// (fp32, tf32, bf16, bf16-projection, fp16) or parts such as "streams=bf16,products=bf16" (parts
// left out are fp32; bnd::declaration_parts()). Its name is the preset's where the parts are one,
// else the parts that are not fp32.
struct Precision {
  std::string name = "fp32";
  bnd::Declaration decl;
  static Precision fp32() { return {}; }
  static Precision tf32();
  static Precision bf16();
  friend bool operator==(const Precision& a, const Precision& b) { return a.decl == b.decl; }
  friend bool operator!=(const Precision& a, const Precision& b) { return !(a == b); }
};
const std::vector<Precision>& all_precisions();  // the presets
std::string precision_name(const Precision& p);
Precision precision_from_name(const std::string& name);  // throws std::invalid_argument
bnd::Model precision_model(const Precision& p);          // the bound-carrying type's model

struct Tensor {
  std::vector<std::size_t> shape;
  std::vector<float> data;
};

// A Case: configuration, named inputs and params (fixtures/README.md names), the precision model
// the kernel declares.
struct OpCase {
  Op op = Op::boundary;
  ref::Config cfg;
  std::size_t tokens = 1;
  std::uint64_t seed = 0;
  Precision precision;
  ref::BlockConfig block;  // block and stack: the sublayers' shapes (and layers)
  std::size_t batch =
      1;  // block and stack: tokens = batch * positions; attention within a sequence
  std::map<std::string, Tensor> inputs, params;
  // Where the case comes from, so that it can name the command that rebuilds it: generated from
  // the fields above (`check`), read from or saved to a fixture (`compare file`), or generated and
  // then changed (rebuilt by nothing until it is saved).
  enum class Origin { generated, file, derived };
  Origin origin = Origin::generated;
  std::string file;
  std::string file_case;         // the case's name within a multi-case capture file
  bool precision_given = false;  // judged under a declaration given in place of the file's
  const Tensor& input(const std::string& name) const;
  const Tensor& param(const std::string& name) const;
};

// The outputs of an op, in the order they are computed (the stages of its Trace).
const std::vector<std::string>& output_names(Op op);

// A generated Case, deterministic in its arguments. With precision bf16 the stream tensors
// (x, residual, f) hold bf16 values (stored exactly in fp32). One mixes, boundary or rmsnorm
// case in eight is uniform, as a torch.full smoke test: hc_fn one value, and every token's
// streams constant along d, so that long reductions sum repeated terms (see
// bnd::detail::premise_holds).
OpCase generate_case(Op op, const ref::Config& cfg, std::size_t tokens, std::uint64_t seed,
                     Precision precision);

using ref::Stage;
template <class S>
using Trace = std::vector<Stage<S>>;
// Whether these outputs leave anything to judge: a sublayer's output given with the case is taken
// as it is, so outputs of those alone (or none) would pass on nothing.
bool judges_something(const OpCase& header, const Trace<float>& outputs);
// The stage of t with that name, or nullptr.
template <class S>
const Stage<S>* find_stage(const Trace<S>& t, const std::string& name) {
  for (const auto& s : t)
    if (s.name == name) return &s;
  return nullptr;
}

// The fp32 value of x, as a kernel computes with it. Through a volatile float: GCC 12.2's SLP
// vectorizer removes the round trip double(float(x)) when it vectorizes two of them (case_header
// declared the double eps instead of the fp32 one, and REPRO lines printed a value that read
// back to another case).
double fp32_value(double x);

// A Case with no tensors yet: op, configuration (eps rounded to the fp32 values a kernel
// computes with: the case declares those), tokens, seed and precision (validated).
OpCase case_header(Op op, const ref::Config& cfg, std::size_t tokens, std::uint64_t seed,
                   Precision precision);

// A Block (or stack) Case: B sequences of T positions, sublayers of the given shapes; params
// named as in fixtures/README.md ("attn/wq", ...), per layer "layers/<l>/..." in a stack, plus
// "final_norm/weight".
OpCase generate_block_case(Op op, const ref::Config& cfg, const ref::BlockConfig& block,
                           std::size_t B, std::size_t T, std::uint64_t seed, Precision precision);
// A case's tensors stored as its declaration says (rounded to nearest, where it names bf16 or
// fp16): inputs and captured sublayer outputs as `inputs`, mixes as `mixes`, pre_mix, post and
// comb as `coefficients`, every parameter as `weights`, an upstream gradient as the output it is
// the gradient of (a stream output's as `streams`). Generated cases and read fixtures are
// stored so: what a kernel is given is what the oracle evaluates.
bnd::Format declared_storage(const bnd::Declaration& d, const std::string& input);
void store_declared(OpCase& c);
// The format c's declaration stores an output stage in, its rounding then part of the stage's
// bound: a mixes stage as `mixes`, pre, post, comb and next_pre_mix as `coefficients`, a backward's
// gradient of a stream input and every other forward stage as `streams`; fp32 for the rest.
bnd::Format declared_output_storage(const OpCase& c, const std::string& stage);
// Whether a stage was handed over rounded to a format other than its declared storage: its values
// are then not those the kernel's later stages read, and nothing is anchored on them.
bool rounded_on_handover(const OpCase& c, const bnd::StoredFormats& stored,
                         const std::string& stage);
// Throws invalid_argument unless a backward op can be judged under p: the pieces' and the
// boundary's under declarations of inputs, weights and streams (docs/semantics.md, "The backward
// ops"), the Block's and a stack's under fp32 only.
void need_backward_declaration(Op op, const Precision& p);
// The parameters of layer l of a block or stack Case.
ref::BlockParams block_params(const OpCase& c, int layer);

// Case i of a self-test campaign (seed + i): an op (boundary 45%, split_sinkhorn 25%, the other
// pieces 15%, a small whole Block 15%), n in {1,2,3,4,8}, d in 1..48, iters in 1..30, hc_eps
// log-uniform in 1e-6..1e-1 (large eps makes a misplaced eps glaring), norm_eps log-uniform in
// 1e-20..1e-3, 2 tokens (Block: 1-2 sequences of 2-4 positions, 1-2 heads, 2-4 experts), under
// the given declaration (inputs stored as it says).
OpCase campaign_case(std::uint64_t seed, std::uint64_t i,
                     const Precision& precision = Precision::fp32());

// Case i of the backward self-test campaign: a backward op (the split 35%, the boundary 15%, the
// mixes 15%, hc_pre, hc_post and RMSNorm 20%, the Block's 10% and a stack's 5%; under a
// declaration other than fp32 the boundary's in their place), n in {1,2,3,4,8}, d in 1..48,
// iters, hc_eps and norm_eps as campaign_case, 2 tokens (the Block's: small_block_case's sizes),
// under the given declaration (inputs and upstream gradients stored as it says).
OpCase backward_campaign_case(std::uint64_t seed, std::uint64_t i,
                              const Precision& precision = Precision::fp32());

// The oracle: the reference in the bound-carrying Scalar under the case's precision model.
Trace<bnd::Bounded> oracle_trace(const OpCase& c, unsigned threads = 0);

using ref::store_all;

// A block or stack Case through the reference in Scalar B (one thread: attention couples the
// positions of a sequence). routings: per layer, filled when not null; forced: per layer, experts
// per token to use instead of the Scalar's own choice (-1: own choice), or empty; anchor: a
// kernel's Trace whose intermediates feed the next stages (ref::Feed).
//
// With captured sublayers every stage is per token, so the tokens are evaluated in `threads`
// contiguous parts in parallel (the values do not depend on the split).
template <class B, class Scope>
Trace<B> evaluate_block(const OpCase& c, Scope scope_of, std::vector<ref::Routing<B>>* routings,
                        const std::vector<std::vector<int>>& forced,
                        const Trace<float>* anchor = nullptr, unsigned threads = 1) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  if (c.block.captured_sublayers && threads > 1 && c.tokens > 1 && anchor) {
    const std::size_t parts = std::min<std::size_t>(threads, c.tokens);
    std::vector<Trace<B>> traces(parts);
    std::vector<std::exception_ptr> errors(parts);
    par::for_each(parts, threads, [&](std::size_t k) {
      try {
        const std::size_t t0 = c.tokens * k / parts, t1 = c.tokens * (k + 1) / parts;
        OpCase part = c;
        part.tokens = t1 - t0;
        part.batch = 1;
        for (auto& [name, t] : part.inputs) {
          const std::size_t per = t.data.size() / c.tokens;
          t.data.assign(t.data.begin() + std::ptrdiff_t(t0 * per),
                        t.data.begin() + std::ptrdiff_t(t1 * per));
          std::vector<std::size_t> shape{1, part.tokens};  // [B, T, ...] with B = 1
          if (t.shape.size() > 2) shape.insert(shape.end(), t.shape.begin() + 2, t.shape.end());
          t.shape = shape;
        }
        Trace<float> sub;
        for (const auto& st : *anchor) {
          const std::size_t per = st.values.size() / c.tokens;
          std::vector<std::size_t> shape = st.shape;
          if (!shape.empty()) shape[0] = part.tokens;
          sub.push_back({st.name, shape,
                         std::vector<float>(st.values.begin() + std::ptrdiff_t(t0 * per),
                                            st.values.begin() + std::ptrdiff_t(t1 * per))});
        }
        traces[k] = evaluate_block<B>(part, scope_of, nullptr, forced, &sub, 1);
      } catch (...) {
        errors[k] = std::current_exception();
      }
    });
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
    Trace<B> whole = std::move(traces[0]);
    for (std::size_t k = 1; k < parts; ++k)
      for (std::size_t s = 0; s < whole.size(); ++s) {
        auto& v = whole[s].values;
        v.insert(v.end(), traces[k][s].values.begin(), traces[k][s].values.end());
        whole[s].shape[0] += traces[k][s].shape[0];
      }
    if (routings) routings->assign(std::size_t(c.block.layers), {});
    return whole;
  }
  const auto scope = scope_of(0);
  (void)scope;
  const std::size_t N = c.tokens, T = N / c.batch;
  const auto& xin = c.input("x").data;
  const std::vector<B> x(xin.begin(), xin.end());
  Trace<B> trace;
  if (c.op == Op::block) {
    const auto& pin = c.input("pre_mix").data;
    const std::vector<B> pre(pin.begin(), pin.end());
    ref::Routing<B> r;
    ref::block_forward(c.cfg, c.block, c.batch, T, x.data(), pre.data(), block_params(c, 0), trace,
                       "", &r, forced.empty() ? nullptr : forced[0].data(), anchor);
    if (routings) routings->assign(1, std::move(r));
  } else {
    std::vector<ref::BlockParams> layers;
    std::vector<const int*> f;
    for (int l = 0; l < c.block.layers; ++l) {
      layers.push_back(block_params(c, l));
      f.push_back(forced.empty() ? nullptr : forced[std::size_t(l)].data());
    }
    ref::stack_forward(c.cfg, c.block, c.batch, T, x.data(), layers,
                       c.param("final_norm/weight").data.data(), trace, routings, &f, anchor);
  }
  return trace;
}

// The op evaluated through the reference in any Scalar B, in blocks of tokens; scope_of(block)
// is called on the worker thread before each block and its result held while it evaluates (the
// bound type's model scope, the stochastic type's random stream: per block, so that results do
// not depend on the thread count).
template <class B, class Scope>
Trace<B> evaluate_op(const OpCase& c, unsigned threads, Scope scope_of) {
  using std::size_t;
  if (c.op == Op::block || c.op == Op::stack)
    return evaluate_block<B>(c, scope_of, nullptr, std::vector<std::vector<int>>{});
  const ref::Config& k = c.cfg;
  const std::size_t T = c.tokens, n = std::size_t(k.n), d = std::size_t(k.d);
  const std::size_t M = std::size_t(k.mix()), nd = n * d;
  Trace<B> trace;
  for (const auto& t : op_spec(c.op).outputs) {
    std::vector<std::size_t> shape = resolve(t.dims, k);
    shape.insert(shape.begin(), T);
    std::size_t size = 1;
    for (auto s : shape) size *= s;
    trace.push_back({t.name, shape, std::vector<B>(size)});
  }
  auto out = [&](const std::string& name) -> std::vector<B>& {
    for (auto& s : trace)
      if (s.name == name) return s.values;
    throw std::logic_error("no stage " + name);
  };
  auto split = [&](std::size_t t, const B* mix) {
    ref::split_sinkhorn(k, mix, c.param("hc_scale").data.data(), c.param("hc_base").data.data(),
                        &out("pre")[t * n], &out("post")[t * n], &out("comb")[t * n * n]);
    store_all(&out("pre")[t * n], n, ref::Storage::coefficients);
    store_all(&out("post")[t * n], n, ref::Storage::coefficients);
    store_all(&out("comb")[t * n * n], n * n, ref::Storage::coefficients);
  };
  // Blocks of tokens, so that the projection of mixes can reuse each chunk of hc_fn.
  constexpr std::size_t kBlock = 8;
  par::for_each((T + kBlock - 1) / kBlock, threads, [&](std::size_t blk) {
    const auto scope = scope_of(blk);
    (void)scope;
    const std::size_t t0 = blk * kBlock, nt = std::min(kBlock, T - t0);
    const float* f = c.op == Op::post || c.op == Op::boundary ? c.input("f").data.data() : nullptr;
    switch (c.op) {
      case Op::block:
      case Op::stack:
        break;  // evaluate_block
      case Op::split_sinkhorn:
        for (std::size_t t = t0; t < t0 + nt; ++t) {
          const float* m = c.input("mixes").data.data() + t * M;
          const std::vector<B> mix(m, m + M);
          split(t, mix.data());
        }
        break;
      case Op::mixes:
        ref::mixes(k, nt, c.input("x").data.data() + t0 * nd, c.param("hc_fn").data.data(),
                   &out("mixes")[t0 * M]);
        store_all(&out("mixes")[t0 * M], nt * M, ref::Storage::mixes);
        for (std::size_t t = t0; t < t0 + nt; ++t) split(t, &out("mixes")[t * M]);
        break;
      case Op::pre:
        for (std::size_t t = t0; t < t0 + nt; ++t) {
          B* y = &out("y")[t * d];
          ref::hc_pre(k, c.input("x").data.data() + t * nd, c.input("pre_mix").data.data() + t * n,
                      y);
          store_all(y, d);
        }
        break;
      case Op::post:
        for (std::size_t t = t0; t < t0 + nt; ++t) {
          B* y = &out("y")[t * nd];
          ref::hc_post(k, f + t * d, c.input("residual").data.data() + t * nd,
                       c.input("post").data.data() + t * n, c.input("comb").data.data() + t * n * n,
                       y);
          store_all(y, nd);
        }
        break;
      case Op::rmsnorm:
        for (std::size_t t = t0; t < t0 + nt; ++t) {
          B* y = &out("y")[t * d];
          ref::rmsnorm(d, k.norm_eps, c.input("x").data.data() + t * d,
                       c.param("weight").data.data(), y);
          store_all(y, d);
        }
        break;
      case Op::boundary: {
        B* x = &out("x")[t0 * nd];
        for (std::size_t t = t0; t < t0 + nt; ++t) {
          B* xt = &out("x")[t * nd];
          ref::hc_post(k, f + t * d, c.input("residual").data.data() + t * nd,
                       c.input("post").data.data() + t * n, c.input("comb").data.data() + t * n * n,
                       xt);
          store_all(xt, nd);
        }
        ref::mixes(k, nt, x, c.param("hc_fn").data.data(), &out("mixes")[t0 * M]);
        store_all(&out("mixes")[t0 * M], nt * M, ref::Storage::mixes);
        for (std::size_t t = t0; t < t0 + nt; ++t) {
          split(t, &out("mixes")[t * M]);
          B* y = &out("y")[t * d];
          ref::hc_pre(k, &out("x")[t * nd], c.input("pre_mix").data.data() + t * n, y);
          store_all(y, d);
        }
        break;
      }
      default:
        throw std::logic_error("evaluate_op: " + op_name(c.op) + " is judged by backward_trace");
    }
  });
  return trace;
}

// The op in Scalar B with nothing to scope (double, float, multiprecision).
template <class B>
Trace<B> evaluate_op(const OpCase& c, unsigned threads = 0) {
  return evaluate_op<B>(c, threads, [](std::size_t) { return 0; });
}

}  // namespace mhc::oracles
