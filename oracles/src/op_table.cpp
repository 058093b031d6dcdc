// The ops' names and outputs, and a Case's named tensors: what readers of fixtures need, kept
// apart from the oracle (the fixture reader's fuzz target links this file alone).
#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "mhc/oracles/generate.hpp"
#include "mhc/oracles/ops.hpp"

namespace mhc::oracles {

const std::vector<Op>& all_ops() {
  static const std::vector<Op> ops{Op::split_sinkhorn, Op::mixes,   Op::pre,
                                   Op::post,           Op::rmsnorm, Op::boundary};
  return ops;
}

const std::vector<Op>& block_ops() {
  static const std::vector<Op> ops{Op::block, Op::stack};
  return ops;
}

const std::vector<Op>& backward_ops() {
  static const std::vector<Op> ops{
      Op::split_sinkhorn_backward, Op::mixes_backward,   Op::pre_backward,
      Op::post_backward,           Op::rmsnorm_backward, Op::boundary_backward};
  return ops;
}

const std::vector<Op>& block_backward_ops() {
  static const std::vector<Op> ops{Op::block_backward, Op::stack_backward};
  return ops;
}

bool TensorSpec::stream() const {
  return draw == Draw::activations || draw == Draw::activations_if_eps ||
         draw == Draw::activations_nonzero;
}

namespace {

using D = Dim;
const TensorSpec kX{"x", {D::n, D::d}, Draw::activations};
const TensorSpec kF{"f", {D::d}, Draw::activations};
const TensorSpec kResidual{"residual", {D::n, D::d}, Draw::activations};
const TensorSpec kPreMix{"pre_mix", {D::n}, Draw::pre_weights};
const TensorSpec kPostIn{"post", {D::n}, Draw::post_weights};
const TensorSpec kCombIn{"comb", {D::n, D::n}, Draw::combs};
const TensorSpec kHcFn{"hc_fn", {D::M, D::nd}, Draw::hc_fn};
const TensorSpec kHcScale{"hc_scale", {D::three}, Draw::hc_scale};
const TensorSpec kHcBase{"hc_base", {D::M}, Draw::hc_base};
const TensorSpec kMixes{"mixes", {D::M}, Draw::mixes};
const TensorSpec kPre{"pre", {D::n}}, kPost{"post", {D::n}}, kComb{"comb", {D::n, D::n}};

TensorSpec with(TensorSpec t, Draw draw) {
  t.draw = draw;
  return t;
}

TensorSpec reading(TensorSpec t, std::vector<std::string> params) {
  t.reads = std::move(params);
  return t;
}

// The backward of a forward op's entry (OpSpec::backward).
OpSpec backward_of(const OpSpec& f, Op op) {
  OpSpec b = f;
  b.op = op;
  b.name = f.name + "_backward";
  b.backward = true;
  b.forward = f.op;
  for (const auto& o : f.outputs)
    b.inputs.push_back({"upstream_" + o.name, o.dims, Draw::upstream});
  b.outputs.clear();
  for (const auto& i : f.inputs) b.outputs.push_back({"grad_" + i.name, i.dims});
  if (f.whole) return b;
  for (const auto& p : f.params) {
    TensorSpec g{"grad_" + p.name, p.dims};
    g.per_token = false;
    b.outputs.push_back(g);
  }
  return b;
}

}  // namespace

const std::vector<OpSpec>& op_table() {
  static const std::vector<OpSpec> table = [] {
    std::vector<OpSpec> t{
        {Op::split_sinkhorn,
         "split_sinkhorn",
         {kMixes},
         {kHcScale, kHcBase},
         {kPre, kPost, kComb},
         false,
         true,
         true,
         false},
        {Op::mixes,
         "mixes",
         {with(kX, Draw::activations_if_eps)},
         {kHcFn, kHcScale, kHcBase},
         {reading({"mixes", {D::M}}, {"hc_fn"}), kPre, kPost, kComb},
         false,
         true,
         true,
         true},
        {Op::pre, "pre", {kX, kPreMix}, {}, {{"y", {D::d}}}, false, false, false, false},
        {Op::post,
         "post",
         {kF, kResidual, kPostIn, kCombIn},
         {},
         {{"y", {D::n, D::d}}},
         false,
         false,
         false,
         false},
        {Op::rmsnorm,
         "rmsnorm",
         {{"x", {D::d}, Draw::activations_if_eps}},
         {{"weight", {D::d}, Draw::norm_weight}},
         {{"y", {D::d}}},
         false,
         false,
         false,
         true},
        {Op::boundary,
         "boundary",
         {with(kF, Draw::activations_nonzero), with(kResidual, Draw::activations_nonzero), kPostIn,
          kCombIn, kPreMix},
         {kHcFn, kHcScale, kHcBase},
         {reading({"x", {D::n, D::d}}, {}),
          reading({"mixes", {D::M}}, {"hc_fn"}),
          kPre,
          kPost,
          kComb,
          {"y", {D::d}}},
         false,
         true,
         true,
         true},
        {Op::block,
         "block",
         {with(kX, Draw::activations_if_eps), kPreMix},
         layer_params(),
         {{"x", {D::n, D::d}}, {"next_pre_mix", {D::n}}},
         true,
         true,
         true,
         true},
        {Op::stack,
         "stack",
         {with(kX, Draw::activations_if_eps)},
         layer_params(),
         {{"x", {D::n, D::d}}, {"next_pre_mix", {D::n}}},
         true,
         true,
         true,
         true},
    };
    for (auto& s : t) s.forward = s.op;
    for (const auto& [op, forward] : {std::pair{Op::split_sinkhorn_backward, Op::split_sinkhorn},
                                      {Op::mixes_backward, Op::mixes},
                                      {Op::pre_backward, Op::pre},
                                      {Op::post_backward, Op::post},
                                      {Op::rmsnorm_backward, Op::rmsnorm},
                                      {Op::boundary_backward, Op::boundary},
                                      {Op::block_backward, Op::block},
                                      {Op::stack_backward, Op::stack}})
      for (std::size_t k = 0; k < 8; ++k)
        if (t[k].op == forward) t.push_back(backward_of(t[k], op));
    return t;
  }();
  return table;
}

const OpSpec& op_spec(Op op) {
  for (const auto& s : op_table())
    if (s.op == op) return s;
  throw std::logic_error("op missing from the op table");
}

std::string op_name(Op op) {
  return op_spec(op).name;
}

Op op_from_name(const std::string& name) {
  std::string names;
  for (const auto& s : op_table()) {
    if (s.name == name) return s.op;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  throw std::invalid_argument("unknown op '" + name + "' (" + names + ")");
}

namespace {

std::size_t extent(Dim x, const ref::Config& c, const ref::BlockConfig& b) {
  const auto z = [](int v) { return std::size_t(v); };
  switch (x) {
    case Dim::n:
      return z(c.n);
    case Dim::d:
      return z(c.d);
    case Dim::nd:
      return c.stream_size();
    case Dim::M:
      return z(c.mix());
    case Dim::three:
      return 3;
    case Dim::heads_x_head_dim:
      return z(b.heads) * z(b.head_dim);
    case Dim::experts:
      return z(b.experts);
    case Dim::inter:
      return z(b.inter);
    case Dim::top_k:
      return z(b.top_k);
  }
  throw std::logic_error("op table: unknown dimension");
}

}  // namespace

std::vector<std::size_t> resolve(const std::vector<Dim>& dims, const ref::Config& c,
                                 const ref::BlockConfig& b) {
  std::vector<std::size_t> out;
  for (Dim x : dims) out.push_back(extent(x, c, b));
  return out;
}

namespace {

// A layer's params that a Block reads: with captured sublayers only the mHC boundaries' and the
// norms'.
std::vector<TensorSpec> layer_params_read(const ref::BlockConfig& b) {
  std::vector<TensorSpec> params = layer_params();
  if (b.captured_sublayers)
    params.erase(std::remove_if(params.begin(), params.end(),
                                [](const TensorSpec& p) {
                                  return p.name.find("/hc_") == std::string::npos &&
                                         p.name.find("_norm/") == std::string::npos;
                                }),
                 params.end());
  return params;
}

}  // namespace

Elements case_elements(Op op, const ref::Config& c, const ref::BlockConfig& b, double tokens) {
  auto count = [&](const std::vector<TensorSpec>& ts, double times) {
    double sum = 0;
    for (const auto& t : ts) {
      double e = t.per_token ? times : 1.0;
      for (Dim x : t.dims) e *= double(extent(x, c, b));
      sum += e;
    }
    return sum;
  };
  const OpSpec& spec = op_spec(op);
  const bool stack = spec.forward == Op::stack;
  const double layers = stack ? b.layers : 1;
  Elements e;
  e.inputs = count(spec.inputs, tokens);
  if (spec.whole) {
    e.params = count(layer_params_read(b), layers) + (stack ? double(c.d) : 0.0);
    e.stages =
        count(block_stages(), tokens * layers) + (stack ? count(final_stages(), tokens) : 0.0);
    if (spec.backward)  // and the forward's stages
      e.stages += count(block_backward_stages(), tokens * layers) + count(spec.outputs, tokens);
  } else {
    e.params = count(spec.params, 1);
    e.stages = count(spec.outputs, tokens);
  }
  return e;
}

CaseLayout case_layout(const OpCase& c) {
  const OpSpec& t = op_spec(c.op);
  auto specs = [&](const std::vector<TensorSpec>& ts, const std::string& prefix) {
    std::vector<NamedShape> v;
    for (const auto& x : ts)
      v.push_back({prefix + x.name, resolve(x.dims, c.cfg, c.block), x.per_token});
    return v;
  };
  CaseLayout s;
  s.inputs = specs(t.inputs, "");
  s.outputs = specs(t.outputs, "");
  if (!t.whole) {
    s.params = specs(t.params, "");
    return s;
  }
  s.leading = 2;
  const std::vector<TensorSpec> params = layer_params_read(c.block);
  if (t.forward == Op::block) {
    s.params = specs(params, "");
  } else {
    for (int l = 0; l < c.block.layers; ++l) {
      const auto layer = specs(params, "layers/" + std::to_string(l) + "/");
      s.params.insert(s.params.end(), layer.begin(), layer.end());
    }
    s.params.push_back({"final_norm/weight", {std::size_t(c.cfg.d)}});
  }
  return s;
}

std::vector<std::string> given_stages(const OpCase& c) {
  std::vector<std::string> v;
  if (!op_spec(c.op).whole || !c.block.captured_sublayers) return v;
  for (int l = 0; l < c.block.layers; ++l) {
    const std::string p = c.op == Op::stack ? "L" + std::to_string(l) + "." : "";
    v.push_back(p + "attn.out");
    v.push_back(p + "ffn.out");
  }
  return v;
}

bool rounded_on_handover(const OpCase& c, const bnd::StoredFormats& stored,
                         const std::string& stage) {
  return std::any_of(stored.begin(), stored.end(), [&](const auto& f) {
    return f.first == stage && f.second != declared_output_storage(c, stage);
  });
}

bool judges_something(const OpCase& c, const Trace<float>& outputs) {
  const std::vector<std::string> given = given_stages(c);
  return std::any_of(outputs.begin(), outputs.end(), [&](const Stage<float>& s) {
    return std::find(given.begin(), given.end(), s.name) == given.end();
  });
}

std::vector<std::size_t> stage_trailing(const OpCase& c, const std::string& stage) {
  auto find = [&](const std::vector<TensorSpec>& ts, const std::string& name) {
    for (const auto& t : ts)
      if (t.name == name) return resolve(t.dims, c.cfg, c.block);
    return std::vector<std::size_t>{};
  };
  std::string s = stage;
  const OpSpec& spec = op_spec(c.op);
  if (!spec.whole) return {};
  if (spec.forward == Op::stack) {
    if (s.rfind("final.", 0) == 0) return find(final_stages(), s);
    const std::size_t dot = s.find('.');
    if (s.size() < 3 || s[0] != 'L' || dot == std::string::npos) return {};
    const std::string num = s.substr(1, dot - 1);
    if (num.empty() || num.size() > 6 || num.find_first_not_of("0123456789") != std::string::npos ||
        (num.size() > 1 && num[0] == '0') ||
        std::stoi(num) >= c.block.layers)  // as written: L0, L12
      return {};
    s = s.substr(dot + 1);
  }
  const auto forward = find(block_stages(), s);
  return forward.empty() && spec.backward ? find(block_backward_stages(), s) : forward;
}

std::string stage_of_output(const OpCase& c, const std::string& name) {
  if (c.op == Op::block) return name == "x" ? "x_out" : name;
  if (c.op == Op::stack)
    return "L" + std::to_string(c.block.layers - 1) + "." + (name == "x" ? "x_out" : name);
  return name;
}

bool index_stage(const std::string& stage) {
  const std::string s = "ffn.experts";
  return stage.size() >= s.size() && stage.compare(stage.size() - s.size(), s.size(), s) == 0 &&
         (stage.size() == s.size() || stage[stage.size() - s.size() - 1] == '.');
}

const std::vector<TensorSpec>& block_stages() {
  static const std::vector<TensorSpec> s{
      {"attn.mixes", {D::M}},      {"attn.pre", {D::n}},    {"attn.post", {D::n}},
      {"attn.comb", {D::n, D::n}}, {"attn.in", {D::d}},     {"attn.normed", {D::d}},
      {"attn.out", {D::d}},        {"x_mid", {D::n, D::d}}, {"ffn.mixes", {D::M}},
      {"ffn.pre", {D::n}},         {"ffn.post", {D::n}},    {"ffn.comb", {D::n, D::n}},
      {"ffn.in", {D::d}},          {"ffn.normed", {D::d}},  {"ffn.experts", {D::top_k}},
      {"ffn.out", {D::d}},         {"x_out", {D::n, D::d}}, {"next_pre_mix", {D::n}}};
  return s;
}

const std::vector<TensorSpec>& final_stages() {
  static const std::vector<TensorSpec> s{{"final.collapse", {D::d}}, {"final.norm", {D::d}}};
  return s;
}

const std::vector<TensorSpec>& block_backward_stages() {
  static const std::vector<TensorSpec> s{
      {"ffn.grad_out", {D::d}},     {"ffn.grad_normed", {D::d}},  {"ffn.grad_in", {D::d}},
      {"ffn.grad_mixes", {D::M}},   {"grad_x_mid", {D::n, D::d}}, {"attn.grad_out", {D::d}},
      {"attn.grad_normed", {D::d}}, {"attn.grad_in", {D::d}},     {"attn.grad_mixes", {D::M}},
      {"grad_x", {D::n, D::d}},     {"grad_pre_mix", {D::n}}};
  return s;
}

const std::vector<TensorSpec>& layer_params() {
  using W = Draw;
  static const std::vector<TensorSpec> p{
      {"attn/hc_fn", {D::M, D::nd}, W::hc_fn},
      {"attn/hc_base", {D::M}, W::hc_base},
      {"attn/hc_scale", {D::three}, W::hc_scale},
      {"ffn/hc_fn", {D::M, D::nd}, W::hc_fn},
      {"ffn/hc_base", {D::M}, W::hc_base},
      {"ffn/hc_scale", {D::three}, W::hc_scale},
      {"attn_norm/weight", {D::d}, W::norm_weight},
      {"ffn_norm/weight", {D::d}, W::norm_weight},
      {"attn/wq", {D::heads_x_head_dim, D::d}, W::fan_in_gaussian},
      {"attn/wk", {D::heads_x_head_dim, D::d}, W::fan_in_gaussian},
      {"attn/wv", {D::heads_x_head_dim, D::d}, W::fan_in_gaussian},
      {"attn/wo", {D::d, D::heads_x_head_dim}, W::fan_in_gaussian},
      {"ffn/router", {D::experts, D::d}, W::fan_in_gaussian},
      {"ffn/router_bias", {D::experts}, W::bias},
      {"ffn/w1", {D::experts, D::inter, D::d}, W::fan_in_gaussian},
      {"ffn/w2", {D::experts, D::d, D::inter}, W::fan_in_gaussian},
      {"ffn/w3", {D::experts, D::inter, D::d}, W::fan_in_gaussian},
      {"ffn/shared_w1", {D::inter, D::d}, W::fan_in_gaussian},
      {"ffn/shared_w2", {D::d, D::inter}, W::fan_in_gaussian},
      {"ffn/shared_w3", {D::inter, D::d}, W::fan_in_gaussian}};
  return p;
}

const std::vector<Precision>& all_precisions() {
  static const std::vector<Precision> p = [] {
    std::vector<Precision> v;
    for (const auto& [name, d] : bnd::presets()) v.push_back(Precision{name, d});
    return v;
  }();
  return p;
}

Precision Precision::tf32() {
  return precision_from_name("tf32");
}
Precision Precision::bf16() {
  return precision_from_name("bf16");
}

std::string precision_name(const Precision& p) {
  return p.name;
}

// A preset's name, or parts "key=format" joined by commas (bnd::declaration_parts()).
Precision precision_from_name(const std::string& name) {
  std::string presets;
  for (const Precision& p : all_precisions()) {
    if (p.name == name) return p;
    presets += (presets.empty() ? "" : ", ") + p.name;
  }
  std::string keys;
  for (const bnd::Part& p : bnd::declaration_parts()) keys += std::string(", ") + p.key;
  auto bad = [&](const std::string& why) {
    return std::invalid_argument(
        "unknown precision '" + name + "': " + why + " (a preset: " + presets +
        "; or parts such as streams=bf16,products=bf16: " + keys.substr(2) +
        ", each fp32 where left out)");
  };
  if (name.find('=') == std::string::npos) throw bad("not a preset");
  bnd::Declaration d;
  std::set<std::string> seen;
  for (std::size_t at = 0; at <= name.size();) {
    const std::size_t end = std::min(name.find(',', at), name.size());
    const std::string part = name.substr(at, end - at);
    at = end + 1;
    const std::size_t eq = part.find('=');
    if (eq == std::string::npos) throw bad("part '" + part + "' is not key=format");
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    if (!seen.insert(key).second) throw bad("'" + key + "' given twice");
    const bnd::Part* part_of = nullptr;
    for (const bnd::Part& p : bnd::declaration_parts())
      if (key == p.key) part_of = &p;
    if (!part_of) throw bad("unknown part '" + key + "' (" + keys.substr(2) + ")");
    bnd::Format f;
    try {
      f = bnd::format_from_name(value);
    } catch (const std::invalid_argument&) {
      throw bad("'" + value + "' is not a format (fp32, tf32, bf16, fp16)");
    }
    const auto& ok = part_of->allowed;
    if (std::find(ok.begin(), ok.end(), f) == ok.end()) {
      std::string formats;
      for (bnd::Format g : ok)
        formats += std::string(formats.empty() ? "" : ", ") + bnd::format_info(g).name;
      throw bad("'" + key + "' (" + part_of->what + ") is one of " + formats);
    }
    d.*(part_of->member) = f;
  }
  // An eager framework's last operation stores each output in its operations' format: fp32
  // streams or mixes beside narrower intermediates would claim the looser bound for fp32 values.
  if (d.intermediates != bnd::Format::fp32 &&
      (d.streams != d.intermediates || d.mixes != d.intermediates)) {
    const std::string f = bnd::format_info(d.intermediates).name;
    throw bad("intermediates=" + f + " needs streams=" + f + " and mixes=" + f +
              ": the outputs an eager framework forms in " + f + " are stored in " + f);
  }
  for (const Precision& p : all_precisions())
    if (p.decl == d) return p;
  // The parts that are not fp32, in the table's order.
  std::string canonical;
  for (const bnd::Part& p : bnd::declaration_parts())
    if (d.*(p.member) != bnd::Format::fp32)
      canonical += std::string(canonical.empty() ? "" : ",") + p.key + "=" +
                   bnd::format_info(d.*(p.member)).name;
  return Precision{canonical, d};
}

bnd::Format declared_storage(const bnd::Declaration& d, const std::string& input) {
  // An upstream gradient is stored as the output it is the gradient of.
  const std::string up = "upstream_";
  if (input.compare(0, up.size(), up) == 0) {
    const std::string of = input.substr(up.size());
    if (of == "mixes") return d.mixes;
    if (of == "pre" || of == "post" || of == "comb" || of == "next_pre_mix") return d.coefficients;
    return d.streams;  // y, x, x_out: stream outputs
  }
  if (input == "mixes") return d.mixes;
  if (input == "pre_mix" || input == "post" || input == "comb") return d.coefficients;
  return d.inputs;  // the stream tensors: x, residual, f, a captured sublayer's output
}

bnd::Format declared_output_storage(const OpCase& c, const std::string& stage) {
  const bnd::Declaration& d = c.precision.decl;
  const OpSpec& spec = op_spec(c.op);
  if (spec.backward) {  // the gradients of stream inputs are stored as the streams
    for (const auto& t : op_spec(spec.forward).inputs)
      if (stage == "grad_" + t.name) return t.stream() ? d.streams : bnd::Format::fp32;
    return bnd::Format::fp32;
  }
  if (index_stage(stage)) return bnd::Format::fp32;
  return declared_storage(d, "upstream_" + stage.substr(stage.rfind('.') + 1));  // L0.attn.pre
}

void need_backward_declaration(Op op, const Precision& p) {
  const OpSpec& spec = op_spec(op);
  if (!spec.backward || p == Precision::fp32()) return;
  const bnd::Declaration& d = p.decl;
  using F = bnd::Format;
  if (spec.whole || d.mixes != F::fp32 || d.coefficients != F::fp32 || d.products != F::fp32 ||
      d.accumulation != F::fp32 || d.intermediates != F::fp32)
    throw std::invalid_argument(
        spec.name +
        (spec.whole ? " is judged under the fp32 declaration only ("
                    : " is judged under declarations of inputs, weights and streams "
                      "only, the rest fp32 (") +
        precision_name(p) + " given)");
}

void store_declared(OpCase& c) {
  const bnd::Declaration& d = c.precision.decl;
  auto round = [](bnd::Format f, std::vector<float>& v) {
    for (float& x : v) x = gen::round_to(f, x);
  };
  for (auto& [name, t] : c.inputs) round(declared_storage(d, name), t.data);
  for (auto& [name, t] : c.params) round(d.weights, t.data);
}

const Tensor& OpCase::input(const std::string& name) const {
  auto it = inputs.find(name);
  if (it == inputs.end()) throw std::invalid_argument("case has no input '" + name + "'");
  return it->second;
}
const Tensor& OpCase::param(const std::string& name) const {
  auto it = params.find(name);
  if (it == params.end()) throw std::invalid_argument("case has no param '" + name + "'");
  return it->second;
}

const std::vector<std::string>& output_names(Op op) {
  // block and stack: named by the Trace itself (block_stages(), final_stages())
  static const std::map<Op, std::vector<std::string>> names = [] {
    std::map<Op, std::vector<std::string>> m;
    for (const auto& s : op_table()) {
      auto& v = m[s.op];
      if (!s.whole || s.backward)
        for (const auto& t : s.outputs) v.push_back(t.name);
    }
    return m;
  }();
  return names.at(op);
}

}  // namespace mhc::oracles
