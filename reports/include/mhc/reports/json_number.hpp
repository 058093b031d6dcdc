// Numbers in mhc JSON files (reports, gate baselines): JSON has no Inf or NaN, so they are the
// strings "inf", "-inf" and "nan".
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace mhc::reports {

template <class Json = nlohmann::ordered_json>
Json json_number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

template <class Json>
double number_from_json(const Json& j) {
  if (j.is_number()) return j.template get<double>();
  const std::string s = j.template get<std::string>();
  if (s == "inf") return HUGE_VAL;
  if (s == "-inf") return -HUGE_VAL;
  return std::nan("");
}

}  // namespace mhc::reports
