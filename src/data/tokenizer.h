// Tokenizer: text to token ids. The built-in byte-level tokenizer maps each byte to its value
// (vocabulary 256, lossless for any input); sentencepiece models are read by
// SentencePieceTokenizer, which lives in a separate torch-free helper (see sentencepiece_tokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace motley {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// "byte" or the sentencepiece model's path: what data.json records.
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  /// Appends the ids of `text` to `out`.
  virtual Status Encode(std::string_view text, std::vector<uint32_t>* out) const = 0;
  virtual std::string Decode(const std::vector<uint32_t>& ids) const = 0;
  /// The id appended between documents, or -1 for none (the byte tokenizer: text files concatenate).
  virtual int64_t document_separator() const { return -1; }
  /// The id put before each document (a model's BOS), or -1 for none.
  virtual int64_t document_start() const { return -1; }
  /// What identifies the tokenizer's behaviour (prepared data records it; a run refuses data made by
  /// another): "" where the name says it all.
  virtual std::string hash() const { return ""; }
};

class ByteTokenizer : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  int64_t vocab_size() const override { return 256; }
  Status Encode(std::string_view text, std::vector<uint32_t>* out) const override;
  std::string Decode(const std::vector<uint32_t>& ids) const override;
};

}  // namespace motley
