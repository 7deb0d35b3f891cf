#include "runtime/executor/copy_engine.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

// CPU copies on threads follow the GPU's rules: a parameter copy is fed in pieces by Pump(), its
// ticket is not finished before every piece is queued, and waiting for it queues the rest.
TEST(CopyEngine, AParameterCopyIsFedInPiecesAndWaitingForItQueuesTheRest) {
  CopyEngine copies(torch::kCPU, /*threads=*/true);
  const int64_t pieces = 10;
  const torch::Tensor host = torch::arange(pieces * copies.piece_bytes() / 4, torch::kFloat32);
  CopyTicket done;
  torch::Tensor device = copies.ToDevice(host, {}, &done);
  const int64_t total = pieces * copies.piece_bytes();
  EXPECT_EQ(copies.unqueued_bytes(), total - copies.pump_bytes()) << "the first pieces are queued at once";
  copies.Pump();
  EXPECT_EQ(copies.unqueued_bytes(), total - 2 * copies.pump_bytes());
  EXPECT_FALSE(done.finished());
  copies.Wait(done);  // queues the rest; on CPU the host is the compute stream and waits
  EXPECT_EQ(copies.unqueued_bytes(), 0);
  EXPECT_TRUE(torch::equal(device, host));
}

TEST(CopyEngine, ACopyStartedAfterAFedOneWaitsForAllOfIt) {
  CopyEngine copies(torch::kCPU, /*threads=*/true);
  const torch::Tensor values = torch::randn({8 * copies.piece_bytes() / 4});
  CopyTicket to_device, back;
  torch::Tensor device = copies.ToDevice(values, {}, &to_device);
  // Offloading what the prefetch brings, before the prefetch is fed: the offload waits for it
  // (not for the first pieces alone), so it reads every value and no NaN of the unwritten copy.
  torch::Tensor host = copies.ToHost(device, to_device, &back);
  copies.Synchronize();
  EXPECT_TRUE(torch::equal(host, values));
  EXPECT_TRUE(to_device.finished());
  EXPECT_TRUE(back.finished());
}

TEST(CopyEngine, ActivationCopiesAreNotFed) {
  CopyEngine copies(torch::kCPU, /*threads=*/true);
  const torch::Tensor values = torch::randn({8 * copies.piece_bytes() / 4});
  CopyTicket done;
  torch::Tensor device = copies.ToDevice(values, {}, &done, CopyLane::kActivations);
  EXPECT_EQ(done.job, nullptr);
  copies.Wait(done);
  EXPECT_TRUE(torch::equal(device, values));
}

}  // namespace
}  // namespace motley
