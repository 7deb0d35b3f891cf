#include "data/utf8.h"

namespace motley {

std::string ReplaceInvalidUtf8(std::string_view text, int64_t* replaced) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  std::string out;
  int64_t count = 0;
  size_t i = 0;
  // Fast path: text that is valid needs no copy decisions byte by byte.
  out.reserve(n);
  while (i < n) {
    const unsigned char b = s[i];
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    // The bytes that may follow the lead (WHATWG's "UTF-8 lower/upper boundary").
    int need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      need = 2;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      need = 3;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      out += "\xEF\xBF\xBD";
      ++count;
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool ok = true;
    for (int k = 0; k < need; ++k, ++j) {
      if (j >= n || s[j] < lo || s[j] > hi) {
        ok = false;
        break;
      }
      lo = 0x80, hi = 0xBF;
    }
    if (ok) {
      out.append(text.substr(i, j - i));
    } else {
      out += "\xEF\xBF\xBD";  // the maximal subpart; the byte that broke it is read again
      ++count;
    }
    i = j;
  }
  if (replaced) *replaced = count;
  return out;
}

uint32_t DecodeUtf8(std::string_view text, size_t at) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + at;
  switch (Utf8Length(s[0])) {
    case 1:
      return s[0];
    case 2:
      return (uint32_t{s[0]} & 0x1F) << 6 | (s[1] & 0x3F);
    case 3:
      return (uint32_t{s[0]} & 0x0F) << 12 | (uint32_t{s[1]} & 0x3F) << 6 | (s[2] & 0x3F);
    default:
      return (uint32_t{s[0]} & 0x07) << 18 | (uint32_t{s[1]} & 0x3F) << 12 | (uint32_t{s[2]} & 0x3F) << 6 |
             (s[3] & 0x3F);
  }
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace motley
