// The parts of a tokenizer.json tokenizer (what HfTokenizer holds): read from the file by
// hf_tokenizer_json.cc, run by hf_tokenizer.cc. Internal to those two files.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/bpe_merges.h"
#include "data/regex.h"

namespace motley {
namespace hf {

inline constexpr const char* kMetaspace = "\xE2\x96\x81";  // ▁

struct Normalizer {
  enum class Kind { kPrepend, kReplace } kind;
  std::string text, content;     // Prepend: text; Replace: text -> content (a literal)
  std::shared_ptr<Regex> regex;  // Replace with a Regex pattern
};

struct PreTokenizer {
  enum class Kind { kSplit, kByteLevel, kMetaspace } kind = Kind::kSplit;
  std::shared_ptr<Regex> regex;   // Split (its pattern), ByteLevel with use_regex
  bool remove = false;            // Split: behaviour "Removed" (else "Isolated")
  bool add_prefix_space = false;  // ByteLevel
  std::string replacement;        // Metaspace
  std::string prepend_scheme;     // Metaspace: always, first, never
  bool split = true;              // Metaspace
};

struct Decoder {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
  Decoder(Kind k, std::string p = "", std::string c = "", int begin = 0, int end = 0)
      : kind(k), pattern(std::move(p)), content(std::move(c)), start(begin), stop(end) {}
  Kind kind;
  std::string pattern, content;  // Replace; Strip's content; Metaspace's replacement
  int start = 0, stop = 0;       // Strip
  bool prepend = true;           // Metaspace: strip the first token's leading space
};

struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool special = false;
};

struct TokenizerParts {
  bool byte_level = false;  // the vocabulary is written in the byte alphabet
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  int64_t unk_id = -1;
  std::unordered_map<std::string, uint32_t> piece_to_id;  // byte-level: by raw bytes
  std::vector<std::string> id_to_piece;                   // byte-level: raw bytes
  std::array<int64_t, 256> byte_id{};                     // byte-level: each byte's token; else <0xXX>
  BpeMerges merges;
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  std::vector<Decoder> decoders;
  std::vector<AddedToken> added;  // longest first
  std::array<std::vector<const AddedToken*>, 256> added_by_first{};
  // Words seen before (byte-level pre-tokenized text repeats its words): their ids.
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<uint32_t>> cache;

  std::string Normalize(std::string text) const;
  // Pieces of one segment (between added tokens); `first`: the segment starts the input.
  std::vector<std::string> PreTokenize(std::string text, bool first) const;
  void EncodeWord(const std::string& word, std::vector<uint32_t>* out) const;
};

}  // namespace hf
}  // namespace motley
