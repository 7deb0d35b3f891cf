// Tokenized shards in llm.c's .bin format: a header of 256 int32 — magic 20240520, a version, the
// token count — then the tokens. Version 1 stores uint16 tokens (vocabularies up to 65,536);
// motley's version 2 stores uint32 tokens for larger vocabularies. Read with pread, so that a shard
// cut short under a running job is an error naming it (a mapping would end the process with SIGBUS).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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

/// What a shard's header says, checked against the file's size.
struct TokenFileHeader {
  int bytes_per_token = 2;
  int64_t num_tokens = 0;
};

/// The header's bytes are the file's first min(file_bytes, 1024) bytes (`path` for messages).
Result<TokenFileHeader> ParseTokenFileHeader(std::string_view first_bytes, int64_t file_bytes,
                                             const std::string& path);

class TokenFile {
 public:
  /// Opens the file and checks its header and size. When `vocab_size` > 0 every token must be
  /// below it (checked once, at open).
  static Result<TokenFile> Open(const std::string& path, int64_t vocab_size = 0);
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  int64_t num_tokens() const { return num_tokens_; }
  int bytes_per_token() const { return bytes_per_token_; }
  const std::string& path() const { return path_; }
  /// Tokens [begin, begin + count) into `out` (resized to `count`). An error names the file when it
  /// no longer holds them (cut short since it was opened).
  /// REQUIRES: begin + count <= num_tokens().
  Status Copy(int64_t begin, int64_t count, std::vector<int64_t>* out) const;

 private:
  TokenFile() = default;
  int fd_ = -1;
  std::string path_;
  int64_t num_tokens_ = 0;
  int bytes_per_token_ = 2;
};

}  // namespace motley
