#include "runtime/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace motley {
namespace {

constexpr size_t kHeaderInts = 256;
constexpr size_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

}  // namespace

Status WriteTokenFile(const std::string& path, const std::vector<uint32_t>& tokens, int64_t vocab_size) {
  const bool wide = vocab_size > 65536;
  std::vector<int32_t> header(kHeaderInts, 0);
  header[0] = kTokenFileMagic;
  header[1] = wide ? 2 : 1;
  header[2] = static_cast<int32_t>(tokens.size());
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    return Status::InvalidArgument(fmt::format("{}: {} tokens do not fit one shard's int32 count; split the input",
                                               path, tokens.size()));
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Status::IoError(fmt::format("{}: cannot create: {}", tmp, std::strerror(errno)));
  auto write_all = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd, c, n);
      if (w <= 0) return false;
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  };
  bool ok = write_all(header.data(), kHeaderBytes);
  if (wide) {
    ok = ok && write_all(tokens.data(), tokens.size() * 4);
  } else {
    std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
    ok = ok && write_all(narrow.data(), narrow.size() * 2);
  }
  ok = ok && ::fsync(fd) == 0;
  ok = (::close(fd) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IoError(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
  }
  return Status::Ok();
}

Result<TokenFile> TokenFile::Open(const std::string& path, int64_t vocab_size) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Status::NotFound(fmt::format("{}: cannot open the token file: {}", path, std::strerror(errno)));
  struct stat st {};
  ::fstat(fd, &st);
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < kHeaderBytes) {
    ::close(fd);
    return Status::InvalidArgument(fmt::format("{}: truncated: {} bytes, shorter than the {}-byte header", path,
                                               size, kHeaderBytes));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return Status::IoError(fmt::format("{}: mmap failed: {}", path, std::strerror(errno)));
  TokenFile f;
  f.data_ = static_cast<const uint8_t*>(map);
  f.size_ = size;
  int32_t header[3];
  std::memcpy(header, f.data_, sizeof header);
  if (header[0] != kTokenFileMagic)
    return Status::InvalidArgument(fmt::format("{}: wrong magic {} (expected {}): not a tokenized .bin shard; make "
                                               "one with `motley data prepare`",
                                               path, header[0], kTokenFileMagic));
  if (header[1] != 1 && header[1] != 2)
    return Status::InvalidArgument(fmt::format("{}: unknown version {} (1: uint16 tokens, 2: uint32)", path, header[1]));
  f.bytes_per_token_ = header[1] == 1 ? 2 : 4;
  f.num_tokens_ = header[2];
  const size_t expected = kHeaderBytes + static_cast<size_t>(f.num_tokens_) * f.bytes_per_token_;
  if (header[2] < 0 || size != expected)
    return Status::InvalidArgument(fmt::format("{}: truncated or padded: the header says {} tokens ({} bytes with the "
                                               "header) but the file has {} bytes",
                                               path, header[2], expected, size));
  if (vocab_size > 0) {
    for (int64_t i = 0; i < f.num_tokens_; ++i) {
      if (f[i] >= vocab_size)
        return Status::InvalidArgument(fmt::format("{}: token {} at position {} is outside the model's vocabulary of "
                                                   "{}; the data was tokenized for another vocabulary",
                                                   path, f[i], i, vocab_size));
    }
  }
  return f;
}

TokenFile::TokenFile(TokenFile&& o) noexcept { *this = std::move(o); }

TokenFile& TokenFile::operator=(TokenFile&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  std::swap(num_tokens_, o.num_tokens_);
  std::swap(bytes_per_token_, o.bytes_per_token_);
  return *this;
}

TokenFile::~TokenFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

uint32_t TokenFile::operator[](int64_t i) const {
  const uint8_t* p = data_ + kHeaderBytes + static_cast<size_t>(i) * bytes_per_token_;
  if (bytes_per_token_ == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void TokenFile::Copy(int64_t begin, int64_t count, std::vector<int64_t>* out) const {
  out->resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) (*out)[i] = (*this)[begin + i];
}

}  // namespace motley
