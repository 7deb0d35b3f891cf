#include "runtime/emulation/memory_ledger.h"

#include <cstdlib>
#include <cstring>

#include <c10/core/CPUAllocator.h>
#include <fmt/format.h>
#include <torch/version.h>

#include "core/units.h"

namespace motley {
namespace {

// Each allocation carries its size, whether a ledger counts it and which one, in a 64-byte header
// before the data (which keeps libtorch's 64-byte alignment). The data pointer is its own deleter context, as
// raw_allocate() requires (some kernels, e.g. bf16 ones, allocate through it).
constexpr size_t kHeader = 64;

// libtorch 2.3 made Allocator::allocate non-const and added copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define MOTLEY_ALLOCATE_CONST
#define MOTLEY_ALLOCATOR_COPY_DATA 1
#else
#define MOTLEY_ALLOCATE_CONST const
#define MOTLEY_ALLOCATOR_COPY_DATA 0
#endif

thread_local MemoryLedger* scoped_ledger = nullptr;  // MemoryLedgerScope

class LedgerAllocator final : public c10::Allocator {
 public:
  explicit LedgerAllocator(MemoryLedger* ledger) { ledger_ = ledger; }

  c10::DataPtr allocate(size_t n) MOTLEY_ALLOCATE_CONST override {
    const auto bytes = static_cast<int64_t>(n);
    const bool counted = !HostMemoryScope::active();
    MemoryLedger* ledger = scoped_ledger != nullptr ? scoped_ledger : ledger_;
    if (counted && !ledger->Reserve(bytes))
      throw c10::OutOfMemoryError({__func__, __FILE__, __LINE__}, ledger->OutOfMemoryMessage(bytes));
    if (!counted) ledger->ReserveHost(bytes);
    void* base = nullptr;
    if (posix_memalign(&base, kHeader, n + kHeader) != 0) {
      if (counted) ledger->Release(bytes);
      if (!counted) ledger->ReleaseHost(bytes);
      throw c10::OutOfMemoryError({__func__, __FILE__, __LINE__}, "out of host memory: cannot allocate " +
                                                                      FormatBytes(static_cast<double>(n)));
    }
    static_cast<size_t*>(base)[0] = n;
    static_cast<size_t*>(base)[1] = counted ? 1 : 0;
    static_cast<MemoryLedger**>(base)[2] = ledger;
    void* data = static_cast<char*>(base) + kHeader;
    return {data, data, &Free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Free; }
#if MOTLEY_ALLOCATOR_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
#endif

 private:
  static void Free(void* data) {
    if (data == nullptr) return;
    void* base = static_cast<char*>(data) - kHeader;
    const auto bytes = static_cast<int64_t>(static_cast<size_t*>(base)[0]);
    MemoryLedger* ledger = static_cast<MemoryLedger**>(base)[2];
    if (static_cast<size_t*>(base)[1] != 0)
      ledger->Release(bytes);
    else
      ledger->ReleaseHost(bytes);
    std::free(base);
  }
  static inline MemoryLedger* ledger_ = nullptr;
};

thread_local int host_scopes = 0;

}  // namespace

MemoryLedgerScope::MemoryLedgerScope(MemoryLedger* ledger) : previous_(scoped_ledger) {
  scoped_ledger = ledger;
}
MemoryLedgerScope::~MemoryLedgerScope() { scoped_ledger = previous_; }

HostMemoryScope::HostMemoryScope() { ++host_scopes; }
HostMemoryScope::~HostMemoryScope() { --host_scopes; }
bool HostMemoryScope::active() { return host_scopes > 0; }

MemoryLedger& MemoryLedger::Install() {
  static MemoryLedger* ledger = [] {
    auto* l = new MemoryLedger();
    static LedgerAllocator allocator(l);
    c10::SetCPUAllocator(&allocator, /*priority=*/100);
    return l;
  }();
  return *ledger;
}

MemoryLedger& MemoryLedger::Current() {
  MemoryLedger& process = Install();
  return scoped_ledger != nullptr ? *scoped_ledger : process;
}

void MemoryLedger::set_owner(std::string owner) { owner_ = std::move(owner); }

bool MemoryLedger::Reserve(int64_t bytes) {
  const int64_t now = used_bytes_.fetch_add(bytes) + bytes;
  const int64_t cap = capacity_bytes_;
  if (cap > 0 && now > cap) {
    used_bytes_ -= bytes;
    return false;
  }
  int64_t peak = peak_bytes_;
  while (now > peak && !peak_bytes_.compare_exchange_weak(peak, now)) {
  }
  return true;
}

std::string MemoryLedger::OutOfMemoryMessage(int64_t bytes) const {
  return fmt::format("out of memory on {}: tried to allocate {}; {} of the emulated capacity of {} in use",
                     owner_, FormatBytes(static_cast<double>(bytes)),
                     FormatBytes(static_cast<double>(used_bytes_)),
                     FormatBytes(static_cast<double>(capacity_bytes_)));
}

torch::Tensor HostEmptyLike(const torch::Tensor& like) {
  const size_t n = like.nbytes();
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return torch::from_blob(
      p, like.sizes(), [](void* q) { std::free(q); },
      torch::TensorOptions().dtype(like.dtype()).device(torch::kCPU));
}

torch::Tensor HostCopy(const torch::Tensor& src) {
  torch::Tensor s = src.contiguous();
  if (torch::cuda::is_available())
    return s.to(torch::TensorOptions().device(torch::kCPU).pinned_memory(true), false, true);
  torch::Tensor out = HostEmptyLike(s);
  if (s.nbytes() > 0) std::memcpy(out.data_ptr(), s.data_ptr(), s.nbytes());
  return out;
}

}  // namespace motley
