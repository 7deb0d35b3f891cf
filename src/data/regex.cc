#include "data/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/utf8.h"

namespace motley {

Result<std::shared_ptr<Regex>> Regex::Compile(const std::string& pattern, const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error, message.data(), message.size());
    return Status::InvalidArgument(
        fmt::format("{}: the regular expression {} does not compile at offset {}: {}", where,
                    nlohmann::json(pattern).dump(), offset, reinterpret_cast<const char*>(message.data())));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without JIT (an unsupported CPU) it still matches
  return std::shared_ptr<Regex>(new Regex(code));
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::Matches(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
  thread_local std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  size_t at = 0;
  while (at <= text.size()) {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), at,
                               PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH, or a limit: the rest is one gap
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.get());
    if (ov[1] > ov[0]) {
      out->emplace_back(ov[0], ov[1]);
      at = ov[1];
    } else {
      at = ov[0] + (ov[0] < text.size() ? Utf8Length(static_cast<unsigned char>(text[ov[0]])) : 1);
    }
  }
}

}  // namespace motley
