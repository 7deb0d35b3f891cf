// Durable file writes and checksums. AtomicWriteFile writes a temporary file beside the target,
// fsyncs it, renames it over the target and fsyncs the directory: a crash leaves either the old
// file or the new one, never a torn one. CRC-32 (Boost.CRC) guards checkpoints against corruption.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"

namespace motley {

/// The one rule for every file motley writes (issue #48), what AtomicWriteFile and the data
/// writers follow:
///   - a path that does not exist, or names a regular file: a temporary beside it that this
///     process creates (never one that was there: O_EXCL, a name of its own), renamed over it;
///   - a character device or a pipe (`-o /dev/null`): written through — it stays what it is;
///   - a symbolic link: followed — what it points to is written by these rules, the link stays;
///   - a directory, a socket or a block device: refused, naming the path and the fix.
/// Nothing the writer did not create is removed.
struct OutputTarget {
  std::string path;      // where to write: the path given, or what its links point to
  bool through = false;  // a character device or a pipe: written in place
};
Result<OutputTarget> ResolveOutput(const std::string& path);

/// A temporary file beside `target` created by this process alone (O_EXCL, O_NOFOLLOW): its name,
/// and its descriptor (open for writing).
Result<std::pair<std::string, int>> CreateTempBeside(const std::string& target);

/// Calls `write(append)` where `append(bytes, n)` adds to the file; returns the bytes' CRC-32 in
/// `crc32` when not null.
using AppendFn = std::function<Status(const void* data, size_t size)>;
Status AtomicWriteFile(const std::string& path, const std::function<Status(const AppendFn&)>& write,
                       uint32_t* crc32 = nullptr);
Status AtomicWriteFile(const std::string& path, std::string_view content, uint32_t* crc32 = nullptr);

/// The CRC-32 of a whole file (read in chunks).
Result<uint32_t> FileCrc32(const std::string& path);
uint32_t Crc32(std::string_view bytes);

/// fsync on a directory, so that renames within it are durable.
Status FsyncDirectory(const std::string& dir);

/// The whole file as a string, or a NotFound/IoError naming it.
Result<std::string> ReadFileToString(const std::string& path);

/// Whether this process can create, write and remove a file in `dir` (made if missing): a rank's
/// check, before any step, that it can write the run's shared checkpoint folder. The error names
/// `who` ("rank 3 on node-b (10.0.0.2)"), the folder and why.
Status CheckFolderWritable(const std::string& dir, const std::string& who);

}  // namespace motley
