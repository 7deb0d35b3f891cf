#include "runtime/train/safetensors.h"
#include "core/json_read.h"

#include <algorithm>
#include <cstdint>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"

namespace motley {
namespace {

struct DtypeName {
  const char* name;
  torch::Dtype dtype;
  int bytes;
};
constexpr DtypeName kDtypes[] = {
    {"F64", torch::kFloat64, 8}, {"F32", torch::kFloat32, 4}, {"BF16", torch::kBFloat16, 2},
    {"F16", torch::kFloat16, 2}, {"I64", torch::kInt64, 8},   {"I32", torch::kInt32, 4},
    {"U8", torch::kUInt8, 1},    {"BOOL", torch::kBool, 1},
};

const DtypeName* ByName(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

const DtypeName* ByDtype(torch::Dtype dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.dtype) return &d;
  return nullptr;
}

}  // namespace

Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata, uint32_t* crc32) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> contiguous;
  int64_t offset = 0;
  for (const auto& t : tensors) {
    const DtypeName* d = ByDtype(t.tensor.scalar_type());
    if (d == nullptr)
      return Status::InvalidArgument(fmt::format("{}: tensor {} has a dtype safetensors writing does not cover", path,
                                                 t.name));
    contiguous.push_back(t.tensor.detach().to(torch::kCPU).contiguous());
    const int64_t bytes = contiguous.back().numel() * d->bytes;
    header[t.name] = {{"dtype", d->name}, {"shape", t.tensor.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data to 8 bytes, as the format allows
  return AtomicWriteFile(
      path,
      [&](const AppendFn& append) -> Status {
        uint64_t n = text.size();
        uint8_t le[8];
        for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(n >> (8 * i));
        MOTLEY_RETURN_IF_ERROR(append(le, 8));
        MOTLEY_RETURN_IF_ERROR(append(text.data(), text.size()));
        for (const auto& c : contiguous)
          MOTLEY_RETURN_IF_ERROR(append(c.data_ptr(), static_cast<size_t>(c.numel() * c.element_size())));
        return Status::Ok();
      },
      crc32);
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: cannot open the safetensors file", path));
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  uint8_t le[8] = {};
  in.read(reinterpret_cast<char*>(le), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(le[i]) << (8 * i);
  if (!in || n > static_cast<uint64_t>(file_size - 8) || n > (100u << 20))
    return Status::InvalidArgument(
        fmt::format("{}: not a safetensors file (header length {} in a file of {} bytes)", path, n, file_size));
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  Result<nlohmann::json> parsed = ParseJson(text, path + " (its header)");
  if (!parsed.ok()) return Status::InvalidArgument(fmt::format("not a safetensors file: {}", parsed.status().message()));
  nlohmann::json header = std::move(*parsed);
  if (!header.is_object())
    return Status::InvalidArgument(fmt::format("{}: not a safetensors file (the header is not a JSON object)", path));
  SafetensorsFile f;
  f.path_ = path;
  f.data_start_ = 8 + static_cast<int64_t>(n);
  const int64_t data_size = file_size - f.data_start_;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (value.is_object())
        for (const auto& [k, v] : value.items())
          if (v.is_string()) f.metadata_[k] = v.get<std::string>();
      continue;
    }
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument(fmt::format("{}: tensor {}: {}", path, name, why));
    };
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets"))
      return bad("needs dtype, shape and data_offsets");
    Entry e;
    if (!value["dtype"].is_string()) return bad("dtype must be a string");
    e.dtype = value["dtype"].get<std::string>();
    const DtypeName* d = ByName(e.dtype);
    if (d == nullptr) return bad(fmt::format("unsupported dtype {}", e.dtype));
    if (!value["shape"].is_array() || value["shape"].size() > 16) return bad("shape must be a list of at most 16 sizes");
    // Checked against the file before anything is allocated, without overflowing: no tensor holds
    // more elements than the file has bytes.
    int64_t numel = 1;
    for (const auto& s : value["shape"]) {
      if (!s.is_number_integer() || s.get<int64_t>() < 0) return bad("shape must hold non-negative integers");
      e.shape.push_back(s.get<int64_t>());
      if (e.shape.back() > 0 && numel > std::max<int64_t>(data_size, 0) / e.shape.back())
        return bad(fmt::format("shape {} holds more elements than the file's {} data bytes", value["shape"].dump(),
                               data_size));
      numel *= e.shape.back();
    }
    const auto& off = value["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_integer() || !off[1].is_number_integer())
      return bad("data_offsets must be [begin, end]");
    e.begin = off[0].get<int64_t>();
    e.end = off[1].get<int64_t>();
    if (e.begin < 0 || e.end < e.begin || e.end > data_size || e.end - e.begin != numel * d->bytes)
      return bad(fmt::format("data_offsets [{}, {}] do not hold {} x {} bytes within the file's {} data bytes "
                             "(truncated?)",
                             e.begin, e.end, numel, d->bytes, data_size));
    f.entries_[name] = std::move(e);
  }
  return f;
}

Result<torch::Tensor> SafetensorsFile::Load(const std::string& name, torch::Dtype dtype) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return Status::NotFound(fmt::format("{}: no tensor named {}", path_, name));
  const Entry& e = it->second;
  torch::Tensor raw = torch::empty(e.shape, torch::TensorOptions().dtype(ByName(e.dtype)->dtype));
  std::ifstream in(path_, std::ios::binary);
  in.seekg(data_start_ + e.begin);
  in.read(static_cast<char*>(raw.data_ptr()), e.end - e.begin);
  if (!in) return Status::IoError(fmt::format("{}: cannot read tensor {}", path_, name));
  return raw.to(dtype);
}

}  // namespace motley
