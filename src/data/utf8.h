// UTF-8 as tokenizers need it: invalid input made valid the way the WHATWG Encoding standard's
// decoder does (each maximal invalid subpart becomes U+FFFD, as browsers, Node's TextDecoder and
// Python's errors="replace" do), and walking a valid string code point by code point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace motley {

/// `text` with every maximal invalid subpart replaced by U+FFFD (EF BF BD); returns how many were
/// replaced. Valid text comes back unchanged.
std::string ReplaceInvalidUtf8(std::string_view text, int64_t* replaced = nullptr);

/// The length in bytes of the code point that starts with lead byte `lead` of valid UTF-8.
inline size_t Utf8Length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

/// The code point at `text[at]` of valid UTF-8.
uint32_t DecodeUtf8(std::string_view text, size_t at);
/// Appends code point `cp` in UTF-8.
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace motley
