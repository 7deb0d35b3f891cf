// The executor's bookkeeping (plan/program_walker.h) on a recording fake: no processes, no tensors.
// The fake keeps what it is told — which ops started, finished and freed what — and checks the
// data flow on its own terms (each buffer's last writer and readers), independently of how the
// walker decides.
#include "plan/program_walker.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "plan/lower.h"
#include "plan/plan_io.h"
#include "sim/simulator.h"
#include "sim/test_models.h"

namespace motley {
namespace {

using test::FastCluster;
using test::LayerHeavyModel;
using test::RandomPlan;

// Records what the walker asks of it. Collectives and transfers stay in flight until the walker
// finishes them (or, with `done_after`, report done that many ops after they started); the rest
// finish at once. Every problem it sees is kept in `problems`.
class RecordingOpRunner : public OpRunner {
 public:
  explicit RecordingOpRunner(const Program& p, int done_after = -1) : program_(p), done_after_(done_after) {}

  Status BeforeOp(int op) override {
    now_ = op;
    return Status::Ok();
  }
  Result<bool> Start(int i) override {
    const Op& op = program_.ops[i];
    log.push_back(fmt::format("start {} {}", i, OpKindName(op.kind)));
    // In program order — the collectives among themselves: one reached while another runs waits
    // in a queue while the ops after it start.
    int& last = IsCollective(op.kind) ? last_collective_ : last_other_;
    if (i <= last) problems.push_back(fmt::format("op {} started out of program order (after {})", i, last));
    last = i;
    for (int d : op.deps)
      if (!finished_.count(d))
        problems.push_back(fmt::format("op {} started before its dep {} finished", i, d));
    // Read after write: the buffer's last writer has finished. Write after read or write: every
    // earlier reader and writer of it has.
    for (const Buffer& b : op.reads)
      if (auto w = writer_.find(b); w != writer_.end() && w->second != i && !finished_.count(w->second))
        problems.push_back(
            fmt::format("op {} reads {} while op {} still writes it", i, BufferName(b), w->second));
    for (const Buffer& b : op.writes) {
      if (auto w = writer_.find(b); w != writer_.end() && !finished_.count(w->second))
        problems.push_back(
            fmt::format("op {} writes {} while op {} still writes it", i, BufferName(b), w->second));
      for (int r : readers_[b])
        if (!finished_.count(r))
          problems.push_back(fmt::format("op {} writes {} while op {} still reads it", i, BufferName(b), r));
    }
    for (const Buffer& b : op.reads) readers_[b].insert(i);
    for (const Buffer& b : op.writes) writer_[b] = i;
    // A rank's collectives one at a time (the simulator's comm lane).
    if (IsCollective(op.kind))
      for (const auto& [j, at] : started_at_)
        if (IsCollective(program_.ops[j].kind))
          problems.push_back(fmt::format("collective {} started while collective {} is in flight", i, j));
    const bool in_flight = IsCollective(op.kind) || op.kind == OpKind::kSend || op.kind == OpKind::kRecv;
    if (in_flight) {
      started_at_[i] = i;
      max_in_flight = std::max(max_in_flight, static_cast<int>(started_at_.size()));
      return false;
    }
    finished_.insert(i);
    return true;
  }
  bool Done(int i) override { return done_after_ >= 0 && now_ - started_at_.at(i) >= done_after_; }
  Status Finish(int i) override {
    log.push_back(fmt::format("finish {}", i));
    if (!started_at_.erase(i)) problems.push_back(fmt::format("op {} finished but was not in flight", i));
    finished_.insert(i);
    return Status::Ok();
  }
  Status Free(const Buffer& b) override {
    log.push_back("free " + BufferName(b));
    for (int r : readers_[b])
      if (!finished_.count(r))
        problems.push_back(fmt::format("{} freed while op {} reads it", BufferName(b), r));
    readers_.erase(b);
    writer_.erase(b);
    ++frees;
    return Status::Ok();
  }

  std::vector<std::string> log, problems;
  int max_in_flight = 0, frees = 0;

 private:
  const Program& program_;
  int done_after_;
  int now_ = 0, last_collective_ = -1, last_other_ = -1;
  std::set<int> finished_;
  std::map<int, int> started_at_;  // in flight: op -> the op index at its start
  std::map<Buffer, int> writer_;
  std::map<Buffer, std::set<int>> readers_;
};

Status Walk(const Program& p, RecordingOpRunner* runner) { return ProgramWalker(p, runner).Run(); }

TEST(ProgramWalker, RandomPlansRunWithEveryCollectiveAndTransferInFlightAsLongAsPossible) {
  std::mt19937 rng(7);
  ModelSpec m = LayerHeavyModel(12);
  m.vocab_size = 32;
  Cluster cluster = FastCluster(8);
  int overlapped = 0;
  for (int i = 0; i < 300; ++i) {
    Plan plan = RandomPlan(rng, 8, m);
    Result<Schedule> s = LowerPlan(plan, cluster, m);
    ASSERT_TRUE(s.ok()) << s.status().message();
    for (const Program& p : s->programs) {
      for (int done_after : {-1, 0, 3}) {  // finished only when needed; as soon as possible; a little later
        RecordingOpRunner runner(p, done_after);
        Status st = Walk(p, &runner);
        ASSERT_TRUE(st.ok()) << "plan " << i << " rank " << p.rank << ": " << st.message() << "\n"
                             << PlanToToml(plan);
        ASSERT_TRUE(runner.problems.empty())
            << "plan " << i << " rank " << p.rank << ": " << runner.problems[0];
        if (done_after < 0 && runner.max_in_flight > 1) ++overlapped;
      }
    }
  }
  EXPECT_GT(overlapped, 100);  // collectives do overlap the compute (and each other)
}

// A hand-made program: ministage 0 on one rank, ZeRO-1 style.
Program TinyProgram() {
  const Buffer grads{BufferKind::kGrads, 0}, grad_shard{BufferKind::kGradShard, 0},
      shard{BufferKind::kShard, 0}, params{BufferKind::kParams, 0}, moments{BufferKind::kMoments, 0};
  Program p;
  p.resident = {params, shard, moments, grads, grad_shard};
  auto op = [](OpKind kind, Buffers reads, Buffers writes, Buffers frees = {}) {
    Op o;
    o.kind = kind;
    o.ministage = 0;
    o.reads = std::move(reads);
    o.writes = std::move(writes);
    o.frees = std::move(frees);
    return o;
  };
  p.ops.push_back(op(OpKind::kForward, {params}, {{BufferKind::kSaved, 0, 0}}));
  p.ops.push_back(
      op(OpKind::kBackward, {params, {BufferKind::kSaved, 0, 0}}, {grads}, {{BufferKind::kSaved, 0, 0}}));
  p.ops.push_back(op(OpKind::kReduceScatter, {grads}, {grads, grad_shard}));
  p.ops.push_back(op(OpKind::kForward, {params}, {{BufferKind::kSaved, 0, 1}}));  // races with nothing
  p.ops.push_back(op(OpKind::kOptimizerStep, {shard, grad_shard, moments}, {shard, grad_shard, moments}));
  p.ops.push_back(op(OpKind::kAllGather, {shard}, {params}));
  p.ops.push_back(
      op(OpKind::kBackward, {params, {BufferKind::kSaved, 0, 1}}, {grads}, {{BufferKind::kSaved, 0, 1}}));
  return p;
}

TEST(ProgramWalker, FinishesACollectiveRightBeforeTheFirstOpThatRacesWithIt) {
  const Program p = TinyProgram();
  RecordingOpRunner runner(p);
  ASSERT_TRUE(Walk(p, &runner).ok());
  EXPECT_TRUE(runner.problems.empty()) << runner.problems[0];
  // The reduce-scatter stays in flight over the forward that needs none of its buffers, and ends
  // before the optimizer step reads the gradient shard; the gather ends before the backward
  // reads the parameters.
  const std::vector<std::string> expected = {
      "start 0 forward", "start 1 backward", "free saved(ms0, mb0)",   "start 2 reduce_scatter",
      "start 3 forward", "finish 2",         "start 4 optimizer_step", "start 5 all_gather",
      "finish 5",        "start 6 backward", "free saved(ms0, mb1)"};
  EXPECT_EQ(runner.log, expected);
}

// A reduce-scatter runs; a gather reached meanwhile waits in a queue (nothing of it allocated yet)
// while the host goes on to a forward that needs neither; it starts once the reduce-scatter has
// finished: when an op needs the gather, or as soon as the walker sees the reduce-scatter done.
TEST(ProgramWalker, ACollectiveReachedWhileAnotherRunsWaitsInAQueueAndTheHostGoesOn) {
  const Buffer grads0{BufferKind::kGrads, 0}, grad_shard0{BufferKind::kGradShard, 0},
      shard1{BufferKind::kShard, 1}, params1{BufferKind::kParams, 1}, params2{BufferKind::kParams, 2};
  Program p;
  p.resident = {grads0, grad_shard0, shard1, params2};
  auto op = [](OpKind kind, int ministage, Buffers reads, Buffers writes, Buffers frees = {}) {
    Op o;
    o.kind = kind;
    o.ministage = ministage;
    o.reads = std::move(reads);
    o.writes = std::move(writes);
    o.frees = std::move(frees);
    return o;
  };
  p.ops.push_back(op(OpKind::kReduceScatter, 0, {grads0}, {grad_shard0}));
  p.ops.push_back(op(OpKind::kAllGather, 1, {shard1}, {params1}));
  p.ops.push_back(op(OpKind::kForward, 2, {params2}, {}));
  p.ops.push_back(op(OpKind::kBackward, 1, {params1}, {}, {params1}));

  RecordingOpRunner when_needed(p);
  ASSERT_TRUE(Walk(p, &when_needed).ok());
  EXPECT_TRUE(when_needed.problems.empty()) << when_needed.problems[0];
  EXPECT_EQ(when_needed.log, (std::vector<std::string>{"start 0 reduce_scatter", "start 2 forward",
                                                       "finish 0", "start 1 all_gather", "finish 1",
                                                       "start 3 backward", "free params(ms1)"}));

  // Done two ops after it started: the gather is queued at op 1 and starts at op 2, when the
  // walker sees the reduce-scatter done.
  RecordingOpRunner soon(p, /*done_after=*/2);
  ASSERT_TRUE(Walk(p, &soon).ok());
  EXPECT_TRUE(soon.problems.empty()) << soon.problems[0];
  EXPECT_EQ(soon.log, (std::vector<std::string>{"start 0 reduce_scatter", "finish 0", "start 1 all_gather",
                                                "start 2 forward", "finish 1", "start 3 backward",
                                                "free params(ms1)"}));
}

// Looking from inside a compute op (Poll with may_block false), the walker starts a queued
// reduction but never the gradient norm: it is a blocking all-reduce over every rank.
TEST(ProgramWalker, APollFromInsideAComputeOpStartsNoGradientNorm) {
  const Buffer grads0{BufferKind::kGrads, 0}, grad_shard0{BufferKind::kGradShard, 0};
  Program p;
  p.resident = {grads0, grad_shard0};
  Op rs;
  rs.kind = OpKind::kReduceScatter;
  rs.reads = {grads0};
  rs.writes = {grad_shard0};
  Op norm;
  norm.kind = OpKind::kGradNorm;
  norm.reads = {grad_shard0};
  p.ops = {rs, norm};
  RecordingOpRunner runner(p, /*done_after=*/0);
  ProgramWalker walker(p, &runner);
  walker.Begin();
  ASSERT_TRUE(walker.Step(0).ok());
  ASSERT_TRUE(walker.Step(1).ok());  // finishes the reduce-scatter first: the norm reads its shard
  EXPECT_EQ(runner.log,
            (std::vector<std::string>{"start 0 reduce_scatter", "finish 0", "start 1 grad_norm"}));

  // The norm queued behind a running reduction that a poll from inside a compute op finishes.
  Program q = p;
  q.ops[1].reads.clear();  // the norm no longer waits for the shard: it queues
  RecordingOpRunner queued(q, /*done_after=*/2);
  ProgramWalker w(q, &queued);
  w.Begin();
  ASSERT_TRUE(w.Step(0).ok());
  ASSERT_TRUE(w.Step(1).ok());  // op 0 is not done yet (done two ops after it started): op 1 waits
  EXPECT_EQ(queued.log, (std::vector<std::string>{"start 0 reduce_scatter"}));
  ASSERT_TRUE(queued.BeforeOp(2).ok());  // the fake's clock: op 0 is done now
  ASSERT_TRUE(w.Poll(/*may_block=*/false).ok());
  EXPECT_EQ(queued.log, (std::vector<std::string>{"start 0 reduce_scatter", "finish 0"}));
  ASSERT_TRUE(w.Poll(/*may_block=*/true).ok());
  EXPECT_EQ(queued.log,
            (std::vector<std::string>{"start 0 reduce_scatter", "finish 0", "start 1 grad_norm"}));
  ASSERT_TRUE(w.End().ok());
}

TEST(ProgramWalker, AReadOfSomethingNotHeldIsAnErrorNamingTheOpAndTheBuffer) {
  Program p = TinyProgram();
  p.ops[1].frees.push_back({BufferKind::kParams, 0});  // the full parameters go after the first backward
  RecordingOpRunner runner(p);
  Status st = Walk(p, &runner);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("op 3 (forward) reads params(ms0), which the rank does not hold"),
            std::string::npos)
      << st.message();
}

// What the walker says a rank holds, buffer by buffer: the resident state, then what each op
// writes as it starts (the activations of each microbatch, told apart), in order.
TEST(ProgramWalker, HeldListsTheBuffersTheRankHoldsAsTheStepGoes) {
  const Program p = TinyProgram();
  RecordingOpRunner runner(p);
  ProgramWalker w(p, &runner);
  w.Begin();
  std::vector<Buffer> resident(p.resident.begin(), p.resident.end());
  std::sort(resident.begin(), resident.end());
  resident.erase(std::unique(resident.begin(), resident.end()), resident.end());
  EXPECT_EQ(w.held(), resident);
  std::set<Buffer> written;
  for (int i = 0; i < static_cast<int>(p.ops.size()); ++i) {
    ASSERT_TRUE(w.Step(i).ok());
    const std::vector<Buffer> held = w.held();
    EXPECT_TRUE(std::is_sorted(held.begin(), held.end()));
    for (const Buffer& b : p.ops[static_cast<size_t>(i)].writes) {
      EXPECT_TRUE(std::binary_search(held.begin(), held.end(), b)) << "op " << i << " " << BufferName(b);
      if (b.microbatch >= 0) written.insert(b);
    }
  }
  EXPECT_GE(written.size(), 2u);  // microbatches' buffers were told apart
  ASSERT_TRUE(w.End().ok());
  EXPECT_EQ(w.held(), resident);
}

TEST(ProgramWalker, AStepThatDoesNotEndInItsResidentStateIsAnError) {
  Program p = TinyProgram();
  p.ops[6].frees.clear();  // the second microbatch's boundaries are never freed
  RecordingOpRunner runner(p);
  Status st = Walk(p, &runner);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("saved(ms0, mb1) left over"), std::string::npos) << st.message();

  Program q = TinyProgram();
  q.ops[4].frees.push_back({BufferKind::kMoments, 0});  // the moments go and never come back
  RecordingOpRunner runner2(q);
  st = Walk(q, &runner2);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("moments(ms0) missing"), std::string::npos) << st.message();
}

TEST(ProgramWalker, AnOpInFlightFreesWhatItUsesOnlyWhenItFinishes) {
  Program p = TinyProgram();
  // ZeRO-2: the reduce-scatter frees the full gradients, which the next backward writes anew.
  p.resident.erase(std::find(p.resident.begin(), p.resident.end(), Buffer{BufferKind::kGrads, 0}));
  p.ops[2].writes = {{BufferKind::kGradShard, 0}};
  p.ops[2].frees = {{BufferKind::kGrads, 0}};
  p.ops[6].frees.push_back({BufferKind::kGrads, 0});  // and the step ends without them
  RecordingOpRunner runner(p);
  ASSERT_TRUE(Walk(p, &runner).ok());
  EXPECT_TRUE(runner.problems.empty()) << runner.problems[0];
  const auto at = [&](const std::string& line) {
    return std::find(runner.log.begin(), runner.log.end(), line) - runner.log.begin();
  };
  EXPECT_LT(at("start 3 forward"), at("free grads(ms0)"));  // still in flight over the forward
  EXPECT_EQ(at("free grads(ms0)"), at("finish 2") + 1);
}

TEST(ProgramWalker, EveryLoweredScheduleOfTheRandomPlansKeepsItsBufferDiscipline) {
  std::mt19937 rng(99);
  ModelSpec m = LayerHeavyModel(12);
  m.vocab_size = 32;
  Cluster cluster = FastCluster(8);
  for (int i = 0; i < 300; ++i) {
    Plan plan = RandomPlan(rng, 8, m);
    Result<Schedule> s = LowerPlan(plan, cluster, m);
    ASSERT_TRUE(s.ok()) << s.status().message();
    ASSERT_EQ(CheckScheduleBuffers(*s), "") << "plan " << i << ":\n" << PlanToToml(plan);
    // Receives write exactly what the matching sends read.
    for (const Program& p : s->programs)
      for (const Op& op : p.ops)
        if (op.kind == OpKind::kSend) {
          bool matched = false;
          for (const Op& other : s->programs[op.peer].ops)
            matched = matched || (other.kind == OpKind::kRecv && other.peer == p.rank &&
                                  other.tag == op.tag && other.writes == op.reads);
          ASSERT_TRUE(matched) << "plan " << i << ": rank " << p.rank << " sends "
                               << BufferName(op.reads.at(0)) << " to rank " << op.peer
                               << " and nothing there receives it";
        }
  }
}

// Clipping holds every update until the global norm; with sharded parameters (ZeRO-3, offload) it
// must not hold the full parameters with them: they go after their last backward, so at the norm
// a rank holds no ministage's full parameters.
TEST(ProgramWalker, AtTheGlobalNormNoShardedPlanHoldsFullParameters) {
  std::mt19937 rng(11);
  ModelSpec m = LayerHeavyModel(12);
  m.vocab_size = 32;
  Cluster cluster = FastCluster(8);
  int checked = 0;
  for (int i = 0; i < 400; ++i) {
    Plan plan = RandomPlan(rng, 8, m);
    if (!plan.gradient_clipping || !(plan.zero_stage == 3 || plan.offload_params)) continue;
    Result<Schedule> s = LowerPlan(plan, cluster, m);
    ASSERT_TRUE(s.ok()) << s.status().message();
    for (const Program& p : s->programs) {
      struct AtTheNorm : OpRunner {
        const Program* program = nullptr;
        const ProgramWalker* walker = nullptr;
        std::vector<Buffer> params_held;
        Result<bool> Start(int i) override {
          if (program->ops[i].kind == OpKind::kGradNorm)
            for (const Buffer& b : walker->held())
              if (b.kind == BufferKind::kParams) params_held.push_back(b);
          return true;
        }
        Status Finish(int) override { return Status::Ok(); }
      } runner;
      ProgramWalker walker(p, &runner);
      runner.program = &p;
      runner.walker = &walker;
      ASSERT_TRUE(walker.Run().ok());
      ASSERT_TRUE(runner.params_held.empty()) << "plan " << i << " rank " << p.rank << " holds "
                                              << BufferName(runner.params_held[0]) << " at the norm\n"
                                              << PlanToToml(plan);
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

// Loss scaling without clipping (#47): fp16 plans (and any plan with loss_scaling) get the one
// kGradNorm collective — every rank learns whether any rank overflowed — and every update waits
// for it, on every rank; without either, no rank has the collective.
TEST(ProgramWalker, LossScalingHoldsEveryUpdateForTheFoundInfCollective) {
  std::mt19937 rng(5);
  ModelSpec m = LayerHeavyModel(8);
  m.vocab_size = 32;
  Cluster cluster = FastCluster(8);
  int checked = 0;
  for (int i = 0; i < 100; ++i) {
    Plan plan = RandomPlan(rng, 8, m);
    plan.gradient_clipping = false;
    plan.loss_scaling = i % 2 == 0;
    plan.precision = i % 4 == 0 ? Precision::kFp16 : Precision::kFp32;
    Result<Schedule> s = LowerPlan(plan, cluster, m);
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->loss_scaling, plan.loss_scaled());
    for (const Program& p : s->programs) {
      int norm = -1;
      for (size_t k = 0; k < p.ops.size(); ++k)
        if (p.ops[k].kind == OpKind::kGradNorm) norm = static_cast<int>(k);
      ASSERT_EQ(norm >= 0, plan.loss_scaled()) << "plan " << i << " rank " << p.rank;
      if (norm < 0) continue;
      // Every optimizer step comes after the collective (in program order and by its deps).
      for (size_t k = 0; k < p.ops.size(); ++k) {
        if (p.ops[k].kind != OpKind::kOptimizerStep) continue;
        EXPECT_GT(static_cast<int>(k), norm) << "plan " << i << " rank " << p.rank;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
}

// The simulator runs ops on parallel streams as soon as their deps allow, with no hazard checks of
// its own (unlike the walker): so the lowering's deps alone must keep the data flow — or the
// simulator would time a program the runtime does not run.
TEST(ProgramWalker, TheSimulatorsTimelineKeepsEveryBufferHazardThroughTheDepsAlone) {
  std::mt19937 rng(5);
  ModelSpec m = LayerHeavyModel(12);
  m.vocab_size = 32;
  Cluster cluster = FastCluster(8);
  SimConfig config;
  config.record_trace = true;
  int checked = 0;
  for (int i = 0; i < 200; ++i) {
    Plan plan = RandomPlan(rng, 8, m);
    Result<Schedule> s = LowerPlan(plan, cluster, m);
    ASSERT_TRUE(s.ok()) << s.status().message();
    CostModel costs(cluster, m, nullptr, plan.seq_len, plan.precision, plan.activation_checkpointing);
    Result<SimResult> r = Simulate(*s, cluster, costs, config);
    ASSERT_TRUE(r.ok()) << r.status().message();
    std::map<std::pair<int, int>, std::pair<double, double>> span;  // (rank, op) -> start, end
    for (const TraceEvent& t : r->trace) span[{t.rank, t.op}] = {t.start_s, t.end_s};
    for (const Program& p : s->programs) {
      std::map<Buffer, int> writer;
      std::map<Buffer, std::vector<int>> readers;
      for (int j = 0; j < static_cast<int>(p.ops.size()); ++j) {
        const Op& op = p.ops[j];
        const double start = span.at({p.rank, j}).first;
        auto ended = [&](int k) { return span.at({p.rank, k}).second <= start + 1e-12; };
        auto where = [&](int k, const Buffer& b, const char* what) {
          return fmt::format("plan {} rank {}: op {} ({}) {} {} before op {} ({}) is done\n{}", i, p.rank, j,
                             OpKindName(op.kind), what, BufferName(b), k, OpKindName(p.ops[k].kind),
                             PlanToToml(plan));
        };
        for (const Buffer& b : op.reads)
          if (auto w = writer.find(b); w != writer.end()) {
            ASSERT_TRUE(ended(w->second)) << where(w->second, b, "reads");
          }
        for (const Buffer& b : op.writes) {
          if (auto w = writer.find(b); w != writer.end() && w->second != j) {
            ASSERT_TRUE(ended(w->second)) << where(w->second, b, "overwrites");
          }
          for (int k : readers[b]) {
            if (k != j) {
              ASSERT_TRUE(ended(k)) << where(k, b, "overwrites");
            }
          }
        }
        // A free takes effect when the op ends: every other reader must be done by then.
        const double end = span.at({p.rank, j}).second;
        for (const Buffer& b : op.frees)
          for (int k : readers[b]) {
            if (k != j) {
              ASSERT_LE(span.at({p.rank, k}).second, end + 1e-12) << where(k, b, "frees");
            }
          }
        for (const Buffer& b : op.reads) readers[b].push_back(j);
        for (const Buffer& b : op.writes) {
          writer[b] = j;
          readers[b].clear();
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

}  // namespace
}  // namespace motley
