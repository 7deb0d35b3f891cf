#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstdint>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <boost/crc.hpp>

namespace motley {
namespace fs = std::filesystem;

Result<OutputTarget> ResolveOutput(const std::string& path) {
  OutputTarget out{path, false};
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return out;  // nothing there: a new file
  // A symbolic link is followed — what it points to is written, the link stays — hop by hop, so
  // that a dangling one's target is created.
  for (int hops = 0; S_ISLNK(st.st_mode); ++hops) {
    std::error_code ec;
    const fs::path to = fs::read_symlink(out.path, ec);
    if (ec || hops == 40)
      return Status::InvalidArgument(
          fmt::format("{}: a symbolic link that cannot be followed ({}); give a file path", path,
                      ec ? ec.message() : "too many levels"));
    out.path = (to.is_absolute() ? to : fs::path(out.path).parent_path() / to).string();
    if (::lstat(out.path.c_str(), &st) != 0) return out;  // a dangling link: its target is created
  }
  if (S_ISREG(st.st_mode)) return out;
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
    out.through = true;
    return out;
  }
  const char* what = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "a block device";
  return Status::InvalidArgument(fmt::format(
      "{}: is {}; motley writes a file here only where there is none, a regular file, a character device or "
      "a pipe — "
      "give a file path{}",
      path, what, S_ISDIR(st.st_mode) ? fmt::format(" (e.g. {})", (fs::path(path) / "out").string()) : ""));
}

Result<std::pair<std::string, int>> CreateTempBeside(const std::string& target) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = fmt::format("{}.tmp-{}-{}", target, ::getpid(), counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST)
      return Status::InvalidArgument(
          fmt::format("{}: exists and motley did not create it in this run; remove it", tmp));
    return Status::IoError(fmt::format("{}: cannot create: {}", tmp, std::strerror(errno)));
  }
  return std::make_pair(tmp, fd);
}

namespace {

// Writes `write`'s bytes to `fd` (named `name` for messages), their CRC-32 into `crc`.
Status WriteAllTo(int fd, const std::string& name, const std::function<Status(const AppendFn&)>& write,
                  boost::crc_32_type* crc) {
  auto append = [&](const void* data, size_t size) -> Status {
    crc->process_bytes(data, size);
    const char* c = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t w = ::write(fd, c, size);
      if (w <= 0) return Status::IoError(fmt::format("{}: write failed: {}", name, std::strerror(errno)));
      c += w;
      size -= static_cast<size_t>(w);
    }
    return Status::Ok();
  };
  return write(append);
}

}  // namespace

Status AtomicWriteFile(const std::string& path, const std::function<Status(const AppendFn&)>& write,
                       uint32_t* crc32) {
  MOTLEY_ASSIGN_OR_RETURN(const OutputTarget target, ResolveOutput(path));
  boost::crc_32_type crc;
  if (target.through) {  // a character device or a pipe: written in place, never replaced
    const int fd = ::open(target.path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Status::IoError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
    Status s = WriteAllTo(fd, path, write, &crc);
    ::close(fd);
    if (s.ok() && crc32 != nullptr) *crc32 = crc.checksum();
    return s;
  }
  MOTLEY_ASSIGN_OR_RETURN(const auto created, CreateTempBeside(target.path));
  const auto& [tmp, fd] = created;
  Status s = WriteAllTo(fd, tmp, write, &crc);
  if (s.ok() && ::fsync(fd) != 0)
    s = Status::IoError(fmt::format("{}: fsync failed: {}", tmp, std::strerror(errno)));
  if (::close(fd) != 0 && s.ok())
    s = Status::IoError(fmt::format("{}: close failed: {}", tmp, std::strerror(errno)));
  if (s.ok() && std::rename(tmp.c_str(), target.path.c_str()) != 0)
    s = Status::IoError(fmt::format("{}: rename failed: {}", path, std::strerror(errno)));
  if (!s.ok()) {
    std::remove(tmp.c_str());  // this process's own temporary
    return s;
  }
  if (crc32 != nullptr) *crc32 = crc.checksum();
  const fs::path parent = fs::path(target.path).parent_path();
  return FsyncDirectory(parent.empty() ? "." : parent.string());
}

Status AtomicWriteFile(const std::string& path, std::string_view content, uint32_t* crc32) {
  return AtomicWriteFile(
      path, [&](const AppendFn& append) { return append(content.data(), content.size()); }, crc32);
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
  if (fd < 0)
    return Status::IoError(fmt::format("{}: cannot open the directory: {}", dir, std::strerror(errno)));
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

Status CheckFolderWritable(const std::string& dir, const std::string& who) {
  auto refused = [&](const std::string& why) {
    return Status::IoError(
        fmt::format("{} cannot write the checkpoint folder {} ({}): every rank writes its part of a "
                    "checkpoint there, so the "
                    "folder must be shared by every host (a network or parallel filesystem) and writable by "
                    "each rank's user; "
                    "set [checkpoint] dir to such a folder",
                    who, dir, why));
  };
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return refused(ec.message());
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string probe =
      (std::filesystem::path(dir) / fmt::format(".write-probe-{}-{}", host, ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return refused(std::strerror(errno));
  const bool written = ::write(fd, "ok", 2) == 2;
  const int write_errno = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!written) return refused(std::strerror(write_errno));
  return Status::Ok();
}

}  // namespace motley
