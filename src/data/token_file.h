// Tokenized shards in llm.c's .bin format: a header of 256 int32 — magic 20240520, a version, the
// token count — then the tokens. Version 1 stores uint16 tokens (vocabularies up to 65,536);
// motley's version 2 stores uint32 tokens for larger vocabularies. Read through mmap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace motley {

constexpr int32_t kTokenFileMagic = 20240520;

/// The largest token count one shard holds (the header's count is an int32).
constexpr int64_t kMaxTokensPerShard = 2147483647;

/// Writes one shard incrementally: tokens are appended (buffered), and Finish() writes the count
/// into the header, fsyncs and renames the temporary file into place — an interrupted write never
/// leaves a partial shard under the final name. The version follows `vocab_size` (> 65,536: uint32).
class TokenFileWriter {
 public:
  static Result<TokenFileWriter> Create(const std::string& path, int64_t vocab_size);
  TokenFileWriter(TokenFileWriter&& other) noexcept;
  TokenFileWriter& operator=(TokenFileWriter&& other) noexcept;
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;
  ~TokenFileWriter();  // removes the temporary file when Finish() was not called

  Status Append(const uint32_t* tokens, size_t count);
  Status Finish();
  int64_t num_tokens() const { return num_tokens_; }

 private:
  TokenFileWriter() = default;
  Status Flush();
  std::string path_, tmp_;
  int fd_ = -1;
  bool wide_ = false;
  int64_t num_tokens_ = 0;
  std::vector<uint8_t> buffer_;
};

/// Writes `tokens` atomically (temporary file, fsync, rename), choosing the version by `vocab_size`.
Status WriteTokenFile(const std::string& path, const std::vector<uint32_t>& tokens, int64_t vocab_size);

class TokenFile {
 public:
  /// Maps the file and checks its header and size. When `vocab_size` > 0 every token must be below
  /// it (checked once, at open).
  static Result<TokenFile> Open(const std::string& path, int64_t vocab_size = 0);
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  int64_t num_tokens() const { return num_tokens_; }
  int bytes_per_token() const { return bytes_per_token_; }
  uint32_t operator[](int64_t i) const;
  /// Tokens [begin, begin + count) into `out`.
  void Copy(int64_t begin, int64_t count, std::vector<int64_t>* out) const;

 private:
  TokenFile() = default;
  const uint8_t* data_ = nullptr;  // the whole mapping
  size_t size_ = 0;
  int64_t num_tokens_ = 0;
  int bytes_per_token_ = 2;
};

}  // namespace motley
