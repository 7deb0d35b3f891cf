#include <cstdint>

#include "data/tokenizer.h"

namespace motley {

Status ByteTokenizer::Encode(std::string_view text, std::vector<uint32_t>* out) const {
  out->reserve(out->size() + text.size());
  for (char c : text) out->push_back(static_cast<uint8_t>(c));
  return Status::Ok();
}

std::string ByteTokenizer::Decode(const std::vector<uint32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (uint32_t id : ids) text.push_back(static_cast<char>(id & 0xff));
  return text;
}

}  // namespace motley
