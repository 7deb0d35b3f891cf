// Regex: a PCRE2 pattern compiled with UTF and UCP (\p{L}, \s and \d by Unicode) and JIT-compiled
// where the CPU allows: the pre-tokenizer patterns of tokenizer.json files (hf_tokenizer.h) and of
// motley's own tokenizer training (bpe_trainer.h).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

struct pcre2_real_code_8;

namespace motley {

/// Llama 3's pre-tokenizer pattern, as its published tokenizer.json writes it.
inline constexpr const char* kLlama3PreTokenizerPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
/// GPT-2's, which a ByteLevel pre-tokenizer with use_regex applies.
inline constexpr const char* kGpt2PreTokenizerPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class Regex {
 public:
  /// `where` names the pattern's place in messages.
  static Result<std::shared_ptr<Regex>> Compile(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// Every match in `text` (valid UTF-8) as [begin, end) byte ranges, left to right; an empty match
  /// steps over one code point.
  void Matches(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;

 private:
  explicit Regex(pcre2_real_code_8* code) : code_(code) {}
  pcre2_real_code_8* code_;
};

}  // namespace motley
