// The job's training and validation token streams, from its [data] section:
//   train = "builtin"  the built-in corpus, byte-tokenized in memory; its last 5% is validation
//   train = DIR        a directory made by `motley data prepare` (data.json, train*.bin, val.bin)
//   train = FILE.bin   one shard; validation only when `validation` names a file
// Paths are relative to the job file. The model's vocabulary must cover the data's, and data
// prepared with a tokenizer.json must have been prepared with the run's ([data] tokenizer, or the
// [model] init_from folder's).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/job.h"
#include "data/token_dataset.h"

namespace motley {

struct TrainingData {
  TokenDataset train;
  std::optional<TokenDataset> validation;
};

/// `base_dir`: where relative paths start (the job file's directory).
Result<TrainingData> OpenTrainingData(const DataConfig& config, const std::string& base_dir,
                                      int64_t vocab_size, int64_t seq_len);

/// The tokenizer a run's data must have been prepared with: a tokenizer.json's path and hash
/// (HfTokenizer). Empty: no check (the byte tokenizer, a sentencepiece model).
struct ExpectedTokenizer {
  std::string name, hash;
};

/// A .bin file, or a prepared directory's training shards (`split` "train") or validation file
/// (`split` "val"). A prepared directory made with another tokenizer than `expected` is an error
/// naming both.
Result<TokenDataset> OpenTokenData(const std::string& path, const std::string& split, int64_t vocab_size,
                                   const ExpectedTokenizer& expected = {});

}  // namespace motley
