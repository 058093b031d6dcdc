// The number formats and the named declarations: data alone, so that the fixture reader's fuzz
// target links them without the oracle.
#include <stdexcept>

#include "mhc/oracles/bounded.hpp"

namespace mhc::bnd {

const FormatInfo& format_info(Format f) {
  static const FormatInfo info[] = {
      {"fp32", 0x1.0p-24, 0x1.fffffep127, 0x1.0p-126},
      {"tf32", 0x1.0p-11, 0x1.ffep127, 0x1.0p-126},  // 10 explicit mantissa bits, fp32's range
      {"bf16", 0x1.0p-8, 0x1.fep127, 0x1.0p-126},    // 7 explicit mantissa bits, fp32's range
      {"fp16", 0x1.0p-11, 65504, 0x1.0p-14},         // 10 explicit mantissa bits, 5 exponent bits
  };
  return info[int(f)];
}

Format format_from_name(const std::string& name) {
  for (Format f : {Format::fp32, Format::tf32, Format::bf16, Format::fp16})
    if (name == format_info(f).name) return f;
  throw std::invalid_argument("unknown number format '" + name + "' (fp32, tf32, bf16, fp16)");
}

const std::vector<std::pair<std::string, Declaration>>& presets() {
  static const std::vector<std::pair<std::string, Declaration>> all = {
      {"fp32", {}},
      {"tf32", {Format::fp32, Format::tf32, Format::fp32}},
      {"bf16", {Format::bf16, Format::fp32, Format::fp32}},
      {"bf16-projection", {Format::fp32, Format::bf16, Format::fp32}},
      {"fp16", {Format::fp16, Format::fp16, Format::fp32}},
  };
  return all;
}

}  // namespace mhc::bnd
