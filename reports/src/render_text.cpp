// Markdown summary and JUnit XML of the report model.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#include "mhc/oracles/diagnosis.hpp"
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

// Text from outside in a Markdown line or table cell, shown as it is: control bytes escaped, and
// every character that would start markup (a code span, raw HTML, a link, emphasis, an entity, a
// heading, the table's next cell) backslash-escaped; but '_' between letters or digits, which
// cannot (CommonMark's flanking rules), so that names like hc_eps read as they are. Where the text
// may open a line: its leading spaces as entities (no indented code), and a list's or a setext
// heading's marker escaped.
std::string md_cell(const std::string& raw) {
  const std::string t = clean_text(raw);
  const auto alnum = [&](std::size_t i) {
    return i < t.size() && std::isalnum(static_cast<unsigned char>(t[i]));
  };
  const std::size_t lead = std::min(t.find_first_not_of(' '), t.size());
  std::size_t digits = lead;  // "1." and "1)" open an ordered list
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  std::string o;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const char ch = t[i];
    if (i < lead) {
      o += "&#32;";
      continue;
    }
    const bool inert = ch == '_' && i > 0 && alnum(i - 1) && alnum(i + 1);
    const bool opens = (i == lead && (ch == '-' || ch == '+' || ch == '=')) ||
                       (i == digits && digits > lead && (ch == '.' || ch == ')'));
    if ((ch && std::strchr("\\`*_[]<>|&~#", ch) && !inert) || opens) o += '\\';
    o += ch;
  }
  return o;
}

// Text from outside as a code span, taken literally by the reader (a REPRO line pastes as it
// runs): fenced by one backtick more than its longest run of them, padded where it starts or ends
// with one or with a space at both ends (the reader strips one space a side there).
std::string md_code(const std::string& raw) {
  const std::string t = clean_text(raw);
  if (t.empty()) return t;
  std::size_t run = 0, longest = 0;
  for (char ch : t) longest = std::max(longest, run = ch == '`' ? run + 1 : 0);
  const bool pad = t.front() == '`' || t.back() == '`' ||
                   (t.front() == ' ' && t.back() == ' ' && t.find_first_not_of(' ') != t.npos);
  const std::string fence(longest + 1, '`'), space = pad ? " " : "";
  return fence + space + t + space + fence;
}

// Sub-items explaining each catalogued deviation the text names, once per entry (`seen`).
std::string md_explained(const std::string& text, std::set<std::string>& seen, const char* indent) {
  std::string o;
  for (const auto& [name, sentence] : oracles::diagnosis_sentences(text))
    if (seen.insert(name).second) o += indent + ("- `" + name + "`: " + sentence + "\n");
  return o;
}

// n of the cases as a percentage with the count, "12.5% (25)"; "-" without cases.
std::string share(long n, long cases) {
  return cases ? fmt_g(100.0 * double(n) / double(cases)) + "% (" + std::to_string(n) + ")" : "-";
}

// The depths (1..n) a gain table shows: every one of a short curve; of a long one 1, 2, 4, ...
// (1, 4, 16, ... when that keeps it to about 12 rows) and the last.
std::vector<std::size_t> shown_depths(std::size_t n) {
  std::vector<std::size_t> d;
  if (n <= 16) {
    for (std::size_t i = 1; i <= n; ++i) d.push_back(i);
    return d;
  }
  int bits = 0;  // floor(log2 n)
  while (n >> (bits + 1)) ++bits;
  const int k = (bits + 11) / 12;
  for (std::size_t x = 1; x < n; x <<= k) d.push_back(x);
  d.push_back(n);
  return d;
}

void md_map(std::ostringstream& o, const std::vector<MapCell>& map) {
  o << "| family | logit scale | hc_eps | rounds | cases | > 1e-3 | > 1e-6 | max residual |\n";
  o << "|---|--:|--:|--:|--:|--:|--:|--:|\n";
  for (const auto& c : map)
    o << "| " << md_cell(c.family) << " | " << fmt_g(c.scale) << " | " << fmt_g(c.eps) << " | "
      << c.rounds << " | " << c.cases << " | " << share(c.above_1e3, c.cases) << " | "
      << share(c.above_1e6, c.cases) << " | " << fmt_g(c.max_residual) << " |\n";
  o << "\n";
}

void md_gains(std::ostringstream& o, const std::vector<GainCurve>& gains) {
  for (const auto& g : gains) {
    const std::size_t n = std::max({g.forward.size(), g.backward.size(), g.spectral.size()});
    auto at = [](const std::vector<double>& v, std::size_t depth) {
      return depth <= v.size() ? fmt_g(v[depth - 1], 4) : std::string("-");
    };
    o << "Gain of the composite mapping against depth, " << md_cell(g.label)
      << " (1: doubly stochastic):\n\n| depth | forward | backward | spectral |\n"
      << "|--:|--:|--:|--:|\n";
    for (const std::size_t d : shown_depths(n))
      o << "| " << d << " | " << at(g.forward, d) << " | " << at(g.backward, d) << " | "
        << at(g.spectral, d) << " |\n";
    o << "\n";
  }
}

}  // namespace

std::string to_markdown(const Report& r) {
  std::ostringstream o;
  const Meta& m = r.meta;
  const auto [entries, ok, cases, pass] = r.summary();
  o << "# mhc-verify report: " << (pass ? "PASS" : "FAIL") << "\n\n";
  o << md_code(m.command) << "  \n";
  o << "mhc-verify " << md_cell(m.version) << " (" << md_cell(m.git_commit) << "), "
    << md_cell(m.compiler) << ", " << md_cell(m.build_type) << "; " << md_cell(m.host)
    << "; device: " << md_cell(m.device) << "  \n";
  o << "started " << md_cell(m.started) << ", " << fmt_g(m.wall_s) << " s";
  if (!r.complete)
    o << "; **incomplete**"
      << (r.interrupted.empty() ? "" : " (interrupted by " + md_cell(r.interrupted) + ")");
  o << "\n\n"
    << r.entries.size() << " entries, " << ok << " as expected, " << cases << " cases.\n\n";
  o << "| entry | result | expect | cases | pass | fail | undecidable | mistrusted | max ratio |\n";
  o << "|---|---|---|--:|--:|--:|--:|--:|--:|\n";
  // Those not as expected first; an entry judged without cases shows only its result.
  for (int pass_ok = 0; pass_ok < 2; ++pass_ok)
    for (const auto& e : r.entries) {
      if (e.ok() != bool(pass_ok)) continue;
      double worst = 0;
      for (const auto& a : e.stages) worst = std::max(worst, a.ratio_max);
      auto count = [&](oracles::State s) {
        return e.cases.empty() ? std::string("-") : std::to_string(e.count(s));
      };
      const std::string result = md_cell(entry_result(e));
      o << "| " << md_cell(e.id) << " | " << (e.ok() ? result : "**" + result + "**") << " | "
        << md_cell(e.expect) << " | " << (e.cases.empty() ? "-" : std::to_string(e.cases.size()))
        << " | " << count(oracles::State::pass) << " | " << count(oracles::State::fail) << " | "
        << count(oracles::State::undecidable) << " | " << count(oracles::State::mistrusted) << " | "
        << (e.stages.empty() ? "-" : fmt_g(worst)) << " |\n";
    }
  for (const auto& e : r.entries) {
    std::set<std::string> seen;  // deviations explained in this entry
    o << "\n## " << md_cell(e.id) << (e.ok() ? "" : " (NOT OK)") << "\n\n";
    if (!e.settings.empty()) {
      for (std::size_t i = 0; i < e.settings.size(); ++i)
        o << (i ? ", " : "") << md_cell(e.settings[i].first) << "="
          << md_cell(e.settings[i].second);
      o << "\n\n";
    }
    if (!e.problem.empty())
      o << "- **problem**: " << md_cell(e.problem) << "\n" << md_explained(e.problem, seen, "  ");
    for (const auto& [k, v] : e.facts)
      o << "- " << md_cell(k) << ": " << md_cell(v) << "\n"
        << (k == "diagnosis" ? md_explained(v, seen, "  ") : "");
    if (!e.facts.empty() || !e.problem.empty()) o << "\n";
    if (!e.map.empty()) md_map(o, e.map);
    if (!e.gains.empty()) md_gains(o, e.gains);
    if (!e.stages.empty()) {
      o << "| stage | pass | fail | undec | mistr | max ratio | p99 ratio | median ratio | max ulp "
           "| worst |\n";
      o << "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n";
      for (const auto& a : e.stages)
        o << "| " << md_cell(a.stage) << " | " << state_count(a, "pass") << " | "
          << state_count(a, "fail") << " | " << state_count(a, "undecidable") << " | "
          << state_count(a, "mistrusted") << " | " << fmt_g(a.ratio_max) << " | "
          << fmt_g(a.ratio_p99) << " | " << fmt_g(a.ratio_median) << " | " << fmt_g(a.max_ulp)
          << " | case " << a.worst_case << " token " << a.worst.token << " elem " << a.worst.index
          << " |\n";
    }
    for (const auto& c : e.cases) {
      if (c.verdict.state != oracles::State::fail) continue;
      const auto* s = first_divergent(c);
      o << "\n- **fail** " << md_cell(case_name(c)) << ": first divergent stage "
        << md_code(c.verdict.first_divergent) << (s ? ": " + md_cell(s->reason) : "") << "\n";
      if (!c.diagnosis.empty())
        o << "  - diagnosis: " << md_cell(c.diagnosis) << "\n"
          << md_explained(c.diagnosis, seen, "    ");
      if (!c.repro.empty()) o << "  - REPRO: " << md_code(c.repro) << "\n";
      if (!c.saved.empty()) o << "  - saved: " << md_code(c.saved) << "\n";
    }
  }
  return clean_text(o.str(), true, "\n");  // and what came from elsewhere: valid UTF-8
}

std::string to_junit(const Report& r) {
  struct Case {
    std::string name, kind, message, body;  // kind: "", "failure", "skipped"
    double seconds = -1;                    // < 0: not timed
  };
  // Times: a case's is its judgement's wall time; a test about the whole entry (caught, a
  // regression) and a suite take the sum of the entry's cases; <testsuites> the run's wall time
  // (a merge's: the sum of its suites).
  auto seconds = [](double s) { return s < 0 ? std::string() : " time=\"" + fmt_g(s, 6) + "\""; };
  std::ostringstream suites;
  int tests = 0, failures = 0, skipped = 0;
  double total = 0;
  for (const auto& e : r.entries) {
    std::vector<Case> tc;
    double judged = e.cases.empty() ? -1 : 0;
    for (const auto& c : e.cases) judged += c.seconds;
    // A problem (a regression, a wrong diagnosis, a flagged legitimate kernel) is a test of its
    // own, named by its entry so that a CI page says which one; an entry judged without cases
    // (mutants --production) is that one test, passing or not.
    if (!e.problem.empty())
      tc.push_back({e.id, "failure", e.problem, "", judged});
    else if (e.cases.empty() && r.complete)
      tc.push_back({e.id, e.ok() ? "" : "failure", e.ok() ? "" : entry_result(e), "", judged});
    if (e.expect == "fail" && !e.cases.empty()) {
      Case c{"caught", "", "", "", judged};
      if (!e.count(oracles::State::fail)) {
        c.kind = "failure";
        c.message = "a wrong kernel passed every case: the harness did not catch it";
      }
      tc.insert(tc.begin(), c);
    } else if (e.expect != "fail") {
      for (const auto& c : e.cases) {
        Case t{case_name(c), "", "", "", c.seconds};
        const auto st = c.verdict.state;
        if (st == oracles::State::fail) {
          const auto* s = first_divergent(c);
          t.kind = "failure";
          t.message =
              "first divergent stage " + c.verdict.first_divergent + (s ? ": " + s->reason : "");
          if (!c.diagnosis.empty()) t.body += "DIAGNOSIS: " + c.diagnosis + "\n";
          for (const auto& [name, sentence] : oracles::diagnosis_sentences(c.diagnosis))
            t.body += "  " + name + ": " + sentence + "\n";
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
      tc.push_back({"no case finished", "skipped", "the run did not finish", "", -1});
    int f = 0, sk = 0;
    for (const auto& c : tc) {
      f += c.kind == "failure";
      sk += c.kind == "skipped";
    }
    tests += int(tc.size());
    failures += f;
    skipped += sk;
    total += std::max(judged, 0.0);
    suites << "  <testsuite name=\"" << xml(e.id) << "\" tests=\"" << tc.size() << "\" failures=\""
           << f << "\" errors=\"0\" skipped=\"" << sk << "\"" << seconds(judged)
           << ">\n    <properties>\n";
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
      suites << "    <testcase classname=\"" << xml(e.id) << "\" name=\"" << xml(c.name) << "\""
             << seconds(c.seconds);
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
  // A run that has not finished is an error of its own: the file a killed or interrupted run
  // leaves holds passing cases only, and a CI page that reads it must not show green.
  int errors = 0;
  if (!r.complete) {
    errors = 1;
    ++tests;
    const std::string why =
        !r.interrupted.empty() ? "the run was interrupted by " + r.interrupted +
                                     ": the tests above are the cases it finished"
        : r.meta.subcommand == "merge"
            ? "a part of the merge did not finish, or is missing (the merge's INCOMPLETE and "
              "MISSING lines name them): the tests above are the cases the parts hold"
            : "the run has not finished (it is still running, or an error or a kill stopped "
              "it): the tests above are the cases judged before this file was written";
    suites << "  <testsuite name=\"mhc-verify run\" tests=\"1\" failures=\"0\" errors=\"1\" "
              "skipped=\"0\">\n    <testcase classname=\"mhc-verify run\" name=\"finished\">\n"
              "      <error message=\""
           << xml(why) << "\"/>\n    </testcase>\n  </testsuite>\n";
  }
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"mhc-verify\" tests=\""
    << tests << "\" failures=\"" << failures << "\" errors=\"" << errors << "\" skipped=\""
    << skipped << "\"" << seconds(r.meta.subcommand == "merge" ? total : r.meta.wall_s) << ">\n"
    << suites.str() << "</testsuites>\n";
  return o.str();
}

}  // namespace mhc::reports
