#include "plan/transfer_order.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

Op Transfer(OpKind kind, int peer, int64_t tag, std::vector<int32_t> deps = {}) {
  Op op;
  op.kind = kind;
  op.stream = Stream::kComm;
  op.peer = peer;
  op.tag = tag;
  op.bytes = 1 << 20;
  op.deps.assign(deps.begin(), deps.end());
  return op;
}
Op Compute(std::vector<int32_t> deps = {}) {
  Op op;
  op.kind = OpKind::kForward;
  op.deps.assign(deps.begin(), deps.end());
  return op;
}
Schedule TwoRanks(std::vector<Op> rank0, std::vector<Op> rank1) {
  Schedule s;
  s.programs.resize(2);
  s.programs[0].rank = 0;
  s.programs[0].ops = std::move(rank0);
  s.programs[1].rank = 1;
  s.programs[1].ops = std::move(rank1);
  return s;
}

TEST(TransferOrder, APairSendingBothWaysAtOnceRuns) {
  // 1F1B's steady state: each rank sends to the other before it receives. Under NCCL both sends
  // would wait forever on one stream per pair; motley gives each direction its own.
  Schedule s = TwoRanks({Transfer(OpKind::kSend, 1, 1), Transfer(OpKind::kRecv, 1, 2)},
                        {Transfer(OpKind::kSend, 0, 2), Transfer(OpKind::kRecv, 0, 1)});
  EXPECT_EQ(CheckTransferOrder(s), "");
}

TEST(TransferOrder, TransfersIssuedInAnotherOrderAreNamed) {
  Schedule s = TwoRanks({Transfer(OpKind::kSend, 1, 5), Transfer(OpKind::kSend, 1, 6)},
                        {Transfer(OpKind::kRecv, 0, 6), Transfer(OpKind::kRecv, 0, 5)});
  const std::string problem = CheckTransferOrder(s);
  EXPECT_NE(problem.find(
                "rank 0's send #1 to rank 1 (op 0 (send to rank 1, tag 5)) would meet rank 1's receive #1"),
            std::string::npos)
      << problem;
  EXPECT_NE(problem.find("order their transfers differently"), std::string::npos);
}

TEST(TransferOrder, ASendWaitingForComputeThatWaitsForThePeerIsADeadlock) {
  // Each rank computes on what the other sends, and sends only after its compute (a stream waits
  // for the compute queued before it): neither transfer can start.
  Schedule s = TwoRanks({Transfer(OpKind::kRecv, 1, 1), Compute({0}), Transfer(OpKind::kSend, 1, 2)},
                        {Transfer(OpKind::kRecv, 0, 2), Compute({0}), Transfer(OpKind::kSend, 0, 1)});
  const std::string problem = CheckTransferOrder(s);
  EXPECT_NE(problem.find("2 ranks would wait for each other forever"), std::string::npos) << problem;
  EXPECT_NE(problem.find("rank 0: op 0 (receive from rank 1, tag 1) waits for rank 1"), std::string::npos)
      << problem;
  // The same with the sends before the compute runs.
  Schedule fine = TwoRanks({Transfer(OpKind::kSend, 1, 2), Transfer(OpKind::kRecv, 1, 1), Compute({1})},
                           {Transfer(OpKind::kSend, 0, 1), Transfer(OpKind::kRecv, 0, 2), Compute({1})});
  EXPECT_EQ(CheckTransferOrder(fine), "");
}

TEST(TransferOrder, AGroupsCollectivesInAnotherOrderAreNamed) {
  Schedule s = TwoRanks({}, {});
  s.collectives = {{OpKind::kAllGather, {0, 1}, 8, false}, {OpKind::kReduceScatter, {0, 1}, 8, false}};
  auto collective = [](OpKind kind, int index) {
    Op op;
    op.kind = kind;
    op.stream = Stream::kComm;
    op.collective = index;
    return op;
  };
  s.programs[0].ops = {collective(OpKind::kAllGather, 0), collective(OpKind::kReduceScatter, 1)};
  s.programs[1].ops = {collective(OpKind::kReduceScatter, 1), collective(OpKind::kAllGather, 0)};
  const std::string problem = CheckTransferOrder(s);
  EXPECT_NE(problem.find("the members order the group's collectives differently"), std::string::npos)
      << problem;
  std::swap(s.programs[1].ops[0], s.programs[1].ops[1]);
  EXPECT_EQ(CheckTransferOrder(s), "");
}

}  // namespace
}  // namespace motley
