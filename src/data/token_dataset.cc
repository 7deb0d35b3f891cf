#include "data/token_dataset.h"

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "data/data_sampler.h"

namespace motley {

Result<TokenDataset> TokenDataset::OpenFiles(const std::vector<std::string>& paths, int64_t vocab_size) {
  MOTLEY_CHECK(!paths.empty());
  TokenDataset d;
  for (const std::string& path : paths) {
    MOTLEY_ASSIGN_OR_RETURN(TokenFile f, TokenFile::Open(path, vocab_size));
    d.offsets_.push_back(d.num_tokens_);
    d.num_tokens_ += f.num_tokens();
    d.files_.push_back(std::move(f));
  }
  d.name_ = paths.size() == 1 ? paths[0] : paths[0] + " (+" + std::to_string(paths.size() - 1) + " shards)";
  return d;
}

TokenDataset TokenDataset::FromTokens(std::vector<uint32_t> tokens, std::string name) {
  TokenDataset d;
  d.num_tokens_ = static_cast<int64_t>(tokens.size());
  d.memory_ = std::move(tokens);
  d.name_ = std::move(name);
  return d;
}

Status TokenDataset::Copy(int64_t begin, int64_t count, std::vector<int64_t>* out) const {
  MOTLEY_CHECK_GE(begin, 0);
  MOTLEY_CHECK_LE(begin + count, num_tokens_);
  const size_t at = out->size();
  if (files_.empty()) {
    out->insert(out->end(), memory_.begin() + begin, memory_.begin() + begin + count);
    return Status::Ok();
  }
  out->resize(at + static_cast<size_t>(count));
  // The file holding `begin`, then onwards across shard boundaries.
  size_t f =
      static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), begin) - offsets_.begin()) - 1;
  std::vector<int64_t> part;
  for (int64_t i = 0; i < count;) {
    const int64_t local = begin + i - offsets_[f];
    const int64_t n = std::min(count - i, files_[f].num_tokens() - local);
    MOTLEY_RETURN_IF_ERROR(files_[f].Copy(local, n, &part));
    std::copy(part.begin(), part.end(), out->begin() + static_cast<ptrdiff_t>(at + static_cast<size_t>(i)));
    i += n;
    ++f;
  }
  return Status::Ok();
}

Status SampleTrainingWindows(const TokenDataset& data, uint64_t seed, int64_t step, int64_t first,
                             int64_t count, int64_t seq_len, std::vector<int64_t>* out) {
  out->clear();
  for (int64_t i = first; i < first + count; ++i)
    MOTLEY_RETURN_IF_ERROR(
        data.Copy(SampleWindowStart(seed, step, i, data.num_tokens(), seq_len), seq_len + 1, out));
  return Status::Ok();
}

Status EvaluationWindows(const TokenDataset& data, int64_t first, int64_t count, int64_t seq_len,
                         std::vector<int64_t>* out) {
  out->clear();
  for (int64_t i = first; i < first + count; ++i)
    MOTLEY_RETURN_IF_ERROR(data.Copy(i * seq_len, seq_len + 1, out));
  return Status::Ok();
}

int64_t NumEvaluationWindows(const TokenDataset& data, int64_t seq_len) {
  return data.num_tokens() > 0 ? (data.num_tokens() - 1) / seq_len : 0;
}

}  // namespace motley
