// HfTokenizer: a model's own tokenizer from its Hugging Face tokenizer.json (with
// tokenizer_config.json / special_tokens_map.json beside it for BOS and EOS), for the BPE models
// Llama families carry:
//   - byte-level BPE (Llama 3, GPT-2 style): a Split pre-tokenizer whose regular expression uses
//     Unicode classes (run by PCRE2 with UTF and UCP), ByteLevel's byte alphabet, ignore_merges;
//   - sentencepiece-style BPE (Llama 2, TinyLlama): Prepend/Replace normalizers or a Metaspace
//     pre-tokenizer, "▁" for spaces, byte fallback (<0x41>) and fused unknowns.
// Added tokens (special or not) in the text are matched first, longest first, as Hugging Face does;
// the pieces between them are normalized and pre-tokenized on their own. Invalid UTF-8 becomes
// U+FFFD per maximal invalid subpart (utf8.h), as JavaScript's TextDecoder and Python's
// errors="replace" read it. Any component outside these (another model type, a normalizer such as
// NFKC, another pre-tokenizer or split behaviour) is refused at load by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/bpe_merges.h"
#include "data/tokenizer.h"

namespace motley {

namespace hf {
struct TokenizerParts;  // hf_tokenizer_parts.h
}  // namespace hf

class HfTokenizer : public Tokenizer {
 public:
  /// `path`: a tokenizer.json, or a folder holding one (a Hugging Face model folder).
  static Result<std::unique_ptr<HfTokenizer>> Load(const std::string& path);
  /// The same from a tokenizer.json's text (`where` names it in messages); BOS and EOS from the
  /// tokenizer_config.json / special_tokens_map.json in `folder` when it is not "".
  static Result<std::unique_ptr<HfTokenizer>> FromJson(std::string_view text, const std::string& where,
                                                       const std::string& folder = "");
  ~HfTokenizer() override;

  /// The tokenizer.json's path.
  std::string name() const override { return path_; }
  int64_t vocab_size() const override { return vocab_size_; }
  /// The ids of `text`, added tokens in it included, without BOS or EOS.
  Status Encode(std::string_view text, std::vector<uint32_t>* out) const override;
  std::string Decode(const std::vector<uint32_t>& ids) const override;
  /// EOS: appended after every document.
  int64_t document_separator() const override { return eos_id_; }
  /// BOS, put before every document when the tokenizer adds one (-1: none).
  int64_t document_start() const override { return add_bos_ ? bos_id_ : -1; }
  /// A hash of tokenizer.json and the BOS/EOS choice, hex: prepared data records it.
  std::string hash() const override { return hash_; }
  /// How many invalid UTF-8 subparts Encode has replaced so far.
  int64_t replaced_invalid_utf8() const { return replaced_; }

 private:
  HfTokenizer();
  std::string path_, hash_;
  int64_t vocab_size_ = 0, bos_id_ = -1, eos_id_ = -1;
  bool add_bos_ = false;
  mutable int64_t replaced_ = 0;
  std::unique_ptr<hf::TokenizerParts> impl_;
};

}  // namespace motley
