#include "mhc/reports/text.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "mhc/reports/report.hpp"

namespace mhc::reports {

std::string fmt_g(double x, int digits) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*g", digits, x);
  return buf;
}

namespace {

// The length of the valid UTF-8 sequence at s[i] (1..4), or 0 where there is none.
std::size_t utf8_length(const std::string& s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // at most U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

// Code points a terminal or a reader acts on unseen: C1 controls, the bidirectional controls
// (text shown in another order than it runs), and the noncharacters XML 1.0 forbids.
bool hidden(std::uint32_t u) {
  return (u >= 0x80 && u <= 0x9F) || u == 0x061C || u == 0x200E || u == 0x200F ||
         (u >= 0x202A && u <= 0x202E) || (u >= 0x2066 && u <= 0x2069) || u == 0xFFFE || u == 0xFFFF;
}

std::uint32_t code_point(const std::string& s, std::size_t i, std::size_t n) {
  const auto b = [&](std::size_t k) { return std::uint32_t(static_cast<unsigned char>(s[i + k])); };
  if (n == 1) return b(0);
  std::uint32_t u = b(0) & (0x7Fu >> n);
  for (std::size_t k = 1; k < n; ++k) u = (u << 6) | (b(k) & 0x3F);
  return u;
}

}  // namespace

std::string clean_text(const std::string& s, bool controls, const char* keep) {
  std::string o;
  o.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const std::size_t n = utf8_length(s, i);
    const bool control = (c < 0x20 || c == 0x7F) && !(c != 0 && std::strchr(keep, char(c)));
    if (n == 0 || (controls && control)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      o += buf;
      ++i;
      continue;
    }
    if (controls && n > 1 && hidden(code_point(s, i, n))) {
      char buf[12];
      std::snprintf(buf, sizeof buf, "\\u%04X", unsigned(code_point(s, i, n)));
      o += buf;
    } else {
      o.append(s, i, n);
    }
    i += n;
  }
  return o;
}

std::string markup_escape(const std::string& s) {
  std::string o;
  for (char ch : clean_text(s, true, "\n\t")) switch (ch) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&apos;";
        break;
      default:
        o += ch;
    }
  return o;
}

std::string entry_result(const Entry& e) {
  std::string word;
  for (const auto& [k, v] : e.facts)
    if (k == "verdict") word = v;
  // Judged without cases (mutants --production): its problem is set exactly when one is flagged.
  if (word.empty() && e.kind == "production" && e.cases.empty())
    word = e.problem.empty() ? "none flagged" : "flagged";
  if (word.empty() && e.expect == "fail")
    word = e.count(oracles::State::fail) ? "caught" : "not caught";
  if (e.ok()) return word.empty() ? "ok" : word;
  return word.empty() || word == "NOT OK" ? "NOT OK" : "NOT OK: " + word;
}

}  // namespace mhc::reports
