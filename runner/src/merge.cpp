#include "mhc/runner/merge.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>

#include "mhc/reports/report.hpp"
#include "mhc/reports/text.hpp"
#include "mhc/runner/session.hpp"

namespace mhc::runner {

namespace {

// Shards of one campaign run the same command line (their report paths aside) with the same
// count; the index differs.
std::string campaign_of(const reports::Report& r) {
  return r.meta.shards > 1 ? std::to_string(r.meta.shards) + " " + r.meta.campaign : "";
}

}  // namespace

MergePlan::MergePlan(std::vector<std::string> files) : files_(std::move(files)) {
  for (const auto& f : files_) parts_.push_back(reports::read_report(f));
  // The same file twice (by another name too) would count its cases twice.
  for (std::size_t i = 0; i < files_.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (reports::same_file(files_[i], files_[j]))
        throw std::invalid_argument(files_[i] + " and " + files_[j] +
                                    " are the same report; give each report once");
  std::map<std::pair<std::string, int>, std::size_t> seen;
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    const std::string c = campaign_of(parts_[i]);
    if (c.empty()) continue;
    const auto [at, fresh] = seen.emplace(std::make_pair(c, parts_[i].meta.shard), i);
    if (!fresh)
      throw std::invalid_argument(files_[i] + " and " + files_[at->second] + " are both shard " +
                                  std::to_string(parts_[i].meta.shard) + " of " +
                                  std::to_string(parts_[i].meta.shards) + " of `" +
                                  parts_[i].meta.campaign + "`");
  }
}

int MergePlan::run(Session& session) {
  auto& parts = parts_;
  auto& merged = session.report;
  int code = 0;
  complete_ = true;
  // Parts in the order given, a campaign's shards together and by index from its first one.
  std::vector<std::size_t> order(parts.size());
  std::iota(order.begin(), order.end(), 0);
  std::map<std::string, std::size_t> first;  // campaign -> its first part
  for (std::size_t i = 0; i < parts.size(); ++i) first.emplace(campaign_of(parts[i]), i);
  auto rank = [&](std::size_t i) {
    const std::string c = campaign_of(parts[i]);
    return c.empty() ? std::make_pair(i, 0) : std::make_pair(first[c], parts[i].meta.shard);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return rank(a) < rank(b); });

  std::map<std::string, std::set<int>> shards_of;  // campaign -> the indices given
  std::set<std::string> ids;
  std::map<std::string, std::size_t> joined;  // "campaign\nid" -> index in merged.entries
  for (const std::size_t i : order) {
    auto& part = parts[i];
    const std::string campaign = campaign_of(part);
    // A part that decided nothing may join parts that did: the merge decides that again below.
    code = std::max(code, part.exit_code == kUndecidedExit ? 0 : part.exit_code);
    if (!part.complete) {
      complete_ = false;
      std::printf(
          "INCOMPLETE %s%s\n", files_[i].c_str(),
          part.interrupted.empty() ? "" : (" (interrupted by " + part.interrupted + ")").c_str());
    }
    if (merged.meta.device == "none" && part.meta.device != "none")
      merged.meta.device = part.meta.device;
    if (!campaign.empty()) shards_of[campaign].insert(part.meta.shard);
    for (auto& e : part.entries) {
      if (!campaign.empty()) {
        const auto at = joined.find(campaign + "\n" + e.id);
        if (at != joined.end()) {
          merged.entries[at->second].join(std::move(e));
          continue;
        }
        joined[campaign + "\n" + e.id] = merged.entries.size();
      }
      if (!ids.insert(e.id).second) {
        e.id += " (" + files_[i] + ")";
        ids.insert(e.id);
      }
      merged.entries.push_back(std::move(e));
    }
  }
  for (const auto& [campaign, given] : shards_of) {
    const int count = std::stoi(campaign.substr(0, campaign.find(' ')));
    for (int k = 0; k < count; ++k)
      if (!given.count(k)) {
        complete_ = false;
        std::printf("MISSING shard %d of %d of `%s`\n", k, count,
                    reports::clean_text(campaign.substr(campaign.find(' ') + 1)).c_str());
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
  const bool pass = ok == int(merged.entries.size()) && complete_ && code == 0;
  std::size_t cases = 0, decided = 0;
  for (const auto& e : merged.entries) {
    cases += e.cases.size();
    decided += std::size_t(e.count(oracles::State::pass) + e.count(oracles::State::fail));
  }
  const bool none_decided = pass && nothing_decided(long(cases), long(decided));
  std::printf("\nmerge: %s: %d of %zu entries as expected, from %zu reports%s\n",
              none_decided ? kUndecided
              : pass       ? "PASS"
                           : "FAIL",
              ok, merged.entries.size(), parts.size(),
              complete_ ? "" : "; some incomplete or missing");
  return none_decided ? kUndecidedExit : pass ? 0 : 1;
}

}  // namespace mhc::runner
