#include "runtime/comm/comm_clock.h"

#include <thread>

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(CommClock, OnCpuCountsTheHostsWaitsUntilReset) {
  CommClock clock;
  const torch::Device cpu(torch::kCPU);
  for (int i = 0; i < 2; ++i) {
    const CommClock::Mark m = clock.Start(cpu);
    EXPECT_EQ(m.device, nullptr);  // no device clock on CPU
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    clock.Stop(m, cpu);
  }
  EXPECT_GE(clock.host_s(), 0.04);  // at least the two sleeps (sleep_for never returns early)
  EXPECT_EQ(clock.DeviceSeconds(), 0);
  clock.Reset();
  EXPECT_EQ(clock.host_s(), 0);
}

}  // namespace
}  // namespace motley
