#include <map>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/message_tags.h"
#include "core/net.h"
#include "core/rendezvous.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/run_ranks_for_test.h"

namespace motley {
namespace {

TEST(Communicator, CollectivesAndTransfersGiveTheRightValues) {
  RunRanks(3, [](Communicator& c) {
    const int r = c.rank();
    torch::Tensor sum = torch::full({4}, r + 1.0);
    ASSERT_TRUE(c.AllReduceSum(c.world(), sum).ok());
    EXPECT_TRUE(torch::equal(sum, torch::full({4}, 6.0)));

    torch::Tensor gathered = torch::empty({6});
    ASSERT_TRUE(
        c.AllGather(c.world(), torch::full({2}, static_cast<double>(r)).to(torch::kFloat32), gathered).ok());
    EXPECT_TRUE(torch::equal(gathered, torch::tensor({0.f, 0.f, 1.f, 1.f, 2.f, 2.f})));

    torch::Tensor in = torch::arange(6, torch::kFloat32) + r;
    torch::Tensor out = torch::empty({2});
    ASSERT_TRUE(c.ReduceScatterSum(c.world(), in, out).ok());
    EXPECT_TRUE(torch::equal(out, torch::tensor({6.f * r + 3, 3.f * (2 * r + 1) + 3})));

    CommGroup* pair = c.NewGroup({0, 2}).value();
    if (r != 1) {
      torch::Tensor t = torch::full({2}, static_cast<float>(r));
      ASSERT_TRUE(c.AllReduceSum(*pair, t).ok());
      EXPECT_TRUE(torch::equal(t, torch::full({2}, 2.f)));
    } else {
      EXPECT_EQ(pair->index, -1);
    }

    torch::Tensor b = torch::full({3}, static_cast<float>(r));
    ASSERT_TRUE(c.Broadcast(c.world(), b, 1).ok());
    EXPECT_TRUE(torch::equal(b, torch::full({3}, 1.f)));

    // A ring of non-blocking transfers: everyone sends before anyone waits.
    torch::Tensor mine = torch::full({5}, static_cast<float>(r));
    torch::Tensor got = torch::empty({5});
    PendingTransfer send = c.Send(mine, (r + 1) % 3, 7).value();
    PendingTransfer recv = c.Recv(got, (r + 2) % 3, 7).value();
    ASSERT_TRUE(send.Wait().ok());
    ASSERT_TRUE(recv.Wait().ok());
    EXPECT_TRUE(torch::equal(got, torch::full({5}, static_cast<float>((r + 2) % 3))));
    ASSERT_TRUE(c.Barrier(c.world()).ok());
  });
}

// Islands: worlds of their own inside the world of every rank, each numbered from 0, with its own
// collectives, groups and transfers, while the outer world's go on beside them.
TEST(Communicator, WorldsWithinTheWorldNumberTheirRanksFromZero) {
  RunRanks(4, [](Communicator& c) {
    const int r = c.rank(), island = r / 2;
    std::unique_ptr<Communicator> mine =
        c.Within({2 * island, 2 * island + 1}, fmt::format("island-{}", island)).value();
    EXPECT_EQ(mine->rank(), r % 2);
    EXPECT_EQ(mine->world_size(), 2);
    torch::Tensor sum = torch::full({3}, r + 1.0);
    ASSERT_TRUE(mine->AllReduceSum(mine->world(), sum).ok());
    EXPECT_TRUE(torch::equal(sum, torch::full({3}, island == 0 ? 3.0 : 7.0)));
    // Rank 1 of each island sends to its rank 0: the same numbers, another world each.
    torch::Tensor t = torch::full({2}, static_cast<double>(r));
    if (mine->rank() == 1) {
      ASSERT_TRUE(mine->Send(t, 0, 3).value().Wait().ok());
    } else {
      ASSERT_TRUE(mine->Recv(t, 1, 3).value().Wait().ok());
      EXPECT_TRUE(torch::equal(t, torch::full({2}, r + 1.0)));
    }
    CommGroup* alone = mine->NewGroup({mine->rank()}).value();
    EXPECT_EQ(alone->size(), 1);
    // The outer world: the islands' matching ranks together (every rank makes both groups, in the
    // same order), and everyone.
    CommGroup* firsts = c.NewGroup({0, 2}).value();
    CommGroup* seconds = c.NewGroup({1, 3}).value();
    CommGroup* across = r % 2 == 0 ? firsts : seconds;
    torch::Tensor matched = torch::full({1}, static_cast<double>(r));
    ASSERT_TRUE(c.AllReduceSum(*across, matched).ok());
    EXPECT_EQ(matched.item<double>(), r % 2 == 0 ? 2.0 : 4.0);
    torch::Tensor all = torch::ones({1});
    ASSERT_TRUE(c.AllReduceSum(c.world(), all).ok());
    EXPECT_EQ(all.item<double>(), 4.0);
    ASSERT_TRUE(c.Barrier(c.world()).ok());
  });
}

// The reserve probe's all-reduce: a real one on the backend (sums over the group), also in a group
// of one, where AllReduceSum returns at once (so NCCL would never set its buffers up).
TEST(Communicator, AnAllReduceOnTheBackendRunsInAnyGroup) {
  for (int ranks : {1, 2}) {
    RunRanks(ranks, [ranks](Communicator& c) {
      torch::Tensor t = torch::full({3}, c.rank() + 1.0);
      ASSERT_TRUE(c.AllReduceOnBackend(c.world(), t).ok());
      EXPECT_TRUE(torch::equal(t, torch::full({3}, ranks == 1 ? 1.0 : 3.0)));
    });
  }
}

// Uneven state shares (plan/state_shares.h): pieces of 3, 1 and 0 elements (an empty piece too).
TEST(Communicator, GathersAndReduceScattersUnevenPieces) {
  RunRanks(3, [](Communicator& c) {
    const int r = c.rank();
    const std::vector<int64_t> counts = {3, 1, 0};
    const int64_t begin[] = {0, 3, 4};
    torch::Tensor gathered = torch::empty({4});
    torch::Tensor piece = torch::full({counts[r]}, static_cast<float>(r + 1));
    ASSERT_TRUE(c.AllGather(c.world(), piece, gathered, counts).ok());
    EXPECT_TRUE(torch::equal(gathered, torch::tensor({1.f, 1.f, 1.f, 2.f})));

    // In place: the piece is this member's part of the output.
    torch::Tensor in_place = torch::zeros({4});
    in_place.narrow(0, begin[r], counts[r]).fill_(static_cast<float>(10 * (r + 1)));
    torch::Tensor own = in_place.narrow(0, begin[r], counts[r]);
    ASSERT_TRUE(c.AllGather(c.world(), own, in_place, counts).ok());
    EXPECT_TRUE(torch::equal(in_place, torch::tensor({10.f, 10.f, 10.f, 20.f})));

    torch::Tensor in = torch::arange(4, torch::kFloat32) * (r + 1);  // sum: arange * 6
    torch::Tensor out = torch::full({counts[r]}, -1.f);
    ASSERT_TRUE(c.ReduceScatterSum(c.world(), in, out, counts).ok());
    EXPECT_TRUE(torch::equal(out, (torch::arange(4, torch::kFloat32) * 6).narrow(0, begin[r], counts[r])));
  });
}

TEST(Communicator, TransfersMatchInTheOrderTheyAreIssuedNotByTag) {
  // NCCL's rule on every backend: the k-th send from a to b meets b's k-th receive from a. Both
  // directions of the pair are in flight at once (on NCCL, each has its own stream).
  RunRanks(2, [](Communicator& c) {
    const int peer = 1 - c.rank();
    const float base = 10.f * static_cast<float>(c.rank());
    torch::Tensor first = torch::full({3}, base + 1), second = torch::full({3}, base + 2);
    PendingTransfer s1 = c.Send(first, peer, 1).value();
    PendingTransfer s2 = c.Send(second, peer, 2).value();
    torch::Tensor got_a = torch::empty({3}), got_b = torch::empty({3});
    PendingTransfer r1 = c.Recv(got_a, peer, 2).value();  // tags in the other order: ignored
    PendingTransfer r2 = c.Recv(got_b, peer, 1).value();
    for (PendingTransfer* p : {&s1, &s2, &r1, &r2}) ASSERT_TRUE(p->Wait().ok());
    const float theirs = 10.f * static_cast<float>(peer);
    EXPECT_TRUE(torch::equal(got_a, torch::full({3}, theirs + 1)));
    EXPECT_TRUE(torch::equal(got_b, torch::full({3}, theirs + 2)));
  });
}

TEST(Communicator, AMissingRankIsNamedAtConnect) {
  Rendezvous rv;
  rv.rank = 0;
  rv.world_size = 2;
  rv.master_port = FreeTcpPort();
  CommConfig config;
  config.connect_timeout_s = 1;
  config.heartbeat_timeout_s = 0;
  Result<std::unique_ptr<Communicator>> c = Communicator::Connect(rv, config);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("rank 1 did not join the rendezvous"), std::string::npos)
      << c.status().message();
}

TEST(Communicator, ATimeoutIsAnErrorNotAHang) {
  RunRanks(
      2,
      [](Communicator& c) {
        if (c.rank() == 0) {
          torch::Tensor t = torch::empty({4});
          // Nobody sends: the receive must give up after the timeout with a message naming the peer.
          Result<PendingTransfer> recv = c.Recv(t, 1, MessageTag(TagRange::kStateGather, 7));
          ASSERT_TRUE(recv.ok());
          Status s = recv->Wait();
          ASSERT_FALSE(s.ok());
          EXPECT_NE(s.message().find("receive of 4 elements from rank 1 (state gather message 7) failed"),
                    std::string::npos)
              << s.message();
        } else {
          std::this_thread::sleep_for(std::chrono::seconds(3));  // alive, but silent
        }
      },
      /*timeout_s=*/1);
}

}  // namespace
}  // namespace motley
