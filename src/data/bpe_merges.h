// BpeMerges: byte-pair encoding's merge table and the merge loop. A word's symbols (token ids) are
// merged pair by pair, always the pair of lowest rank (its line in the merges list) and of those the
// leftmost, until no adjacent pair has a merge — what Hugging Face's tokenizers (BPE model) and
// sentencepiece's BPE do. O(n log n) in the word's symbols with a heap, so a whole document as one
// word (sentencepiece-style tokenizers without a pre-tokenizer) is fine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace motley {

class BpeMerges {
 public:
  /// Merging `left` and `right` gives `merged`; earlier calls have lower ranks. A pair added twice
  /// keeps its first rank.
  void Add(uint32_t left, uint32_t right, uint32_t merged);
  size_t size() const { return merges_.size(); }
  /// Merges `symbols` in place.
  void Apply(std::vector<uint32_t>* symbols) const;

 private:
  struct Merge {
    uint32_t rank, merged;
  };
  static uint64_t Key(uint32_t a, uint32_t b) { return uint64_t{a} << 32 | b; }
  const Merge* Find(uint32_t a, uint32_t b) const {
    auto it = merges_.find(Key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace motley
