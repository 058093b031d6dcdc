#include "mhc/oracles/diagnosis.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>

#include "mhc/oracles/anchored.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/verdict.hpp"

namespace mhc::oracles {

const std::vector<ref::Semantics>& deviation_catalogue() {
  static const std::vector<ref::Semantics> all = [] {
    using E = ref::Semantics::Eps;
    std::vector<ref::Semantics> v;
    auto add = [&v](auto set) {
      ref::Semantics s;
      set(s);
      v.push_back(s);
    };
    add([](ref::Semantics& s) { s.softmax_eps = E::in_sum; });
    add([](ref::Semantics& s) { s.softmax_eps = E::none; });
    add([](ref::Semantics& s) { s.col_eps = E::after; });
    add([](ref::Semantics& s) { s.col_eps = E::none; });
    add([](ref::Semantics& s) { s.row_eps = E::after; });
    add([](ref::Semantics& s) { s.row_eps = E::none; });
    add([](ref::Semantics& s) { s.first_row = true; });
    add([](ref::Semantics& s) { s.iters_delta = 1; });
    add([](ref::Semantics& s) { s.iters_delta = -1; });
    add([](ref::Semantics& s) { s.comb_transposed = true; });
    add([](ref::Semantics& s) { s.post_factor2 = false; });
    add([](ref::Semantics& s) { s.post_eps = true; });
    add([](ref::Semantics& s) { s.pre_eps = false; });
    add([](ref::Semantics& s) { s.scales_swapped = true; });
    add([](ref::Semantics& s) { s.rms = ref::Semantics::Rms::stream_mean; });
    add([](ref::Semantics& s) { s.rms = ref::Semantics::Rms::token_sum; });
    add([](ref::Semantics& s) { s.d_major = true; });
    add([](ref::Semantics& s) { s.max_subtraction = false; });
    for (double scale : {0.0, 0.1, 10.0})
      add([scale](ref::Semantics& s) { s.hc_eps_scale = scale; });
    return v;
  }();
  return all;
}

const std::vector<std::pair<std::string, double>>& norm_eps_alternatives() {
  static const std::vector<std::pair<std::string, double>> all = {{"norm_eps_1e-6", 1e-6},
                                                                  {"norm_eps_1e-5", 1e-5}};
  return all;
}

const std::vector<ref::BlockSemantics>& block_deviation_catalogue() {
  static const std::vector<ref::BlockSemantics> all = [] {
    std::vector<ref::BlockSemantics> v(7);
    v[0].shifted_pre = false;
    v[1].causal = false;
    v[2].attn_norm = false;
    v[3].ffn_norm = false;
    v[4].normalise_routing = false;
    v[5].comb_transposed_site = 0;
    v[6].comb_transposed_site = 1;
    return v;
  }();
  return all;
}

namespace {

// got judged as alt's outputs: alt's oracle (into want, its anchored stages appended) and
// anchored stages, without the second tier.
Verdict judged_as(const OpCase& alt, const Trace<float>& got, unsigned threads, ErrorModel model,
                  const bnd::StoredFormats& stored, Trace<bnd::Bounded>* want) {
  *want = oracle_trace(alt, threads, model, {}, &got);
  const Trace<bnd::Bounded> anchored = anchored_trace(alt, got, threads, model, stored);
  Verdict v = compare(got, *want);
  add_anchored(anchored_stages(alt, got, anchored), v);
  want->insert(want->end(), anchored.begin(), anchored.end());
  return v;
}

// Every stage passes, and at least one was judged.
bool passes(const Verdict& v) {
  bool any_judged = false;
  for (const auto& s : v.stages) {
    if (s.state == State::fail) return false;
    any_judged = any_judged || s.state == State::pass;
  }
  return any_judged;
}

}  // namespace

std::vector<std::string> diagnose(const OpCase& c, const Trace<float>& got, unsigned threads,
                                  ErrorModel model, const std::vector<std::string>& failed,
                                  const Trace<bnd::Bounded>* own, const NoiseModels* models,
                                  const bnd::StoredFormats& stored) {
  std::vector<std::string> names;
  auto values = [](const Trace<bnd::Bounded>& t, const std::string& name) {
    const Trace<bnd::Bounded>::value_type* found = nullptr;
    for (const auto& st : t)
      if (st.name == name) found = &st;
    return found;
  };
  // Whether `trace` has every failed stage as `own` has it (a stage `own` lacks is not known to
  // be the same).
  auto same = [&](const Trace<bnd::Bounded>& trace) {
    if (!own || failed.empty()) return false;
    for (const auto& name : failed) {
      const auto *a = values(*own, name), *b = values(trace, name);
      if (!a || !b || a->values.size() != b->values.size()) return false;
      for (std::size_t i = 0; i < a->values.size(); ++i)
        if (!(a->values[i].v == b->values[i].v) &&
            !(std::isnan(a->values[i].v) && std::isnan(b->values[i].v)))
          return false;
    }
    return true;
  };
  std::vector<std::pair<std::string, OpCase>> alternatives;
  for (const auto& sem : deviation_catalogue()) {
    OpCase alt = c;
    alt.cfg.sem = sem;
    alternatives.emplace_back(sem.name(), std::move(alt));
  }
  if (op_spec(c.op).whole)
    for (const auto& sem : block_deviation_catalogue()) {
      // Inside a captured sublayer: nothing of the case depends on it.
      if (c.block.captured_sublayers && (!sem.causal || !sem.normalise_routing)) continue;
      OpCase alt = c;
      alt.block.sem = sem;
      alternatives.emplace_back(sem.name(), std::move(alt));
    }
  // The RMS statistics with a framework's usual RMSNorm eps in place of the configured one.
  for (const auto& [name, eps] : norm_eps_alternatives()) {
    const bool reads =
        op_spec(c.op).reads_norm_eps || op_spec(op_spec(c.op).forward).reads_norm_eps;
    if (!reads || c.cfg.norm_eps == fp32_value(eps)) continue;
    OpCase alt = c;
    alt.cfg.norm_eps = fp32_value(eps);
    alternatives.emplace_back(name, std::move(alt));
  }
  for (const auto& [name, alt] : alternatives) {
    if (!ref::validate(alt.cfg).empty()) continue;  // e.g. iters - 1 = 0
    Trace<bnd::Bounded> want;
    Verdict v = judged_as(alt, got, threads, model, stored, &want);
    if (same(want)) continue;
    if (models && own) {
      NoiseModels judged = noise_models(alt, got, stored);  // measured under its semantics
      for (auto& [stage, m] : moved_models(*models, *own, want))
        judged.emplace(stage, std::move(m));
      second_tier(judged, alt, got, v);
    }
    if (passes(v)) names.push_back(name);
  }
  return names;
}

const char* const kWithinWorstCase =
    "no catalogued deviation explains it, and it is within the worst-case bounds: an accuracy "
    "shortfall (a precision the kernel does not declare, or an arithmetic regression)";

bool within_worst_case(const OpCase& c, const Trace<float>& got, unsigned threads) {
  return passes(compare(got, oracle_trace(c, threads, ErrorModel::rigorous, {}, &got)));
}

namespace {

constexpr const char* kUndeclared = "undeclared_";

// One part of a declaration set to a format ("intermediates" sets streams and mixes with it: an
// eager framework stores the outputs it forms in that format).
struct Widening {
  const char* key;
  bnd::Format format;
};

// c's precision with the widenings that make a part narrower than c declares it, as a validated
// Precision; nothing where none applies or the op cannot be judged under the result.
std::optional<Precision> widened(const OpCase& c, const std::vector<Widening>& ws) {
  bnd::Declaration d = c.precision.decl;
  auto widen = [](bnd::Format& part, bnd::Format f) {
    if (bnd::format_info(f).u > bnd::format_info(part).u) part = f;
  };
  for (const Widening& w : ws)
    for (const bnd::Part& p : bnd::declaration_parts())
      if (std::string(p.key) == w.key) {
        widen(d.*(p.member), w.format);
        if (p.member == &bnd::Declaration::intermediates) {
          widen(d.streams, w.format);
          widen(d.mixes, w.format);
        }
      }
  if (d == c.precision.decl) return std::nullopt;
  std::string parts;
  for (const bnd::Part& p : bnd::declaration_parts())
    if (d.*(p.member) != bnd::Format::fp32)
      parts += std::string(parts.empty() ? "" : ",") + p.key + "=" +
               bnd::format_info(d.*(p.member)).name;
  try {
    Precision p = precision_from_name(parts);
    need_backward_declaration(c.op, p);
    return p;
  } catch (const std::invalid_argument&) {
    return std::nullopt;  // e.g. intermediates narrower than streams declared already
  }
}

std::string widening_name(const std::vector<Widening>& ws) {
  std::string name = kUndeclared;
  for (std::size_t i = 0; i < ws.size(); ++i)
    name += std::string(i ? "_and_" : "") + ws[i].key + "_" + bnd::format_info(ws[i].format).name;
  return name;
}

}  // namespace

std::vector<std::string> undeclared_precision(const OpCase& c, const Trace<float>& got,
                                              unsigned threads, ErrorModel model,
                                              const bnd::StoredFormats& stored) {
  using F = bnd::Format;
  // Two widths, 11 significant bits then 8; a storage of either before the products': a stored
  // stage passes only where every value the kernel gave is of the format, evidence that
  // arithmetic of the same error's size does not leave (inputs and weights are read rounded, as
  // the oracle reads them). Where several storages of one width pass, each is named.
  const std::vector<std::vector<Widening>> levels = {{{"mixes", F::fp16},
                                                      {"coefficients", F::fp16},
                                                      {"streams", F::fp16},
                                                      {"intermediates", F::fp16},
                                                      {"inputs", F::fp16},
                                                      {"weights", F::fp16},
                                                      {"products", F::tf32}},
                                                     {{"mixes", F::bf16},
                                                      {"coefficients", F::bf16},
                                                      {"streams", F::bf16},
                                                      {"intermediates", F::bf16},
                                                      {"inputs", F::bf16},
                                                      {"weights", F::bf16},
                                                      {"products", F::bf16}}};
  // sized: by the size of the error alone (values of any format).
  auto passes_under = [&](const std::vector<Widening>& ws, bool sized = false) {
    const std::optional<Precision> p = widened(c, ws);
    if (!p) return false;
    OpCase alt = c;
    alt.precision = *p;
    store_declared(alt);  // inputs and weights as the kernel would have read them
    Trace<bnd::Bounded> want;
    Verdict v = judged_as(alt, got, threads, model, stored, &want);
    second_tier(noise_models(alt, got, stored), alt, got, v);  // fp32's noise where it applies
    if (!sized) stored_as_declared(alt, got, v);
    return passes(v);
  };
  std::vector<std::vector<Widening>> applicable(levels.size());
  for (std::size_t l = 0; l < levels.size(); ++l)
    for (const Widening& w : levels[l])
      if (widened(c, {w})) applicable[l].push_back(w);
  auto is_storage = [](const Widening& w) { return std::string(w.key) != "products"; };
  for (const auto& level : applicable) {
    std::vector<std::string> names;
    for (const Widening& w : level)
      if (is_storage(w) && passes_under({w})) names.push_back(widening_name({w}));
    if (!names.empty()) return names;
  }
  // The products' bounds (lambda sqrt(n) of the operands' rounding) do not tell tf32 from bf16:
  // every products format that passes is named.
  std::vector<std::string> names;
  for (const auto& level : applicable)
    for (const Widening& w : level)
      if (!is_storage(w) && passes_under({w})) names.push_back(widening_name({w}));
  if (!names.empty()) return names;
  // Only together: the fewest parts of a width, each left out where the rest still pass (not
  // monotone: fp16's range may overflow where a part alone does not).
  for (std::vector<Widening> need : applicable) {
    if (need.empty() || !passes_under(need, true) || !passes_under(need)) continue;
    for (std::size_t i = 0; i < need.size() && need.size() > 1;) {
      std::vector<Widening> rest = need;
      rest.erase(rest.begin() + std::ptrdiff_t(i));
      if (passes_under(rest))
        need = std::move(rest);
      else
        ++i;
    }
    return {widening_name(need)};
  }
  return {};
}

std::string describe_diagnosis(const std::vector<std::string>& names) {
  if (names.empty()) return "no catalogued deviation explains the output";
  if (names[0].rfind(kUndeclared, 0) == 0) {
    std::string s =
        "no catalogued deviation explains the output; its error is the size of a "
        "precision it does not declare, ";
    for (std::size_t i = 0; i < names.size(); ++i) s += (i ? " or " : "") + names[i];
    return s;
  }
  std::string s = "matches the oracle with ";
  for (std::size_t i = 0; i < names.size(); ++i) s += (i ? " or " : "") + names[i];
  return s;
}

std::string diagnosis_sentence(const std::string& name) {
  // docs/semantics.md, "Traps": what each deviation does, against what the semantics say.
  static const std::map<std::string, std::string> sentences = {
      {"softmax_eps_in_sum",
       "The softmax adds hc_eps to the row sum before dividing; the semantics add it after the "
       "division."},
      {"softmax_eps_none",
       "The softmax leaves out hc_eps; the semantics add it after the division."},
      {"col_eps_after",
       "The Sinkhorn column divisions add hc_eps after dividing instead of to the column sum."},
      {"col_eps_none", "The Sinkhorn column divisions leave out hc_eps (divide by the bare sum)."},
      {"row_eps_after",
       "The Sinkhorn row divisions add hc_eps after dividing instead of to the row sum."},
      {"row_eps_none", "The Sinkhorn row divisions leave out hc_eps (divide by the bare sum)."},
      {"first_division_row",
       "The first Sinkhorn division after the softmax is a row division; it should be a column "
       "division."},
      {"iters+1", "The Sinkhorn runs one round more than sinkhorn_iters."},
      {"iters-1", "The Sinkhorn runs one round fewer than sinkhorn_iters."},
      {"comb_transposed",
       "hc_post reads the comb transposed, C[k,j] for C[j,k], so streams are carried into the "
       "wrong streams."},
      {"post_without_factor2",
       "The writing weights post lack their factor 2 (sig instead of 2 sig)."},
      {"post_with_eps", "The writing weights post add hc_eps, which they should not."},
      {"pre_without_eps", "The reading weights pre leave out the hc_eps added after the sigmoid."},
      {"scales_swapped",
       "pre is scaled by hc_scale[1] and post by hc_scale[0]: the two are swapped."},
      {"rms_per_stream",
       "The mixes' RMS statistic is taken per stream instead of over all n*d values of the token."},
      {"rms_of_sum",
       "The mixes' RMS statistic uses the sum of squares instead of their mean over the token."},
      {"d_major_flattening",
       "The projection reads the streams d-major, x[c*n + j], instead of stream-major, x[j*d + "
       "c]."},
      {"no_max_subtraction",
       "The softmax does not subtract the row maximum: the same in exact arithmetic, but exp "
       "overflows in fp32 for large logits."},
      {"pre_not_shifted",
       "Each sublayer reads the streams with the weights its own site computed instead of those "
       "of the previous site."},
      {"attention_not_causal", "Attention looks at later positions too: it is not causal."},
      {"attn_norm_skipped", "The RMSNorm before attention is skipped."},
      {"ffn_norm_skipped", "The RMSNorm before the FFN is skipped."},
      {"routing_not_normalised",
       "The MoE routing weights are not normalised over the chosen experts."},
      {"comb_transposed_at_attn", "The attention site's hc_post reads its comb transposed."},
      {"comb_transposed_at_ffn", "The FFN site's hc_post reads its comb transposed."},
      {"norm_eps_1e-6",
       "The RMS statistics (RMSNorm's, the mixes') add eps 1e-6, a framework's usual RMSNorm "
       "eps, instead of the configured norm_eps."},
      {"norm_eps_1e-5",
       "The RMS statistics (RMSNorm's, the mixes') add eps 1e-5, a framework's usual RMSNorm "
       "eps, instead of the configured norm_eps."},
  };
  if (const auto it = sentences.find(name); it != sentences.end()) return it->second;
  // undeclared_<key>_<format>[_and_...]: undeclared_precision's names.
  if (name.rfind(kUndeclared, 0) == 0) {
    std::string what, declare;
    for (std::size_t at = std::strlen(kUndeclared); at < name.size();) {
      const std::size_t end = std::min(name.find("_and_", at), name.size());
      const std::string unit = name.substr(at, end - at);
      at = end + 5;
      const std::size_t cut = unit.rfind('_');
      const bnd::Part* part = nullptr;
      for (const bnd::Part& p : bnd::declaration_parts())
        if (cut != std::string::npos && unit.compare(0, cut, p.key) == 0 && p.key[cut] == '\0')
          part = &p;
      if (!part) return {};
      const std::string f = unit.substr(cut + 1);
      what += std::string(what.empty() ? "" : ", and ") + part->what + " in " + f;
      declare += std::string(declare.empty() ? "" : ",") + part->key + "=" + f;
      if (part->member == &bnd::Declaration::intermediates)
        declare += ",mixes=" + f + ",streams=" + f;  // as an eager framework stores its outputs
    }
    if (what.empty()) return {};
    return "The kernel errs as much as " + what + ": it passes when its declaration adds " +
           declare +
           " (--precision), a narrower precision than it declares, or an arithmetic "
           "error of that size.";
  }
  // hc_eps_x<scale>: the Semantics names any scale this way.
  if (name.rfind("hc_eps_x", 0) == 0 && name.size() > 8) {
    const std::string scale = name.substr(8);
    char* end = nullptr;
    const double v = std::strtod(scale.c_str(), &end);
    if (end && *end == '\0')
      return v == 0 ? "hc_eps is left out everywhere it enters (pre and every Sinkhorn step)."
                    : "hc_eps is " + scale + " times its declared value everywhere it enters.";
  }
  return {};
}

std::vector<std::pair<std::string, std::string>> diagnosis_sentences(const std::string& text) {
  // A name is a run of these characters ("iters+1", "hc_eps_x0.1"); a trailing '.' ends a line.
  auto word_char = [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '+' || ch == '-' ||
           ch == '.';
  };
  std::vector<std::pair<std::string, std::string>> found;
  for (std::size_t i = 0; i < text.size();) {
    if (!word_char(text[i])) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < text.size() && word_char(text[j])) ++j;
    std::string word = text.substr(i, j - i);
    while (!word.empty() && word.back() == '.') word.pop_back();
    i = j;
    std::string sentence = diagnosis_sentence(word);
    if (sentence.empty()) continue;
    bool seen = false;
    for (const auto& f : found) seen = seen || f.first == word;
    if (!seen) found.emplace_back(std::move(word), std::move(sentence));
  }
  return found;
}

}  // namespace mhc::oracles
