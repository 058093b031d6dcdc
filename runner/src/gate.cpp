#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "mhc/impl/plugin.hpp"
#include "mhc/runner/gate.hpp"

#include "mhc/impl/kernels.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/ops.hpp"
#include "mhc/reports/json_number.hpp"
#include "mhc/reports/text.hpp"
#include "mhc/runner/check.hpp"
#include "mhc/runner/repro.hpp"

namespace mhc::runner {

namespace {

using json = nlohmann::ordered_json;
constexpr const char* kBaselineSchema = "mhc-baseline/1";

// The suite file: one setting per line, `key value...`, `#` comments. Lists multiply.
struct Suite {
  std::vector<std::string> kernels{"cpu", "cpu-fused"};
  std::vector<oracles::Op> ops = oracles::all_ops();
  std::vector<oracles::Precision> precisions{oracles::Precision::fp32()};
  std::vector<double> hc_eps{1e-6};
  ref::Config cfg = ref::v41();
  int cases = 4;
  std::size_t tokens = 4;
  std::uint64_t seed = 1;
  oracles::ErrorModel model = oracles::ErrorModel::standard;
  double allowance = 2, floor = 0.05;  // see gate/README.md
};

[[noreturn]] void suite_error(const std::string& file, int line, const std::string& what) {
  throw std::invalid_argument(file + ":" + std::to_string(line) + ": " + what);
}

Suite read_suite(const std::string& path) {
  reports::require_regular_file("suite", path);
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read suite " + path);
  Suite s;
  std::string text;
  int line_no = 0;
  std::map<std::string, int> set_on;  // key -> its line
  while (std::getline(in, text)) {
    ++line_no;
    if (text.find('\0') != std::string::npos) suite_error(path, line_no, "binary data, not text");
    if (const auto hash = text.find('#'); hash != std::string::npos) text.resize(hash);
    std::istringstream words(text);
    std::string key;
    if (!(words >> key)) continue;
    std::vector<std::string> v;
    for (std::string w; words >> w;) v.push_back(w);
    if (v.empty()) suite_error(path, line_no, "'" + key + "' needs a value");
    if (const auto [at, fresh] = set_on.emplace(key, line_no); !fresh)
      suite_error(path, line_no,
                  "'" + key + "' is set again (line " + std::to_string(at->second) +
                      " set it); a key once");
    auto one = [&]() -> const std::string& {
      if (v.size() != 1) suite_error(path, line_no, "'" + key + "' takes one value");
      return v[0];
    };
    auto number = [&](const std::string& w) {
      try {
        std::size_t used = 0;
        const double x = std::stod(w, &used);
        if (used != w.size() || !std::isfinite(x)) throw std::invalid_argument(w);
        return x;
      } catch (const std::exception&) {
        suite_error(path, line_no, "'" + key + "': '" + w + "' is not a number");
      }
    };
    auto integer = [&](const std::string& w, double lo, double hi) {
      const double x = number(w);
      if (x != std::floor(x) || x < lo || x > hi)
        suite_error(path, line_no,
                    "'" + key + "': " + w + " is not an integer in [" + std::to_string(long(lo)) +
                        ", " + std::to_string(long(hi)) + "]");
      return x;
    };
    if (key == "kernels") {
      s.kernels = v;
    } else if (key == "ops") {
      s.ops.clear();
      for (const auto& o : v) {
        std::vector<oracles::Op> ok = oracles::all_ops();
        for (oracles::Op b : oracles::backward_ops()) ok.push_back(b);
        const auto it = std::find_if(ok.begin(), ok.end(),
                                     [&](oracles::Op x) { return oracles::op_name(x) == o; });
        if (it == ok.end()) {
          std::string names;
          for (oracles::Op x : ok) names += (names.empty() ? "" : ", ") + oracles::op_name(x);
          suite_error(path, line_no, "op '" + o + "' (" + names + ")");
        }
        s.ops.push_back(*it);
      }
    } else if (key == "precisions") {
      s.precisions.clear();
      for (const auto& p : v) {
        try {
          s.precisions.push_back(oracles::precision_from_name(p));
        } catch (const std::invalid_argument& e) {
          suite_error(path, line_no, e.what());
        }
      }
    } else if (key == "hc-eps") {
      s.hc_eps.clear();
      for (const auto& w : v) s.hc_eps.push_back(number(w));
    } else if (key == "cases") {
      s.cases = int(integer(one(), 1, 1e6));
    } else if (key == "tokens") {
      s.tokens = std::size_t(integer(one(), 1, 1 << 20));
    } else if (key == "seed") {
      s.seed = std::uint64_t(integer(one(), 0, 9007199254740992.0));
    } else if (key == "n") {
      s.cfg.n = int(integer(one(), 1, 64));
    } else if (key == "dim") {
      s.cfg.d = int(integer(one(), 1, 1 << 20));
    } else if (key == "iters") {
      s.cfg.iters = int(integer(one(), 1, 100000));
    } else if (key == "norm-eps") {
      s.cfg.norm_eps = number(one());
    } else if (key == "error-model") {
      try {
        s.model = oracles::error_model_from_name(one());
      } catch (const std::invalid_argument& e) {
        suite_error(path, line_no, e.what());
      }
    } else if (key == "allowance") {
      s.allowance = number(one());
      if (s.allowance < 1) suite_error(path, line_no, "allowance must be >= 1");
    } else if (key == "floor") {
      s.floor = number(one());
      if (s.floor < 0) suite_error(path, line_no, "floor must be >= 0");
    } else {
      suite_error(path, line_no,
                  "unknown key '" + key +
                      "' (kernels, ops, precisions, hc-eps, cases, tokens, "
                      "seed, n, dim, iters, norm-eps, error-model, allowance, floor)");
    }
  }
  if (set_on.empty())
    throw std::invalid_argument(path +
                                ": no settings (a suite names at least its kernels or ops; "
                                "gate/default.suite is an example)");
  for (double e : s.hc_eps) {
    ref::Config c = s.cfg;
    c.hc_eps = e;
    if (const auto why = ref::validate(c); !why.empty())
      throw std::invalid_argument(path + ": " + why);
  }
  return s;
}

std::string g(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

json num(double x) {
  return reports::json_number(x);
}
double from_num(const json& j) {
  return reports::number_from_json(j);
}

// Every value the gate reads from a baseline, checked on load: a name for each error (file and
// JSON path) before any case runs.
void validate_baseline(const json& b, const std::string& file) {
  auto bad = [&](const std::string& where, const std::string& what) {
    throw std::invalid_argument(file + ": " + where + ": expected " + what);
  };
  auto number = [&](const json& j, const std::string& where, double lo, double hi) {
    if (!j.is_number() || !(j.get<double>() >= lo && j.get<double>() <= hi))
      bad(where, "a number in [" + g(lo) + ", " + g(hi) + "], got " + j.dump());
  };
  if (!b.is_object() || !b.contains("schema") || b["schema"] != kBaselineSchema)
    bad("/schema", std::string("\"") + kBaselineSchema + "\" (an mhc-baseline/1 file)");
  if (b.contains("allowance")) number(b["allowance"], "/allowance", 1, 1e6);
  if (b.contains("floor")) number(b["floor"], "/floor", 0, 1e6);
  if (!b.contains("entries") || !b["entries"].is_object()) bad("/entries", "an object of entries");
  for (const auto& [id, e] : b["entries"].items()) {
    const std::string at = "/entries/" + id;
    if (!e.is_object()) bad(at, "an object");
    if (!e.contains("cases") || !e["cases"].is_number_unsigned()) bad(at + "/cases", "a count");
    if (!e.contains("stages") || !e["stages"].is_object() || e["stages"].empty())
      bad(at + "/stages", "an object of at least one stage");
    for (const auto& [name, st] : e["stages"].items()) {
      const std::string sat = at + "/stages/" + name;
      if (!st.is_object()) bad(sat, "an object");
      for (const char* stat : {"ratio_max", "ratio_p99"}) {
        if (!st.contains(stat)) bad(sat + "/" + stat, "a ratio");
        const json& r = st[stat];
        if (!(r.is_number() && r.get<double>() >= 0) && r != "inf")
          bad(sat + "/" + stat, "a ratio >= 0 or \"inf\", got " + r.dump());
      }
      if (!st.contains("states") || !st["states"].is_object())
        bad(sat + "/states", "an object of counts");
      for (const auto& [state, n] : st["states"].items()) {
        try {
          oracles::state_from_name(state);
        } catch (const std::invalid_argument&) {
          bad(sat + "/states/" + state, "a state's name (pass, fail, ...)");
        }
        if (!n.is_number_unsigned() || n.get<std::uint64_t>() > e["cases"].get<std::uint64_t>())
          bad(sat + "/states/" + state, "a count of at most the entry's cases, got " + n.dump());
      }
      if (st.contains("errors")) {  // a case's error: >= 0, "inf", or "nan" where it had none
        const json& es = st["errors"];
        if (!es.is_array() || es.size() > e["cases"].get<std::uint64_t>())
          bad(sat + "/errors", "an array of at most the entry's cases");
        for (std::size_t k = 0; k < es.size(); ++k)
          if (!(es[k].is_number() && es[k].get<double>() >= 0) && es[k] != "inf" && es[k] != "nan")
            bad(sat + "/errors/" + std::to_string(k),
                "an error >= 0, \"inf\" or \"nan\", got " + es[k].dump());
      }
    }
  }
}

json baseline_of(const reports::Report& r, const Suite& s, const std::string& suite_path) {
  json out;
  out["schema"] = kBaselineSchema;
  out["suite"] = suite_path;
  out["allowance"] = s.allowance;
  out["floor"] = s.floor;
  out["git_commit"] = r.meta.git_commit;
  json entries = json::object();
  for (const auto& e : r.entries) {
    json stages = json::object();
    for (const auto& a : e.stages) {
      json states = json::object();
      for (const auto& [k, v] : a.states) states[k] = v;
      json errors = json::array();
      for (double x : a.case_errors) errors.push_back(num(x));
      stages[a.stage] = {{"states", states},
                         {"ratio_max", num(a.ratio_max)},
                         {"ratio_p99", num(a.ratio_p99)},
                         {"errors", errors}};
    }
    entries[e.id] = {{"cases", e.cases.size()}, {"stages", stages}};
  }
  out["entries"] = entries;
  return out;
}

// The entry of a run: the kernel, op, precision and every setting that changes its numbers
// (those of the V4.1 configuration, seed 1 and the standard model only when they differ), so that
// a baseline recorded with other settings cannot vouch for it.
std::string entry_id(const CheckSpec& c, const std::string& kernel) {
  const CheckSpec d;
  std::string id = "gate " + kernel + " " + oracles::op_name(c.op) + " " +
                   oracles::precision_name(c.precision) + " hc_eps=" + g(c.cfg.hc_eps) +
                   " tokens=" + std::to_string(c.tokens) + " cases=" + std::to_string(c.cases);
  auto add = [&](bool differs, const std::string& text) {
    if (differs) id += " " + text;
  };
  char norm[32];
  std::snprintf(norm, sizeof norm, "%.9g", c.cfg.norm_eps);
  add(c.cfg.n != d.cfg.n, "n=" + std::to_string(c.cfg.n));
  add(c.cfg.d != d.cfg.d, "dim=" + std::to_string(c.cfg.d));
  add(c.cfg.iters != d.cfg.iters, "iters=" + std::to_string(c.cfg.iters));
  add(c.cfg.norm_eps != d.cfg.norm_eps, std::string("norm_eps=") + norm);
  add(c.seed != d.seed, "seed=" + std::to_string(c.seed));
  add(c.model != d.model, "model=" + oracles::error_model_name(c.model));
  return id;
}

}  // namespace

struct GatePlan::Data {
  Suite suite;
  std::vector<std::string> kernels;
  std::map<std::string, std::string> baseline_names;  // kernel -> its entries' name for it
  json base;
};

GatePlan::GatePlan(const GateSpec& spec) : spec_(spec) {
  auto d = std::make_shared<Data>();
  const GateSpec* st = &spec_;
  d->suite = read_suite(st->suite);
  const Suite& suite = d->suite;
  std::vector<std::string>& kernels = d->kernels;
  kernels = st->kernels.empty() ? suite.kernels : st->kernels;
  std::map<std::string, std::string> by_name;  // baseline name -> kernel
  for (const auto& k : kernels) {
    const impl::Backend* b = impl::find_backend(k);
    if (!b) throw std::invalid_argument(st->suite + ": unknown kernel '" + k + "'");
    const std::string name = b->baseline_name.empty() ? b->name : b->baseline_name;
    const auto [at, fresh] = by_name.emplace(name, k);
    if (!fresh)
      throw std::invalid_argument("kernels " + at->second + " and " + k + " are both " + name +
                                  " to the baseline: gate them in separate runs");
    d->baseline_names[k] = name;
  }
  for (const auto op : suite.ops) try {
      within_limits(op, suite.cfg, {}, double(suite.tokens), 1, st->limits);
    } catch (const TooLarge& e) {
      throw std::invalid_argument(st->suite + ": " + e.what());
    }
  json& base = d->base;
  if (st->update && reports::same_file(st->suite, st->baseline))
    throw std::invalid_argument("--baseline " + st->baseline + " is the suite " + st->suite +
                                ": --update would replace it");
  if (st->update && st->shard.count > 1)
    throw std::invalid_argument(
        "--update records the whole suite's baseline: run it unsharded "
        "(" +
        st->shard.text() + ")");
  if (st->update) {  // refused before the suite runs, not after
    reports::require_regular_file("baseline", st->baseline);
    const std::string probe = st->baseline + ".tmp." + std::to_string(::getpid());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      throw std::invalid_argument("cannot write baseline " + st->baseline + ": " +
                                  std::strerror(errno));
    ::close(fd);
    ::unlink(probe.c_str());
  }
  if (!st->update) {
    reports::require_regular_file("baseline", st->baseline);
    std::ifstream in(st->baseline);
    if (!in)
      throw std::invalid_argument("cannot read baseline " + st->baseline +
                                  " (create it with --update)");
    try {
      base = json::parse(in);
    } catch (const std::exception& e) {
      throw std::invalid_argument(st->baseline + ": not JSON: " + e.what());
    }
    validate_baseline(base, st->baseline);
  }
  d_ = d;
}

int GatePlan::run(Session& session) const {
  const GateSpec* st = &spec_;
  const Suite& suite = d_->suite;
  const std::vector<std::string>& kernels = d_->kernels;
  const json& base = d_->base;
  // With a plug-in among them, ours are isolated too: this process then never holds the CUDA
  // context that would keep a plug-in on the GPU out of its worker.
  const bool isolate = st->isolate || std::any_of(kernels.begin(), kernels.end(), impl::is_plugin);
  std::vector<CheckSpec> specs;
  std::size_t planned = 0;  // entries of the whole suite; this shard takes some
  for (const auto& k : kernels)
    for (const auto& op : suite.ops)
      for (const auto& p : suite.precisions)
        for (double e : suite.hc_eps) {
          CheckSpec c;
          c.kernel = k;
          c.op = op;
          c.precision = p;
          c.model = suite.model;
          c.cfg = suite.cfg;
          c.cfg.hc_eps = e;
          c.tokens = suite.tokens;
          c.cases = suite.cases;
          c.seed = suite.seed;
          c.threads = st->threads;
          c.isolate = isolate;
          c.kernel_seconds = st->kernel_seconds;
          c.limits = st->limits;
          c.save_dir = "";
          c.kind = "gate";
          c.id = entry_id(c, d_->baseline_names.at(k));
          if (st->shard.takes(planned++)) specs.push_back(c);
        }
  std::printf(
      "gate: %zu runs (%zu kernels x %zu ops x %zu precisions x %zu hc_eps), %d cases each\n",
      planned, kernels.size(), suite.ops.size(), suite.precisions.size(), suite.hc_eps.size(),
      suite.cases);
  if (st->shard.count > 1)
    std::printf("gate: %s takes %zu of them\n", st->shard.text().c_str(), specs.size());
  int failed = 0;
  std::vector<std::string> skipped;  // a planned case without a verdict fails the gate
  for (const auto& spec : specs) {
    if (session.stop()) break;
    const CheckTally t = run_check(spec, session);
    failed += t.failed;
    if (t.skipped)
      skipped.push_back("SKIPPED " + spec.id + ": " + std::to_string(t.skipped) + " of " +
                        std::to_string(t.done) + " cases: " + t.skip_reason);
  }
  if (session.stop()) return 1;

  // Regressions against the baseline.
  std::vector<std::string> problems;
  std::set<std::string> fresh;  // entries not in the baseline
  const double allowance = st->update ? suite.allowance : base.value("allowance", suite.allowance);
  const double floor = st->update ? suite.floor : base.value("floor", suite.floor);
  // The line that reruns case k of entry i where this run ran.
  const auto rerun = [&](std::size_t i, std::size_t k) {
    return rerun_here(
        repro(check_case(specs[i], specs[i].seed + k), specs[i].kernel, specs[i].model), st->shard,
        specs[i].kernel_seconds);
  };
  if (!st->update) {
    const json& be = base["entries"];
    for (std::size_t i = 0; i < specs.size(); ++i) {
      reports::Entry& e = session.report.entry(specs[i].id);
      const std::string id = reports::clean_text(e.id);  // a plug-in names itself: for a terminal
      if (!be.contains(e.id)) {
        e.problem = "not in the baseline " + st->baseline + " (run with --update to record it)";
        problems.push_back("NEW " + id + ": " + reports::clean_text(e.problem));
        fresh.insert(e.id);
        continue;
      }
      const json& bs = be[e.id]["stages"];
      for (const auto& a : e.stages) {
        if (!bs.contains(a.stage)) continue;
        for (const char* stat : {"ratio_max", "ratio_p99"}) {
          const double was = from_num(bs[a.stage][stat]);
          const double now = std::string(stat) == "ratio_max" ? a.ratio_max : a.ratio_p99;
          if (!(now > allowance * was && now > was + floor)) continue;
          std::string line = "REGRESSED " + id + " stage " + a.stage + ": " + stat + " " + g(was) +
                             " -> " + g(now) + " (allowance " + g(allowance) + "x, floor " +
                             g(floor) + ")";
          e.problem = line.substr(10);
          problems.push_back(line + "\n  REPRO: " + rerun(i, a.worst_case));
        }
        // The error itself, however far below the bound: the median over the cases of its
        // growth, each error floored at u = 2^-24 (below that, fp32 cannot tell). Baselines
        // recorded before errors were kept skip this.
        if (bs[a.stage].contains("errors")) {
          const json& we = bs[a.stage]["errors"];
          std::vector<std::pair<double, std::size_t>> growth;  // (growth, case)
          for (std::size_t k = 0; k < we.size() && k < a.case_errors.size(); ++k) {
            const double was = from_num(we[k]), now = a.case_errors[k];
            if (std::isnan(was) || std::isnan(now)) continue;
            const double u = 0x1.0p-24;
            growth.emplace_back(std::max(now, u) / std::max(was, u), k);
          }
          if (!growth.empty()) {
            std::sort(growth.begin(), growth.end());
            const double median = growth[growth.size() / 2].first;
            if (median > allowance) {
              std::string line = "REGRESSED " + id + " stage " + a.stage + ": error grew " +
                                 g(median) + "x (normwise, median over the cases; allowance " +
                                 g(allowance) + "x)";
              e.problem = line.substr(10);
              problems.push_back(line + "\n  REPRO: " + rerun(i, growth.back().second));
            }
          }
        }
        // A stage that was decided everywhere and is not any more.
        const auto was_states = bs[a.stage]["states"];
        const int was_pass = was_states.value("pass", 0);
        const auto it = a.states.find("pass");
        const int now_pass = it == a.states.end() ? 0 : it->second;
        if (was_pass == int(e.cases.size()) && now_pass < was_pass) {
          std::string line = "REGRESSED " + id + " stage " + a.stage + ": " +
                             std::to_string(now_pass) + " of " + std::to_string(e.cases.size()) +
                             " cases pass, baseline " + std::to_string(was_pass);
          e.problem = line.substr(10);
          problems.push_back(line);
        }
      }
    }
  }
  std::printf("\n%-52s %6s %5s %10s  %s\n", "entry", "cases", "fail", "max ratio", "vs baseline");
  for (const auto& e : session.report.entries) {
    double worst = 0;
    for (const auto& a : e.stages) worst = std::max(worst, a.ratio_max);
    const char* status = st->update          ? "recorded"
                         : fresh.count(e.id) ? "NEW"
                         : e.problem.empty() ? "ok"
                                             : "REGRESSED";
    std::printf("%-52s %6zu %5d %10.3g  %s\n", reports::clean_text(e.id).c_str(), e.cases.size(),
                e.count(oracles::State::fail), worst, status);
  }
  for (const auto& p : problems) std::printf("%s\n", p.c_str());  // made of clean text
  if (st->update) {
    if (failed) {
      std::printf(
          "gate: FAIL (%d cases failed; the baseline is not updated with failing verdicts)\n",
          failed);
      return (1);
    }
    Suite recorded = suite;
    recorded.allowance = allowance;
    recorded.floor = floor;
    reports::write_atomic(st->baseline,
                          baseline_of(session.report, recorded, st->suite).dump(1) + "\n");
    std::printf("gate: baseline %s recorded (%zu entries)\n",
                reports::clean_text(st->baseline).c_str(), session.report.entries.size());
    return (0);
  }
  for (const auto& line : skipped) std::printf("%s\n", reports::clean_text(line).c_str());
  const bool ok = failed == 0 && problems.empty() && skipped.empty();
  std::printf("gate: %s (%d cases failed, %zu regressions or new entries)\n",
              run_outcome(ok).c_str(), failed, problems.size());
  return (ok ? 0 : 1);
}

}  // namespace mhc::runner
