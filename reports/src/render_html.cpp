// A self-contained HTML page of the report model: inline CSS and SVG, no script, no network.
// Per entry: the stage table, observed error against bound per stage (log-log, the diagonal is
// the bound), ulp histograms, the Sinkhorn residual against step, worst elements and failures.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "mhc/reports/report.hpp"
#include "mhc/reports/text.hpp"

namespace mhc::reports {

namespace {

std::string esc(const std::string& raw) {
  return markup_escape(raw);
}

constexpr double W = 260, H = 190, L = 46, R = 10, T = 22, B = 34;  // plot box and margins

std::string axes(std::ostringstream& o, const std::string& title, const std::string& xlabel,
                 const std::string& ylabel) {
  o << "<svg class=\"plot\" viewBox=\"0 0 " << W << " " << H << "\" width=\"" << W << "\" height=\""
    << H << "\" xmlns=\"http://www.w3.org/2000/svg\">"
    << "<text x=\"" << W / 2 << "\" y=\"14\" class=\"t\">" << esc(title) << "</text>"
    << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << W - L - R << "\" height=\""
    << H - T - B << "\" class=\"box\"/>"
    << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 4 << "\" class=\"l\">" << esc(xlabel)
    << "</text><text x=\"11\" y=\"" << (T + H - B) / 2
    << "\" class=\"l\" transform=\"rotate(-90 11 " << (T + H - B) / 2 << ")\">" << esc(ylabel)
    << "</text>";
  return "</svg>";
}

// Decades [lo, hi] covering the positive finite values (at least one decade wide).
std::pair<int, int> decades(const std::vector<double>& v) {
  double mn = HUGE_VAL, mx = -HUGE_VAL;
  for (double x : v)
    if (x > 0 && std::isfinite(x)) {
      mn = std::min(mn, x);
      mx = std::max(mx, x);
    }
  if (mn > mx) return {-8, 0};
  int lo = int(std::floor(std::log10(mn))), hi = int(std::ceil(std::log10(mx)));
  if (hi <= lo) hi = lo + 1;
  return {lo, hi};
}

void decade_ticks(std::ostringstream& o, int lo, int hi, bool x_axis) {
  const int step = std::max(1, (hi - lo + 4) / 5);
  for (int k = lo; k <= hi; k += step) {
    const double f = double(k - lo) / (hi - lo);
    if (x_axis) {
      const double px = L + f * (W - L - R);
      o << "<text x=\"" << px << "\" y=\"" << H - B + 12 << "\" class=\"k\">1e" << k << "</text>";
    } else {
      const double py = H - B - f * (H - T - B);
      o << "<text x=\"" << L - 3 << "\" y=\"" << py + 3 << "\" class=\"k r\">1e" << k << "</text>";
    }
  }
}

// Observed |got - want| against the bound, log-log; the diagonal is observed = bound.
void error_plot(std::ostringstream& o, const StageAggregate& a) {
  std::vector<double> xs, ys;
  for (const auto& e : a.samples) {
    xs.push_back(e.bound);
    ys.push_back(std::fabs(e.got - e.want));
  }
  std::vector<double> all = xs;
  all.insert(all.end(), ys.begin(), ys.end());
  const auto [lo, hi] = decades(all);
  const std::string close = axes(o, a.stage, "bound", "|got - want|");
  decade_ticks(o, lo, hi, true);
  decade_ticks(o, lo, hi, false);
  auto px = [&, lo = lo, hi = hi](double v) {
    const double f =
        v > 0 && std::isfinite(v) ? (std::log10(v) - lo) / (hi - lo) : (v > 0 ? 1.0 : 0.0);
    return L + std::clamp(f, 0.0, 1.0) * (W - L - R);
  };
  auto py = [&, lo = lo, hi = hi](double v) {
    const double f =
        v > 0 && std::isfinite(v) ? (std::log10(v) - lo) / (hi - lo) : (v > 0 ? 1.0 : 0.0);
    return H - B - std::clamp(f, 0.0, 1.0) * (H - T - B);
  };
  o << "<line x1=\"" << L << "\" y1=\"" << H - B << "\" x2=\"" << W - R << "\" y2=\"" << T
    << "\" class=\"diag\"/>";
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const bool bad = !(ys[i] <= xs[i]);
    o << "<circle cx=\"" << fmt_g(px(xs[i]), 5) << "\" cy=\"" << fmt_g(py(ys[i]), 5)
      << "\" r=\"2.2\" class=\"" << (bad ? "bad" : "ok") << "\"/>";
  }
  o << close;
}

void ulp_plot(std::ostringstream& o, const StageAggregate& a) {
  const std::string close = axes(o, a.stage, "ulp distance", "elements");
  const std::size_t nb = a.ulp_hist.size();
  double mx = 0;
  for (auto c : a.ulp_hist) mx = std::max(mx, std::log10(1.0 + double(c)));
  const double bw = (W - L - R) / double(std::max<std::size_t>(nb, 1));
  for (std::size_t b = 0; b < nb; ++b) {
    const double h = mx > 0 ? std::log10(1.0 + double(a.ulp_hist[b])) / mx * (H - T - B) : 0;
    o << "<rect x=\"" << fmt_g(L + double(b) * bw + 0.5, 5) << "\" y=\"" << fmt_g(H - B - h, 5)
      << "\" width=\"" << fmt_g(bw - 1, 4) << "\" height=\"" << fmt_g(h, 5) << "\" class=\""
      << (b + 1 == nb ? "bar bad" : "bar") << "\"><title>"
      << (b == 0        ? std::string("0 ulp")
          : b + 1 == nb ? std::string(">= 2^24 ulp or non-finite")
                        : "[2^" + std::to_string(b - 1) + ", 2^" + std::to_string(b) + ") ulp")
      << ": " << a.ulp_hist[b] << "</title></rect>";
  }
  for (std::size_t b : {std::size_t(0), std::size_t(9), std::size_t(17), nb - 1})
    if (b < nb)
      o << "<text x=\"" << fmt_g(L + (double(b) + 0.5) * bw, 5) << "\" y=\"" << H - B + 12
        << "\" class=\"k\">"
        << (b == 0        ? "0"
            : b + 1 == nb ? "2^24+"
                          : "2^" + std::to_string(b - 1))
        << "</text>";
  o << "<text x=\"" << L - 3 << "\" y=\"" << T + 8 << "\" class=\"k r\">log</text>" << close;
}

void sinkhorn_plot(std::ostringstream& o, const SinkhornCurve& c) {
  std::vector<double> all = c.residual;
  if (std::isfinite(c.kernel_residual)) all.push_back(c.kernel_residual);
  const auto [lo, hi] = decades(all);
  const std::string close = axes(o, "Sinkhorn residual, " + c.label,
                                 "step (softmax, col, row, ...)", "max |line sum - 1|");
  decade_ticks(o, lo, hi, false);
  const std::size_t n = c.residual.size();
  auto px = [&](std::size_t i) {
    return L + (n > 1 ? double(i) / double(n - 1) : 0.5) * (W - L - R);
  };
  auto py = [&, lo = lo, hi = hi](double v) {
    const double f = v > 0 && std::isfinite(v) ? (std::log10(v) - lo) / (hi - lo) : 0.0;
    return H - B - std::clamp(f, 0.0, 1.0) * (H - T - B);
  };
  o << "<polyline class=\"curve\" points=\"";
  for (std::size_t i = 0; i < n; ++i)
    o << fmt_g(px(i), 5) << "," << fmt_g(py(c.residual[i]), 5) << " ";
  o << "\"/>";
  const double ky = py(c.kernel_residual);
  if (std::isfinite(c.kernel_residual))
    o << "<line x1=\"" << L << "\" y1=\"" << fmt_g(ky, 5) << "\" x2=\"" << W - R << "\" y2=\""
      << fmt_g(ky, 5) << "\" class=\"kern\"/><text x=\"" << W - R - 2 << "\" y=\""
      << fmt_g(ky - 3, 5) << "\" class=\"k r\">kernel " << fmt_g(c.kernel_residual, 2) << "</text>";
  o << "<text x=\"" << L << "\" y=\"" << H - B + 12 << "\" class=\"k\">0</text><text x=\"" << W - R
    << "\" y=\"" << H - B + 12 << "\" class=\"k r\">" << (n ? n - 1 : 0) << "</text>" << close;
}

const char* kStyle = R"(<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d232a;max-width:1400px}
h1{font-size:22px;margin:0 0 6px} h2{font-size:17px;margin:18px 0 6px}
.meta{color:#555;font-size:12.5px} code{font-size:12.5px;background:#f2f4f6;padding:1px 4px}
table{border-collapse:collapse;margin:8px 0;font-size:12.5px}
th,td{border:1px solid #d6dbe0;padding:3px 7px;text-align:right;white-space:nowrap} th{background:#eef1f4}
td:first-child,th:first-child{text-align:left}
.PASS,.ok{color:#17692d;font-weight:600} .FAIL,.bad,.notok{color:#b3261e;font-weight:600}
.banner{font-size:20px;padding:8px 12px;border-radius:6px;display:inline-block;margin:8px 0}
.banner.PASS{background:#e3f4e6} .banner.FAIL{background:#fbe4e2}
details{border:1px solid #d6dbe0;border-radius:6px;margin:10px 0;padding:4px 10px}
summary{cursor:pointer;font-weight:600}
.plots{display:flex;flex-wrap:wrap;gap:6px}
svg.plot{background:#fff;border:1px solid #e3e7eb}
svg .t{font-size:11px;text-anchor:middle;font-weight:600} svg .l{font-size:10px;text-anchor:middle}
svg .k{font-size:8.5px;text-anchor:middle;fill:#555} svg .r{text-anchor:end}
svg .box{fill:none;stroke:#9aa4ae} svg .diag{stroke:#b3261e;stroke-dasharray:4 3}
svg circle.ok{fill:#2b6cb0;fill-opacity:.65} svg circle.bad{fill:#b3261e}
svg .bar{fill:#2b6cb0} svg .bar.bad{fill:#b3261e} svg .curve{fill:none;stroke:#2b6cb0;stroke-width:1.6}
svg .kern{stroke:#b3261e;stroke-dasharray:3 2}
.fail{margin:6px 0;padding:6px 8px;background:#fdf3f2;border-left:3px solid #b3261e}
</style>)";

}  // namespace

std::string to_html(const Report& r) {
  std::ostringstream o;
  const Meta& m = r.meta;
  const auto [entries, ok, cases, pass] = r.summary();
  const char* word = pass ? "PASS" : "FAIL";
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>mhc-verify " << word
    << ": " << esc(m.subcommand) << "</title>" << kStyle << "</head><body>\n";
  o << "<h1>mhc-verify report</h1><div class=\"banner " << word << "\">" << word << ": " << ok
    << " of " << r.entries.size() << " entries as expected, " << cases << " cases"
    << (r.complete              ? ""
        : r.interrupted.empty() ? " (incomplete)"
                                : " (interrupted by " + r.interrupted + ")")
    << "</div>\n<div class=\"meta\"><code>" << esc(m.command) << "</code><br>mhc-verify "
    << esc(m.version) << " (" << esc(m.git_commit) << "), " << esc(m.compiler) << ", "
    << esc(m.build_type) << "; " << esc(m.fp_flags) << "<br>" << esc(m.host)
    << "; device: " << esc(m.device) << "; started " << esc(m.started) << ", " << fmt_g(m.wall_s)
    << " s</div>\n";
  o << "<table><tr><th>entry</th><th>expect</th><th>cases</th><th>pass</th><th>fail</th>"
       "<th>undecidable</th><th>mistrusted</th><th>max ratio</th><th>result</th></tr>\n";
  for (const auto& e : r.entries) {
    double worst = 0;
    for (const auto& a : e.stages) worst = std::max(worst, a.ratio_max);
    o << "<tr><td>" << esc(e.id) << "</td><td>" << e.expect << "</td><td>" << e.cases.size()
      << "</td><td>" << e.count(oracles::State::pass) << "</td><td>"
      << e.count(oracles::State::fail) << "</td><td>" << e.count(oracles::State::undecidable)
      << "</td><td>" << e.count(oracles::State::mistrusted) << "</td><td>" << fmt_g(worst)
      << "</td><td class=\"" << (e.ok() ? "ok\">ok" : "notok\">NOT OK") << "</td></tr>\n";
  }
  o << "</table>\n<p class=\"meta\">ratio: observed error / derived bound per element; an element "
       "passes when it is &le; 1. In the plots, points above the dashed diagonal exceed their "
       "bound.</p>\n";
  const bool open_all = r.entries.size() <= 3;
  for (const auto& e : r.entries) {
    o << "<details" << (open_all || !e.ok() ? " open" : "") << "><summary>" << esc(e.id)
      << " <span class=\"" << (e.ok() ? "ok\">ok" : "notok\">NOT OK") << "</span></summary>\n";
    if (!e.settings.empty() || !e.error_model.empty()) {
      o << "<p class=\"meta\">";
      if (!e.error_model.empty()) o << "error model " << esc(e.error_model) << "; ";
      for (std::size_t i = 0; i < e.settings.size(); ++i)
        o << (i ? ", " : "") << esc(e.settings[i].first) << "=" << esc(e.settings[i].second);
      o << "</p>\n";
    }
    if (!e.problem.empty())
      o << "<div class=\"fail\"><b>problem</b>: " << esc(e.problem) << "</div>\n";
    if (!e.facts.empty()) {
      o << "<table>";
      for (const auto& [k, v] : e.facts)
        o << "<tr><td>" << esc(k) << "</td><td>" << esc(v) << "</td></tr>";
      o << "</table>\n";
    }
    for (const auto& c : e.cases) {
      if (c.verdict.state != oracles::State::fail) continue;
      o << "<div class=\"fail\"><b>fail</b> "
        << esc(c.label.empty()
                   ? "case " + std::to_string(c.index) + " (seed " + std::to_string(c.seed) + ")"
                   : c.label)
        << ": first divergent stage <code>" << esc(c.verdict.first_divergent) << "</code>";
      for (const auto& s : c.verdict.stages)
        if (s.stage == c.verdict.first_divergent) o << ": " << esc(s.reason);
      if (!c.diagnosis.empty()) o << "<br>diagnosis: " << esc(c.diagnosis);
      if (!c.repro.empty()) o << "<br><code>REPRO: " << esc(c.repro) << "</code>";
      if (!c.saved.empty()) o << "<br>saved: <code>" << esc(c.saved) << "</code>";
      o << "</div>\n";
    }
    if (!e.stages.empty()) {
      o << "<table><tr><th>stage</th><th>pass</th><th>fail</th><th>undec</th><th>mistr</th>"
           "<th>max ratio</th><th>p99 ratio</th><th>median ratio</th><th>max ulp</th>"
           "<th>max rel</th><th>worst element (case, token, index)</th><th>got</th><th>want</th>"
           "<th>bound</th></tr>\n";
      for (const auto& a : e.stages) {
        auto n = [&](const char* s) {
          const auto it = a.states.find(s);
          return it == a.states.end() ? 0 : it->second;
        };
        o << "<tr><td>" << esc(a.stage) << "</td><td>" << n("pass") << "</td><td"
          << (n("fail") ? " class=\"bad\"" : "") << ">" << n("fail") << "</td><td>"
          << n("undecidable") << "</td><td>" << n("mistrusted") << "</td><td"
          << (a.ratio_max > 1 ? " class=\"bad\"" : "") << ">" << fmt_g(a.ratio_max) << "</td><td>"
          << fmt_g(a.ratio_p99) << "</td><td>" << fmt_g(a.ratio_median) << "</td><td>"
          << fmt_g(a.max_ulp) << "</td><td>" << fmt_g(a.max_rel) << "</td><td>" << a.worst_case
          << ", " << a.worst.token << ", " << a.worst.index << "</td><td>" << fmt_g(a.worst.got, 9)
          << "</td><td>" << fmt_g(a.worst.want, 9) << "</td><td>" << fmt_g(a.worst.bound)
          << "</td></tr>\n";
      }
      o << "</table>\n<div class=\"plots\">";
      for (const auto& a : e.stages)
        if (!a.samples.empty()) error_plot(o, a);
      o << "</div>\n<div class=\"plots\">";
      for (const auto& a : e.stages)
        if (!a.samples.empty()) ulp_plot(o, a);
      o << "</div>\n";
    }
    if (!e.sinkhorn.empty()) {
      o << "<div class=\"plots\">";
      for (const auto& c : e.sinkhorn) sinkhorn_plot(o, c);
      o << "</div>\n";
    }
    o << "</details>\n";
  }
  o << "</body></html>\n";
  return o.str();
}

}  // namespace mhc::reports
