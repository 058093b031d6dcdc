// mhc-verify merge: the parser of runner::MergePlan.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "commands.hpp"
#include "mhc/runner/merge.hpp"

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
    runner::MergePlan plan(st->files);  // a file that is not a report fails before any output
    runner::Session session(st->out);
    const int rc = session.finish(plan.run(session));
    return rc;
  };
}

}  // namespace mhc::cli
