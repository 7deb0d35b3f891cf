#include "runtime/islands/outer_optimizer.h"

#include <gtest/gtest.h>

#include "runtime/comm/run_ranks_for_test.h"
#include "runtime/islands/island_exchange.h"

namespace motley {
namespace {

auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

// torch.optim.SGD(lr=0.7, momentum=0.9, nesterov=True) on a parameter at 1.0 with gradients 0.5 and
// then 0.25, worked by hand: buf = 0.5, p = 1 - 0.7 (0.5 + 0.9 x 0.5) = 0.335; buf = 0.9 x 0.5 + 0.25 =
// 0.7, p = 0.335 - 0.7 (0.25 + 0.9 x 0.7) = -0.281. Without Nesterov: p = 1 - 0.35 = 0.65, then
// 0.65 - 0.7 x 0.7 = 0.16.
TEST(OuterOptimizer, StepsAsSgdWithNesterovMomentumOnTheAnchor) {
  for (bool nesterov : {true, false}) {
    torch::Tensor param = torch::ones({1}, kF64);
    OuterOptimizer outer({.lr = 0.7, .momentum = 0.9, .nesterov = nesterov}, {param});
    param.fill_(5);  // what the inner steps did does not enter: the step takes the average it is given
    outer.Step({torch::full({1}, 0.5, kF64)});
    EXPECT_NEAR(param.item<double>(), nesterov ? 0.335 : 0.65, 1e-15);
    outer.Step({torch::full({1}, 0.25, kF64)});
    EXPECT_NEAR(param.item<double>(), nesterov ? -0.281 : 0.16, 1e-15);
    EXPECT_NEAR(outer.momentum()[0].item<double>(), 0.7, 1e-15);
    EXPECT_EQ(outer.steps(), 2);
  }
}

TEST(OuterOptimizer, PseudoGradientsAreTheChangeSinceTheLastOuterStep) {
  torch::Tensor a = torch::arange(6, kF64).reshape({2, 3}), b = torch::full({4}, 2.0, kF64);
  OuterOptimizer outer({.lr = 1, .momentum = 0}, {a, b});
  a.add_(0.5);
  b.mul_(3);
  auto d = outer.PseudoGradients();
  EXPECT_TRUE(torch::allclose(d[0], torch::full({2, 3}, -0.5, kF64)));
  EXPECT_TRUE(torch::allclose(d[1], torch::full({4}, -4.0, kF64)));
  // At lr 1 without momentum an island alone steps to where it trained: the loop changes nothing.
  outer.Step(d);
  EXPECT_TRUE(torch::allclose(a, torch::arange(6, kF64).reshape({2, 3}) + 0.5, 0, 1e-15));
  EXPECT_TRUE(torch::allclose(b, torch::full({4}, 6.0, kF64), 0, 1e-15));
  EXPECT_TRUE(torch::allclose(outer.PseudoGradients()[1], torch::zeros({4}, kF64)));
}

// An overlapped round lands after inner steps went on (IslandsConfig::overlap_steps): the anchor steps as
// ever, and the piece keeps what it learnt since the round was sent. By hand: sent at [0.5, 1] (from the
// anchor [1, 2]), trained on to [0.25, 0.5], the islands' average [0.3, 0.6] at lr 0.7 without momentum:
// the anchor goes to [0.79, 1.58] and the piece to [0.25, 0.5] + [0.79, 1.58] - [0.5, 1] = [0.54, 1.08].
TEST(OuterOptimizer, ALandedRoundKeepsWhatThePieceLearntSinceItWasSent) {
  torch::Tensor param = torch::tensor({1.0, 2.0}, kF64);
  OuterOptimizer outer({.lr = 0.7, .momentum = 0}, {param});
  param.copy_(torch::tensor({0.5, 1.0}, kF64));
  const torch::Tensor launched = param.clone();
  param.copy_(torch::tensor({0.25, 0.5}, kF64));
  outer.StepPiece(0, torch::tensor({0.3, 0.6}, kF64), launched);
  outer.FinishStep();
  EXPECT_TRUE(torch::allclose(outer.anchor()[0], torch::tensor({0.79, 1.58}, kF64), 0, 1e-15));
  EXPECT_TRUE(torch::allclose(param, torch::tensor({0.54, 1.08}, kF64), 0, 1e-15));
  // An island alone at lr 1 without momentum: the landing changes nothing, whenever it lands.
  OuterOptimizer alone({.lr = 1, .momentum = 0}, {param});
  param.add_(0.125);
  const torch::Tensor sent = param.clone();
  const torch::Tensor delta = alone.PseudoGradient(0);
  param.mul_(1.5);
  const torch::Tensor trained = param.clone();
  alone.StepPiece(0, delta, sent);
  EXPECT_TRUE(torch::allclose(param, trained, 0, 1e-15));
}

// int4 keeps a value exactly when it is a whole number of sevenths of its block's largest magnitude;
// each block of 128 values of a piece has its own scale (a small block beside a large one keeps its
// detail), a piece of any length (the last block partial, an odd count) and a zero piece come back
// whole-shaped (an empty one too: a rank's part of a fragment may hold none), and anything else is within
// half a step of its block.
TEST(IslandExchange, Int4KeepsEachBlockOfAPieceToItsOwnScale) {
  torch::Tensor blocky = torch::zeros({3, 100}, kF64);  // 300 values: blocks of 128, 128 and 44
  blocky.view({-1}).narrow(0, 0, 128).copy_(torch::arange(-7, 8, kF64).repeat(9).narrow(0, 0, 128) * 1000);
  blocky.view({-1}).narrow(0, 128, 128).copy_(torch::arange(-7, 8, kF64).repeat(9).narrow(0, 0, 128) / 1024);
  blocky.view({-1}).narrow(0, 256, 44).copy_(torch::linspace(-1, 3, 44, kF64));
  const torch::Tensor odd = torch::cos(torch::arange(7, kF64)), zero = torch::zeros({5}, kF64),
                      empty = torch::zeros({0, 4}, kF64);
  double error = 0;
  std::vector<torch::Tensor> arrived = AsArrived({blocky, empty, odd, zero}, "int4", &error);
  ASSERT_EQ(arrived.size(), 4u);
  EXPECT_EQ(arrived[1].sizes(), empty.sizes());
  arrived.erase(arrived.begin() + 1);
  EXPECT_EQ(arrived[0].sizes(), blocky.sizes());
  EXPECT_EQ(arrived[1].sizes(), odd.sizes());
  EXPECT_TRUE(torch::equal(arrived[2], zero));
  const torch::Tensor got = arrived[0].reshape({-1}), want = blocky.reshape({-1});
  EXPECT_LT((got.narrow(0, 0, 256) - want.narrow(0, 0, 256)).abs().max().item<double>(), 1e-15 * 7000);
  EXPECT_LE((got.narrow(0, 256, 44) - want.narrow(0, 256, 44)).abs().max().item<double>(), 3.0 / 14 + 1e-7);
  EXPECT_GT((got.narrow(0, 256, 44) - want.narrow(0, 256, 44)).abs().max().item<double>(), 0);
  EXPECT_LE((arrived[1] - odd).abs().max().item<double>(), 1.0 / 14 + 1e-7);
  EXPECT_GT(error, 0);
  EXPECT_LT(error, 0.1);
}

// Two islands, one rank each: after an outer step at lr 1 without momentum both hold the average
// of what they trained to (the weighted one with tokens as weights), in every compression within
// its error — which the exchange reports.
TEST(IslandExchange, AveragesThePseudoGradientsOfTheIslandsWeightedAndCompressed) {
  for (const std::string& compression : OuterCompressions()) {
    for (bool weighted : {false, true}) {
      RunRanks(2, [&](Communicator& c) {
        const int r = c.rank();
        // Values without torch's generator: the ranks' threads share it.
        const torch::Tensor start_a = torch::sin(torch::arange(12, kF64)).reshape({3, 4}),
                            start_b = torch::cos(torch::arange(5, kF64));
        const auto moved = [&](int island) {
          const double k = 1.7 + island;
          return std::pair{start_a + 0.01 * torch::sin(k * torch::arange(1, 13, kF64)).reshape({3, 4}),
                           start_b + 0.01 * torch::cos(k * torch::arange(1, 6, kF64))};
        };
        const auto [moved_a, moved_b] = moved(r);
        const auto [other_a, other_b] = moved(1 - r);  // the other island's, to check against
        torch::Tensor a = start_a.clone(), b = start_b.clone();
        OuterOptimizer outer({.lr = 1, .momentum = 0, .compression = compression}, {a, b});
        a.copy_(moved_a);
        b.copy_(moved_b);
        const double w_mine = weighted ? (r == 0 ? 3.0 : 1.0) : 1.0,
                     w_other = weighted ? (r == 0 ? 1.0 : 3.0) : 1.0;
        std::vector<torch::Tensor> d = outer.PseudoGradients();
        auto done = AverageAcrossIslands(c, c.world(), d, w_mine, compression);
        ASSERT_TRUE(done.ok()) << done.status().message();
        outer.Step(d);
        const torch::Tensor want_a = (w_mine * moved_a + w_other * other_a) / (w_mine + w_other),
                            want_b = (w_mine * moved_b + w_other * other_b) / (w_mine + w_other);
        // The error is relative to the pseudo-gradients (~0.01): fp16 keeps 11 bits, int8 7, int4 3.
        const double tol = compression == "none"   ? 1e-14
                           : compression == "fp16" ? 0.01 * 2e-3
                           : compression == "int8" ? 0.01 * 0.05
                                                   : 0.01 * 0.2;
        EXPECT_LT((a - want_a).abs().max().item<double>(), tol) << compression;
        EXPECT_LT((b - want_b).abs().max().item<double>(), tol) << compression;
        if (compression == "none") {
          EXPECT_EQ(done->compression_error, 0);
          EXPECT_EQ(done->bytes_sent, 17 * 8);
        } else {
          EXPECT_GT(done->compression_error, 0) << compression;
          EXPECT_LT(done->compression_error, compression == "fp16"   ? 1e-3
                                             : compression == "int8" ? 2e-2
                                                                     : 0.15)
              << compression;
          // int4: each piece a block of 128 values (zeros after its own), two a byte, an fp32 scale.
          const double bytes = compression == "fp16"   ? 17 * 2
                               : compression == "int8" ? 17 + 2 * 8
                                                       : 2 * (64 + 4);
          EXPECT_EQ(done->bytes_sent, bytes) << compression;
        }
      });
    }
  }
}

}  // namespace
}  // namespace motley
