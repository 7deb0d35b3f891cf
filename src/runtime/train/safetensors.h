// Safetensors, the format Hugging Face checkpoints use: an 8-byte little-endian header length, a
// JSON header mapping each tensor's name to {dtype, shape, data_offsets}, then the raw bytes.
// motley writes F32/BF16/F16/I64/U8 and reads F64/F32/BF16/F16/I64/I32/U8/BOOL.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/safetensors_header.h"
#include "core/status.h"

namespace motley {

struct NamedTensor {
  std::string name;
  torch::Tensor tensor;
};

/// Writes atomically (file_io.h); `crc32` receives the file's checksum.
Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata, uint32_t* crc32 = nullptr);

class SafetensorsFile {
 public:
  /// Reads and checks the header (names, dtypes, offsets within the file).
  static Result<SafetensorsFile> Open(const std::string& path);

  using Entry = SafetensorsEntry;
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  /// The tensor `name` on the CPU, converted to `dtype`.
  Result<torch::Tensor> Load(const std::string& name, torch::Dtype dtype) const;
  /// The tensor `name` into `dest` (its shape; converted to its dtype): read straight into its
  /// memory when the dtypes match, so loading holds nothing beside the parameter.
  Status LoadInto(const std::string& name, torch::Tensor& dest) const;
  /// The tensor `name` as a read-only view of the file mapped into memory, in the file's dtype:
  /// copying a slice of it reads that slice's pages and no others (the map is released with the
  /// last tensor that views it).
  Result<torch::Tensor> Map(const std::string& name) const;

 private:
  std::string path_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
  int64_t data_start_ = 0;
};

}  // namespace motley
