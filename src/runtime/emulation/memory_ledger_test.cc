#include "runtime/emulation/memory_ledger.h"

#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(MemoryLedger, CountsTensorsAndRefusesPastCapacityWithTheGpuError) {
  MemoryLedger& ledger = MemoryLedger::Install();
  ledger.set_owner("rank 3 (test)");
  const int64_t base = ledger.used_bytes();
  {
    torch::Tensor t = torch::zeros({1 << 20}, torch::kFloat32);  // 4 MiB
    EXPECT_GE(ledger.used_bytes() - base, 4 << 20);
    ledger.ResetPeak();
    ledger.set_capacity_bytes(ledger.used_bytes() + (2 << 20));
    try {
      torch::Tensor u = torch::zeros({1 << 20}, torch::kFloat32);
      ADD_FAILURE() << "an allocation past the capacity succeeded";
    } catch (const c10::OutOfMemoryError& e) {
      const std::string what = e.what_without_backtrace();
      EXPECT_NE(what.find("out of memory on rank 3 (test): tried to allocate 4.00 MiB"), std::string::npos)
          << what;
    }
    // Smaller allocations still fit, and the peak follows them.
    torch::Tensor small = torch::zeros({1 << 18}, torch::kFloat32);  // 1 MiB
    EXPECT_GE(ledger.peak_bytes(), ledger.used_bytes());
    // Host copies are outside the ledger: a 4 MiB copy fits although the device is nearly full.
    torch::Tensor host = HostCopy(t);
    EXPECT_TRUE(torch::equal(host, t));
    ledger.set_capacity_bytes(0);
  }
  EXPECT_EQ(ledger.used_bytes(), base);  // everything freed is uncounted
}

TEST(MemoryLedger, KernelsThatAllocateRawMemoryWork) {
  // Some kernels (bf16 ones among them) allocate through Allocator::raw_allocate, which needs the
  // data pointer to be its own deleter context.
  MemoryLedger& ledger = MemoryLedger::Install();
  void* p = c10::GetCPUAllocator()->raw_allocate(1000);
  ASSERT_NE(p, nullptr);
  c10::GetCPUAllocator()->raw_deallocate(p);
  torch::Tensor a = torch::randn({64, 64}).to(torch::kBFloat16);
  torch::Tensor b = torch::matmul(a, a).to(torch::kFloat32);
  EXPECT_EQ(b.size(0), 64);
  EXPECT_GE(ledger.peak_bytes(), 0);
}

}  // namespace
}  // namespace motley
