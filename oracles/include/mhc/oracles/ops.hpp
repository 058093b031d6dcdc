// The operations a kernel is judged on (the fixture table of SPEC section 6, plus the sublayer
// boundary), their Cases, and the oracle's Trace of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mhc/oracles/bounded.hpp"
#include "mhc/reference/config.hpp"

namespace mhc::oracles {

enum class Op { split_sinkhorn, mixes, pre, post, rmsnorm, boundary };
const std::vector<Op>& all_ops();
std::string op_name(Op op);
Op op_from_name(const std::string& name);  // throws std::invalid_argument naming the choices

struct Tensor {
  std::vector<std::size_t> shape;
  std::vector<float> data;
};

// A Case: configuration, named inputs and params (SPEC section 6 names), the precision model
// the kernel declares.
struct OpCase {
  Op op = Op::boundary;
  ref::Config cfg;
  std::size_t tokens = 1;
  std::uint64_t seed = 0;
  std::string precision = "fp32";
  std::map<std::string, Tensor> inputs, params;
  const Tensor& input(const std::string& name) const;
  const Tensor& param(const std::string& name) const;
};

// The outputs of an op, in the order they are computed (the stages of its Trace).
const std::vector<std::string>& output_names(Op op);

// A generated Case, deterministic in its arguments. With precision "bf16" the stream tensors
// (x, residual, f) hold bf16 values (stored exactly in fp32).
OpCase generate_case(Op op, const ref::Config& cfg, std::size_t tokens, std::uint64_t seed,
                     const std::string& precision);

template <class S>
struct Stage {
  std::string name;
  std::vector<std::size_t> shape;  // [T, ...]
  std::vector<S> values;
};
template <class S>
using Trace = std::vector<Stage<S>>;

// The oracle: the reference in the bound-carrying Scalar under the case's precision model.
Trace<bnd::Bounded> oracle_trace(const OpCase& c, unsigned threads = 0);

}  // namespace mhc::oracles
