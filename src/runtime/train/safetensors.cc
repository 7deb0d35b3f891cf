#include "runtime/train/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

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
      return Status::InvalidArgument(
          fmt::format("{}: tensor {} has a dtype safetensors writing does not cover", path, t.name));
    contiguous.push_back(t.tensor.detach().to(torch::kCPU).contiguous());
    const int64_t bytes = contiguous.back().numel() * d->bytes;
    header[t.name] = {
        {"dtype", d->name}, {"shape", t.tensor.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
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
  MOTLEY_ASSIGN_OR_RETURN(SafetensorsHeader header, ReadSafetensorsHeader(path));
  SafetensorsFile f;
  f.path_ = path;
  f.entries_ = std::move(header.entries);
  f.metadata_ = std::move(header.metadata);
  f.data_start_ = header.data_start;
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

Result<torch::Tensor> SafetensorsFile::Map(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return Status::NotFound(fmt::format("{}: no tensor named {}", path_, name));
  const Entry& e = it->second;
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(fmt::format("{}: cannot open: {}", path_, std::strerror(errno)));
  const auto page = static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
  const int64_t begin = data_start_ + e.begin, aligned = begin / page * page;
  const auto length = static_cast<size_t>(data_start_ + e.end - aligned);
  void* base = length > 0 ? ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, aligned) : nullptr;
  ::close(fd);
  if (base == MAP_FAILED)
    return Status::IoError(fmt::format("{}: cannot map tensor {}: {}", path_, name, std::strerror(errno)));
  auto unmap = [base, length](void*) {
    if (base != nullptr) ::munmap(base, length);
  };
  return torch::from_blob(static_cast<char*>(base) + (begin - aligned), e.shape, unmap,
                          torch::TensorOptions().dtype(ByName(e.dtype)->dtype));
}

Status SafetensorsFile::LoadInto(const std::string& name, torch::Tensor& dest) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return Status::NotFound(fmt::format("{}: no tensor named {}", path_, name));
  const Entry& e = it->second;
  if (ByName(e.dtype)->dtype != dest.scalar_type() || !dest.is_contiguous() ||
      e.shape != dest.sizes().vec()) {
    MOTLEY_ASSIGN_OR_RETURN(torch::Tensor t, Load(name, dest.scalar_type()));
    torch::NoGradGuard no_grad;
    dest.copy_(t.view(dest.sizes()));
    return Status::Ok();
  }
  std::ifstream in(path_, std::ios::binary);
  in.seekg(data_start_ + e.begin);
  in.read(static_cast<char*>(dest.data_ptr()), e.end - e.begin);
  if (!in) return Status::IoError(fmt::format("{}: cannot read tensor {}", path_, name));
  return Status::Ok();
}

}  // namespace motley
