#include "runtime/optim/adamw.h"

#include <gtest/gtest.h>

#include "runtime/train/lr_schedule.h"

namespace motley {
namespace {

TEST(AdamW, MatchesTorchAdamWOnWholeParameters) {
  torch::manual_seed(0);
  torch::nn::Linear a(6, 4), b(6, 4);
  a->to(torch::kFloat64);  // in fp64: the two updates differ by the order of their operations only
  b->to(torch::kFloat64);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < a->parameters().size(); ++i) b->parameters()[i].copy_(a->parameters()[i]);
  }
  OptimizerConfig cfg;
  cfg.lr = 1e-2;
  cfg.weight_decay = 0.1;
  torch::optim::AdamW reference(b->parameters(), torch::optim::AdamWOptions(cfg.lr)
                                                     .betas({cfg.beta1, cfg.beta2})
                                                     .eps(cfg.eps)
                                                     .weight_decay(cfg.weight_decay));
  AdamW ours(cfg);
  std::vector<ParamShard> shards;
  for (int step = 1; step <= 5; ++step) {
    torch::Tensor x = torch::randn({3, 6}, torch::kFloat64);
    a->zero_grad();
    b->zero_grad();
    a->forward(x).pow(2).sum().backward();
    b->forward(x).pow(2).sum().backward();
    if (shards.empty()) {
      shards = WholeParameterShards(*a);
      for (auto& s : shards) s.decay = true;  // torch decays every parameter
    }
    for (size_t i = 0; i < shards.size(); ++i) shards[i].grad = a->parameters()[i].grad();
    ours.Step(shards, cfg.lr, step);
    reference.step();
  }
  for (size_t i = 0; i < a->parameters().size(); ++i)
    EXPECT_TRUE(torch::allclose(a->parameters()[i], b->parameters()[i], 1e-12, 1e-14)) << i;
  for (const ParamShard& s : shards)
    EXPECT_EQ(s.exp_avg.scalar_type(), torch::kFloat64) << "moments in the master dtype";
}

TEST(AdamW, ShardedUpdateEqualsTheWholeUpdate) {
  torch::manual_seed(1);
  torch::Tensor whole = torch::randn({10, 3}), grad = torch::randn({10, 3});
  torch::Tensor split = whole.clone();
  AdamW opt(OptimizerConfig{});
  std::vector<ParamShard> one = {{"", whole.view(-1), grad.view(-1), true, {}, {}}};
  // Three ranks' shards of the same flat parameter: 12, 12 and 6 elements.
  std::vector<ParamShard> three;
  for (auto [begin, len] : {std::pair{0, 12}, std::pair{12, 12}, std::pair{24, 6}})
    three.push_back(
        {"", split.view(-1).narrow(0, begin, len), grad.view(-1).narrow(0, begin, len), true, {}, {}});
  for (int step = 1; step <= 3; ++step) {
    opt.Step(one, 1e-3, step);
    opt.Step(three, 1e-3, step);
  }
  EXPECT_TRUE(torch::equal(whole, split));
}

TEST(AdamW, ClippingScalesToTheGlobalNorm) {
  torch::Tensor g1 = torch::full({4}, 3.0), g2 = torch::full({4}, 4.0);  // global norm sqrt(4*9 + 4*16)
  std::vector<ParamShard> shards = {{"a", torch::zeros({4}), g1, true, {}, {}},
                                    {"b", torch::zeros({4}), g2, true, {}, {}}};
  const double norm = std::sqrt(GradNormSquared(shards));
  EXPECT_DOUBLE_EQ(norm, std::sqrt(4 * 9.0 + 4 * 16.0));
  const double factor = ClipGradients(shards, norm, 1.0);
  EXPECT_NEAR(std::sqrt(GradNormSquared(shards)), 1.0, 1e-6);
  EXPECT_NEAR(factor, 1.0 / norm, 1e-6);
  EXPECT_DOUBLE_EQ(ClipGradients(shards, 0.5, 1.0), 1.0);  // within the limit: untouched
}

TEST(AdamW, SumOfSquaresIsTheFp64SumOverPiecesOfAnyLength) {
  torch::manual_seed(1);
  for (int64_t n :
       {int64_t{0}, int64_t{1}, int64_t{1} << 15, (int64_t{1} << 16) + 7}) {  // empty, one, one piece, three
    torch::Tensor t = torch::randn({n}) * 1e3;
    const double want = n == 0 ? 0.0 : t.to(torch::kFloat64).pow(2).sum().item<double>();
    torch::Tensor got = SumOfSquares(t);
    EXPECT_EQ(got.scalar_type(), torch::kFloat64);
    EXPECT_NEAR(got.item<double>(), want, 1e-12 * std::max(1.0, want)) << n;
  }
  torch::Tensor m = torch::randn({37, 41});  // any shape: all of its elements
  EXPECT_NEAR(SumOfSquares(m).item<double>(), m.to(torch::kFloat64).pow(2).sum().item<double>(), 1e-9);
}

// On a GPU with libtorch >= 2.2 fp32 shards take ATen's fused kernel; on the CPU the loop of ops.
// The same five steps from the same start agree to fp32's rounding (the two orders of operations).
TEST(AdamW, OnAGpuTheFusedStepEqualsTheStepOfOps) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(0);
  OptimizerConfig cfg;
  cfg.weight_decay = 0.1;
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  std::vector<ParamShard> cpu(3), gpu(3);
  for (int i = 0; i < 3; ++i) {
    cpu[i].param = torch::randn({64 + i, 32});
    cpu[i].decay = i != 1;
    gpu[i].param = cpu[i].param.to(cuda.device());
    gpu[i].decay = cpu[i].decay;
  }
  const torch::Tensor start = cpu[0].param.clone();
  AdamW adamw(cfg);
  for (int step = 1; step <= 5; ++step) {
    for (int i = 0; i < 3; ++i) {
      cpu[i].grad = torch::randn_like(cpu[i].param);
      gpu[i].grad = cpu[i].grad.to(cuda.device());
    }
    adamw.Step(cpu, 1e-2, step);
    adamw.Step(gpu, 1e-2, step);
  }
  for (int i = 0; i < 3; ++i) {
    const double gap = (gpu[i].param.cpu() - cpu[i].param).abs().max().item<double>();
    EXPECT_LT(gap, 1e-5) << "shard " << i;
    EXPECT_LT((gpu[i].exp_avg_sq.cpu() - cpu[i].exp_avg_sq).abs().max().item<double>(), 1e-5);
  }
  // The step moved the parameters (so agreement is not that of two no-ops).
  EXPECT_GT((cpu[0].param - start).abs().max().item<double>(), 1e-3);
}

TEST(LrSchedule, WarmupThenCosineOrLinearDecayToTheFloor) {
  OptimizerConfig opt;
  opt.lr = 1.0;
  LrScheduleConfig s;
  s.warmup_steps = 10;
  s.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(LearningRate(opt, s, 0, 110), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(opt, s, 9, 110), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(opt, s, 10, 110), 1.0);
  EXPECT_NEAR(LearningRate(opt, s, 59, 110), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 49 / 99.0)), 1e-12);
  EXPECT_DOUBLE_EQ(LearningRate(opt, s, 109, 110), 0.1);
  s.decay = "linear";
  EXPECT_NEAR(LearningRate(opt, s, 59, 110), 0.1 + 0.9 * (1 - 49 / 99.0), 1e-12);
  s.decay = "constant";
  EXPECT_DOUBLE_EQ(LearningRate(opt, s, 100, 110), 1.0);
}

}  // namespace
}  // namespace motley
