// A self-contained HTML page of the report model: inline CSS and SVG, no script, no network.
// First an overview, one linked line per entry, those not as expected first; then per entry
// (anchored): the stage table, observed error against bound per stage (log-log, the diagonal is
// the bound), ulp histograms, the Sinkhorn residual against step, a convergence map's heatmaps,
// the composite gain against depth, worst elements and failures with their diagnosis in words. A
// plot is drawn only where it shows something the table does not: no plot of an exact stage, points
// that fall on the same pixel drawn once, and a stack's layers as one plot per stage kind against
// the layer.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "mhc/oracles/diagnosis.hpp"
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
  // No xmlns: inline in HTML, the parser puts <svg> in the SVG namespace.
  o << "<svg class=\"plot\" viewBox=\"0 0 " << W << " " << H << "\">"
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

// Whether any sampled element differs from the oracle's value: an exact stage's plot would only
// show points on the floor.
bool any_error(const StageAggregate& a) {
  for (const auto& e : a.samples)
    if (!(e.got == e.want)) return true;
  return false;
}

// Points as zero-length path segments with round caps (4.4 px wide), one per 2-pixel cell and
// class: the same picture as a circle each, a fraction of the bytes (a stage of a 1000-case run
// has ~1200 samples).
void dots(std::ostringstream& o, const std::vector<std::pair<double, double>>& pts,
          const char* cls) {
  std::set<std::pair<long, long>> seen;
  std::string d;
  for (const auto& [x, y] : pts)
    if (const long cx = 2 * std::lround(x / 2), cy = 2 * std::lround(y / 2);
        seen.insert({cx, cy}).second)
      d += "M" + std::to_string(cx) + " " + std::to_string(cy) + "h0";
  if (!d.empty()) o << "<path class=\"" << cls << "\" d=\"" << d << "\"/>";
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
  std::vector<std::pair<double, double>> ok, bad;
  for (std::size_t i = 0; i < xs.size(); ++i)
    (ys[i] <= xs[i] ? ok : bad).push_back({px(xs[i]), py(ys[i])});
  dots(o, ok, "pt");
  dots(o, bad, "pt bad");  // drawn last: on top
  o << close;
}

// The ulp histogram of a stage (log counts) as a small picture in its table row, the counts in its
// tooltip: 26 bins read at a glance beside the stage's numbers, at a fifth of the bytes of a plot.
void ulp_spark(std::ostringstream& o, const StageAggregate& a) {
  constexpr double bw = 3, h = 16;
  const std::size_t nb = a.ulp_hist.size();
  double mx = 0;
  for (auto c : a.ulp_hist) mx = std::max(mx, std::log10(1.0 + double(c)));
  std::string bars, last, counts;
  for (std::size_t b = 0; b < nb; ++b) {
    if (a.ulp_hist[b] == 0) continue;  // an empty bin is no bar (and most bins are empty)
    const double y = std::log10(1.0 + double(a.ulp_hist[b])) / mx * (h - 1);
    (b + 1 == nb ? last : bars) += "M" + fmt_g(double(b) * bw, 3) + " " + fmt_g(h, 3) + "v" +
                                   fmt_g(-y, 2) + "h" + fmt_g(bw - 0.6, 2) + "V16z";
    // A bin by its lowest distance: 0, 1, 2, 4, ... ulp; the last holds >= 2^24 and non-finite.
    counts += (counts.empty() ? "" : ", ") +
              (b == 0        ? std::string("0")
               : b + 1 == nb ? ">=2^24"
                             : std::to_string(1L << (b - 1))) +
              ": " + std::to_string(a.ulp_hist[b]);
  }
  o << "<svg class=\"spark\" viewBox=\"0 0 " << fmt_g(double(nb) * bw, 3) << " " << h
    << "\"><title>elements by ulp distance from (log heights): " << counts << "</title>";
  if (!bars.empty()) o << "<path class=\"bar\" d=\"" << bars << "\"/>";
  if (!last.empty()) o << "<path class=\"bar bad\" d=\"" << last << "\"/>";
  o << "</svg>";
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

// A stage of a stack, "L<l>.<kind>": its layer and kind; layer -1 for a stage outside the layers.
std::pair<int, std::string> layer_of(const std::string& stage) {
  if (stage.size() < 3 || stage[0] != 'L') return {-1, stage};
  std::size_t i = 1;
  int layer = 0;
  while (i < stage.size() && std::isdigit(static_cast<unsigned char>(stage[i])) && i < 7)
    layer = layer * 10 + (stage[i++] - '0');
  if (i == 1 || i >= stage.size() || stage[i] != '.') return {-1, stage};
  return {layer, stage.substr(i + 1)};
}

// One stage kind of a stack against the layer: the max and the median observed/bound ratio of
// each layer (log), the bound (ratio 1) dashed. Replaces a plot per stage and layer.
void layer_plot(std::ostringstream& o, const std::string& kind,
                const std::vector<std::pair<int, const StageAggregate*>>& layers, int nlayers) {
  std::vector<double> all{1.0};
  for (const auto& [l, a] : layers) {
    all.push_back(a->ratio_max);
    all.push_back(a->ratio_median);
  }
  const auto [lo, hi] = decades(all);
  const std::string close = axes(o, kind, "layer", "observed / bound");
  decade_ticks(o, lo, hi, false);
  auto px = [&](int l) {
    return L + (nlayers > 1 ? double(l) / double(nlayers - 1) : 0.5) * (W - L - R);
  };
  auto py = [&, lo = lo, hi = hi](double v) {
    const double f =
        v > 0 && std::isfinite(v) ? (std::log10(v) - lo) / (hi - lo) : (v > 0 ? 1.0 : 0.0);
    return H - B - std::clamp(f, 0.0, 1.0) * (H - T - B);
  };
  o << "<line x1=\"" << L << "\" y1=\"" << fmt_g(py(1), 5) << "\" x2=\"" << W - R << "\" y2=\""
    << fmt_g(py(1), 5) << "\" class=\"diag\"/>";
  const int step = std::max(1, (nlayers + 7) / 8);
  for (int l = 0; l < nlayers; l += step)
    o << "<text x=\"" << fmt_g(px(l), 5) << "\" y=\"" << H - B + 12 << "\" class=\"k\">" << l
      << "</text>";
  for (int series = 0; series < 2; ++series) {  // the medians, then the maxima on top
    o << "<polyline class=\"" << (series ? "curve" : "curve med") << "\" points=\"";
    for (const auto& [l, a] : layers)
      o << fmt_g(px(l), 5) << "," << fmt_g(py(series ? a->ratio_max : a->ratio_median), 5) << " ";
    o << "\"/>";
  }
  std::vector<std::pair<double, double>> ok, bad;
  for (const auto& [l, a] : layers)
    (a->ratio_max <= 1 ? ok : bad).push_back({px(l), py(a->ratio_max)});
  dots(o, ok, "pt");
  dots(o, bad, "pt bad");
  o << "<text x=\"" << W - R - 2 << "\" y=\"" << T + 10
    << "\" class=\"k r\">max (dots), median</text>" << close;
}

// A fraction of cases as a colour: white (0) to dark red (1, #8b0000).
std::string heat_colour(double f) {
  f = std::clamp(f, 0.0, 1.0);
  char buf[8];
  const long gb = std::lround(255 * (1 - f));
  std::snprintf(buf, sizeof buf, "#%02lx%02lx%02lx", std::lround(255 - f * (255 - 139)), gb, gb);
  return buf;
}

void heat_cell(std::ostringstream& o, long above, long cases, const std::string& title) {
  if (cases == 0) {
    o << "<td class=\"h none\" title=\"" << esc(title) << "\">&ndash;</td>";
    return;
  }
  const double f = double(above) / double(cases);
  o << "<td class=\"h\" style=\"background:" << heat_colour(f) << (f > 0.5 ? ";color:#fff" : "")
    << "\" title=\"" << esc(title) << "\">" << fmt_g(100 * f) << "%</td>";
}

// The convergence map as heatmaps: per hc_eps and threshold, rows (family, logit scale) against
// the rounds, each cell coloured by the fraction of its cases off by more than the threshold.
void map_heatmaps(std::ostringstream& o, const std::vector<MapCell>& map) {
  std::vector<double> epses;
  std::vector<std::pair<std::string, double>> rows;
  std::set<int> rounds;
  for (const auto& c : map) {
    if (std::find(epses.begin(), epses.end(), c.eps) == epses.end()) epses.push_back(c.eps);
    if (std::find(rows.begin(), rows.end(), std::pair{c.family, c.scale}) == rows.end())
      rows.emplace_back(c.family, c.scale);
    rounds.insert(c.rounds);
  }
  const std::pair<long MapCell::*, const char*> thresholds[] = {{&MapCell::above_1e3, "1e-3"},
                                                                {&MapCell::above_1e6, "1e-6"}};
  auto cell = [&](const std::pair<std::string, double>& row, double eps, int n) {
    const auto it = std::find_if(map.begin(), map.end(), [&](const MapCell& m) {
      return m.family == row.first && m.scale == row.second && m.eps == eps && m.rounds == n;
    });
    return it == map.end() ? nullptr : &*it;
  };
  for (const double eps : epses) {
    o << "<div class=\"plots\">";
    for (const auto& [above, threshold] : thresholds) {
      o << "<table class=\"heat\"><caption>hc_eps " << fmt_g(eps)
        << ": cases with a line sum off from its limit 1 - hc_eps by &gt; " << threshold
        << "</caption><tr><th rowspan=\"2\">family</th><th rowspan=\"2\">logit scale</th>"
        << "<th colspan=\"" << rounds.size() << "\">rounds</th></tr><tr>";
      for (const int n : rounds) o << "<th>" << n << "</th>";
      o << "</tr>\n";
      for (const auto& row : rows) {
        o << "<tr><td>" << esc(row.first) << "</td><td>" << fmt_g(row.second) << "</td>";
        for (const int n : rounds) {
          const MapCell* c = cell(row, eps, n);
          if (!c) {
            o << "<td class=\"h none\" title=\"not run\"></td>";
            continue;
          }
          const long n_above = c->*above;
          heat_cell(o, n_above, c->cases,
                    std::to_string(n_above) + " of " + std::to_string(c->cases) + " cases above " +
                        threshold + "; max residual " + fmt_g(c->max_residual));
        }
        o << "</tr>\n";
      }
      o << "</table>";
    }
    o << "</div>\n";
  }
  o << "<table class=\"heat\"><tr><td>cases above the threshold</td>";
  for (const int pct : {0, 25, 50, 75, 100}) heat_cell(o, pct, 100, std::to_string(pct) + "%");
  o << "<td class=\"h none\">no cases</td></tr></table>\n";
}

// The gain of the composite mapping against depth (log), a line per label and norm; 1, the gain
// of doubly stochastic combs, dashed. The legend beside it, in HTML.
void gain_plot(std::ostringstream& o, const std::vector<GainCurve>& gains) {
  static const char* const colours[] = {"#2b6cb0", "#d97706", "#2f855a", "#6b46c1", "#b83280"};
  static const char* const dashes[] = {"", "5 3", "1.5 2"};  // forward, backward, spectral
  static const char* const norms[] = {"forward", "backward", "spectral"};
  std::vector<double> all{1.0};
  std::size_t n = 1;
  for (const auto& g : gains)
    for (const auto* v : {&g.forward, &g.backward, &g.spectral}) {
      all.insert(all.end(), v->begin(), v->end());
      n = std::max(n, v->size());
    }
  const auto [lo, hi] = decades(all);
  o << "<div class=\"plots\">";
  const std::string close = axes(o, "composite gain", "depth", "gain");
  decade_ticks(o, lo, hi, false);
  auto px = [&](std::size_t depth) {
    return L + (n > 1 ? double(depth - 1) / double(n - 1) : 0.5) * (W - L - R);
  };
  auto py = [&, lo = lo, hi = hi](double v) {
    const double f =
        v > 0 && std::isfinite(v) ? (std::log10(v) - lo) / (hi - lo) : (v > 0 ? 1.0 : 0.0);
    return H - B - std::clamp(f, 0.0, 1.0) * (H - T - B);
  };
  o << "<line x1=\"" << L << "\" y1=\"" << fmt_g(py(1), 5) << "\" x2=\"" << W - R << "\" y2=\""
    << fmt_g(py(1), 5) << "\" class=\"one\"/><text x=\"" << L << "\" y=\"" << H - B + 12
    << "\" class=\"k\">1</text><text x=\"" << W - R << "\" y=\"" << H - B + 12
    << "\" class=\"k r\">" << n << "</text>";
  std::string legend;
  for (std::size_t k = 0; k < gains.size(); ++k) {
    const char* colour = colours[k % std::size(colours)];
    const std::vector<double>* curves[] = {&gains[k].forward, &gains[k].backward,
                                           &gains[k].spectral};
    for (std::size_t m = 0; m < 3; ++m) {
      if (curves[m]->empty()) continue;
      // One point per pixel column, the largest value in it: a deep curve stays small.
      std::map<long, double> columns;
      for (std::size_t d = 0; d < curves[m]->size(); ++d) {
        const auto [it, fresh] = columns.emplace(std::lround(px(d + 1)), (*curves[m])[d]);
        if (!fresh) it->second = std::fmax(it->second, (*curves[m])[d]);
      }
      const std::string stroke =
          std::string(" stroke=\"") + colour + "\"" +
          (*dashes[m] ? std::string(" stroke-dasharray=\"") + dashes[m] + "\"" : std::string());
      o << "<polyline class=\"gain\"" << stroke << " points=\"";
      for (const auto& [x, v] : columns) o << x << "," << fmt_g(py(v), 4) << " ";
      o << "\"/>";
      legend +=
          "<li><svg class=\"key\" viewBox=\"0 0 24 8\"><line x1=\"0\" y1=\"4\" x2=\"24\" "
          "y2=\"4\" class=\"gain\"" +
          stroke + "/></svg>" + esc(gains[k].label) + " " + norms[m] + "</li>";
    }
  }
  o << close << "<ul class=\"legend\">" << legend
    << "<li><svg class=\"key\" viewBox=\"0 0 24 8\"><line x1=\"0\" y1=\"4\" x2=\"24\" "
       "y2=\"4\" class=\"one\"/></svg>1: doubly stochastic</li></ul></div>\n";
}

const char* kStyle = R"(<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d232a;max-width:1400px}
h1{font-size:22px;margin:0 0 6px} h2{font-size:17px;margin:18px 0 6px}
.meta{color:#555;font-size:12.5px} code{font-size:12.5px;background:#f2f4f6;padding:1px 4px}
table{border-collapse:collapse;margin:8px 0;font-size:12.5px}
th,td{border:1px solid #d6dbe0;padding:3px 7px;text-align:right;white-space:nowrap} th{background:#eef1f4}
td:first-child,th:first-child{text-align:left} td.note{text-align:left;white-space:normal;max-width:520px}
.PASS,.ok{color:#17692d;font-weight:600} .FAIL,.bad,.notok{color:#b3261e;font-weight:600}
.banner{font-size:20px;padding:8px 12px;border-radius:6px;display:inline-block;margin:8px 0}
.banner.PASS{background:#e3f4e6} .banner.FAIL{background:#fbe4e2}
details{border:1px solid #d6dbe0;border-radius:6px;margin:10px 0;padding:4px 10px}
summary{cursor:pointer;font-weight:600}
.entry{scroll-margin-top:2.4em} .up{font-size:12px;float:right}
.plots{display:flex;flex-wrap:wrap;gap:6px}
svg.plot{background:#fff;border:1px solid #e3e7eb;width:260px;height:190px}
svg.spark{width:78px;height:16px;vertical-align:middle;background:#f6f8fa}
svg .t{font-size:11px;text-anchor:middle;font-weight:600} svg .l{font-size:10px;text-anchor:middle}
svg .k{font-size:8.5px;text-anchor:middle;fill:#555} svg .r{text-anchor:end}
svg .box{fill:none;stroke:#9aa4ae} svg .diag{stroke:#b3261e;stroke-dasharray:4 3}
svg .pt{fill:none;stroke:#2b6cb0;stroke-opacity:.65;stroke-width:4.4;stroke-linecap:round}
svg .pt.bad{stroke:#b3261e;stroke-opacity:1}
svg .bar{fill:#2b6cb0} svg .bar.bad{fill:#b3261e} svg .curve{fill:none;stroke:#2b6cb0;stroke-width:1.6}
svg .curve.med{stroke:#8fb3d9;stroke-dasharray:3 2} svg .kern{stroke:#b3261e;stroke-dasharray:3 2}
.fail{margin:6px 0;padding:6px 8px;background:#fdf3f2;border-left:3px solid #b3261e}
ul.why{margin:2px 0 2px 18px;padding:0;font-size:12.5px;color:#333}
table.heat caption{text-align:left;font-weight:600;padding:2px 0} table.heat th{text-align:center}
td.h{text-align:center;min-width:38px}
td.h.none{background:#e4e7eb;color:#777}
svg .gain{fill:none;stroke-width:1.4} svg .one{stroke:#555;stroke-dasharray:4 3}
ul.legend{list-style:none;margin:0;padding:0;font-size:12px;align-self:center}
svg.key{width:24px;height:8px;margin-right:5px;vertical-align:middle}
</style>)";

// Fragment ids for the entries: a slug of the id ("check cpu-fused boundary fp32" ->
// "e-check-cpu-fused-boundary-fp32"), made unique with a counter.
std::vector<std::string> anchors(const std::vector<Entry>& entries) {
  std::vector<std::string> out;
  std::set<std::string> taken{"overview"};
  for (const auto& e : entries) {
    std::string s = "e-";
    for (char ch : e.id) {
      const unsigned char c = static_cast<unsigned char>(ch);
      if (std::isalnum(c) && c < 0x80)
        s += char(std::tolower(c));
      else if (s.back() != '-')
        s += '-';
    }
    while (s.size() > 2 && s.back() == '-') s.pop_back();
    if (s.size() > 80) s.resize(80);
    std::string id = s;
    for (int k = 2; !taken.insert(id).second; ++k) id = s + "-" + std::to_string(k);
    out.push_back(id);
  }
  return out;
}

// A diagnosis (or a problem naming deviations) with each catalogued name explained once per
// entry: `seen` holds the names already explained.
void explained(std::ostringstream& o, const std::string& text, std::set<std::string>& seen) {
  o << esc(text);
  std::string items;
  for (const auto& [name, sentence] : oracles::diagnosis_sentences(text))
    if (seen.insert(name).second)
      items += "<li><code>" + esc(name) + "</code>: " + esc(sentence) + "</li>";
  if (!items.empty()) o << "<ul class=\"why\">" << items << "</ul>";
}

std::string case_title(const CaseRecord& c) {
  return c.label.empty()
             ? "case " + std::to_string(c.index) + " (seed " + std::to_string(c.seed) + ")"
             : c.label;
}

// The overview's last column: what is wrong, or where the first failure is and what explains it.
std::string note(const Entry& e) {
  if (!e.problem.empty()) return e.problem;
  for (const auto& c : e.cases)
    if (c.verdict.state == oracles::State::fail)
      return "first failure: " + case_title(c) + " at " + c.verdict.first_divergent +
             (c.diagnosis.empty() ? "" : "; " + c.diagnosis);
  return {};
}

constexpr std::size_t kFailuresShown = 12;  // failing cases in detail per entry; JSON has all
constexpr std::size_t kCurvesShown = 6;     // Sinkhorn curves per entry
constexpr std::size_t kClosestShown = 3;    // a condensed entry's passing stages in its table

// The harness's self-tests (a wrong kernel it must catch, a legitimate variant it must pass, its
// own certification): when as expected, their verdict is the news, not their error plots.
// Their section is condensed: no plots, and in the table only the stages that did not pass and
// the passing ones closest to their bound.
bool condensed(const Entry& e) {
  return e.ok() && (e.kind == "mutant" || e.kind == "variant" || e.kind == "selfcheck");
}
// A gate entry as expected (no regression against its baseline) keeps its table, not its plots:
// they would repeat those of the check entries of the same kernels and ops.
bool plotted(const Entry& e) {
  return !condensed(e) && !(e.ok() && e.kind == "gate");
}

// What a stage's plots are drawn from: two stages with the same are drawn once (the other kernel
// computed the same values, next_pre_mix is ffn.pre).
std::string plot_signature(const StageAggregate& a) {
  std::string sig;
  char buf[96];
  for (const auto& e : a.samples) {
    std::snprintf(buf, sizeof buf, "%a %a %a;", e.bound, e.got, e.want);
    sig += buf;
  }
  for (auto c : a.ulp_hist) sig += std::to_string(c) + ",";
  return sig;
}

// The plots drawn so far on the page: signature -> where ("<a href=...>entry</a> stage").
using Drawn = std::map<std::string, std::string>;

void stage_plots(std::ostringstream& o, const Entry& e, const std::string& anchor, Drawn& drawn) {
  // A stack: its layered stages as one plot per kind against the layer.
  std::vector<std::string> kinds;
  std::map<std::string, std::vector<std::pair<int, const StageAggregate*>>> by_kind;
  int nlayers = 0;
  std::vector<const StageAggregate*> rest;
  for (const auto& a : e.stages) {
    const auto [layer, kind] = layer_of(a.stage);
    if (layer < 0) {
      rest.push_back(&a);
      continue;
    }
    if (!by_kind.count(kind)) kinds.push_back(kind);
    by_kind[kind].push_back({layer, &a});
    nlayers = std::max(nlayers, layer + 1);
  }
  std::vector<std::string> exact, same;
  auto notes = [&] {
    if (!exact.empty()) {
      o << "<p class=\"meta\">exact (no element differs from the oracle's value), not plotted: ";
      for (std::size_t i = 0; i < exact.size(); ++i) o << (i ? ", " : "") << esc(exact[i]);
      o << "</p>\n";
    }
    if (!same.empty()) {
      o << "<p class=\"meta\">the same values as plotted before, not plotted again: ";
      for (std::size_t i = 0; i < same.size(); ++i) o << (i ? "; " : "") << same[i];
      o << "</p>\n";
    }
    exact.clear();
    same.clear();
  };
  if (!kinds.empty()) {
    o << "<div class=\"plots\">";
    for (const auto& kind : kinds) {
      bool any = false;
      for (const auto& [l, a] : by_kind[kind]) any = any || a->ratio_max > 0;
      if (any)
        layer_plot(o, kind, by_kind[kind], nlayers);
      else
        exact.push_back(kind);
    }
    o << "</div>\n";
    notes();
  }
  std::vector<const StageAggregate*> shown;
  for (const auto* a : rest) {
    if (a->samples.empty()) continue;
    if (!any_error(*a)) {
      exact.push_back(a->stage);
      continue;
    }
    const auto [it, fresh] = drawn.insert(
        {plot_signature(*a), "<a href=\"#" + anchor + "\">" + esc(e.id) + "</a> " + esc(a->stage)});
    if (fresh)
      shown.push_back(a);
    else
      same.push_back(esc(a->stage) + " as " + it->second);
  }
  if (!shown.empty()) {
    o << "<div class=\"plots\">";
    for (const auto* a : shown) error_plot(o, *a);
    o << "</div>\n";
  }
  notes();
}

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
  // The overview: one line per entry, those not as expected first, each linking to its section.
  const std::vector<std::string> anchor = anchors(r.entries);
  std::vector<std::size_t> order;
  for (int pass_ok = 0; pass_ok < 2; ++pass_ok)
    for (std::size_t i = 0; i < r.entries.size(); ++i)
      if (r.entries[i].ok() == bool(pass_ok)) order.push_back(i);
  o << "<table id=\"overview\"><tr><th>entry</th><th>result</th><th>expect</th><th>cases</th>"
       "<th>pass</th><th>fail</th><th>undecidable</th><th>mistrusted</th><th>max ratio</th>"
       "<th>note</th></tr>\n";
  for (const std::size_t i : order) {
    const Entry& e = r.entries[i];
    double worst = 0;
    for (const auto& a : e.stages) worst = std::max(worst, a.ratio_max);
    // An entry judged without cases (mutants --production) has no counts to show, only its result.
    auto count = [&](oracles::State s) {
      return e.cases.empty() ? std::string("&ndash;") : std::to_string(e.count(s));
    };
    o << "<tr><td><a href=\"#" << anchor[i] << "\">" << esc(e.id) << "</a></td><td class=\""
      << (e.ok() ? "ok" : "notok") << "\">" << esc(entry_result(e)) << "</td><td>" << e.expect
      << "</td><td>" << (e.cases.empty() ? std::string("&ndash;") : std::to_string(e.cases.size()))
      << "</td><td>" << count(oracles::State::pass) << "</td><td>" << count(oracles::State::fail)
      << "</td><td>" << count(oracles::State::undecidable) << "</td><td>"
      << count(oracles::State::mistrusted) << "</td><td>"
      << (e.stages.empty() ? std::string("&ndash;") : fmt_g(worst)) << "</td><td class=\"note\">"
      << esc(note(e)) << "</td></tr>\n";
  }
  o << "</table>\n<p class=\"meta\">ratio: observed error / derived bound per element; an element "
       "passes when it is &le; 1. In the plots, points above the dashed diagonal exceed their "
       "bound; a stack's stages are plotted per kind against the layer (the dashed line is the "
       "bound). Entries not as expected are open; a link opens the others.</p>\n";
  const bool open_all = r.entries.size() <= 3;
  Drawn drawn;
  for (std::size_t i = 0; i < r.entries.size(); ++i) {
    const Entry& e = r.entries[i];
    std::set<std::string> explained_names;
    // The anchor is inside the section: following a link to it opens a folded one.
    o << "<details" << (open_all || !e.ok() ? " open" : "") << "><summary>" << esc(e.id)
      << " <span class=\"" << (e.ok() ? "ok\">" : "notok\">") << esc(entry_result(e))
      << "</span></summary>\n<div class=\"entry\" id=\"" << anchor[i]
      << "\"><a class=\"up\" href=\"#overview\">overview</a>\n";
    if (!e.settings.empty() || !e.error_model.empty()) {
      o << "<p class=\"meta\">";
      if (!e.error_model.empty()) o << "error model " << esc(e.error_model) << "; ";
      for (std::size_t k = 0; k < e.settings.size(); ++k)
        o << (k ? ", " : "") << esc(e.settings[k].first) << "=" << esc(e.settings[k].second);
      o << "</p>\n";
    }
    if (!e.problem.empty()) {
      o << "<div class=\"fail\"><b>problem</b>: ";
      explained(o, e.problem, explained_names);
      o << "</div>\n";
    }
    if (!e.facts.empty()) {
      o << "<table>";
      for (const auto& [k, v] : e.facts) {
        o << "<tr><td>" << esc(k) << "</td><td class=\"note\">";
        if (k == "diagnosis")
          explained(o, v, explained_names);
        else
          o << esc(v);
        o << "</td></tr>";
      }
      o << "</table>\n";
    }
    if (!e.map.empty()) map_heatmaps(o, e.map);
    if (!e.gains.empty()) gain_plot(o, e.gains);
    std::size_t failures = 0;
    for (const auto& c : e.cases) {
      if (c.verdict.state != oracles::State::fail) continue;
      if (++failures > kFailuresShown) continue;
      o << "<div class=\"fail\"><b>fail</b> " << esc(case_title(c))
        << ": first divergent stage <code>" << esc(c.verdict.first_divergent) << "</code>";
      for (const auto& s : c.verdict.stages)
        if (s.stage == c.verdict.first_divergent) o << ": " << esc(s.reason);
      if (!c.diagnosis.empty()) {
        o << "<br>diagnosis: ";
        explained(o, c.diagnosis, explained_names);
      }
      if (!c.repro.empty()) o << "<br><code>REPRO: " << esc(c.repro) << "</code>";
      if (!c.saved.empty()) o << "<br>saved: <code>" << esc(c.saved) << "</code>";
      o << "</div>\n";
    }
    if (failures > kFailuresShown)
      o << "<p class=\"meta\">" << failures - kFailuresShown
        << " more failing cases; every one, with its REPRO line, is in the JSON and JUnit "
           "reports.</p>\n";
    if (!e.stages.empty()) {
      o << "<table><tr><th>stage</th><th>pass</th><th>fail</th><th>undec</th><th>mistr</th>"
           "<th>max ratio</th><th>p99 ratio</th><th>median ratio</th><th>max ulp</th>"
           "<th>max rel</th><th>worst element (case, token, index)</th><th>got</th><th>want</th>"
           "<th>bound</th>"
        << (plotted(e) ? "<th>ulp histogram</th>" : "") << "</tr>\n";
      // A condensed entry's rows: every stage that did not pass everywhere, and the passing
      // ones closest to their bound.
      std::vector<bool> row(e.stages.size(), !condensed(e));
      if (condensed(e)) {
        std::vector<std::size_t> by_ratio;
        for (std::size_t k = 0; k < e.stages.size(); ++k) {
          const auto& st = e.stages[k].states;
          const auto it = st.find("pass");
          const int passed = it == st.end() ? 0 : it->second;
          int total = 0;
          for (const auto& [name, n] : st) total += n;
          if (passed < total)
            row[k] = true;
          else
            by_ratio.push_back(k);
        }
        std::stable_sort(by_ratio.begin(), by_ratio.end(), [&](std::size_t x, std::size_t y) {
          return e.stages[x].ratio_max > e.stages[y].ratio_max;
        });
        for (std::size_t k = 0; k < by_ratio.size() && k < kClosestShown; ++k)
          row[by_ratio[k]] = true;
      }
      for (std::size_t k = 0; k < e.stages.size(); ++k) {
        if (!row[k]) continue;
        const StageAggregate& a = e.stages[k];
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
          << "</td>";
        if (plotted(e)) {
          o << "<td>";
          if (!a.ulp_hist.empty()) ulp_spark(o, a);
          o << "</td>";
        }
        o << "</tr>\n";
      }
      o << "</table>\n";
      const auto shown = std::size_t(std::count(row.begin(), row.end(), true));
      if (shown < e.stages.size())
        o << "<p class=\"meta\">" << e.stages.size() - shown
          << " more stages passed in every case (a self-test as expected: its table shows the "
             "stages that did not pass and those closest to their bound, without plots; every "
             "stage is in the JSON report).</p>\n";
      if (plotted(e)) stage_plots(o, e, anchor[i], drawn);
    }
    if (!e.sinkhorn.empty() && plotted(e)) {
      o << "<div class=\"plots\">";
      for (std::size_t k = 0; k < e.sinkhorn.size() && k < kCurvesShown; ++k)
        sinkhorn_plot(o, e.sinkhorn[k]);
      o << "</div>\n";
      if (e.sinkhorn.size() > kCurvesShown)
        o << "<p class=\"meta\">" << e.sinkhorn.size() - kCurvesShown
          << " more Sinkhorn curves in the JSON report.</p>\n";
    }
    o << "</div></details>\n";
  }
  o << "</body></html>\n";
  return o.str();
}

}  // namespace mhc::reports
