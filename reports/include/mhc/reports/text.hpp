// Text from outside (file names, fixture attributes, arguments) made safe to print and to store:
// reports are UTF-8 and a terminal obeys control characters. And the words the Markdown and HTML
// summaries share.
#pragma once

#include <string>

namespace mhc::reports {

// x as printf's %.<digits>g.
std::string fmt_g(double x, int digits = 3);

// s with every byte that is not part of a valid UTF-8 sequence written as \xNN, and, where
// `controls`, every control character (C0 and DEL) but those in `keep` as \xNN too, and C1
// controls, bidirectional controls and U+FFFE/U+FFFF as \uNNNN.
std::string clean_text(const std::string& s, bool controls = true, const char* keep = "");

// Text for XML and HTML: clean_text (newlines and tabs kept), then & < > " ' as entities.
std::string markup_escape(const std::string& s);

struct Entry;
// What an entry came to, for its summary row: "ok"; "caught" (a wrong kernel that failed, as it
// must); the verdict an entry records among its facts ("detected", "undetectable"); "none
// flagged" for the production run's legitimate kernels; each prefixed "NOT OK" when the entry is
// not as expected.
std::string entry_result(const Entry& e);

}  // namespace mhc::reports
