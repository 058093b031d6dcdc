// JSON rendering of the report model: schema mhc-report/1 (reports/schema/mhc-report-1.json).
// Keys in a fixed order and numbers in shortest round-trip form, so that two runs of the same
// command give the same bytes apart from meta.started, meta.finished and meta.wall_s.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "mhc/reports/json_number.hpp"
#include "mhc/reports/report.hpp"
#include "mhc/reports/text.hpp"

namespace mhc::reports {

namespace {

// Every string and key as valid UTF-8 (other bytes as \xNN): a file name or a fixture attribute
// with stray bytes must not make the report unwritable.
void clean_strings(nlohmann::ordered_json& j) {
  if (j.is_string()) {
    j = clean_text(j.get<std::string>(), false);
  } else if (j.is_array()) {
    for (auto& x : j) clean_strings(x);
  } else if (j.is_object()) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    for (auto& [k, v] : j.items()) {
      clean_strings(v);
      o[clean_text(k, false)] = std::move(v);
    }
    j = std::move(o);
  }
}

}  // namespace

namespace {

using json = nlohmann::ordered_json;

json num(double x) {
  return json_number(x);
}

json element(const oracles::Element& e) {
  return {{"index", e.index},    {"token", e.token},      {"got", num(e.got)},
          {"want", num(e.want)}, {"bound", num(e.bound)}, {"ratio", num(e.ratio)},
          {"rule", e.rule}};
}

json pairs(const std::vector<std::pair<std::string, std::string>>& kv) {
  json o = json::object();
  for (const auto& [k, v] : kv) o[k] = v;
  return o;
}

json stage_verdict(const oracles::StageVerdict& s) {
  json j = {{"stage", s.stage},
            {"state", oracles::state_name(s.state)},
            {"rule", s.rule},
            {"reason", s.reason},
            {"elements", s.elements},
            {"failed", s.failed},
            {"undecidable", s.undecidable},
            {"ratio_max", num(s.ratio_max)},
            {"ratio_p99", num(s.ratio_p99)},
            {"ratio_p50", num(s.ratio_p50)},
            {"max_abs", num(s.metrics.max_abs)},
            {"max_rel", num(s.metrics.max_rel)},
            {"rel_floor", num(s.metrics.rel_floor)},
            {"max_ulp", num(s.metrics.max_ulp)},
            {"normwise", num(s.metrics.normwise)},
            {"worst", element(s.worst)}};
  if (s.has_noise)
    j["noise"] = {{"state", oracles::state_name(s.noise.state)},
                  {"reason", s.noise.reason},
                  {"elements", s.noise.elements},
                  {"z_max", num(s.noise.z_max)},
                  {"z_rms", num(s.noise.z_rms)},
                  {"z_limit", num(s.noise.z_limit)},
                  {"rms_limit", num(s.noise.rms_limit)},
                  {"worst", element(s.noise.worst)}};
  return j;
}

json aggregate(const StageAggregate& a) {
  // A set of points for a plot: written in one order whatever order the cases (or the shards of
  // a campaign, joined) came in.
  std::vector<std::array<double, 4>> points;
  for (const auto& e : a.samples)
    points.push_back({double(e.index), double(e.token), e.bound, std::fabs(e.got - e.want)});
  auto key = [](double x) {  // NaN (an unwritten element) last, and ordered
    return std::isnan(x) ? std::numeric_limits<double>::infinity() : x;
  };
  std::sort(points.begin(), points.end(), [&](const auto& x, const auto& y) {
    for (std::size_t k = 0; k < 4; ++k)
      if (key(x[k]) != key(y[k])) return key(x[k]) < key(y[k]);
    return false;
  });
  json samples = json::array();
  for (const auto& p : points)
    samples.push_back({num(p[2]), num(p[3]), std::size_t(p[0]), std::size_t(p[1])});
  json states = json::object();
  for (const auto& [k, v] : a.states) states[k] = v;
  json worst = element(a.worst);
  worst["case"] = a.worst_case;
  return {{"stage", a.stage},
          {"states", states},
          {"ratio_max", num(a.ratio_max)},
          {"ratio_p99", num(a.ratio_p99)},
          {"ratio_median", num(a.ratio_median)},
          {"max_ulp", num(a.max_ulp)},
          {"max_rel", num(a.max_rel)},
          {"worst", worst},
          {"ulp_hist", a.ulp_hist},
          {"samples", samples}};
}

}  // namespace

std::string to_json(const Report& r) {
  const Meta& m = r.meta;
  json out;
  out["schema"] = kSchema;
  out["meta"] = {{"tool", m.tool},
                 {"version", m.version},
                 {"git_commit", m.git_commit},
                 {"command", m.command},
                 {"subcommand", m.subcommand},
                 {"compiler", m.compiler},
                 {"build_type", m.build_type},
                 {"fp_flags", m.fp_flags},
                 {"host", m.host},
                 {"device", m.device},
                 {"threads", m.threads},
                 {"shard",
                  {{"index", m.shard},
                   {"count", m.shards},
                   {"source", m.shard_source},
                   {"campaign", m.campaign}}},
                 {"started", m.started},
                 {"finished", m.finished},
                 {"wall_s", num(m.wall_s)}};
  out["complete"] = r.complete;
  out["interrupted"] = r.interrupted.empty() ? json(nullptr) : json(r.interrupted);
  out["exit_code"] = r.exit_code;
  const auto sum = r.summary();
  out["summary"] = {{"entries", sum.entries},
                    {"ok", sum.ok},
                    {"not_ok", sum.entries - sum.ok},
                    {"cases", sum.cases}};
  json entries = json::array();
  for (const auto& e : r.entries) {
    json counts = json::object();
    for (auto s : oracles::kStates) counts[oracles::state_name(s)] = e.count(s);
    json stages = json::array();
    for (const auto& a : e.stages) stages.push_back(aggregate(a));
    json curves = json::array();
    for (const auto& c : e.sinkhorn) {
      json res = json::array();
      for (double x : c.residual) res.push_back(num(x));
      curves.push_back(
          {{"label", c.label}, {"residual", res}, {"kernel_residual", num(c.kernel_residual)}});
    }
    json cs = json::array();
    for (const auto& c : e.cases) {
      json st = json::array();
      for (const auto& s : c.verdict.stages) st.push_back(stage_verdict(s));
      cs.push_back({{"index", c.index},
                    {"seed", c.seed},
                    {"label", c.label},
                    {"state", oracles::state_name(c.verdict.state)},
                    {"first_divergent", c.verdict.first_divergent},
                    {"diagnosis", c.diagnosis},
                    {"repro", c.repro},
                    {"saved", c.saved},
                    {"nondeterministic", c.nondeterministic},
                    {"seconds", num(c.seconds)},
                    {"stages", st}});
    }
    json je = {{"id", e.id},
               {"kind", e.kind},
               {"kernel", e.kernel},
               {"op", e.op},
               {"precision", e.precision},
               {"error_model", e.error_model},
               {"settings", pairs(e.settings)},
               {"expect", e.expect},
               {"ok", e.ok()},
               {"problem", e.problem},
               {"counts", counts},
               {"stages", stages},
               {"sinkhorn", curves}};
    // Only where a run recorded them: the reports of every other command keep their bytes.
    if (!e.map.empty()) {
      json cells = json::array();
      for (const auto& c : e.map)
        cells.push_back({{"family", c.family},
                         {"scale", num(c.scale)},
                         {"eps", num(c.eps)},
                         {"rounds", c.rounds},
                         {"cases", c.cases},
                         {"above_1e3", c.above_1e3},
                         {"above_1e6", c.above_1e6},
                         {"max_residual", num(c.max_residual)}});
      je["map"] = cells;
    }
    if (!e.gains.empty()) {
      auto nums = [](const std::vector<double>& v) {
        json a = json::array();
        for (double x : v) a.push_back(num(x));
        return a;
      };
      json gains = json::array();
      for (const auto& g : e.gains)
        gains.push_back({{"label", g.label},
                         {"forward", nums(g.forward)},
                         {"backward", nums(g.backward)},
                         {"spectral", nums(g.spectral)}});
      je["gains"] = gains;
    }
    je["facts"] = pairs(e.facts);
    je["cases"] = cs;
    entries.push_back(std::move(je));
  }
  out["entries"] = entries;
  clean_strings(out);
  return out.dump(1) + "\n";
}

}  // namespace mhc::reports
