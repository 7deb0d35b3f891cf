// The job's training and validation token streams, from its [data] section:
//   train = "builtin"  the built-in corpus, byte-tokenized in memory; its last 5% is validation
//   train = DIR        a directory made by `motley data prepare` (data.json, train*.bin, val.bin)
//   train = FILE.bin   one shard; validation only when `validation` names a file
// Paths are relative to the job file. The model's vocabulary must cover the data's.
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
Result<TrainingData> OpenTrainingData(const DataConfig& config, const std::string& base_dir, int64_t vocab_size,
                                      int64_t seq_len);

/// A .bin file, or a prepared directory's training shards (`split` "train") or validation file
/// (`split` "val").
Result<TokenDataset> OpenTokenData(const std::string& path, const std::string& split, int64_t vocab_size);

}  // namespace motley
