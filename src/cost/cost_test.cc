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
const Network kTwoNodes{TwoNodes, NodeOf, {}, CollectiveLibrary::kNccl};

TEST(CommCost, ARingOnOneNodeMovesTwoPassesOfThreeQuartersForAnAllReduce) {
  // n = 4: 2 passes x 3 steps x 1/4 of 1 GB at 100 GB/s.
  EXPECT_DOUBLE_EQ(CollectiveS(CollectiveKind::kAllReduce, {0, 1, 2, 3}, 1e9, kTwoNodes),
                   2 * 3 * 0.25e9 / 100e9);
  EXPECT_DOUBLE_EQ(CollectiveS(CollectiveKind::kReduceScatter, {0, 1, 2, 3}, 1e9, kTwoNodes),
                   3 * 0.25e9 / 100e9);
  EXPECT_EQ(CollectiveS(CollectiveKind::kAllReduce, {2}, 1e9, kTwoNodes), 0);
}

TEST(CommCost, AcrossNodesTheHierarchicalAlgorithmWinsWhereTheRingIsPacedByTheSlowLink) {
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  // Ring: 2 x 7 steps of 1/8 GB over the 1 GB/s link.
  const double ring = 2 * 7 * (1e9 / 8) / 1e9;
  // Hierarchical: within each node a reduce-scatter and an all-gather (2 x 3 x 1/4 GB at 100
  // GB/s), across the two leaders an all-reduce of a quarter (2 x 1 x 1/8 GB at 1 GB/s).
  const double hierarchical = 2 * (3 * 0.25e9 / 100e9) + 2 * 1 * (0.25e9 / 2) / 1e9;
  EXPECT_LT(hierarchical, ring);
  EXPECT_DOUBLE_EQ(CollectiveS(CollectiveKind::kAllReduce, all, 1e9, kTwoNodes), hierarchical);
  // One member per node: nothing to gain, the ring.
  EXPECT_DOUBLE_EQ(CollectiveS(CollectiveKind::kAllReduce, {0, 4}, 1e9, kTwoNodes), 2 * 1 * 0.5e9 / 1e9);
}

TEST(CommCost, EachCallPaysTheLargestCollectiveOverheadOfItsRingOnce) {
  // Node 1's links carry a measured overhead of 1 ms a call, node 0's of 0.1 ms.
  auto measured = [](int a, int b) {
    Link l = TwoNodes(a, b);
    if (a != b) l.collective_overhead_s = (a / 4 == 1 || b / 4 == 1) ? 1e-3 : 1e-4;
    return l;
  };
  const Network with{measured, NodeOf, {}, CollectiveLibrary::kNccl};
  const auto all_reduce = CollectiveKind::kAllReduce;
  const double algorithm = CollectiveS(all_reduce, {0, 1, 2, 3}, 1e9, kTwoNodes);
  EXPECT_DOUBLE_EQ(CollectiveS(all_reduce, {0, 1, 2, 3}, 1e9, with), algorithm + 1e-4);
  const double across = CollectiveS(all_reduce, {0, 1, 4, 5}, 1e6, kTwoNodes);
  EXPECT_DOUBLE_EQ(CollectiveS(all_reduce, {0, 1, 4, 5}, 1e6, with), across + 1e-3);
  EXPECT_EQ(CollectiveS(all_reduce, {4}, 1e6, with), 0);  // no call at all
}

// Three nodes as the multi-host benchmark's: node 0 holds devices 0 and 1, node 1 device 2, node 2
// device 3; every link between nodes 1 Gbit/s (125 MB/s), none faster, so each node's card
// carries 125 MB/s; 10 GB/s inside node 0.
Link ThreeHosts(int a, int b) {
  if (a == b) return Link{};
  const auto node = [](int d) { return d < 2 ? 0 : d - 1; };
  return node(a) == node(b) ? Make(LinkKind::kIntraNode, 10, 0) : Make(LinkKind::kInterNode, 0.125, 0);
}
int ThreeHostsNode(int d) { return d < 2 ? 0 : d - 1; }

TEST(CommCost, ANodesNetworkCardIsTheFastestOfItsLinksToOtherNodes) {
  EXPECT_EQ(NodeNics({0, 2, 3}, ThreeHosts), std::vector<double>(3, 0.125e9));
  // Node 2's link to node 0 measured at 100 Mbit/s: node 0 still reaches node 1 at 1 Gbit/s.
  auto slow = [](int a, int b) {
    Link l = ThreeHosts(a, b);
    if ((ThreeHostsNode(a) == 2) != (ThreeHostsNode(b) == 2) && a != b) l.bandwidth_bytes_per_s = 12.5e6;
    return l;
  };
  EXPECT_EQ(NodeNics({0, 2, 3}, slow), (std::vector<double>{0.125e9, 0.125e9, 12.5e6}));
}

TEST(CommCost, GlooRunsOneRingAnAllToAllAndBroadcastTreesWithTheCardsShared) {
  const std::vector<int> all = {0, 1, 2, 3};
  const double s = 8e6, piece = s / 4, inter = 0.125e9;
  Network net{ThreeHosts, ThreeHostsNode, NodeNics({0, 2, 3}, ThreeHosts), CollectiveLibrary::kGloo};
  // All-reduce: one ring 0->1->2->3->0, 2 passes x 3 rounds; each round one flow in and one out of
  // each card: paced by the 1 Gbit/s links.
  EXPECT_DOUBLE_EQ(CollectiveS(CollectiveKind::kAllReduce, all, s, net), 2 * 3 * piece / inter);
  // Reduce-scatter, all-to-all: node 0's two devices each send a piece to the two devices of the
  // other nodes — 4 pieces through its card (and 4 in), where a ring's round sends one.
  EXPECT_DOUBLE_EQ(CollectiveS(CollectiveKind::kReduceScatter, all, s, net), 4 * piece / inter);
  // All-gather: a broadcast tree from every member. Round 1, each root to the member after it:
  // 0->1 inside node 0, 1->2, 2->3, 3->0 — one piece through each card each way. Round 2, the
  // root and the one after it to the two after those (0->2 and 1->3 for root 0, ...): 0->2,
  // 1->3, 2->0 and 3->1 twice each — node 0's card carries 4 pieces out and 4 in.
  EXPECT_DOUBLE_EQ(CollectiveS(CollectiveKind::kAllGather, all, s, net), (1 + 4) * piece / inter);
  // NCCL on the same nodes: the faster of the ring and the hierarchical algorithm, no more than
  // the ring.
  net.library = CollectiveLibrary::kNccl;
  EXPECT_LE(CollectiveS(CollectiveKind::kReduceScatter, all, s, net), 3 * piece / inter + 1e-12);
}

TEST(CommCost, FlowsBetweenTwoNodesShareTheirPathAndEachNodesCard) {
  // A ring that leaves node 0 twice a round (0 -> 4 and 1 -> 5): 2 pieces through its card.
  // (Gloo: one ring, in the group's order.)
  Network net{TwoNodes, NodeOf, NodeNics({0, 4}, TwoNodes), CollectiveLibrary::kGloo};
  const double interleaved = CollectiveS(CollectiveKind::kAllReduce, {0, 4, 1, 5}, 1e9, net);
  const double in_order = CollectiveS(CollectiveKind::kAllReduce, {0, 1, 4, 5}, 1e9, net);
  // In order: each round sends one piece each way across (1 -> 4, 5 -> 0). Interleaved: two.
  EXPECT_DOUBLE_EQ(in_order, 2 * 3 * 0.25e9 / 1e9);
  EXPECT_DOUBLE_EQ(interleaved, 2 * 3 * 2 * 0.25e9 / 1e9);
  // Without a card's limit the two flows 0 -> 4 and 1 -> 5 still share the path between the nodes.
  net.nic_bytes_per_s.clear();
  EXPECT_DOUBLE_EQ(CollectiveS(CollectiveKind::kAllReduce, {0, 4, 1, 5}, 1e9, net), interleaved);
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
