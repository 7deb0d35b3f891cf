#include "core/file_io.h"

#include <cstdint>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <boost/crc.hpp>
#include <fmt/format.h>

namespace motley {
namespace fs = std::filesystem;

Status AtomicWriteFile(const std::string& path, const std::function<Status(const AppendFn&)>& write,
                       uint32_t* crc32) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Status::IoError(fmt::format("{}: cannot create: {}", tmp, std::strerror(errno)));
  boost::crc_32_type crc;
  auto append = [&](const void* data, size_t size) -> Status {
    crc.process_bytes(data, size);
    const char* c = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t w = ::write(fd, c, size);
      if (w <= 0) return Status::IoError(fmt::format("{}: write failed: {}", tmp, std::strerror(errno)));
      c += w;
      size -= static_cast<size_t>(w);
    }
    return Status::Ok();
  };
  Status s = write(append);
  if (s.ok() && ::fsync(fd) != 0) s = Status::IoError(fmt::format("{}: fsync failed: {}", tmp, std::strerror(errno)));
  if (::close(fd) != 0 && s.ok()) s = Status::IoError(fmt::format("{}: close failed: {}", tmp, std::strerror(errno)));
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
    s = Status::IoError(fmt::format("{}: rename failed: {}", path, std::strerror(errno)));
  if (!s.ok()) {
    std::remove(tmp.c_str());
    return s;
  }
  if (crc32 != nullptr) *crc32 = crc.checksum();
  const fs::path parent = fs::path(path).parent_path();
  return FsyncDirectory(parent.empty() ? "." : parent.string());
}

Status AtomicWriteFile(const std::string& path, std::string_view content, uint32_t* crc32) {
  return AtomicWriteFile(path, [&](const AppendFn& append) { return append(content.data(), content.size()); }, crc32);
}

Result<uint32_t> FileCrc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: cannot open", path));
  boost::crc_32_type crc;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    crc.process_bytes(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return Status::IoError(fmt::format("{}: read failed", path));
  return crc.checksum();
}

uint32_t Crc32(std::string_view bytes) {
  boost::crc_32_type crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

Status FsyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Status::IoError(fmt::format("{}: cannot open the directory: {}", dir, std::strerror(errno)));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Status::IoError(fmt::format("{}: fsync failed: {}", dir, std::strerror(errno)));
  return Status::Ok();
}

Result<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: cannot open", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError(fmt::format("{}: read failed", path));
  return ss.str();
}

}  // namespace motley
