#include "data/token_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstdint>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "core/check.h"
#include "core/file_io.h"

namespace motley {
namespace {

constexpr size_t kHeaderInts = 256;
constexpr size_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

}  // namespace

Result<TokenFileWriter> TokenFileWriter::Create(const std::string& path, int64_t vocab_size) {
  TokenFileWriter w;
  // The output rule (core/file_io.h): a temporary of this process's own, renamed over the file.
  MOTLEY_ASSIGN_OR_RETURN(const OutputTarget target, ResolveOutput(path));
  if (target.through)
    return Status::InvalidArgument(
        fmt::format("{}: is a device or a pipe; a token file is written into a folder", path));
  MOTLEY_ASSIGN_OR_RETURN(const auto created, CreateTempBeside(target.path));
  w.path_ = target.path;
  w.tmp_ = created.first;
  w.fd_ = created.second;
  w.wide_ = vocab_size > 65536;
  w.buffer_.resize(kHeaderBytes, 0);  // the header, completed by Finish()
  return w;
}

TokenFileWriter::TokenFileWriter(TokenFileWriter&& o) noexcept { *this = std::move(o); }

TokenFileWriter& TokenFileWriter::operator=(TokenFileWriter&& o) noexcept {
  std::swap(path_, o.path_);
  std::swap(tmp_, o.tmp_);
  std::swap(fd_, o.fd_);
  std::swap(wide_, o.wide_);
  std::swap(num_tokens_, o.num_tokens_);
  std::swap(buffer_, o.buffer_);
  return *this;
}

TokenFileWriter::~TokenFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    std::remove(tmp_.c_str());
  }
}

namespace {

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

Status TokenFileWriter::Flush() {
  if (!WriteAll(fd_, buffer_.data(), buffer_.size()))
    return Status::IoError(fmt::format("{}: write failed: {}", tmp_, std::strerror(errno)));
  buffer_.clear();
  return Status::Ok();
}

Status TokenFileWriter::Append(const uint32_t* tokens, size_t count) {
  MOTLEY_CHECK_GE(fd_, 0);
  if (num_tokens_ + static_cast<int64_t>(count) > kMaxTokensPerShard)
    return Status::InvalidArgument(
        fmt::format("{}: more than {} tokens do not fit one shard's int32 count; split the input", path_,
                    kMaxTokensPerShard));
  const size_t width = wide_ ? 4 : 2;
  const size_t at = buffer_.size();
  buffer_.resize(at + count * width);
  if (wide_) {
    std::memcpy(buffer_.data() + at, tokens, count * 4);
  } else {
    for (size_t i = 0; i < count; ++i) {
      const auto v = static_cast<uint16_t>(tokens[i]);
      std::memcpy(buffer_.data() + at + 2 * i, &v, 2);
    }
  }
  num_tokens_ += static_cast<int64_t>(count);
  return buffer_.size() >= (8u << 20) ? Flush() : Status::Ok();
}

Status TokenFileWriter::Finish() {
  MOTLEY_CHECK_GE(fd_, 0);
  MOTLEY_RETURN_IF_ERROR(Flush());
  const int32_t header[3] = {kTokenFileMagic, wide_ ? 2 : 1, static_cast<int32_t>(num_tokens_)};
  bool ok = ::pwrite(fd_, header, sizeof header, 0) == static_cast<ssize_t>(sizeof header);
  ok = ok && ::fsync(fd_) == 0;
  ok = (::close(fd_) == 0) && ok;
  fd_ = -1;
  if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    std::remove(tmp_.c_str());
    return Status::IoError(fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
  }
  return Status::Ok();
}

Status WriteTokenFile(const std::string& path, const std::vector<uint32_t>& tokens, int64_t vocab_size) {
  MOTLEY_ASSIGN_OR_RETURN(TokenFileWriter w, TokenFileWriter::Create(path, vocab_size));
  MOTLEY_RETURN_IF_ERROR(w.Append(tokens.data(), tokens.size()));
  return w.Finish();
}

Result<TokenFileHeader> ParseTokenFileHeader(std::string_view first_bytes, int64_t file_bytes,
                                             const std::string& path) {
  if (file_bytes < static_cast<int64_t>(kHeaderBytes) || first_bytes.size() < 3 * sizeof(int32_t))
    return Status::InvalidArgument(fmt::format("{}: truncated: {} bytes, shorter than the {}-byte header",
                                               path, file_bytes, kHeaderBytes));
  int32_t header[3];
  std::memcpy(header, first_bytes.data(), sizeof header);
  if (header[0] != kTokenFileMagic)
    return Status::InvalidArgument(
        fmt::format("{}: wrong magic {} (expected {}): not a tokenized .bin shard; make "
                    "one with `motley data prepare`",
                    path, header[0], kTokenFileMagic));
  if (header[1] != 1 && header[1] != 2)
    return Status::InvalidArgument(
        fmt::format("{}: unknown version {} (1: uint16 tokens, 2: uint32)", path, header[1]));
  TokenFileHeader h;
  h.bytes_per_token = header[1] == 1 ? 2 : 4;
  h.num_tokens = header[2];
  const int64_t expected = static_cast<int64_t>(kHeaderBytes) + h.num_tokens * h.bytes_per_token;
  if (header[2] < 0 || file_bytes != expected)
    return Status::InvalidArgument(
        fmt::format("{}: truncated or padded: the header says {} tokens ({} bytes with the "
                    "header) but the file has {} bytes",
                    path, header[2], expected, file_bytes));
  return h;
}

Result<TokenFile> TokenFile::Open(const std::string& path, int64_t vocab_size) {
  TokenFile f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0)
    return Status::NotFound(fmt::format("{}: cannot open the token file: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(f.fd_, &st) != 0)
    return Status::IoError(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)));
  char first[3 * sizeof(int32_t)] = {};
  const ssize_t got = ::pread(f.fd_, first, sizeof first, 0);
  MOTLEY_ASSIGN_OR_RETURN(
      TokenFileHeader header,
      ParseTokenFileHeader(std::string_view(first, got > 0 ? static_cast<size_t>(got) : 0), st.st_size,
                           path));
  f.bytes_per_token_ = header.bytes_per_token;
  f.num_tokens_ = header.num_tokens;
  if (vocab_size > 0) {
    constexpr int64_t kChunk = int64_t{1} << 20;
    std::vector<int64_t> tokens;
    for (int64_t begin = 0; begin < f.num_tokens_; begin += kChunk) {
      MOTLEY_RETURN_IF_ERROR(f.Copy(begin, std::min(kChunk, f.num_tokens_ - begin), &tokens));
      for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] >= vocab_size)
          return Status::InvalidArgument(
              fmt::format("{}: token {} at position {} is outside the model's vocabulary of "
                          "{}; the data was tokenized for another vocabulary",
                          path, tokens[i], begin + static_cast<int64_t>(i), vocab_size));
    }
  }
  return f;
}

TokenFile::TokenFile(TokenFile&& o) noexcept { *this = std::move(o); }

TokenFile& TokenFile::operator=(TokenFile&& o) noexcept {
  std::swap(fd_, o.fd_);
  std::swap(path_, o.path_);
  std::swap(num_tokens_, o.num_tokens_);
  std::swap(bytes_per_token_, o.bytes_per_token_);
  return *this;
}

TokenFile::~TokenFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status TokenFile::Copy(int64_t begin, int64_t count, std::vector<int64_t>* out) const {
  MOTLEY_CHECK(begin >= 0 && count >= 0 && begin + count <= num_tokens_);
  const size_t bytes = static_cast<size_t>(count) * static_cast<size_t>(bytes_per_token_);
  std::vector<uint8_t> raw(bytes);
  const off_t offset = static_cast<off_t>(kHeaderBytes) + static_cast<off_t>(begin) * bytes_per_token_;
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, raw.data() + done, bytes - done, offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      struct stat st {};
      ::fstat(fd_, &st);
      return Status::IoError(fmt::format(
          "{}: changed while the job reads it: tokens {}..{} are gone (the file now has {} bytes, {} when it "
          "was "
          "opened){}; leave a job's data unchanged while it runs (prepare new data into another folder)",
          path_, begin, begin + count, st.st_size,
          static_cast<int64_t>(kHeaderBytes) + num_tokens_ * bytes_per_token_,
          n < 0 ? fmt::format(" ({})", std::strerror(errno)) : std::string()));
    }
    done += static_cast<size_t>(n);
  }
  out->resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    if (bytes_per_token_ == 2) {
      uint16_t v;
      std::memcpy(&v, raw.data() + 2 * i, 2);
      (*out)[i] = v;
    } else {
      uint32_t v;
      std::memcpy(&v, raw.data() + 4 * i, 4);
      (*out)[i] = v;
    }
  }
  return Status::Ok();
}

}  // namespace motley
