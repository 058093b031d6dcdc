// The report model and its renderers on hand-built verdicts.
#include <unistd.h>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mhc/reports/report.hpp"
#include "mhc/reports/text.hpp"

using namespace mhc;
using State = oracles::State;

namespace {

oracles::StageVerdict stage(const std::string& name, State st, double ratio_max, double p50) {
  oracles::StageVerdict s;
  s.stage = name;
  s.state = st;
  s.ratio_max = ratio_max;
  s.ratio_p99 = ratio_max;
  s.ratio_p50 = p50;
  s.worst.index = 7;
  s.worst.token = 1;
  s.worst.ratio = ratio_max;
  s.ulp_hist.assign(oracles::kUlpBins, 1);
  s.samples = {s.worst};
  return s;
}

reports::CaseRecord make_case(std::size_t i, State st, double ratio) {
  reports::CaseRecord c;
  c.index = i;
  c.seed = 100 + i;
  c.verdict.state = st;
  if (st == State::fail) c.verdict.first_divergent = "comb";
  c.verdict.stages = {stage("pre", State::pass, 0.25, 0.01 * double(i + 1)),
                      stage("comb", st, ratio, 0.1)};
  return c;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("reports: an entry aggregates its cases per stage", "[reports]") {
  reports::Entry e;
  e.add_case(make_case(0, State::pass, 0.5));
  e.add_case(make_case(1, State::fail, 3.0));
  e.add_case(make_case(2, State::pass, 0.75));
  REQUIRE(e.stages.size() == 2);
  const auto& comb = e.stages[1];
  CHECK(comb.stage == "comb");
  CHECK(comb.ratio_max == 3.0);
  CHECK(comb.worst_case == 1);
  CHECK(comb.states.at("pass") == 2);
  CHECK(comb.states.at("fail") == 1);
  CHECK(comb.ulp_hist[0] == 3);  // one element per case in each bin
  // pre: medians 0.01, 0.02, 0.03 -> 0.02
  CHECK(e.stages[0].ratio_median == Approx(0.02));
  CHECK(e.count(State::fail) == 1);
  CHECK_FALSE(e.ok());
  e.expect = "fail";  // a wrong kernel: caught, so as expected
  CHECK(e.ok());
  e.problem = "misdiagnosed";
  CHECK_FALSE(e.ok());
  // The cases keep their verdicts; their samples and histograms moved into the aggregates.
  CHECK(e.cases[1].verdict.stages[1].samples.empty());
}

TEST_CASE("reports: JSON writes non-finite numbers as strings and is deterministic", "[reports]") {
  reports::Report r;
  r.meta.version = "0";
  auto& e = r.entry("check k op fp32");
  auto c = make_case(0, State::fail, HUGE_VAL);
  c.verdict.stages[1].metrics.max_ulp = std::nan("");
  e.add_case(c);
  const std::string a = reports::to_json(r), b = reports::to_json(r);
  CHECK(a == b);
  const auto j = nlohmann::json::parse(a);
  CHECK(j["schema"] == "mhc-report/1");
  CHECK(j["entries"][0]["stages"][1]["ratio_max"] == "inf");
  CHECK(j["entries"][0]["cases"][0]["stages"][1]["max_ulp"] == "nan");
  CHECK(j["entries"][0]["cases"][0]["first_divergent"] == "comb");
  CHECK(j["summary"]["not_ok"] == 1);
  CHECK(j["interrupted"].is_null());
}

TEST_CASE("reports: JUnit and HTML escape what they quote", "[reports]") {
  reports::Report r;
  r.meta.command = "mhc-verify check --kernel a<b & \"c\"";
  auto& e = r.entry("check <k> & op");
  auto c = make_case(0, State::fail, 2.0);
  c.verdict.stages[1].reason = "got 1 < want 2 & \x01 bound";
  c.repro = "mhc-verify check --seed 1";
  e.add_case(c);
  const std::string x = reports::to_junit(r);
  CHECK(x.find("name=\"check &lt;k&gt; &amp; op\"") != std::string::npos);
  CHECK(x.find("got 1 &lt; want 2 &amp; \\x01 bound") != std::string::npos);  // escaped, visible
  CHECK(x.find("tests=\"1\" failures=\"1\"") != std::string::npos);
  CHECK(x.find("REPRO: mhc-verify check --seed 1") != std::string::npos);
  const std::string h = reports::to_html(r);
  CHECK(h.find("a&lt;b &amp; &quot;c&quot;") != std::string::npos);
  CHECK(h.find("<svg") != std::string::npos);
  CHECK(h.find("check <k>") == std::string::npos);
}

TEST_CASE("reports: a wrong kernel's entry is one JUnit test that fails when it was not caught",
          "[reports]") {
  reports::Report r;
  auto& e = r.entry("mutant:x");
  e.expect = "fail";
  e.add_case(make_case(0, State::pass, 0.5));
  CHECK(reports::to_junit(r).find("<failure message=\"a wrong kernel passed every case") !=
        std::string::npos);
  e.add_case(make_case(1, State::fail, 5));
  CHECK(reports::to_junit(r).find("<failure") == std::string::npos);
}

TEST_CASE("reports: writes are atomic and name the file on failure", "[reports]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("mhc-reports-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "r.json").string();
  reports::write_atomic(path, "first");
  reports::write_atomic(path, "second");
  CHECK(slurp(path) == "second");
  int files = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) files += f.is_regular_file();
  CHECK(files == 1);  // no temporary left behind
  const std::string bad = (dir / "missing" / "r.json").string();
  try {
    reports::write_atomic(bad, "x");
    FAIL("no exception");
  } catch (const std::runtime_error& ex) {
    CHECK(std::string(ex.what()).find(bad) != std::string::npos);
  }
  // The writer writes every format it is given, and always on the final write.
  reports::Outputs out;
  out.json = (dir / "a.json").string();
  out.junit = (dir / "a.xml").string();
  reports::Writer w(out);
  reports::Report r;
  r.entry("e").add_case(make_case(0, State::pass, 0.5));
  w.write(r, true);
  CHECK(nlohmann::json::parse(slurp(out.json))["summary"]["cases"] == 1);
  CHECK(slurp(out.junit).find("<testsuites") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("reports: text from outside is made valid UTF-8 with its control bytes escaped",
          "[reports][text]") {
  using reports::clean_text;
  CHECK(clean_text("plain ascii") == "plain ascii");
  CHECK(clean_text("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") ==
        "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  CHECK(clean_text("a\xFF"
                   "b") == "a\\xFFb");
  CHECK(clean_text("\xC3") == "\\xC3");                             // truncated sequence
  CHECK(clean_text("\xC0\xAF") == "\\xC0\\xAF");                    // overlong
  CHECK(clean_text("\xED\xA0\x80") == "\\xED\\xA0\\x80");           // a surrogate
  CHECK(clean_text("\xF4\x90\x80\x80") == "\\xF4\\x90\\x80\\x80");  // beyond U+10FFFF
  CHECK(clean_text("x\nPASS\x1B[31m") == "x\\x0APASS\\x1B[31m");
  CHECK(clean_text("x\ny\tz", true, "\n") == "x\ny\\x09z");
  CHECK(clean_text("x\ny\x1B", false) == "x\ny\x1B");  // controls kept when asked
  CHECK(clean_text(std::string("a\0b", 3)) == "a\\x00b");
}

// A stage's second-tier verdict, limits included, survives a JSON write and read (the gate and
// merge read reports back); a report written before the limits were recorded reads with 0.
TEST_CASE("reports: the second tier's verdict and its limits round-trip through JSON",
          "[reports]") {
  reports::Report r;
  reports::CaseRecord c = make_case(0, State::fail, 0.5);
  oracles::StageVerdict& s = c.verdict.stages[1];
  s.rule = "noise";
  s.has_noise = true;
  s.noise.state = State::fail;
  s.noise.reason = "second tier";
  s.noise.elements = 64;
  s.noise.z_max = 7.25;
  s.noise.z_rms = 0.75;
  s.noise.z_limit = 6;
  s.noise.rms_limit = 1.5;
  r.entry("e").add_case(std::move(c));
  const auto dir =
      std::filesystem::temp_directory_path() / ("mhc-noise-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "r.json").string();
  reports::write_atomic(path, reports::to_json(r));
  const reports::Report back = reports::read_report(path);
  const auto& n = back.entries.at(0).cases.at(0).verdict.stages.at(1).noise;
  CHECK(n.z_max == 7.25);
  CHECK(n.z_limit == 6);
  CHECK(n.rms_limit == 1.5);
  auto j = nlohmann::json::parse(reports::to_json(r));
  auto& jn = j["entries"][0]["cases"][0]["stages"][1]["noise"];
  jn.erase("z_limit");
  jn.erase("rms_limit");
  reports::write_atomic(path, j.dump());
  CHECK(reports::read_report(path).entries.at(0).cases.at(0).verdict.stages.at(1).noise.z_limit ==
        0);
  std::filesystem::remove_all(dir);
}
