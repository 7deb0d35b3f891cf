// Durable file writes and checksums. AtomicWriteFile writes a temporary file beside the target,
// fsyncs it, renames it over the target and fsyncs the directory: a crash leaves either the old
// file or the new one, never a torn one. CRC-32 (Boost.CRC) guards checkpoints against corruption.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace motley {

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

}  // namespace motley
