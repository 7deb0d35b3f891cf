// TokenDataset: one stream of tokens, from several .bin shards (in name order, concatenated) or
// from memory (the built-in corpus). Training samples windows anywhere in it (data_sampler.h);
// evaluation reads its non-overlapping windows in order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/token_file.h"

namespace motley {

class TokenDataset {
 public:
  /// Shards read as needed; every token must be below `vocab_size` (when > 0).
  static Result<TokenDataset> OpenFiles(const std::vector<std::string>& paths, int64_t vocab_size);
  static TokenDataset FromTokens(std::vector<uint32_t> tokens, std::string name);

  int64_t num_tokens() const { return num_tokens_; }
  /// What it was opened from, for messages ("data/train.bin", "built-in corpus (train)").
  const std::string& name() const { return name_; }
  /// Appends tokens [begin, begin + count) of the concatenated stream to `out`; an error names a
  /// shard cut short since it was opened.
  /// REQUIRES: begin + count <= num_tokens().
  Status Copy(int64_t begin, int64_t count, std::vector<int64_t>* out) const;

 private:
  std::string name_;
  std::vector<TokenFile> files_;
  std::vector<int64_t> offsets_;  // the first token of each file in the stream
  std::vector<uint32_t> memory_;  // when built from memory
  int64_t num_tokens_ = 0;
};

/// Sequences [first, first + count) of training step `step`: each a window of seq_len + 1 tokens
/// (inputs, then the targets shifted by one) at SampleWindowStart(seed, step, index). Row-major
/// [count, seq_len + 1] into `out`.
Status SampleTrainingWindows(const TokenDataset& data, uint64_t seed, int64_t step, int64_t first,
                             int64_t count, int64_t seq_len, std::vector<int64_t>* out);

/// Evaluation windows [first, first + count): window i holds tokens [i*S, (i+1)*S + 1) — inputs are
/// its first S tokens, targets its last S. Row-major [count, S + 1] into `out`.
/// REQUIRES: (first + count) * S + 1 <= data.num_tokens().
Status EvaluationWindows(const TokenDataset& data, int64_t first, int64_t count, int64_t seq_len,
                         std::vector<int64_t>* out);

/// How many evaluation windows of `seq_len` the data holds.
int64_t NumEvaluationWindows(const TokenDataset& data, int64_t seq_len);

}  // namespace motley
