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
      "Shards of one campaign (the same command run with --shards or a scheduler's index) are\n"
      "joined: an entry several shards hold becomes the entry the unsharded run records, and a\n"
      "shard no file holds is named MISSING. Other entries keep their ids (a repeated id gets\n"
      "the file's name appended). Prints one line per entry and a verdict last. Exit 0 when every\n"
      "entry met its expectation, every part completed with exit 0 (or 3) and no shard is\n"
      "missing; 1 otherwise; 2 when a file is not a report, or two files are the same shard; 3\n"
      "(UNDECIDED) when no case of any part was decided.");
  return [st]() -> int {
    runner::MergePlan plan(st->files);  // a file that is not a report fails before any output
    st->out.reads = st->files;
    runner::Session session(st->out);
    const int code = plan.run(session);
    return session.finish(code, plan.complete());
  };
}

}  // namespace mhc::cli
