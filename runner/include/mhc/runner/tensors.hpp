// Cases from named tensors held in memory (the Python API's arrays): the layout and checks of a
// fixture file (oracles::case_layout), with errors that name the tensor.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "mhc/oracles/ops.hpp"

namespace mhc::runner {

struct Named {
  std::vector<std::size_t> shape;
  std::vector<float> data;
  bnd::Format format = bnd::Format::fp32;  // an output stored as bf16 or fp16: its rounding is
                                           // part of its bound
};
using NamedTensors = std::map<std::string, Named>;

struct TensorCase {
  oracles::OpCase c;
  oracles::Trace<float> outputs;         // as stages, in the op's order
  bnd::StoredFormats stored;             // stages stored as bf16 or fp16
  std::vector<std::string> zero_params;  // params no judged output reads, given as zeros
};

// header: op, config, block shape and precision (tensors empty). Inputs and params must be finite;
// outputs are the op's (any non-empty subset) or, for block and stack, any Trace stage by name.
// Throws std::invalid_argument naming the tensor and what was expected.
TensorCase from_tensors(const oracles::OpCase& header, NamedTensors inputs, NamedTensors params,
                        NamedTensors outputs);

}  // namespace mhc::runner
