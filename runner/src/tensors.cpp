#include "mhc/runner/tensors.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace mhc::runner {

namespace {

std::string shape_text(const std::vector<std::size_t>& s, const std::string& lead = "") {
  std::string r = "(" + lead;
  for (std::size_t i = 0; i < s.size(); ++i)
    r += (i || !lead.empty() ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 && lead.empty() ? ",)" : ")");
}

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw std::invalid_argument(where + ": " + what);
}

// Checks a tensor's shape against its trailing dimensions after `leading` token dimensions
// (-1: any number); returns the product of the leading ones.
std::size_t tokens_of(const std::string& where, const Named& t,
                      const std::vector<std::size_t>& trailing, int leading) {
  const std::string lead = leading == 2 ? "B, T" : leading == 0 ? "" : "...";
  const std::string want = shape_text(trailing, lead);
  const std::size_t rank = t.shape.size();
  const bool rank_ok =
      leading < 0 ? rank >= trailing.size() : rank == trailing.size() + std::size_t(leading);
  if (!rank_ok || !std::equal(trailing.begin(), trailing.end(),
                              t.shape.end() - std::ptrdiff_t(std::min(rank, trailing.size()))))
    bad(where, "shape " + shape_text(t.shape) + ", expected " + want);
  std::size_t tokens = 1;
  for (std::size_t i = 0; i + trailing.size() < rank; ++i) tokens *= t.shape[i];
  std::size_t count = tokens;
  for (auto x : trailing) count *= x;
  if (count != t.data.size())
    bad(where, "shape " + shape_text(t.shape) + " holds " + std::to_string(count) +
                   " elements, the data " + std::to_string(t.data.size()));
  return tokens;
}

}  // namespace

TensorCase from_tensors(const oracles::OpCase& header, NamedTensors inputs, NamedTensors params,
                        NamedTensors outputs) {
  TensorCase r;
  oracles::OpCase& c = r.c;
  c = header;
  c.inputs.clear();
  c.params.clear();
  const oracles::CaseLayout layout = oracles::case_layout(c);
  const std::string op = oracles::op_name(c.op);
  auto names = [](const std::vector<oracles::NamedShape>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x.name;
    return s;
  };
  auto unknown = [&](const NamedTensors& given, const std::vector<oracles::NamedShape>& known,
                     const char* kind) {
    for (const auto& entry : given) {
      const std::string& name = entry.first;
      const bool ok = std::any_of(known.begin(), known.end(),
                                  [&](const oracles::NamedShape& k) { return k.name == name; });
      if (!ok)
        bad(std::string(kind) + "['" + name + "']",
            "op " + op + " has no such " + kind +
                (known.empty() ? " (it takes none)" : " (expected: " + names(known) + ")"));
    }
  };
  unknown(inputs, layout.inputs, "inputs");
  unknown(params, layout.params, "params");

  std::size_t tokens = 0, batch = 1;
  std::string first;
  auto agree = [&](const std::string& where, const Named& t, std::size_t n) {
    if (first.empty()) {
      tokens = n;
      first = where;
      if (layout.leading == 2) batch = t.shape[0];
    } else if (n != tokens) {
      bad(where, std::to_string(n) + " tokens, but " + first + " has " + std::to_string(tokens));
    } else if (layout.leading == 2 && t.shape[0] != batch) {
      bad(where, std::to_string(t.shape[0]) + " sequences, but " + first + " has " +
                     std::to_string(batch));
    }
  };
  for (const auto& spec : layout.inputs) {
    const std::string where = "inputs['" + spec.name + "']";
    auto it = inputs.find(spec.name);
    if (it == inputs.end())
      bad(where, "missing (op " + op + " reads " + names(layout.inputs) + ")");
    agree(where, it->second, tokens_of(where, it->second, spec.trailing, layout.leading));
    c.inputs[spec.name] = {std::move(it->second.shape), std::move(it->second.data)};
  }
  if (tokens == 0) bad(first, "no tokens (an empty leading dimension)");
  c.tokens = tokens;
  c.batch = batch;

  // Outputs first: which params the judged ones read.
  const auto& table = oracles::op_spec(c.op);
  std::set<std::string> needed;
  if (outputs.empty())
    bad("outputs", "none given (expected some of: " + names(layout.outputs) + ")");
  for (auto& entry : outputs) {
    const std::string& name = entry.first;
    Named& t = entry.second;
    const std::string where = "outputs['" + name + "']";
    std::vector<std::size_t> trailing;
    std::string stage = name;
    const auto spec = std::find_if(layout.outputs.begin(), layout.outputs.end(),
                                   [&](const oracles::NamedShape& s) { return s.name == name; });
    if (spec != layout.outputs.end() && !spec->per_token) {  // a parameter's gradient: [...]
      tokens_of(where, t, spec->trailing, 0);
      if (t.format != bnd::Format::fp32) r.stored.emplace_back(name, t.format);
      r.outputs.push_back({name, spec->trailing, std::move(t.data)});
      needed.insert("*");
      continue;
    }
    if (spec != layout.outputs.end()) {
      trailing = spec->trailing;
      stage = oracles::stage_of_output(c, name);
      for (const auto& o : table.outputs)
        if (o.name == name) needed.insert(o.reads.begin(), o.reads.end());
    } else if (table.whole) {
      trailing = oracles::stage_trailing(c, name);
      needed.insert("*");
    }
    if (trailing.empty()) {
      std::string known = names(layout.outputs);
      if (table.whole) known += ", or a stage of the Block's Trace (docs/semantics.md)";
      bad(where, "op " + op + " has no such output (expected: " + known + ")");
    }
    agree(where, t, tokens_of(where, t, trailing, layout.leading));
    std::vector<std::size_t> shape{tokens};
    shape.insert(shape.end(), trailing.begin(), trailing.end());
    if (t.format != bnd::Format::fp32) r.stored.emplace_back(stage, t.format);
    r.outputs.push_back({stage, shape, std::move(t.data)});
  }
  for (const auto& name : oracles::given_stages(c))
    if (std::none_of(r.outputs.begin(), r.outputs.end(),
                     [&](const auto& o) { return o.name == name; }))
      bad("outputs['" + name + "']",
          "missing: with sublayers = 'captured', each sublayer's output is given");
  if (!oracles::judges_something(c, r.outputs))
    bad("outputs",
        "only the sublayers' outputs, which are given and taken as they are: nothing "
        "to judge (expected some of: " +
            names(layout.outputs) + ")");
  // In the order the op computes them, as a kernel's Trace is.
  const oracles::Trace<float> order = [&] {
    oracles::Trace<float> o;
    for (const auto& s : layout.outputs) o.push_back({oracles::stage_of_output(c, s.name), {}, {}});
    return o;
  }();
  std::stable_sort(r.outputs.begin(), r.outputs.end(), [&](const auto& a, const auto& b) {
    auto rank = [&](const std::string& n) {
      for (std::size_t i = 0; i < order.size(); ++i)
        if (order[i].name == n) return i;
      return order.size();
    };
    return rank(a.name) < rank(b.name);
  });

  for (const auto& spec : layout.params) {
    const std::string where = "params['" + spec.name + "']";
    auto it = params.find(spec.name);
    if (it == params.end()) {
      if (needed.count("*") || needed.count(spec.name))
        bad(where, "missing (the outputs given read it)");
      std::size_t count = 1;
      for (auto x : spec.trailing) count *= x;
      c.params[spec.name] = {spec.trailing, std::vector<float>(count, 0.0f)};
      r.zero_params.push_back(spec.name);
      continue;
    }
    tokens_of(where, it->second, spec.trailing, 0);
    c.params[spec.name] = {std::move(it->second.shape), std::move(it->second.data)};
  }
  oracles::store_declared(c);  // tensors the declaration stores narrower hold its values
  c.origin = oracles::OpCase::Origin::derived;
  return r;
}

}  // namespace mhc::runner
