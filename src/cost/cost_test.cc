#include <gtest/gtest.h>

#include "core/model.h"
#include "cost/comm_cost.h"
#include "cost/state_bytes.h"

namespace motley {
namespace {

Link Make(LinkKind kind, double gbytes_per_s, double latency_s) {
  return {kind, gbytes_per_s * 1e9, latency_s};
}

TEST(CommCost, TransferIsLatencyPlusBytesOverBandwidth) {
  EXPECT_DOUBLE_EQ(TransferS(Make(LinkKind::kIntraNode, 10, 1e-5), 1e9), 1e-5 + 0.1);
  EXPECT_EQ(TransferS(Link{}, 1e9), 0);  // to oneself
}

// Devices 0-3 on node 0, 4-7 on node 1: 100 GB/s inside a node, 1 GB/s between the nodes.
Link TwoNodes(int a, int b) {
  if (a == b) return Link{};
  return (a / 4 == b / 4) ? Make(LinkKind::kIntraNode, 100, 0) : Make(LinkKind::kInterNode, 1, 0);
}
int NodeOf(int d) { return d / 4; }

TEST(CommCost, ARingOnOneNodeMovesTwoPassesOfThreeQuartersForAnAllReduce) {
  // n = 4: 2 passes x 3 steps x 1/4 of 1 GB at 100 GB/s.
  EXPECT_DOUBLE_EQ(CollectiveS({0, 1, 2, 3}, 1e9, kAllReducePasses, TwoNodes, NodeOf),
                   2 * 3 * 0.25e9 / 100e9);
  EXPECT_DOUBLE_EQ(CollectiveS({0, 1, 2, 3}, 1e9, 1, TwoNodes, NodeOf), 3 * 0.25e9 / 100e9);
  EXPECT_EQ(CollectiveS({2}, 1e9, 2, TwoNodes, NodeOf), 0);
}

TEST(CommCost, AcrossNodesTheHierarchicalAlgorithmWinsWhereTheRingIsPacedByTheSlowLink) {
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  // Ring: 2 x 7 steps of 1/8 GB over the 1 GB/s link.
  const double ring = 2 * 7 * (1e9 / 8) / 1e9;
  // Hierarchical: within each node a reduce-scatter and an all-gather (2 x 3 x 1/4 GB at 100
  // GB/s), across the two leaders an all-reduce of a quarter (2 x 1 x 1/8 GB at 1 GB/s).
  const double hierarchical = 2 * (3 * 0.25e9 / 100e9) + 2 * 1 * (0.25e9 / 2) / 1e9;
  EXPECT_LT(hierarchical, ring);
  EXPECT_DOUBLE_EQ(CollectiveS(all, 1e9, kAllReducePasses, TwoNodes, NodeOf), hierarchical);
  // One member per node: nothing to gain, the ring.
  EXPECT_DOUBLE_EQ(CollectiveS({0, 4}, 1e9, kAllReducePasses, TwoNodes, NodeOf), 2 * 1 * 0.5e9 / 1e9);
}

TEST(CommCost, EachCallPaysTheLargestCollectiveOverheadOfItsRingOnce) {
  // Node 1's links carry a measured overhead of 1 ms a call, node 0's of 0.1 ms.
  auto measured = [](int a, int b) {
    Link l = TwoNodes(a, b);
    if (a != b) l.collective_overhead_s = (a / 4 == 1 || b / 4 == 1) ? 1e-3 : 1e-4;
    return l;
  };
  const double algorithm = CollectiveS({0, 1, 2, 3}, 1e9, kAllReducePasses, TwoNodes, NodeOf);
  EXPECT_DOUBLE_EQ(CollectiveS({0, 1, 2, 3}, 1e9, kAllReducePasses, measured, NodeOf), algorithm + 1e-4);
  const double across = CollectiveS({0, 1, 4, 5}, 1e6, kAllReducePasses, TwoNodes, NodeOf);
  EXPECT_DOUBLE_EQ(CollectiveS({0, 1, 4, 5}, 1e6, kAllReducePasses, measured, NodeOf), across + 1e-3);
  EXPECT_EQ(CollectiveS({4}, 1e6, kAllReducePasses, measured, NodeOf), 0);  // no call at all
}

TEST(StateBytes, EachZeroStageShardsOneMoreKindOfState) {
  const double p = 1000, d = 4;
  const StateBytesPerParam s = StateBytes(Precision::kBf16);  // 2 + 2 + 12 (fp32 master + moments)
  EXPECT_DOUBLE_EQ(ZeroStateBytes(p, d, 0, Precision::kBf16).device, p * (s.params + s.grads + s.optimizer));
  // ZeRO-1: the full gradients and the shard they are reduced into for the update.
  EXPECT_DOUBLE_EQ(ZeroStateBytes(p, d, 1, Precision::kBf16).device,
                   p * (s.params + s.grads) + p / d * (s.grads + s.optimizer));
  EXPECT_DOUBLE_EQ(ZeroStateBytes(p, 1, 1, Precision::kBf16).device, p * (s.params + s.grads + s.optimizer));
  EXPECT_DOUBLE_EQ(ZeroStateBytes(p, d, 2, Precision::kBf16).device,
                   p * s.params + p / d * (s.grads + s.optimizer));
  EXPECT_DOUBLE_EQ(ZeroStateBytes(p, d, 3, Precision::kBf16).device,
                   p / d * (s.params + s.grads + s.optimizer));
  const RankStateBytes host = ZeroStateBytes(p, d, 2, Precision::kBf16, StatePlacement::kHost);
  EXPECT_EQ(host.device, 0);
  EXPECT_DOUBLE_EQ(host.host, p / d * (s.params + s.optimizer));
  EXPECT_DOUBLE_EQ(ZeroStateBytes(p, d, 2, Precision::kBf16, StatePlacement::kResidentShard).device,
                   p / d * (s.params + s.optimizer));
  EXPECT_EQ(GlooReduceScatterBytes(8e6, 1, true), 0);
  EXPECT_EQ(GlooReduceScatterBytes(8e6, 2, false), 0);
  EXPECT_EQ(GlooReduceScatterBytes(8e6, 2, true), 8e6);
}

}  // namespace
}  // namespace motley
