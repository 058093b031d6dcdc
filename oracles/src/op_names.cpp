// The ops' names and outputs, and a Case's named tensors: what readers of fixtures need, kept
// apart from the oracle (the fixture reader's fuzz target links this file alone).
#include <stdexcept>

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

std::string op_name(Op op) {
  switch (op) {
    case Op::block: return "block";
    case Op::stack: return "stack";
    case Op::split_sinkhorn: return "split_sinkhorn";
    case Op::mixes: return "mixes";
    case Op::pre: return "pre";
    case Op::post: return "post";
    case Op::rmsnorm: return "rmsnorm";
    case Op::boundary: return "boundary";
  }
  return "?";
}

Op op_from_name(const std::string& name) {
  for (Op op : all_ops())
    if (op_name(op) == name) return op;
  for (Op op : block_ops())
    if (op_name(op) == name) return op;
  throw std::invalid_argument("unknown op '" + name +
                              "' (split_sinkhorn, mixes, pre, post, rmsnorm, boundary, block, stack)");
}

const std::vector<Precision>& all_precisions() {
  static const std::vector<Precision> p{Precision::fp32, Precision::tf32, Precision::bf16};
  return p;
}

std::string precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
  }
  return "?";
}

Precision precision_from_name(const std::string& name) {
  for (Precision p : all_precisions())
    if (precision_name(p) == name) return p;
  throw std::invalid_argument("unknown precision '" + name + "' (fp32, tf32, bf16)");
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
  static const std::vector<std::string> split{"pre", "post", "comb"};
  static const std::vector<std::string> mixes{"mixes", "pre", "post", "comb"};
  static const std::vector<std::string> y{"y"};
  static const std::vector<std::string> boundary{"x", "mixes", "pre", "post", "comb", "y"};
  static const std::vector<std::string> none;
  switch (op) {
    case Op::split_sinkhorn: return split;
    case Op::mixes: return mixes;
    case Op::boundary: return boundary;
    case Op::block:
    case Op::stack: return none;  // named by the Trace itself (ref::block_forward)
    default: return y;
  }
}

}  // namespace mhc::oracles
