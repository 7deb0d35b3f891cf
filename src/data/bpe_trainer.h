// Training a byte-level BPE tokenizer (`motley data train-tokenizer`): text pre-tokenized by Llama
// 3's pattern, every byte a token, then the most frequent adjacent pair of each word merged, again
// and again, until the vocabulary has its size (ties: the pair first met in the text). Written as a
// Hugging Face tokenizer.json of Llama 3's layout (Split + ByteLevel pre-tokenizer, ByteLevel
// decoder, ignore_merges) with <|begin_of_text|> and <|end_of_text|> as BOS and EOS, and its
// tokenizer_config.json — what HfTokenizer, and Hugging Face's tools, read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace motley {

struct BpeTrainingOptions {
  int64_t vocab_size = 2048;   // bytes (256) + merges + the two special tokens
  int64_t min_pair_count = 2;  // stop early when no pair occurs this often
};

struct BpeTrainingSummary {
  int64_t merges = 0, vocab_size = 0, words = 0;
};

/// Learns the merges from `texts` and writes `dir`/tokenizer.json and tokenizer_config.json.
Result<BpeTrainingSummary> TrainByteLevelBpe(const std::vector<std::string_view>& texts,
                                             const std::string& dir, const BpeTrainingOptions& options = {});

}  // namespace motley
