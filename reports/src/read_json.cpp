// Reading mhc-report/1 back into the model, for `mhc-verify merge`.
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mhc/reports/json_number.hpp"
#include "mhc/reports/report.hpp"

namespace mhc::reports {

namespace {

using json = nlohmann::json;

double num(const json& j) {
  return number_from_json(j);
}

// A count, index or seed: a JSON integer >= 0 (nlohmann converts -5 or 1e30 without a word).
struct NotWhole : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
std::uint64_t whole(const json& j) {
  if (!j.is_number_unsigned()) throw NotWhole("expected an integer >= 0, got " + j.dump());
  return j.get<std::uint64_t>();
}
int whole_int(const json& j) {
  const std::uint64_t v = whole(j);
  if (v > std::uint64_t(std::numeric_limits<int>::max()))
    throw NotWhole("expected an integer below 2^31, got " + j.dump());
  return int(v);
}

oracles::Element element(const json& j) {
  oracles::Element e;
  e.index = whole(j.at("index"));
  e.token = whole(j.at("token"));
  e.got = num(j.at("got"));
  e.want = num(j.at("want"));
  e.bound = num(j.at("bound"));
  e.ratio = num(j.at("ratio"));
  e.rule = j.at("rule").get<std::string>();
  return e;
}

std::vector<std::pair<std::string, std::string>> pairs(const json& j) {
  std::vector<std::pair<std::string, std::string>> v;
  for (auto it = j.begin(); it != j.end(); ++it)
    v.emplace_back(it.key(), it.value().get<std::string>());
  return v;
}

}  // namespace

Report read_report(const std::string& path) {
  require_regular_file("report", path);
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read report " + path);
  json j;
  try {
    j = json::parse(in);
  } catch (const std::exception& e) {
    throw std::invalid_argument(path + ": not JSON: " + e.what());
  }
  if (!j.is_object() || j.value("schema", "") != kSchema)
    throw std::invalid_argument(path + ": not an " + std::string(kSchema) +
                                " report (no \"schema\": \"" + kSchema + "\")");
  try {
    Report r;
    const json& m = j.at("meta");
    r.meta.version = m.at("version");
    r.meta.git_commit = m.at("git_commit");
    r.meta.command = m.at("command");
    r.meta.subcommand = m.at("subcommand");
    r.meta.compiler = m.at("compiler");
    r.meta.build_type = m.at("build_type");
    r.meta.fp_flags = m.at("fp_flags");
    r.meta.host = m.at("host");
    r.meta.device = m.at("device");
    r.meta.threads = unsigned(whole_int(m.at("threads")));
    if (m.contains("shard")) {  // reports of earlier versions: not sharded
      const json& s = m.at("shard");
      r.meta.shard = whole_int(s.at("index"));
      r.meta.shards = whole_int(s.at("count"));
      r.meta.shard_source = s.at("source");
      r.meta.campaign = s.at("campaign");
      if (r.meta.shards < 1 || r.meta.shard < 0 || r.meta.shard >= r.meta.shards)
        throw std::invalid_argument(path + ": /meta/shard: index " + std::to_string(r.meta.shard) +
                                    " of " + std::to_string(r.meta.shards));
    }
    r.meta.started = m.at("started");
    r.meta.finished = m.at("finished");
    r.meta.wall_s = num(m.at("wall_s"));
    r.complete = j.at("complete");
    r.interrupted = j.at("interrupted").is_null() ? "" : j.at("interrupted").get<std::string>();
    r.exit_code = whole_int(j.at("exit_code"));
    // The exit codes a run ends with (README): anything else is not a report of ours.
    if (r.exit_code != 0 && r.exit_code != 1 && r.exit_code != 2 && r.exit_code != 3 &&
        r.exit_code != 130 && r.exit_code != 143)
      throw std::invalid_argument(path + ": /exit_code: expected 0, 1, 2, 3, 130 or 143, got " +
                                  std::to_string(r.exit_code));
    if (!j.at("entries").is_array())
      throw std::invalid_argument(path + ": /entries: expected an array of entries");
    for (const json& je : j.at("entries")) {
      Entry e;
      e.id = je.at("id");
      e.kind = je.at("kind");
      e.kernel = je.at("kernel");
      e.op = je.at("op");
      e.precision = je.at("precision");
      e.error_model = je.at("error_model");
      e.settings = pairs(je.at("settings"));
      e.expect = je.at("expect");
      e.problem = je.at("problem");
      e.facts = pairs(je.at("facts"));
      for (const json& ja : je.at("stages")) {
        StageAggregate a;
        a.stage = ja.at("stage");
        for (auto it = ja.at("states").begin(); it != ja.at("states").end(); ++it)
          a.states[it.key()] = whole_int(it.value());
        a.ratio_max = num(ja.at("ratio_max"));
        a.ratio_p99 = num(ja.at("ratio_p99"));
        a.ratio_median = num(ja.at("ratio_median"));
        a.max_ulp = num(ja.at("max_ulp"));
        a.max_rel = num(ja.at("max_rel"));
        a.worst = element(ja.at("worst"));
        if (ja.at("worst").contains("case")) a.worst_case = whole(ja.at("worst").at("case"));
        for (const json& h : ja.at("ulp_hist")) a.ulp_hist.push_back(whole(h));
        for (const json& s : ja.at("samples")) {
          oracles::Element el;  // the plot needs |got - want| and the bound only
          el.bound = num(s.at(0));
          el.got = num(s.at(1));
          el.index = whole(s.at(2));
          el.token = whole(s.at(3));
          a.samples.push_back(el);
        }
        e.stages.push_back(std::move(a));
      }
      for (const json& jc : je.at("sinkhorn")) {
        SinkhornCurve c;
        c.label = jc.at("label");
        for (const json& x : jc.at("residual")) c.residual.push_back(num(x));
        c.kernel_residual = num(jc.at("kernel_residual"));
        e.sinkhorn.push_back(std::move(c));
      }
      if (je.contains("map"))  // both absent where a run recorded none
        for (const json& jm : je.at("map")) {
          MapCell c;
          c.family = jm.at("family");
          c.scale = num(jm.at("scale"));
          c.eps = num(jm.at("eps"));
          c.rounds = whole_int(jm.at("rounds"));
          c.cases = whole(jm.at("cases"));
          c.above_1e3 = whole(jm.at("above_1e3"));
          c.above_1e6 = whole(jm.at("above_1e6"));
          c.max_residual = num(jm.at("max_residual"));
          e.map.push_back(std::move(c));
        }
      if (je.contains("gains"))
        for (const json& jg : je.at("gains")) {
          GainCurve g;
          g.label = jg.at("label");
          for (const json& x : jg.at("forward")) g.forward.push_back(num(x));
          for (const json& x : jg.at("backward")) g.backward.push_back(num(x));
          for (const json& x : jg.at("spectral")) g.spectral.push_back(num(x));
          e.gains.push_back(std::move(g));
        }
      for (const json& jc : je.at("cases")) {
        CaseRecord c;
        c.index = whole(jc.at("index"));
        c.seed = whole(jc.at("seed"));
        c.label = jc.at("label");
        c.verdict.state = oracles::state_from_name(jc.at("state"));
        c.verdict.first_divergent = jc.at("first_divergent");
        c.diagnosis = jc.at("diagnosis");
        c.repro = jc.at("repro");
        c.saved = jc.at("saved");
        c.nondeterministic = jc.value("nondeterministic", "");
        if (jc.contains("seconds")) c.seconds = num(jc.at("seconds"));
        for (const json& js : jc.at("stages")) {
          oracles::StageVerdict s;
          s.stage = js.at("stage");
          s.state = oracles::state_from_name(js.at("state"));
          s.rule = js.at("rule");
          s.reason = js.at("reason");
          s.elements = whole(js.at("elements"));
          s.failed = whole(js.at("failed"));
          s.undecidable = whole(js.at("undecidable"));
          s.ratio_max = num(js.at("ratio_max"));
          s.ratio_p99 = num(js.at("ratio_p99"));
          s.ratio_p50 = num(js.at("ratio_p50"));
          s.metrics.max_abs = num(js.at("max_abs"));
          s.metrics.max_rel = num(js.at("max_rel"));
          s.metrics.rel_floor = num(js.at("rel_floor"));
          s.metrics.max_ulp = num(js.at("max_ulp"));
          s.metrics.normwise = num(js.at("normwise"));
          s.worst = element(js.at("worst"));
          if (js.contains("noise")) {
            const json& jn = js.at("noise");
            s.has_noise = true;
            s.noise.state = oracles::state_from_name(jn.at("state"));
            s.noise.reason = jn.at("reason");
            s.noise.elements = whole(jn.at("elements"));
            s.noise.z_max = num(jn.at("z_max"));
            s.noise.z_rms = num(jn.at("z_rms"));
            if (jn.contains("z_limit")) s.noise.z_limit = num(jn.at("z_limit"));
            if (jn.contains("rms_limit")) s.noise.rms_limit = num(jn.at("rms_limit"));
            s.noise.worst = element(jn.at("worst"));
          }
          c.verdict.stages.push_back(std::move(s));
        }
        e.cases.push_back(std::move(c));
      }
      r.entries.push_back(std::move(e));
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(path + ": not a valid " + std::string(kSchema) +
                                " report: " + e.what());
  } catch (const NotWhole& e) {
    throw std::invalid_argument(path + ": not a valid " + std::string(kSchema) +
                                " report: " + e.what());
  }
}

}  // namespace mhc::reports
