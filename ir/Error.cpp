#include "ir/Error.h"

namespace autotune {

std::string printable(const std::string &s, size_t max_bytes) {
  std::string out;
  auto byte = [](unsigned char c) { return static_cast<unsigned>(c); };
  for (size_t i = 0; i < s.size();) {
    if (out.size() >= max_bytes) return out + "...";
    unsigned c = byte(s[i]);
    if (c == '\n') out += "\\n", ++i;
    else if (c == '\t') out += "\\t", ++i;
    else if (c == '\r') out += "\\r", ++i;
    else if (c >= 0x20 && c < 0x7f) out += static_cast<char>(c), ++i;
    else {
      // A whole, valid UTF-8 sequence (no overlongs, surrogates or code points past U+10FFFF) stays.
      size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
      bool ok = len > 0 && i + len <= s.size();
      for (size_t k = 1; ok && k < len; ++k) ok = (byte(s[i + k]) & 0xc0) == 0x80;
      if (ok && len == 3) {
        unsigned c1 = byte(s[i + 1]);
        ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);
      }
      if (ok && len == 4) {
        unsigned c1 = byte(s[i + 1]);
        ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
      }
      if (ok) {
        out.append(s, i, len);
        i += len;
      } else {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
        ++i;
      }
    }
  }
  return out;
}

}  // namespace autotune
