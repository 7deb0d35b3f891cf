#include "data/byte_level.h"

#include <array>
#include <cstdint>
#include <unordered_map>

#include "data/utf8.h"

namespace motley {
namespace {

struct Alphabet {
  std::array<uint32_t, 256> to_cp{};
  std::unordered_map<uint32_t, uint8_t> to_byte;
  Alphabet() {
    uint32_t extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? b : extra++;
      to_byte[to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};
const Alphabet& Bytes() {
  static const Alphabet alphabet;
  return alphabet;
}

}  // namespace

std::string ByteLevelEncode(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) AppendUtf8(Bytes().to_cp[b], &out);
  return out;
}

std::optional<std::string> ByteLevelDecode(std::string_view text) {
  std::string bytes;
  for (size_t at = 0; at < text.size(); at += Utf8Length(static_cast<unsigned char>(text[at]))) {
    auto it = Bytes().to_byte.find(DecodeUtf8(text, at));
    if (it == Bytes().to_byte.end()) return std::nullopt;
    bytes.push_back(static_cast<char>(it->second));
  }
  return bytes;
}

}  // namespace motley
