// Markdown summary and JUnit XML of the report model.
#include <cstdio>
#include <sstream>

#include "mhc/reports/report.hpp"
#include "mhc/reports/text.hpp"

namespace mhc::reports {

namespace {

int state_count(const StageAggregate& a, const char* s) {
  const auto it = a.states.find(s);
  return it == a.states.end() ? 0 : it->second;
}

const oracles::StageVerdict* first_divergent(const CaseRecord& c) {
  for (const auto& s : c.verdict.stages)
    if (s.stage == c.verdict.first_divergent) return &s;
  return nullptr;
}

std::string case_name(const CaseRecord& c) {
  return c.label.empty()
             ? "case " + std::to_string(c.index) + " (seed " + std::to_string(c.seed) + ")"
             : c.label;
}

std::string xml(const std::string& raw) {
  return markup_escape(raw);
}

std::string md_cell(const std::string& raw) {
  std::string o;
  for (char ch : clean_text(raw)) o += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return o;
}

}  // namespace

std::string to_markdown(const Report& r) {
  std::ostringstream o;
  const Meta& m = r.meta;
  const auto [entries, ok, cases, pass] = r.summary();
  o << "# mhc-verify report: " << (pass ? "PASS" : "FAIL") << "\n\n";
  o << "`" << m.command << "`  \n";
  o << "mhc-verify " << m.version << " (" << m.git_commit << "), " << m.compiler << ", "
    << m.build_type << "; " << m.host << "; device: " << m.device << "  \n";
  o << "started " << m.started << ", " << fmt_g(m.wall_s) << " s";
  if (!r.complete)
    o << "; **incomplete**"
      << (r.interrupted.empty() ? "" : " (interrupted by " + r.interrupted + ")");
  o << "\n\n"
    << r.entries.size() << " entries, " << ok << " as expected, " << cases << " cases.\n\n";
  o << "| entry | expect | cases | pass | fail | undecidable | mistrusted | max ratio | result |\n";
  o << "|---|---|--:|--:|--:|--:|--:|--:|---|\n";
  for (const auto& e : r.entries) {
    double worst = 0;
    for (const auto& a : e.stages) worst = std::max(worst, a.ratio_max);
    o << "| " << md_cell(e.id) << " | " << e.expect << " | " << e.cases.size() << " | "
      << e.count(oracles::State::pass) << " | " << e.count(oracles::State::fail) << " | "
      << e.count(oracles::State::undecidable) << " | " << e.count(oracles::State::mistrusted)
      << " | " << fmt_g(worst) << " | " << (e.ok() ? "ok" : "**NOT OK**") << " |\n";
  }
  for (const auto& e : r.entries) {
    o << "\n## " << md_cell(e.id) << (e.ok() ? "" : " (NOT OK)") << "\n\n";
    if (!e.settings.empty()) {
      for (std::size_t i = 0; i < e.settings.size(); ++i)
        o << (i ? ", " : "") << e.settings[i].first << "=" << e.settings[i].second;
      o << "\n\n";
    }
    if (!e.problem.empty()) o << "- **problem**: " << md_cell(e.problem) << "\n";
    for (const auto& [k, v] : e.facts) o << "- " << md_cell(k) << ": " << md_cell(v) << "\n";
    if (!e.facts.empty() || !e.problem.empty()) o << "\n";
    if (!e.stages.empty()) {
      o << "| stage | pass | fail | undec | mistr | max ratio | p99 ratio | median ratio | max ulp "
           "| worst |\n";
      o << "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n";
      for (const auto& a : e.stages)
        o << "| " << a.stage << " | " << state_count(a, "pass") << " | " << state_count(a, "fail")
          << " | " << state_count(a, "undecidable") << " | " << state_count(a, "mistrusted")
          << " | " << fmt_g(a.ratio_max) << " | " << fmt_g(a.ratio_p99) << " | "
          << fmt_g(a.ratio_median) << " | " << fmt_g(a.max_ulp) << " | case " << a.worst_case
          << " token " << a.worst.token << " elem " << a.worst.index << " |\n";
    }
    for (const auto& c : e.cases) {
      if (c.verdict.state != oracles::State::fail) continue;
      const auto* s = first_divergent(c);
      o << "\n- **fail** " << md_cell(case_name(c)) << ": first divergent stage `"
        << c.verdict.first_divergent << "`" << (s ? ": " + md_cell(s->reason) : "") << "\n";
      if (!c.diagnosis.empty()) o << "  - diagnosis: " << md_cell(c.diagnosis) << "\n";
      if (!c.repro.empty()) o << "  - `REPRO: " << md_cell(c.repro) << "`\n";
      if (!c.saved.empty()) o << "  - saved: `" << md_cell(c.saved) << "`\n";
    }
  }
  return clean_text(o.str(), true, "\n");  // and what came from elsewhere: valid UTF-8
}

std::string to_junit(const Report& r) {
  struct Case {
    std::string name, kind, message, body;  // kind: "", "failure", "skipped"
  };
  std::ostringstream suites;
  int tests = 0, failures = 0, skipped = 0;
  for (const auto& e : r.entries) {
    std::vector<Case> tc;
    if (e.expect == "fail") {
      Case c{"caught", "", "", ""};
      if (!e.ok()) {
        c.kind = "failure";
        c.message = e.problem.empty()
                        ? "a wrong kernel passed every case: the harness did not catch it"
                        : e.problem;
      }
      tc.push_back(c);
    } else {
      if (!e.problem.empty()) tc.push_back({"problem", "failure", e.problem, ""});
      for (const auto& c : e.cases) {
        Case t{case_name(c), "", "", ""};
        const auto st = c.verdict.state;
        if (st == oracles::State::fail) {
          const auto* s = first_divergent(c);
          t.kind = "failure";
          t.message =
              "first divergent stage " + c.verdict.first_divergent + (s ? ": " + s->reason : "");
          if (!c.diagnosis.empty()) t.body += "DIAGNOSIS: " + c.diagnosis + "\n";
          if (!c.repro.empty()) t.body += "REPRO: " + c.repro + "\n";
          if (!c.saved.empty()) t.body += "SAVED: " + c.saved + "\n";
        } else if (st != oracles::State::pass) {
          t.kind = "skipped";
          t.message = oracles::state_name(st);
          for (const auto& s : c.verdict.stages)
            if (s.state == st) {
              t.message += ": " + s.stage + ": " + s.reason;
              break;
            }
        }
        tc.push_back(t);
      }
    }
    if (!r.complete && tc.empty())
      tc.push_back({"finished", "skipped", "the run was interrupted", ""});
    int f = 0, sk = 0;
    for (const auto& c : tc) {
      f += c.kind == "failure";
      sk += c.kind == "skipped";
    }
    tests += int(tc.size());
    failures += f;
    skipped += sk;
    suites << "  <testsuite name=\"" << xml(e.id) << "\" tests=\"" << tc.size() << "\" failures=\""
           << f << "\" errors=\"0\" skipped=\"" << sk << "\">\n    <properties>\n";
    auto prop = [&](const std::string& k, const std::string& v) {
      if (!v.empty())
        suites << "      <property name=\"" << xml(k) << "\" value=\"" << xml(v) << "\"/>\n";
    };
    prop("kind", e.kind);
    prop("kernel", e.kernel);
    prop("op", e.op);
    prop("precision", e.precision);
    prop("error_model", e.error_model);
    prop("expect", e.expect);
    for (const auto& [k, v] : e.settings) prop(k, v);
    for (const auto& [k, v] : e.facts) prop(k, v);
    suites << "    </properties>\n";
    for (const auto& c : tc) {
      suites << "    <testcase classname=\"" << xml(e.id) << "\" name=\"" << xml(c.name) << "\"";
      if (c.kind.empty()) {
        suites << "/>\n";
        continue;
      }
      suites << ">\n      <" << c.kind << " message=\"" << xml(c.message) << "\"";
      if (c.body.empty())
        suites << "/>\n";
      else
        suites << ">" << xml(c.body) << "</" << c.kind << ">\n";
      suites << "    </testcase>\n";
    }
    suites << "  </testsuite>\n";
  }
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"mhc-verify\" tests=\""
    << tests << "\" failures=\"" << failures << "\" errors=\"0\" skipped=\"" << skipped << "\">\n"
    << suites.str() << "</testsuites>\n";
  return o.str();
}

}  // namespace mhc::reports
