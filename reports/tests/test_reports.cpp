// The report model and its renderers on hand-built verdicts.
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "mhc/oracles/diagnosis.hpp"
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
  s.worst.want = 1;  // an element off by ratio_max times its bound
  s.worst.bound = 1e-6;
  s.worst.got = 1 + ratio_max * 1e-6;
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

// In a child: raise() delivers synchronously, so the signals arrive in the order and at the
// times written, whatever the machine's load.
int child_status(bool second_later) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    reports::install_interrupt_handler();
    std::raise(SIGINT);
    if (second_later) std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    std::raise(SIGINT);  // `timeout` sends the process one, then its group another
    ::_exit(reports::interrupted() != nullptr ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST_CASE("reports: a signal delivered twice at once stops the run once; a later one ends it",
          "[reports][interrupt]") {
  const int twice = child_status(false);
  CHECK((WIFEXITED(twice) && WEXITSTATUS(twice) == 0));
  const int later = child_status(true);
  CHECK((WIFSIGNALED(later) && WTERMSIG(later) == SIGINT));
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
  // C1 (U+009B is a one-code CSI), bidi overrides and isolates, XML's forbidden noncharacters.
  CHECK(clean_text("a\xC2\x9B"
                   "31mb") == "a\\u009B31mb");
  CHECK(clean_text("x\xE2\x80\xAEtxt.exe \xE2\x81\xA6") == "x\\u202Etxt.exe \\u2066");
  CHECK(clean_text("n\xEF\xBF\xBE\xEF\xBF\xBF") == "n\\uFFFE\\uFFFF");
  CHECK(clean_text("\xC2\x85", false) == "\xC2\x85");                   // kept when asked
  CHECK(clean_text("\xC2\xA0\xEF\xBF\xBD") == "\xC2\xA0\xEF\xBF\xBD");  // NBSP, U+FFFD stay
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

// Indices, seeds and counts read back are integers >= 0: a negative or fractional one is not read
// as some other number (-5 as 2^64 - 5, 1e30 as 0).
TEST_CASE("reports: a count that is not a whole number >= 0 is refused", "[reports]") {
  reports::Report r;
  r.entry("e").add_case(make_case(3, State::pass, 0.5));
  const auto dir =
      std::filesystem::temp_directory_path() / ("mhc-whole-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "r.json").string();
  for (const auto& [where, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"/entries/0/cases/0/index", -5},
           {"/entries/0/cases/0/index", 1e30},
           {"/entries/0/cases/0/index", 2.5},
           {"/entries/0/cases/0/seed", -1},
           {"/entries/0/cases/0/stages/0/failed", -3},
           {"/entries/0/cases/0/stages/0/worst/index", "7"},
           {"/entries/0/stages/0/ulp_hist/0", -5},
           {"/entries/0/stages/0/worst/case", 2.7},
           {"/meta/threads", -1},
           {"/exit_code", 1.5}}) {
    auto j = nlohmann::json::parse(reports::to_json(r));
    j[nlohmann::json::json_pointer(where)] = value;
    reports::write_atomic(path, j.dump());
    CAPTURE(where, value.dump());
    CHECK_THROWS_WITH(reports::read_report(path),
                      Catch::Matchers::Contains("not a valid mhc-report/1 report"));
  }
  reports::write_atomic(path, reports::to_json(r));
  CHECK(reports::read_report(path).entries.at(0).cases.at(0).index == 3);
  std::filesystem::remove_all(dir);
}

TEST_CASE("reports: every catalogued deviation is explained in a sentence",
          "[reports][diagnosis]") {
  std::vector<std::string> names;
  for (const auto& s : oracles::deviation_catalogue()) names.push_back(s.name());
  for (const auto& s : oracles::block_deviation_catalogue()) names.push_back(s.name());
  for (const auto& [name, eps] : oracles::norm_eps_alternatives()) names.push_back(name);
  for (const auto& n : names) {
    INFO(n);
    CHECK(oracles::diagnosis_sentence(n).size() > 20);
  }
  // The undeclared precisions' names, by the declaration parts they name.
  CHECK_THAT(oracles::diagnosis_sentence("undeclared_products_tf32"),
             Catch::Matchers::Contains("the projection's operands in tf32") &&
                 Catch::Matchers::Contains("adds products=tf32 "));
  CHECK_THAT(oracles::diagnosis_sentence("undeclared_mixes_bf16_and_streams_bf16"),
             Catch::Matchers::Contains("adds mixes=bf16,streams=bf16 "));
  CHECK_THAT(oracles::diagnosis_sentence("undeclared_intermediates_fp16"),
             Catch::Matchers::Contains("intermediates=fp16,mixes=fp16,streams=fp16"));
  CHECK(oracles::diagnosis_sentence("undeclared_bogus_bf16").empty());
  CHECK(oracles::diagnosis_sentence("undeclared_").empty());
  CHECK(oracles::diagnosis_sentence("deepseek").empty());
  CHECK(oracles::diagnosis_sentence("comb").empty());
  // Names inside a diagnosis line or a list, as whole words, each once; others ignored.
  const auto found = oracles::diagnosis_sentences(
      "matches the oracle with iters+1 or hc_eps_x0.1 or comb_transposed_at_ffn|iters+1.");
  REQUIRE(found.size() == 3);
  CHECK(found[0].first == "iters+1");
  CHECK(found[1].first == "hc_eps_x0.1");
  CHECK(found[2].first == "comb_transposed_at_ffn");
  CHECK(oracles::diagnosis_sentences("mutant:col_eps_outside, first divergent comb").empty());
}

namespace {

// The fragment ids the page defines and the ones its links point to, in order.
std::pair<std::vector<std::string>, std::vector<std::string>> ids_and_links(const std::string& h) {
  std::vector<std::string> ids, links;
  for (const std::string key : {" id=\"", " href=\"#"}) {
    auto& out = key == " id=\"" ? ids : links;
    for (std::size_t p = h.find(key); p != std::string::npos; p = h.find(key, p + 1)) {
      const std::size_t b = p + key.size();
      out.push_back(h.substr(b, h.find('"', b) - b));
    }
  }
  return {ids, links};
}

}  // namespace

TEST_CASE("reports: the HTML page opens with an overview, failures first, linked to anchors",
          "[reports][html]") {
  reports::Report r;
  r.entry("check a/b fp32").add_case(make_case(0, State::pass, 0.5));
  r.entry("check a b fp32").add_case(make_case(0, State::pass, 0.5));  // the same slug
  auto& bad = r.entry("check bad fp32");
  auto c = make_case(0, State::fail, 3.0);
  c.diagnosis = "matches the oracle with col_eps_after";
  bad.add_case(c);
  auto& prod = r.entry("production mutant:row_without_eps");
  prod.kind = "production";
  prod.facts = {{"detectable", "no"}, {"verdict", "undetectable"}};
  const std::string h = reports::to_html(r);
  const std::size_t overview = h.find("<table id=\"overview\"");
  REQUIRE(overview != std::string::npos);
  CHECK(h.find("<table") == overview);   // the first table
  CHECK(h.find("<details") > overview);  // above every section
  // The failing entry's line comes first, though it was recorded third.
  const std::size_t first_row = h.find("<a href=\"#", overview);
  const std::string bad_link = "<a href=\"#e-check-bad-fp32\"";
  CHECK(h.compare(first_row, bad_link.size(), bad_link) == 0);
  const auto [ids, links] = ids_and_links(h);
  CHECK(std::set<std::string>(ids.begin(), ids.end()).size() == ids.size());  // unique
  CHECK(links.size() >= r.entries.size());
  for (const auto& l : links) {
    INFO(l);
    CHECK(std::find(ids.begin(), ids.end(), l) != ids.end());
  }
  // An entry judged without cases shows its verdict on its line, not 0 cases.
  const std::size_t prod_row = h.find("#e-production-mutant-row-without-eps\"", overview);
  REQUIRE(prod_row != std::string::npos);
  CHECK(h.substr(prod_row, h.find("</tr>", prod_row) - prod_row).find(">undetectable<") !=
        std::string::npos);
  // The diagnosis is explained in words, in the HTML and the Markdown.
  const std::string why = oracles::diagnosis_sentence("col_eps_after");
  CHECK(h.find(reports::markup_escape(why)) != std::string::npos);
  const std::string md = reports::to_markdown(r);
  CHECK(md.find(why) != std::string::npos);
  CHECK(md.find("| production mutant:row_without_eps | undetectable |") != std::string::npos);
}

TEST_CASE("reports: a stack is plotted once per stage kind, exact stages not at all",
          "[reports][html]") {
  reports::Report r;
  auto& e = r.entry("check cpu stack fp32");
  reports::CaseRecord c;
  for (int layer = 0; layer < 3; ++layer)
    for (const char* kind : {"attn.pre", "x_out", "ffn.experts"}) {
      auto s = stage("L" + std::to_string(layer) + "." + kind, State::pass, 0.25, 0.1);
      if (std::string(kind) == "ffn.experts") {  // exact in every layer
        s.ratio_max = s.ratio_p99 = s.ratio_p50 = 0;
        s.worst.got = s.worst.want;
        s.samples = {s.worst};
      }
      c.verdict.stages.push_back(s);
    }
  c.verdict.stages.push_back(stage("final.norm", State::pass, 0.5, 0.1));
  e.add_case(c);
  const std::string h = reports::to_html(r);
  std::size_t plots = 0;
  for (std::size_t p = h.find("<svg class=\"plot\""); p != std::string::npos;
       p = h.find("<svg class=\"plot\"", p + 1))
    ++plots;
  CHECK(plots == 3);  // attn.pre and x_out against the layer, final.norm's error plot
  CHECK(h.find(">attn.pre</text>") != std::string::npos);
  CHECK(h.find(">L1.attn.pre</text>") == std::string::npos);
  CHECK(h.find("not plotted: ffn.experts") != std::string::npos);
}

TEST_CASE("reports: JUnit has times and names a problem's test by its entry", "[reports]") {
  reports::Report r;
  r.meta.subcommand = "gate";
  r.meta.wall_s = 12.5;
  r.complete = true;
  auto& e = r.entry("gate cpu boundary fp32");
  auto c0 = make_case(0, State::pass, 0.5), c1 = make_case(1, State::pass, 0.5);
  c0.seconds = 0.25;
  c1.seconds = 0.5;
  e.add_case(c0);
  e.add_case(c1);
  e.problem = "REGRESSION: comb max ratio 0.9 > baseline 0.5";
  const std::string x = reports::to_junit(r);
  // The run's wall time on <testsuites>; each case's judgement on its test; the entry's sum on
  // its suite and on the test about the whole entry.
  CHECK(x.find("<testsuites name=\"mhc-verify\" tests=\"3\" failures=\"1\" errors=\"0\" "
               "skipped=\"0\" time=\"12.5\">") != std::string::npos);
  CHECK(x.find("tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"0\" time=\"0.75\">\n    "
               "<properties>") != std::string::npos);
  CHECK(x.find("name=\"case 0 (seed 100)\" time=\"0.25\"/>") != std::string::npos);
  CHECK(x.find("name=\"case 1 (seed 101)\" time=\"0.5\"/>") != std::string::npos);
  CHECK(x.find("name=\"problem\"") == std::string::npos);
  CHECK(x.find("<testcase classname=\"gate cpu boundary fp32\" name=\"gate cpu boundary fp32\" "
               "time=\"0.75\">\n      <failure message=\"REGRESSION: comb") != std::string::npos);
  // An entry without cases has no time; a merge's <testsuites> time is its suites' sum.
  r.entry("production legitimate kernels").kind = "production";
  const std::string two = reports::to_junit(r);
  CHECK(two.find("<testcase classname=\"production legitimate kernels\" name=\"production "
                 "legitimate kernels\"/>") != std::string::npos);
  r.meta.subcommand = "merge";
  CHECK(reports::to_junit(r).find("skipped=\"0\" time=\"0.75\">\n  <testsuite") !=
        std::string::npos);
}

TEST_CASE("reports: JUnit of a run that did not finish has an error, whatever its cases say",
          "[reports]") {
  reports::Report r;
  r.meta.subcommand = "check";
  r.entry("check cpu boundary fp32").add_case(make_case(0, State::pass, 0.5));
  r.complete = true;
  CHECK(reports::to_junit(r).find("<error") == std::string::npos);
  r.complete = false;  // as written during the run, and left so by a SIGKILL
  std::string x = reports::to_junit(r);
  CHECK(x.find("<testsuites name=\"mhc-verify\" tests=\"2\" failures=\"0\" errors=\"1\"") !=
        std::string::npos);
  CHECK(x.find("<testcase classname=\"mhc-verify run\" name=\"finished\">\n      <error "
               "message=\"the run has not finished") != std::string::npos);
  r.interrupted = "SIGTERM";
  x = reports::to_junit(r);
  CHECK(x.find("<error message=\"the run was interrupted by SIGTERM") != std::string::npos);
}

namespace {

reports::MapCell map_cell(const std::string& family, double scale, double eps, int rounds,
                          long cases, long above_1e3, long above_1e6, double max_residual) {
  reports::MapCell c;
  c.family = family;
  c.scale = scale;
  c.eps = eps;
  c.rounds = rounds;
  c.cases = cases;
  c.above_1e3 = above_1e3;
  c.above_1e6 = above_1e6;
  c.max_residual = max_residual;
  return c;
}

// Equal, NaN equal to NaN (a value that went through JSON as "nan").
bool same(double a, double b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}
bool same(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](double x, double y) { return same(x, y); });
}
void check_cells(const std::vector<reports::MapCell>& got,
                 const std::vector<reports::MapCell>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("cell " << i);
    CHECK(got[i].family == want[i].family);
    CHECK(got[i].scale == want[i].scale);
    CHECK(got[i].eps == want[i].eps);
    CHECK(got[i].rounds == want[i].rounds);
    CHECK(got[i].cases == want[i].cases);
    CHECK(got[i].above_1e3 == want[i].above_1e3);
    CHECK(got[i].above_1e6 == want[i].above_1e6);
    CHECK(same(got[i].max_residual, want[i].max_residual));
  }
}
void check_gains(const std::vector<reports::GainCurve>& got,
                 const std::vector<reports::GainCurve>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("curve " << want[i].label);
    CHECK(got[i].label == want[i].label);
    CHECK(same(got[i].forward, want[i].forward));
    CHECK(same(got[i].backward, want[i].backward));
    CHECK(same(got[i].spectral, want[i].spectral));
  }
}

// Two shards of a `sinkhorn map` campaign (with a case each, so that the rest of the join runs).
std::pair<reports::Entry, reports::Entry> map_shards() {
  reports::Entry a, b;
  a.id = b.id = "sinkhorn map";
  a.add_case(make_case(0, State::pass, 0.5));
  b.add_case(make_case(1, State::fail, 2.0));
  a.map = {map_cell("random", 1, 1e-6, 20, 100, 10, 40, 2e-3),
           map_cell("random", 1, 1e-6, 40, 100, 2, 30, 5e-4)};  // differs in the rounds only
  b.map = {map_cell("random", 1, 1e-6, 20, 60, 5, 20, 3e-3),    // a's first: adds
           map_cell("random", 1, 1e-2, 20, 50, 0, 1, 2e-6)};    // differs in hc_eps only: new
  a.gains = {{"oracle", {1, 2, 4}, {1, 1.5, 3}, {1, 1.25, 2}}};
  b.gains = {{"oracle", {1, 3}, {1, 1, 5, 9}, {0.5, 1.5, 1.75}},
             {"kernel cpu", {1, 8}, {1, 8}, {1, 8}}};
  return {a, b};
}

}  // namespace

TEST_CASE("reports: joined shards' map cells add and gain curves take the larger value",
          "[reports][map]") {
  auto [a, b] = map_shards();
  a.join(b);
  // By hand: the cells of one key add their counts and keep the larger residual.
  check_cells(a.map, {map_cell("random", 1, 1e-6, 20, 160, 15, 60, 3e-3),
                      map_cell("random", 1, 1e-6, 40, 100, 2, 30, 5e-4),
                      map_cell("random", 1, 1e-2, 20, 50, 0, 1, 2e-6)});
  check_gains(a.gains, {{"oracle", {1, 3, 4}, {1, 1.5, 5, 9}, {1, 1.5, 2}},
                        {"kernel cpu", {1, 8}, {1, 8}, {1, 8}}});
  // The rest of the join is untouched: the cases and their stages.
  REQUIRE(a.cases.size() == 2);
  CHECK(a.stages.at(1).states.at("pass") == 1);
  CHECK(a.stages.at(1).states.at("fail") == 1);
  // The other order: the same values, its cells first.
  auto [a2, b2] = map_shards();
  b2.join(a2);
  CHECK(b2.map.at(0).cases == 160);
  CHECK(b2.map.at(2).rounds == 40);
  check_gains({b2.gains.at(0)}, {{"oracle", {1, 3, 4}, {1, 1.5, 5, 9}, {1, 1.5, 2}}});
  // A NaN residual or gain (a run that blew up) survives a join in either order.
  auto [c, d] = map_shards();
  d.map[0].max_residual = std::nan("");
  d.gains[0].forward[1] = std::nan("");
  reports::Entry c2 = c, d2 = d;
  c.join(d);
  CHECK(std::isnan(c.map[0].max_residual));
  CHECK(std::isnan(c.gains[0].forward[1]));
  d2.join(c2);
  CHECK(std::isnan(d2.map[0].max_residual));
  CHECK(std::isnan(d2.gains[0].forward[1]));
}

TEST_CASE("reports: a map and gain curves round-trip through JSON, and absent they stay absent",
          "[reports][map]") {
  reports::Report r;
  auto& e = r.entry("sinkhorn map");
  e.map = {map_cell("random", 0.1, 1.0 / 3, 20, 7, 1, 2, 0.30000000000000004),
           map_cell("near-identity", 1e-300, 5e-324, 0, 0, 0, 0, HUGE_VAL)};
  e.gains = {{"oracle", {1, 1.0 / 3, 2.5e300}, {}, {HUGE_VAL, std::nan("")}}};
  r.entry("check cpu pre fp32").add_case(make_case(0, State::pass, 0.5));
  const auto dir =
      std::filesystem::temp_directory_path() / ("mhc-map-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "r.json").string();
  const std::string text = reports::to_json(r);
  reports::write_atomic(path, text);
  const reports::Report back = reports::read_report(path);
  std::filesystem::remove_all(dir);
  REQUIRE(back.entries.size() == 2);
  check_cells(back.entries[0].map, r.entries[0].map);
  check_gains(back.entries[0].gains, r.entries[0].gains);
  CHECK(back.entries[1].map.empty());
  CHECK(back.entries[1].gains.empty());
  CHECK(reports::to_json(back) == text);  // written again, the same bytes
  // Keys: the map and the gains after the Sinkhorn curves; an entry without them has neither,
  // so that the reports of every other command keep their bytes.
  const auto j = nlohmann::ordered_json::parse(text);
  std::vector<std::string> keys, plain_keys;
  for (const auto& [k, v] : j["entries"][0].items()) keys.push_back(k);
  for (const auto& [k, v] : j["entries"][1].items()) plain_keys.push_back(k);
  const std::vector<std::string> want = {
      "id", "kind",    "kernel", "op",     "precision", "error_model", "settings", "expect",
      "ok", "problem", "counts", "stages", "sinkhorn",  "facts",       "cases"};
  CHECK(plain_keys == want);
  std::vector<std::string> with = want;
  with.insert(with.begin() + 13, {"map", "gains"});
  CHECK(keys == with);
  CHECK(j["entries"][0]["map"][1]["max_residual"] == "inf");
  CHECK(j["entries"][0]["gains"][0]["spectral"][1] == "nan");
  CHECK(j["entries"][0]["map"][0]["above_1e6"] == 2);
}

TEST_CASE("reports: the Markdown shows a map's fractions and a long gain curve's depths",
          "[reports][map]") {
  reports::Report r;
  auto& e = r.entry("sinkhorn map");
  e.map = {map_cell("random", 1, 1e-6, 20, 200, 25, 40, 0.0023),
           map_cell("random", 4, 1e-6, 20, 0, 0, 0, 0)};
  reports::GainCurve g{"oracle", {}, {}, {}};
  for (int d = 1; d <= 40; ++d) {
    g.forward.push_back(d);
    g.backward.push_back(2 * d);
    g.spectral.push_back(0.5 * d);
  }
  e.gains = {g, {"kernel cpu", {1.5, 2.5}, {1, 1}, {1, 1}}};
  const std::string md = reports::to_markdown(r);
  CHECK(md.find("| family | logit scale | hc_eps | rounds | cases | > 1e-3 | > 1e-6 | max residual "
                "|\n") != std::string::npos);
  // 25 and 40 of 200: 12.5% and 20%.
  CHECK(md.find("| random | 1 | 1e-06 | 20 | 200 | 12.5% (25) | 20% (40) | 0.0023 |\n") !=
        std::string::npos);
  CHECK(md.find("| random | 4 | 1e-06 | 20 | 0 | - | - | 0 |\n") != std::string::npos);
  // 40 depths: 1, 2, 4, 8, 16, 32 and the last; the short curve every depth.
  const std::size_t oracle = md.find("depth, oracle"), kernel = md.find("depth, kernel cpu");
  REQUIRE(oracle != std::string::npos);
  REQUIRE(kernel != std::string::npos);
  const std::string long_table = md.substr(oracle, kernel - oracle);
  for (int d : {1, 2, 4, 8, 16, 32})
    CHECK(long_table.find("\n| " + std::to_string(d) + " | " + std::to_string(d) + " | " +
                          std::to_string(2 * d) + " | ") != std::string::npos);
  CHECK(long_table.find("\n| 40 | 40 | 80 | 20 |\n") != std::string::npos);
  CHECK(long_table.find("\n| 3 |") == std::string::npos);
  CHECK(long_table.find("\n| 33 |") == std::string::npos);
  CHECK(md.find("\n| 1 | 1.5 | 1 | 1 |\n| 2 | 2.5 | 1 | 1 |\n") != std::string::npos);
  // Without them, neither table.
  reports::Report bare;
  bare.entry("check cpu pre fp32").add_case(make_case(0, State::pass, 0.5));
  const std::string plain = reports::to_markdown(bare);
  CHECK(plain.find("logit scale") == std::string::npos);
  CHECK(plain.find("composite mapping") == std::string::npos);
}

TEST_CASE("reports: the HTML draws a map as heatmaps and the gains as a plot", "[reports][map]") {
  reports::Report r;
  auto& e = r.entry("sinkhorn map");
  e.map = {map_cell("random", 1, 1e-6, 20, 200, 25, 40, 0.0023),
           map_cell("random", 1, 1e-6, 40, 0, 0, 0, 0),
           map_cell("random", 1, 1e-2, 20, 10, 10, 10, 0.5)};
  e.gains = {{"oracle", {1, 2, 4}, {1, 2, 4}, {1, 2, 3}}, {"kernel cpu", {1, 2}, {}, {}}};
  const std::string h = reports::to_html(r);
  // A grid per hc_eps and threshold.
  std::size_t grids = 0;
  for (std::size_t p = h.find("<table class=\"heat\"><caption>"); p != std::string::npos;
       p = h.find("<table class=\"heat\"><caption>", p + 1))
    ++grids;
  CHECK(grids == 4);
  // 25 of 200 above 1e-3: 12.5%, white towards dark red by 1/8 (#ff -> #8b: 241; #ff -> 0: 223).
  CHECK(h.find("<td class=\"h\" style=\"background:#f1dfdf\" title=\"25 of 200 cases above 1e-3; "
               "max residual 0.0023\">12.5%</td>") != std::string::npos);
  CHECK(h.find("title=\"40 of 200 cases above 1e-6; max residual 0.0023\">20%</td>") !=
        std::string::npos);
  CHECK(h.find("background:#8b0000;color:#fff\" title=\"10 of 10 cases above 1e-3; "
               "max residual 0.5\">100%</td>") != std::string::npos);
  CHECK(h.find("<td class=\"h none\" title=\"0 of 0 cases above 1e-3; max residual 0\">") !=
        std::string::npos);
  CHECK(h.find("<td class=\"h none\" title=\"not run\"></td>") != std::string::npos);  // eps 1e-2
  // The gains: a plot, one line per label and norm with values, the ideal dashed, a legend.
  const std::size_t svg = h.find("<svg class=\"plot\"");
  REQUIRE(svg != std::string::npos);
  CHECK(h.find(">composite gain</text>", svg) != std::string::npos);
  std::size_t lines = 0;
  for (std::size_t p = h.find("<polyline class=\"gain\""); p != std::string::npos;
       p = h.find("<polyline class=\"gain\"", p + 1))
    ++lines;
  CHECK(lines == 4);
  CHECK(h.find("class=\"one\"/>", svg) != std::string::npos);
  CHECK(h.find("</svg>kernel cpu forward</li>") != std::string::npos);
  CHECK(h.find("</svg>kernel cpu backward</li>") == std::string::npos);  // none recorded
  // Without them, neither.
  reports::Report bare;
  bare.entry("check cpu pre fp32").add_case(make_case(0, State::pass, 0.5));
  const std::string plain = reports::to_html(bare);
  CHECK(plain.find("<table class=\"heat\"") == std::string::npos);
  CHECK(plain.find("composite gain") == std::string::npos);
}
