// The op table against what the reference and the generator really produce: names, order and
// shapes of every op's inputs, params and outputs, and of the Block's stages.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "mhc/oracles/generate.hpp"
#include "mhc/oracles/ops.hpp"

using namespace mhc;
using oracles::Op;

namespace {

std::vector<std::size_t> with_tokens(std::vector<std::size_t> lead, std::vector<std::size_t> dims) {
  lead.insert(lead.end(), dims.begin(), dims.end());
  return lead;
}

ref::Config small() {
  ref::Config c;
  c.n = 3;
  c.d = 10;
  c.iters = 4;
  return c;
}

}  // namespace

TEST_CASE("op table: every op once, names round trip", "[op_table]") {
  std::vector<Op> ops = oracles::all_ops();
  for (Op op : oracles::block_ops()) ops.push_back(op);
  for (Op op : oracles::backward_ops()) ops.push_back(op);
  for (Op op : oracles::block_backward_ops()) ops.push_back(op);
  REQUIRE(oracles::op_table().size() == ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    CHECK(oracles::op_table()[i].op == ops[i]);
    CHECK(oracles::op_from_name(oracles::op_name(ops[i])) == ops[i]);
  }
  CHECK_THROWS_WITH(oracles::op_from_name("attention"), Catch::Contains("boundary, block, stack"));
}

TEST_CASE("op table: generated cases and the reference's outputs follow it", "[op_table]") {
  const ref::Config cfg = small();
  for (Op op : oracles::all_ops()) {
    CAPTURE(oracles::op_name(op));
    const auto& spec = oracles::op_spec(op);
    const auto c = oracles::generate_case(op, cfg, 3, 7, oracles::Precision::fp32());
    REQUIRE(c.inputs.size() == spec.inputs.size());
    for (const auto& t : spec.inputs)
      CHECK(c.input(t.name).shape == with_tokens({3}, oracles::resolve(t.dims, c.cfg)));
    REQUIRE(c.params.size() == spec.params.size());
    for (const auto& t : spec.params)
      CHECK(c.param(t.name).shape == oracles::resolve(t.dims, c.cfg));
    const auto trace = oracles::evaluate_op<double>(c, 1);
    REQUIRE(trace.size() == spec.outputs.size());
    for (std::size_t s = 0; s < trace.size(); ++s) {
      CHECK(trace[s].name == spec.outputs[s].name);
      CHECK(trace[s].shape == with_tokens({3}, oracles::resolve(spec.outputs[s].dims, c.cfg)));
    }
  }
}

TEST_CASE("op table: the Block's and a stack's stages are the reference's", "[op_table]") {
  ref::BlockConfig b;
  b.heads = 2;
  b.head_dim = 3;
  b.experts = 3;
  b.top_k = 2;
  b.inter = 5;
  b.layers = 2;
  for (Op op : oracles::block_ops()) {
    CAPTURE(oracles::op_name(op));
    const auto c =
        oracles::generate_block_case(op, small(), b, 2, 2, 3, oracles::Precision::fp32());
    const auto& spec = oracles::op_spec(op);
    for (const auto& t : spec.inputs)
      CHECK(c.input(t.name).shape == with_tokens({2, 2}, oracles::resolve(t.dims, c.cfg, c.block)));
    const std::size_t layers = op == Op::stack ? 2 : 1;
    CHECK(c.params.size() == layers * oracles::layer_params().size() + (op == Op::stack ? 1 : 0));
    std::vector<std::string> names;
    std::vector<std::vector<std::size_t>> shapes;
    for (std::size_t l = 0; l < layers; ++l)
      for (const auto& t : oracles::block_stages()) {
        names.push_back((op == Op::stack ? "L" + std::to_string(l) + "." : "") + t.name);
        shapes.push_back(with_tokens({4}, oracles::resolve(t.dims, c.cfg, c.block)));
      }
    if (op == Op::stack)
      for (const auto& t : oracles::final_stages()) {
        names.push_back(t.name);
        shapes.push_back(with_tokens({4}, oracles::resolve(t.dims, c.cfg, c.block)));
      }
    const auto trace = oracles::evaluate_op<double>(c, 1);
    REQUIRE(trace.size() == names.size());
    for (std::size_t s = 0; s < trace.size(); ++s) {
      CHECK(trace[s].name == names[s]);
      CHECK(trace[s].shape == shapes[s]);
    }
  }
}

// Declarations: a preset by name, parts that equal a preset take its name, other parts are
// written in full and read back; and the ways a declaration can be wrong, each named.
TEST_CASE("precision: presets, parts and their names", "[op_table]") {
  using F = bnd::Format;
  for (const auto& p : oracles::all_precisions())
    CHECK(oracles::precision_from_name(p.name).decl == p.decl);
  const std::vector<std::pair<std::string, std::string>> same = {
      {"streams=bf16", "bf16"},
      {"products=tf32", "tf32"},
      {"products=bf16", "bf16-projection"},
      {"accumulation=fp32,products=bf16,streams=fp32", "bf16-projection"},
      {"streams=fp16,products=fp16,inputs=fp16,weights=fp16", "fp16"},
      {"streams=fp32", "fp32"}};
  for (const auto& [parts, preset] : same) {
    CAPTURE(parts);
    CHECK(oracles::precision_from_name(parts).name == preset);
  }
  const auto p = oracles::precision_from_name("products=bf16,accumulation=bf16");
  CHECK(p.name == "products=bf16,accumulation=bf16");
  CHECK(p.decl.products == F::bf16);
  CHECK(p.decl.accumulation == F::bf16);
  CHECK(oracles::precision_from_name(p.name) == p);
  CHECK(oracles::precision_from_name("streams=fp16,products=fp16").name ==
        "streams=fp16,products=fp16");
  // Every part, in any order: named in the table's order, and read back to the same parts.
  const auto all = oracles::precision_from_name(
      "intermediates=bf16,accumulation=bf16,products=tf32,streams=bf16,coefficients=fp16,"
      "mixes=bf16,weights=fp16,inputs=bf16");
  CHECK(all.name ==
        "inputs=bf16,weights=fp16,mixes=bf16,coefficients=fp16,streams=bf16,products=tf32,"
        "accumulation=bf16,intermediates=bf16");
  CHECK(all.decl.intermediates == F::bf16);
  CHECK(all.decl.inputs == F::bf16);
  CHECK(all.decl.weights == F::fp16);
  CHECK(all.decl.mixes == F::bf16);
  CHECK(all.decl.coefficients == F::fp16);
  CHECK(oracles::precision_from_name(all.name) == all);
  const std::vector<std::pair<std::string, std::string>> wrong = {
      {"fp8", "not a preset"},
      {"streams=tf32", "'streams' (stream tensors written) is one of fp32, bf16, fp16"},
      {"mixes=tf32", "'mixes' (the mixes, stored before the split) is one of fp32, bf16, fp16"},
      {"accumulation=fp16", "'accumulation' (the projection's sums) is one of fp32, bf16"},
      {"products=bf16,products=fp32", "given twice"},
      {"products=bf16,", "not key=format"},
      {"colour=bf16",
       "unknown part 'colour' (inputs, weights, mixes, coefficients, streams, "
       "products, accumulation, intermediates) (a preset: fp32, tf32, bf16, bf16-projection, "
       "fp16; or parts such as streams=bf16,products=bf16: inputs, weights, mixes, "
       "coefficients, streams, products, accumulation, intermediates, each fp32 where left "
       "out)"},
      {"products=fp8", "'fp8' is not a format"},
      {"streams=bf16,intermediates=bf16", "intermediates=bf16 needs streams=bf16 and mixes=bf16"},
      {"mixes=fp16,streams=fp16,intermediates=bf16", "needs streams=bf16 and mixes=bf16"}};
  for (const auto& [text, why] : wrong) {
    CAPTURE(text);
    CHECK_THROWS_WITH(oracles::precision_from_name(text), Catch::Contains(why));
  }
}

// A backward op reads its forward's inputs and params and the upstream gradient of each forward
// output, and writes the gradient of each input per token and (but for a Block's or a stack's)
// of each param summed over tokens.
TEST_CASE("op table: each backward op is derived from its forward op", "[op_table]") {
  std::vector<Op> ops = oracles::backward_ops();
  for (Op op : oracles::block_backward_ops()) ops.push_back(op);
  for (Op op : ops) {
    const auto& b = oracles::op_spec(op);
    const bool whole = b.whole;
    const auto& f = oracles::op_spec(b.forward);
    CAPTURE(b.name);
    CHECK(b.backward);
    CHECK(!f.backward);
    CHECK(b.name == f.name + "_backward");
    REQUIRE(b.inputs.size() == f.inputs.size() + f.outputs.size());
    for (std::size_t i = 0; i < f.inputs.size(); ++i) CHECK(b.inputs[i].name == f.inputs[i].name);
    for (std::size_t o = 0; o < f.outputs.size(); ++o) {
      CHECK(b.inputs[f.inputs.size() + o].name == "upstream_" + f.outputs[o].name);
      CHECK(b.inputs[f.inputs.size() + o].dims == f.outputs[o].dims);
    }
    REQUIRE(b.params.size() == f.params.size());
    CHECK(whole == f.whole);
    REQUIRE(b.outputs.size() == f.inputs.size() + (whole ? 0 : f.params.size()));
    for (std::size_t i = 0; i < f.inputs.size(); ++i) {
      CHECK(b.outputs[i].name == "grad_" + f.inputs[i].name);
      CHECK(b.outputs[i].per_token);
    }
    for (std::size_t p = 0; p < (whole ? 0 : f.params.size()); ++p) {
      CHECK(b.outputs[f.inputs.size() + p].name == "grad_" + f.params[p].name);
      CHECK(!b.outputs[f.inputs.size() + p].per_token);
    }
  }
}

// The pieces' and the boundary's backward under a declaration: the forward's stream inputs and
// the upstream gradients of its stream outputs are stored as the streams (bf16 values), those of
// the mixes and the coefficients stay fp32; the Block's backward and narrower intermediate stages
// are refused, naming what is judged.
TEST_CASE("op table: a backward case stores its tensors as its declaration says", "[op_table]") {
  auto bf16_valued = [](const std::vector<float>& v) {
    for (float x : v)
      if (oracles::gen::round_bf16(x) != x) return false;
    return true;
  };
  for (Op op : oracles::backward_ops()) {
    const auto& b = oracles::op_spec(op);
    const auto& f = oracles::op_spec(b.forward);
    CAPTURE(b.name);
    ref::Config cfg;
    cfg.d = 24;
    const auto c = oracles::generate_case(op, cfg, 3, 5, oracles::Precision::bf16());
    for (const auto& t : f.inputs)
      if (t.stream()) CHECK(bf16_valued(c.input(t.name).data));
    for (const auto& o : f.outputs) {
      CAPTURE(o.name);
      const bool stream = o.name == "y" || o.name == "x";  // docs/semantics.md, "The mHC pieces"
      CHECK(bf16_valued(c.input("upstream_" + o.name).data) == stream);
    }
  }
  for (Op op : oracles::block_backward_ops())
    CHECK_THROWS_WITH(oracles::generate_case(op, {}, 2, 1, oracles::Precision::bf16()),
                      Catch::Contains("fp32 declaration only"));
  CHECK_THROWS_WITH(oracles::generate_case(Op::boundary_backward, {}, 2, 1,
                                           oracles::precision_from_name("products=tf32")),
                    Catch::Contains("inputs, weights and streams only"));
  CHECK_NOTHROW(oracles::generate_case(Op::boundary_backward, {}, 2, 1,
                                       oracles::precision_from_name("inputs=fp16,streams=fp16")));
}
