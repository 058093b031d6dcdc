#include "mhc/runner/merge.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "mhc/reports/text.hpp"

namespace mhc::runner {

MergePlan::MergePlan(std::vector<std::string> files) : files_(std::move(files)) {
  for (const auto& f : files_) parts_.push_back(reports::read_report(f));
}

int MergePlan::run(Session& session) {
  auto& parts = parts_;
  auto& merged = session.report;
  int code = 0;
  bool complete = true;
  std::set<std::string> ids;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    code = std::max(code, parts[i].exit_code);
    if (!parts[i].complete) {
      complete = false;
      std::printf("INCOMPLETE %s%s\n", files_[i].c_str(),
                  parts[i].interrupted.empty()
                      ? ""
                      : (" (interrupted by " + parts[i].interrupted + ")").c_str());
    }
    if (merged.meta.device == "none" && parts[i].meta.device != "none")
      merged.meta.device = parts[i].meta.device;
    for (auto& e : parts[i].entries) {
      if (!ids.insert(e.id).second) {
        e.id += " (" + files_[i] + ")";
        ids.insert(e.id);
      }
      merged.entries.push_back(std::move(e));
    }
  }
  int ok = 0;
  std::printf("%-58s %6s %5s %6s %10s  %s\n", "entry", "cases", "fail", "undec", "max ratio",
              "result");
  for (const auto& e : merged.entries) {
    double worst = 0;
    for (const auto& a : e.stages) worst = std::max(worst, a.ratio_max);
    ok += e.ok();
    std::printf("%-58s %6zu %5d %6d %10.3g  %s\n", reports::clean_text(e.id).c_str(),
                e.cases.size(), e.count(oracles::State::fail), e.count(oracles::State::undecidable),
                worst,
                e.ok() ? (e.expect == "fail" ? "caught, as expected" : "ok")
                       : ("NOT OK" + (e.problem.empty() ? "" : ": " + e.problem)).c_str());
  }
  const bool pass = ok == int(merged.entries.size()) && complete && code == 0;
  std::printf("\nmerge: %s: %d of %zu entries as expected, from %zu reports%s\n",
              pass ? "PASS" : "FAIL", ok, merged.entries.size(), parts.size(),
              complete ? "" : "; some incomplete");
  return pass ? 0 : 1;
}

}  // namespace mhc::runner
