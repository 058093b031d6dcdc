// mhc-verify merge: several reports (runs, shards, CI jobs) as one, and the summary of them.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "commands.hpp"
#include "mhc/runner/session.hpp"

namespace mhc::cli {

Run add_merge(CLI::App& app) {
  struct State {
    std::vector<std::string> files;
    reports::Outputs out;
  };
  auto st = std::make_shared<State>();
  app.add_option("reports", st->files, "mhc-report/1 JSON files (written with --json)")->required();
  add_report_options(app, st->out);
  app.footer(
      "Entries keep their ids (a repeated id gets the file's name appended). Prints one line per\n"
      "entry and a verdict last. Exit 0 when every entry met its expectation and every part\n"
      "completed with exit 0; 1 otherwise; 2 when a file is not a report.");
  return [st]() -> int {
    std::vector<reports::Report> parts;
    for (const auto& f : st->files) parts.push_back(reports::read_report(f));
    runner::Session session(st->out);
    auto& merged = session.report;
    int code = 0;
    bool complete = true;
    std::set<std::string> ids;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      code = std::max(code, parts[i].exit_code);
      if (!parts[i].complete) {
        complete = false;
        std::printf("INCOMPLETE %s%s\n", st->files[i].c_str(),
                    parts[i].interrupted.empty()
                        ? ""
                        : (" (interrupted by " + parts[i].interrupted + ")").c_str());
      }
      if (merged.meta.device == "none" && parts[i].meta.device != "none")
        merged.meta.device = parts[i].meta.device;
      for (auto& e : parts[i].entries) {
        if (!ids.insert(e.id).second) {
          e.id += " (" + st->files[i] + ")";
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
      std::printf("%-58s %6zu %5d %6d %10.3g  %s\n", e.id.c_str(), e.cases.size(),
                  e.count(oracles::State::fail), e.count(oracles::State::undecidable), worst,
                  e.ok() ? (e.expect == "fail" ? "caught, as expected" : "ok")
                         : ("NOT OK" + (e.problem.empty() ? "" : ": " + e.problem)).c_str());
    }
    const bool pass = ok == int(merged.entries.size()) && complete && code == 0;
    std::printf("\nmerge: %s: %d of %zu entries as expected, from %zu reports%s\n",
                pass ? "PASS" : "FAIL", ok, merged.entries.size(), parts.size(),
                complete ? "" : "; some incomplete");
    const int rc = session.finish(pass ? 0 : 1);
    merged.exit_code = rc;
    return rc;
  };
}

}  // namespace mhc::cli
