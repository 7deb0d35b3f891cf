// The executor in one process (issue #49): every plan the distributed tests train (data
// parallelism at each ZeRO stage, Poplar's uneven batches, GPipe / 1F1B / interleaved pipelines with
// routing and offload, tensor-parallel teams, state shares; tests/cli/plan_cases.h) runs with one
// thread a rank over Gloo on loopback, as gloo's own tests run, and trains the same model as one
// device on the same global batch — fp64, within 1e-10. An executor change is tested here in
// seconds; the process-level tests (tests/cli/distributed_train_cli_test.cc) keep the launcher,
// the data path and the checkpoints.
#include "runtime/executor/executor.h"

#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <gtest/gtest.h>

#include "cli/equivalence_model.h"
#include "cli/plan_cases.h"
#include "core/cluster_parse.h"
#include "core/model_parse.h"
#include "plan/lower.h"
#include "plan/plan_io.h"
#include "runtime/comm/run_ranks_for_test.h"
#include "runtime/emulation/memory_ledger.h"
#include "sim/routing_costs.h"

namespace motley {
namespace {

constexpr int64_t kSteps = 3;
constexpr int64_t kGlobalBatch = 12;  // the plan cases' global batch
constexpr int64_t kSeqLen = 16;

struct Setup {
  Cluster cluster;
  ModelSpec model;
};

const Setup& TheSetup() {
  static const Setup s{ParseClusterToml(motley_test::kCluster, "cluster.toml").value(),
                       ParseModelToml(motley_test::kModel, "model.toml").value()};
  return s;
}

// Each step's token windows [global batch, seq + 1], the same for every run.
torch::Tensor Windows(int64_t step) {
  torch::manual_seed(100 + static_cast<uint64_t>(step));
  return torch::randint(0, TheSetup().model.vocab_size, {kGlobalBatch, kSeqLen + 1}, torch::kInt64);
}

// Trains `plan_text` (a plan case's header and body) for kSteps with one thread a rank; returns
// the whole parameters after the last step (rank 0's GatherFullState) and each step's loss.
struct Trained {
  // The ranks' own ledgers (`own_ledgers`), first: destroyed after every tensor they count.
  std::vector<std::shared_ptr<MemoryLedger>> ledgers;
  std::map<std::string, torch::Tensor> params;
  std::vector<double> losses;
  // With a ledger a rank (`own_ledgers`): each rank's reported peak in the last step, its ledger's,
  // and what its ledger counts after the step (the rank's resident state).
  std::vector<double> reported_peak_bytes, ledger_peak_bytes, resident_bytes;
};

Trained Train(const std::string& plan_text, double clip, bool checkpointing, double rank1_loss_factor = 1,
              bool own_ledgers = false) {
  const Setup& s = TheSetup();
  Plan plan = ParsePlanToml(plan_text, "plan.toml").value();
  plan.activation_checkpointing = plan.activation_checkpointing && checkpointing;
  FillDefaultRouting(&plan, s.cluster, s.model);
  Result<Schedule> schedule = LowerPlan(plan, s.cluster, s.model);
  EXPECT_TRUE(schedule.ok()) << schedule.status().message();
  if (!schedule.ok()) return {};
  std::vector<torch::Tensor> windows;
  for (int64_t step = 0; step < kSteps; ++step) windows.push_back(Windows(step));
  Trained out;
  std::mutex mu;
  MemoryLedger::Install();  // the allocator that counts: rank ledgers count through it
  std::vector<std::shared_ptr<MemoryLedger>>& ledgers = out.ledgers;
  for (int r = 0; own_ledgers && r < plan.num_devices(); ++r)
    ledgers.push_back(std::make_shared<MemoryLedger>());
  out.reported_peak_bytes.assign(ledgers.size(), 0);
  out.ledger_peak_bytes.assign(ledgers.size(), 0);
  out.resident_bytes.assign(ledgers.size(), 0);
  RunRanks(plan.num_devices(), [&](Communicator& comm) {
    LlamaModel model{nullptr};
    {  // every rank draws the whole model from the seed, as one process does: one at a time, since
       // the ranks' threads share torch's generator
      std::lock_guard<std::mutex> lock(mu);
      model = LlamaModel(s.model, /*seed=*/7);
    }
    model->set_precision(Precision::kFp64);
    ExecutorConfig config;
    config.master_dtype = torch::kFloat64;
    config.optimizer.lr = 1e-2;
    config.optimizer.grad_clip_norm = clip;
    config.cpu_copy_threads = true;  // offload copies on threads, as on a GPU
    if (own_ledgers) config.ledger = ledgers[comm.rank()].get();
    Result<std::unique_ptr<Executor>> ex = Executor::Create(*schedule, s.cluster, model, &comm, config);
    ASSERT_TRUE(ex.ok()) << ex.status().message();
    for (int64_t step = 0; step < kSteps; ++step) {
      StepInputs in;
      in.step = step;
      in.lr = 1e-2;
      in.update = step + 1;
      if (comm.rank() == 1) in.faults.loss_factor = rank1_loss_factor;  // fault injection: the test can fail
      in.tokens = [&, step](int64_t first, int64_t n) { return windows[step].narrow(0, first, n); };
      Result<RankStepReport> r = (*ex)->RunStep(in);
      ASSERT_TRUE(r.ok()) << "rank " << comm.rank() << " step " << step << ": " << r.status().message();
      if (comm.rank() == 0) {
        std::lock_guard<std::mutex> lock(mu);
        out.losses.push_back(r->loss);
      }
      if (own_ledgers && step + 1 == kSteps) {
        out.reported_peak_bytes[comm.rank()] = r->peak_memory_bytes;
        out.ledger_peak_bytes[comm.rank()] = static_cast<double>(ledgers[comm.rank()]->peak_bytes());
        out.resident_bytes[comm.rank()] = static_cast<double>(ledgers[comm.rank()]->used_bytes());
      }
    }
    Result<Executor::FullState> full = (*ex)->GatherFullState();
    ASSERT_TRUE(full.ok()) << full.status().message();
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      out.params = full->params;
    }
  });
  return out;
}

// One device on the same global batch: the reference every plan must equal.
const Trained& OneDevice(double clip, bool checkpointing) {
  static std::map<std::pair<double, bool>, Trained> cache;
  auto it = cache.find({clip, checkpointing});
  if (it != cache.end()) return it->second;
  const std::string one = motley_test::PlanHeader() + R"(schedule = "gpipe"
zero_stage = 0
[[groups]]
ministages = [[0, 4]]
devices = [0]
microbatch_size = [12]
num_microbatches = [1]
)";
  return cache[{clip, checkpointing}] = Train(one, clip, checkpointing);
}

class ExecutorInProcess : public ::testing::TestWithParam<motley_test::PlanCase> {};

TEST_P(ExecutorInProcess, TrainsTheSameModelAsOneDevice) {
  const motley_test::PlanCase& c = GetParam();
  const Trained& reference = OneDevice(c.clip, c.checkpointing);
  const Trained plan = Train(motley_test::PlanHeader() + c.body, c.clip, c.checkpointing);
  ASSERT_EQ(plan.losses.size(), reference.losses.size());
  for (size_t i = 0; i < plan.losses.size(); ++i)
    EXPECT_NEAR(plan.losses[i], reference.losses[i], motley_test::kFp64Tolerance)
        << "the loss of step " << i + 1;
  ASSERT_EQ(plan.params.size(), reference.params.size());
  double worst = 0;
  std::string where;
  for (const auto& [name, want] : reference.params) {
    auto got = plan.params.find(name);
    ASSERT_NE(got, plan.params.end()) << name;
    ASSERT_EQ(got->second.sizes(), want.sizes()) << name;
    const double diff = (got->second - want).abs().max().item<double>();
    if (diff > worst) worst = diff, where = name;
  }
  EXPECT_LT(worst, motley_test::kFp64Tolerance) << c.name << ": " << where << " differs by " << worst;
  // The check can fail: the steps moved the parameters well beyond the tolerance.
  const torch::Tensor& w = reference.params.begin()->second;
  LlamaModel initial(TheSetup().model, 7);
  initial->set_precision(Precision::kFp64);
  EXPECT_GT((w - initial->named_parameters()[reference.params.begin()->first]).abs().max().item<double>(),
            1e-4);
}

// Ranks run as threads each count their memory in a ledger of their own (ExecutorConfig::ledger):
// a rank's step reports its own ledger's peak, and what a rank holds between steps is its own. In
// the state-shares case the three ranks hold 15%, 55% and 30% of the optimizer state (and the same
// parameters): their ledgers after a step order alike — where one process ledger would give every
// rank the same figure — and training is still exact. (Peaks are not compared: when a rank's
// activations meet its collectives' buffers depends on timing.)
TEST(ExecutorInProcessLedger, EachRankCountsItsOwnMemory) {
  const motley_test::PlanCase& c = motley_test::PlanNamed("dp3-zero1-state-shares");
  const Trained got =
      Train(motley_test::PlanHeader() + c.body, c.clip, c.checkpointing, 1, /*own_ledgers=*/true);
  ASSERT_EQ(got.reported_peak_bytes.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(r);
    EXPECT_GT(got.reported_peak_bytes[r], 0);
    EXPECT_EQ(got.reported_peak_bytes[r], got.ledger_peak_bytes[r])
        << "the report is the rank's own ledger's";
    EXPECT_GE(got.ledger_peak_bytes[r], got.resident_bytes[r]);
  }
  std::cout << "held after a step: rank 0 " << got.resident_bytes[0] << " bytes, rank 1 "
            << got.resident_bytes[1] << ", rank 2 " << got.resident_bytes[2] << "\n";
  EXPECT_GT(got.resident_bytes[1], got.resident_bytes[2]) << "55% of the state against 30%";
  EXPECT_GT(got.resident_bytes[2], got.resident_bytes[0]) << "30% of the state against 15%";
  const Trained& reference = OneDevice(c.clip, c.checkpointing);
  ASSERT_EQ(got.params.size(), reference.params.size());
  for (const auto& [name, want] : reference.params)
    EXPECT_LT((got.params.at(name) - want).abs().max().item<double>(), motley_test::kFp64Tolerance) << name;
}

// The comparison sees a one-in-a-million change to one rank's gradients (~1e-7 after the steps):
// the tolerance is tight enough to catch a rank that computes slightly wrong.
TEST(ExecutorInProcessCheck, SeesAOneInAMillionChangeToOneRanksGradients) {
  const motley_test::PlanCase& c = motley_test::PlanNamed("dp3-zero3-uneven");
  const Trained& reference = OneDevice(c.clip, c.checkpointing);
  const Trained changed = Train(motley_test::PlanHeader() + c.body, c.clip, c.checkpointing, 1 + 1e-6);
  double worst = 0;
  for (const auto& [name, want] : reference.params)
    worst = std::max(worst, (changed.params.at(name) - want).abs().max().item<double>());
  EXPECT_GT(worst, 100 * motley_test::kFp64Tolerance);
}

INSTANTIATE_TEST_SUITE_P(EveryPlanCase, ExecutorInProcess, ::testing::ValuesIn(motley_test::kPlans),
                         [](const ::testing::TestParamInfo<motley_test::PlanCase>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace motley
