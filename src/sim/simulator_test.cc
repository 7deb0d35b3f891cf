#include "sim/simulator.h"

#include <cstdint>
#include <map>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <iostream>

#include "core/cluster_parse.h"
#include "cost/state_bytes.h"
#include "plan/lower.h"
#include "plan/plan_io.h"
#include "plan/program_walker.h"
#include "plan/transfer_order.h"
#include "sim/flextp_choice.h"
#include "sim/flextp_prediction.h"
#include "sim/routing_costs.h"
#include "sim/test_models.h"

namespace motley {
namespace {

using test::FastCluster;
using test::FlatProfile;
using test::LayerHeavyModel;

Plan GPipe(int stages, int microbatches, const ModelSpec& m) {
  Plan p;
  p.seq_len = 128;
  p.schedule = PipelineSchedule::kGPipe;
  p.zero_stage = 0;
  const int per = m.num_layers / stages;
  for (int g = 0; g < stages; ++g) {
    GroupPlan gp;
    gp.ministages = {{g * per, (g + 1) * per}};
    gp.devices = {{g, 1, microbatches, 0}};
    p.groups.push_back(gp);
  }
  return p;
}

TEST(Simulator, GPipeBubbleMatchesTheFormula) {
  for (auto [p, m] : {std::pair{4, 8}, std::pair{2, 16}, std::pair{8, 8}}) {
    ModelSpec model = LayerHeavyModel(p * 2);
    Cluster cluster = FastCluster(p);
    Plan plan = GPipe(p, m, model);
    Result<Schedule> s = LowerPlan(plan, cluster, model);
    ASSERT_TRUE(s.ok()) << s.status().message();
    Profile profile = FlatProfile(model, plan.seq_len);
    CostModel costs(cluster, model, &profile, plan.seq_len, plan.precision, true);
    Result<SimResult> r = Simulate(*s, cluster, costs);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const double expected = static_cast<double>(p - 1) / (m + p - 1);
    for (const auto& d : r->devices) {
      EXPECT_NEAR(d.idle_fraction, expected, expected * 0.01)
          << "p=" << p << " m=" << m << " rank " << d.rank;
    }
    // (m + p - 1) slots of one forward and one backward of 2 layers each.
    EXPECT_NEAR(r->step_time_s, (m + p - 1) * 2 * (0.010 + 0.020), 1e-3);
  }
}

TEST(Simulator, OneFOneBBubbleMatchesTheFormulaWithAnyNumberOfDevicesPerStage) {
  // p stages of d devices each, every device with m microbatches of its own: each device runs its
  // own 1F1B (a warm-up of p - 1 - stage forwards of its microbatches), so it idles
  // (p - 1) / (m + p - 1) of the step whatever d is — not d times longer, as when the warm-up was
  // counted in the stage's microbatches.
  for (int d : {1, 2, 4}) {
    for (auto [p, m] : {std::pair{4, 8}, std::pair{2, 6}}) {
      ModelSpec model = LayerHeavyModel(p * 2);
      Cluster cluster = FastCluster(p * d);
      Plan plan = GPipe(p, m, model);
      plan.schedule = PipelineSchedule::k1F1B;
      // Round-robin routing: microbatch k on device k mod d of every stage (as Zorse's routing
      // deals them out to devices of equal speed).
      for (int g = 0; g < p; ++g) {
        plan.groups[g].devices.clear();
        for (int i = 0; i < d; ++i) plan.groups[g].devices.push_back({g * d + i, 1, m, 0});
        plan.groups[g].routing.clear();
        for (int k = 0; k < m * d; ++k) plan.groups[g].routing.push_back(g * d + k % d);
      }
      Result<Schedule> s = LowerPlan(plan, cluster, model);
      ASSERT_TRUE(s.ok()) << s.status().message();
      Profile profile = FlatProfile(model, plan.seq_len);
      CostModel costs(cluster, model, &profile, plan.seq_len, plan.precision, true);
      Result<SimResult> r = Simulate(*s, cluster, costs);
      ASSERT_TRUE(r.ok()) << r.status().message();
      const double expected = static_cast<double>(p - 1) / (m + p - 1);
      for (const auto& dev : r->devices)
        EXPECT_NEAR(dev.idle_fraction, expected, expected * 0.01)
            << "d=" << d << " p=" << p << " m=" << m << " rank " << dev.rank;
      EXPECT_NEAR(r->step_time_s, (m + p - 1) * 2 * (0.010 + 0.020), 1e-3)
          << "d=" << d << " p=" << p << " m=" << m;
      // And each device keeps at most p - stage microbatches in flight, as 1F1B promises.
      for (const Program& prog : s->programs) {
        const int stage = prog.rank / d;
        int in_flight = 0, most = 0;
        for (const Op& op : prog.ops) {
          if (op.kind == OpKind::kForward) most = std::max(most, ++in_flight);
          if (op.kind == OpKind::kBackward) --in_flight;
        }
        EXPECT_EQ(most, std::min(m, p - stage)) << "d=" << d << " rank " << prog.rank;
      }
    }
  }
}

TEST(Simulator, ZorseRoutingFinishesTheStageSoonerThanBlockRouting) {
  // Group 1 holds a fast device with 6 microbatches and one 3x slower (emulated) with 2. Block
  // routing hands the slow one the last two; Zorse's rule (§4.2) gives each arriving microbatch to
  // the device with the most remaining work, so both finish the stage's forward pass together.
  Cluster cluster = ParseClusterToml(R"(
[device_types.unit]
memory = "64GiB"
memory_bandwidth = "1000TB/s"
fp16_flops = "100TFLOPS"
fp32_flops = "100TFLOPS"
host_link = "1000TB/s"
[[nodes]]
name = "a"
device = "unit"
count = 3
intra_bandwidth = "1000TB/s"
[[nodes.emulation]]
speed_factor = 1.0
[[nodes.emulation]]
speed_factor = 1.0
[[nodes.emulation]]
speed_factor = 3.0
)",
                                     "c.toml")
                        .value();
  ModelSpec m = LayerHeavyModel(4);
  Profile profile = FlatProfile(m, 128);
  Plan p;
  p.seq_len = 128;
  p.zero_stage = 0;
  p.groups = {GroupPlan{{{0, 2}}, 1, {{0, 1, 8, 0}}, {}, {}},
              GroupPlan{{{2, 4}}, 1, {{1, 1, 6, 0}, {2, 1, 2, 0}}, {}, {}}};
  CostModel costs(cluster, m, &profile, p.seq_len, p.precision, true);
  // When the last forward of group 1 (ranks 1 and 2) ends.
  auto stage_end = [&](const Plan& plan) {
    Schedule s = LowerPlan(plan, cluster, m).value();
    SimConfig config;
    config.record_trace = true;
    SimResult r = Simulate(s, cluster, costs, config).value();
    double end = 0;
    for (const auto& t : r.trace)
      if (t.rank > 0 && s.programs[t.rank].ops[t.op].kind == OpKind::kForward) end = std::max(end, t.end_s);
    return end;
  };
  Plan zorse = p;
  EXPECT_EQ(FillZorseRouting(&zorse, costs), 2);
  // Forward of 2 layers: 20 ms on group 0 and the fast device, 60 ms on the slow one. Block: the
  // slow device gets microbatches 6 and 7 (arriving at 140 and 160 ms) and ends at 260 ms.
  EXPECT_NEAR(stage_end(p), 0.260, 1e-4);
  // Zorse: the slow device takes microbatches 1 and 5; both devices end at 180 ms.
  EXPECT_EQ(zorse.groups[1].routing, (std::vector<int>{1, 2, 1, 1, 1, 2, 1, 1}));
  EXPECT_NEAR(stage_end(zorse), 0.180, 1e-4);
}

// Two ranks: an all-gather posted, then a forward that runs while it is in flight; a second forward
// needs both. (Posted after the first forward, the gather would start only when it ends: the host
// is inside a compute op until it ends, in the runtime and so in the simulator.)
Schedule OverlapSchedule(double gather_bytes) {
  Schedule s;
  s.seq_len = 128;
  s.collectives.push_back({OpKind::kAllGather, {0, 1}, gather_bytes});
  for (int r = 0; r < 2; ++r) {
    Program p;
    p.rank = r;
    p.device = r;
    Op f1;
    f1.kind = OpKind::kForward;
    f1.layer_begin = 0;
    f1.layer_end = 1;
    f1.sequences = 1;
    Op ag;
    ag.kind = OpKind::kAllGather;
    ag.stream = Stream::kComm;
    ag.collective = 0;
    ag.bytes = gather_bytes;
    Op f2 = f1;
    f2.deps = {0, 1};
    p.ops = {ag, f1, f2};
    s.programs.push_back(p);
  }
  return s;
}

// Two devices whose links, to each other and to the host, move 1 GB/s: a transfer's length is
// easy to set.
Cluster OneGBpsCluster() {
  return ParseClusterToml(R"(
[network]
intra_node_latency = "1ns"
[device_types.unit]
memory = "1GiB"
memory_bandwidth = "1TB/s"
fp16_flops = "1TFLOPS"
fp32_flops = "1TFLOPS"
host_link = "1GB/s"
[[nodes]]
name = "n"
device = "unit"
count = 2
intra_bandwidth = "1GB/s"
)",
                          "c.toml")
      .value();
}

TEST(Simulator, HiddenCollectiveAddsNothingLongerOneAddsTheDifference) {
  Cluster cluster = OneGBpsCluster();
  ModelSpec model = LayerHeavyModel(1);
  Profile profile = FlatProfile(model, 128);  // forward 10 ms
  CostModel costs(cluster, model, &profile, 128, Precision::kBf16, true);
  const double forward = 0.010;
  for (double gather_s : {0.004, 0.025}) {
    // Ring all-gather over 2: one step moving half the payload.
    const double bytes = gather_s * 2 * 1e9;
    Schedule s = OverlapSchedule(bytes);
    ASSERT_NEAR(costs.CollectiveS(OpKind::kAllGather, {0, 1}, bytes), gather_s, 1e-8);
    Result<SimResult> r = Simulate(s, cluster, costs);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_NEAR(r->step_time_s, std::max(forward, gather_s) + forward, 1e-8) << gather_s;
    // Posted after the first forward, the gather starts when it ends: nothing overlaps.
    for (Program& p : s.programs) std::swap(p.ops[0], p.ops[1]);
    r = Simulate(s, cluster, costs);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_NEAR(r->step_time_s, forward + gather_s + forward, 1e-8) << gather_s;
  }
}

// Rank 0 sends two transfers of 4 ms each to rank 1 at once: they take its link in turn. Rank 1
// posts the first receive only after a 10 ms forward, the second at once: the first transfer
// completes, for both ends, when its receive is posted (its data was there at 4 ms); the second
// when its data is there, behind the first on the link (8 ms).
TEST(Simulator, ATransferCompletesWhenItsDataIsThereAndItsReceiveIsPosted) {
  Cluster cluster = OneGBpsCluster();
  ModelSpec model = LayerHeavyModel(1);
  Profile profile = FlatProfile(model, 128);  // forward 10 ms
  CostModel costs(cluster, model, &profile, 128, Precision::kBf16, true);
  const double bytes = 4e6;
  ASSERT_NEAR(costs.TransferS(0, 1, bytes), 0.004, 1e-8);
  auto transfer = [&](OpKind kind, int peer, int64_t tag) {
    Op op;
    op.kind = kind;
    op.stream = Stream::kComm;
    op.peer = peer;
    op.tag = tag;
    op.bytes = bytes;
    return op;
  };
  Op forward;
  forward.kind = OpKind::kForward;
  forward.layer_end = 1;
  forward.sequences = 1;
  Schedule s;
  s.seq_len = 128;
  Program p0, p1;
  p0.device = 0;
  p1.rank = p1.device = 1;
  p0.ops = {transfer(OpKind::kSend, 1, 1), transfer(OpKind::kSend, 1, 2)};
  p1.ops = {transfer(OpKind::kRecv, 0, 2), forward, transfer(OpKind::kRecv, 0, 1)};
  s.programs = {p0, p1};
  Result<SimResult> r = Simulate(s, cluster, costs, {.record_trace = true});
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::map<std::pair<int, int>, double> end;
  for (const TraceEvent& t : r->trace) end[{t.rank, t.op}] = t.end_s;
  EXPECT_NEAR((end[{0, 0}]), 0.010, 1e-8);  // tag 1: its receive is posted after the forward
  EXPECT_NEAR((end[{1, 2}]), 0.010, 1e-8);
  EXPECT_NEAR((end[{0, 1}]), 0.008, 1e-8);  // tag 2: behind tag 1 on rank 0's link
  EXPECT_NEAR((end[{1, 0}]), 0.008, 1e-8);
}

TEST(Simulator, MemoryPeakOfASmallDataParallelScheduleMatchesHandComputation) {
  // One device, ZeRO-0, checkpointing, two microbatches of 2 and 1 sequences, 3 layers in one
  // ministage (so the device runs the embedding, the layers and the head); in bf16 and in fp64.
  struct Bytes {
    Precision precision;
    double params, grads, optimizer, activation, logits;  // per value (logits: and the loss's copy)
  };
  for (const Bytes& b : {Bytes{Precision::kBf16, 2, 2, 12, 2, 6}, Bytes{Precision::kFp64, 8, 8, 16, 8, 16}}) {
    SCOPED_TRACE(PrecisionName(b.precision));
    ModelSpec m = LayerHeavyModel(3);
    m.vocab_size = 64;
    Cluster cluster = FastCluster(1);
    Plan p;
    p.seq_len = 32;
    p.precision = b.precision;
    p.zero_stage = 0;
    p.groups = {GroupPlan{{{0, 3}}, 1, {{0, 2, 2, 1}}, {}, {}}};
    Result<Schedule> s = LowerPlan(p, cluster, m);
    ASSERT_TRUE(s.ok()) << s.status().message();
    CostModel costs(cluster, m, nullptr, p.seq_len, p.precision, true);
    Result<SimResult> r = Simulate(*s, cluster, costs);
    ASSERT_TRUE(r.ok()) << r.status().message();

    // By hand. Static: full parameters, gradients and Adam state (bf16: 2 + 2 + 12 with fp32
    // masters and moments; fp64: 8 + 8 + 16).
    const double params = TotalParams(m);
    const double static_bytes = params * (b.params + b.grads + b.optimizer);
    // The larger microbatch (2 sequences x 32 tokens) sets the peak.
    const double tokens = 2 * 32;
    const double act = tokens * m.hidden_size * b.activation;  // one layer boundary
    const double layer_forward = LayerForwardPeakBytesPerToken(m, 32, b.precision, false) * tokens;
    const double logits = tokens * m.vocab_size * b.logits;  // and the loss's master-precision copy
    // Forward: the 3 saved layer inputs and the head's, plus one layer's working set (it keeps
    // nothing) and the logits.
    const double forward_peak = 4 * act + layer_forward + logits;
    // Backward: the 4 saved inputs and one recomputed piece at a time, the larger of a layer (its
    // backward, and its weights' gradients as autograd returns them before they are added into the
    // ministage's) and the head (its recomputed logits and the loss's copy, and its weights').
    const double layer_piece =
        LayerBackwardBytesPerToken(m, 32, b.precision, false) * tokens + ParamsPerLayer(m) * b.grads;
    const double head_piece = HeadBackwardBytesPerToken(m, b.precision) * tokens + HeadParams(m) * b.grads;
    const double backward_peak = 4 * act + std::max(layer_piece, head_piece);
    EXPECT_DOUBLE_EQ(r->devices[0].peak_memory_bytes, static_bytes + std::max(forward_peak, backward_peak));
  }
}

TEST(Simulator, PipelineMemoryCountsActivationsOfEveryMicrobatchInFlight) {
  // GPipe over 2 stages: stage 0 keeps the layer inputs of all its microbatches until their
  // backward; with activation offload only the ones being moved stay.
  ModelSpec m = LayerHeavyModel(4);
  Cluster cluster = FastCluster(2);
  Plan p = GPipe(2, 4, m);
  p.seq_len = 16;
  Profile profile = FlatProfile(m, p.seq_len);
  CostModel costs(cluster, m, &profile, p.seq_len, p.precision, true);
  Result<Schedule> s = LowerPlan(p, cluster, m);
  ASSERT_TRUE(s.ok()) << s.status().message();
  Result<SimResult> kept = Simulate(*s, cluster, costs);
  ASSERT_TRUE(kept.ok()) << kept.status().message();
  const double act = 16.0 * m.hidden_size * 2;
  const double static0 = s->programs[0].static_device_bytes;
  const double layer_backward = LayerBackwardBytesPerToken(m, 16, Precision::kBf16, false) * 16;
  const double layer_grads = ParamsPerLayer(m) * StateBytes(Precision::kBf16).grads;
  // Stage 0 (2 layers) peaks in its first backward: 4 microbatches x 2 saved layer inputs, the
  // received output gradient of microbatch 0, the output of microbatch 3 (its send completes as
  // the host enters the backward, which runs its layers with the tensor still there: the host lets
  // a delivered tensor go between ops), and the backward's working memory (a recomputed layer's
  // backward and its weights' gradients before they are added to the ministage's).
  EXPECT_DOUBLE_EQ(kept->devices[0].peak_memory_bytes,
                   static0 + 4 * 2 * act + 2 * act + layer_backward + layer_grads);

  p.offload_activations = true;
  Result<Schedule> off = LowerPlan(p, cluster, m);
  ASSERT_TRUE(off.ok()) << off.status().message();
  Result<SimResult> offloaded = Simulate(*off, cluster, costs);
  ASSERT_TRUE(offloaded.ok()) << offloaded.status().message();
  EXPECT_LT(offloaded->devices[0].peak_memory_bytes, kept->devices[0].peak_memory_bytes);
  EXPECT_GT(offloaded->devices[0].peak_host_bytes, 0);
}

// The runtime issues in program order and its host is inside a backward until it ends: an
// activation prefetch is placed one compute op before the backward that reads it, so that it runs
// beside the one in between.
TEST(Lowering, AnActivationPrefetchComesOneComputeOpBeforeItsBackward) {
  ModelSpec m = LayerHeavyModel(4);
  Cluster cluster = FastCluster(2);
  for (PipelineSchedule order : {PipelineSchedule::kGPipe, PipelineSchedule::kInterleaved}) {
    Plan p = GPipe(2, 4, m);
    p.schedule = order;
    p.offload_activations = true;
    Result<Schedule> s = LowerPlan(p, cluster, m);
    ASSERT_TRUE(s.ok()) << s.status().message();
    int prefetches = 0;
    for (const Program& prog : s->programs) {
      for (size_t i = 0; i < prog.ops.size(); ++i) {
        if (prog.ops[i].kind != OpKind::kActPrefetch) continue;
        ++prefetches;
        const Buffer saved = prog.ops[i].writes.at(0);
        int computes = 0;
        size_t j = i + 1;
        for (; j < prog.ops.size(); ++j) {
          const Op& op = prog.ops[j];
          if (op.kind == OpKind::kBackward &&
              std::find(op.reads.begin(), op.reads.end(), saved) != op.reads.end())
            break;
          if (IsCompute(op.kind)) ++computes;
        }
        ASSERT_LT(j, prog.ops.size()) << "rank " << prog.rank << " op " << i << ": no backward reads it";
        EXPECT_EQ(computes, 1) << "rank " << prog.rank << " op " << i << " " << BufferName(saved);
      }
    }
    EXPECT_EQ(prefetches, 8);
  }
}

TEST(Simulator, ReportsOutOfMemoryNamingTheDevice) {
  ModelSpec m = LayerHeavyModel(4);
  Cluster cluster = FastCluster(2, "1MiB");
  Plan p = GPipe(2, 2, m);
  Result<Schedule> s = LowerPlan(p, cluster, m);
  ASSERT_TRUE(s.ok());
  CostModel costs(cluster, m, nullptr, p.seq_len, p.precision, true);
  Result<SimResult> r = Simulate(*s, cluster, costs);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->fits_memory);
  EXPECT_NE(r->oom_message.find("device 0 (unit, rank 0) needs"), std::string::npos) << r->oom_message;
}

// The memory the GPU does not give (#47): the simulator plans within memory less the reserve, and a
// step that fits the nominal memory but not what is left is out of memory, naming the reserve.
TEST(Simulator, PlansWithinMemoryLessTheReserveThatCudaAndNcclKeep) {
  ModelSpec m = LayerHeavyModel(4);
  Cluster roomy = FastCluster(2, "64GiB");
  Plan p = GPipe(2, 2, m);
  CostModel costs(roomy, m, nullptr, p.seq_len, p.precision, true);
  Result<SimResult> base = Simulate(LowerPlan(p, roomy, m).value(), roomy, costs);
  ASSERT_TRUE(base.ok());
  const double peak = base->devices[0].peak_memory_bytes;
  ASSERT_GT(peak, 0);
  // Memory 10% above the peak: fits with no reserve, not with a reserve of a fifth of it.
  auto cluster_with = [&](const std::string& reserve) {
    const std::string memory = fmt::format("{:.0f}B", peak * 1.1);
    std::string text =
        "[device_types.unit]\nmemory = \"" + memory +
        "\"\nmemory_bandwidth = \"1000TB/s\"\nfp16_flops = \"100TFLOPS\"\nfp32_flops = \"100TFLOPS\"\n"
        "host_link = \"1000TB/s\"\n" +
        reserve +
        "[[nodes]]\nname = \"n\"\ndevice = \"unit\"\ninterconnect = \"pcie\"\nintra_bandwidth = "
        "\"1000TB/s\"\ncount = 2\n";
    return ParseClusterToml(text, "reserve.toml").value();
  };
  for (const std::string& reserve : {std::string(""), fmt::format("reserve = \"{:.0f}B\"\n", peak * 0.22)}) {
    Cluster c = cluster_with(reserve);
    EXPECT_NEAR(c.usable_memory_bytes(0), c.memory_bytes(0) - c.reserve_bytes(0), 1);
    Result<SimResult> r =
        Simulate(LowerPlan(p, c, m).value(), c, CostModel(c, m, nullptr, p.seq_len, p.precision, true));
    ASSERT_TRUE(r.ok());
    EXPECT_NEAR(r->devices[0].capacity_bytes, c.usable_memory_bytes(0), 1);
    EXPECT_EQ(r->fits_memory, reserve.empty()) << r->oom_message;
    if (!reserve.empty()) {
      EXPECT_NE(r->oom_message.find("CUDA, NCCL and the allocator keep"), std::string::npos)
          << r->oom_message;
    }
  }
}

TEST(Simulator, DeadlockIsAnErrorNamingTheStuckRanks) {
  Schedule s;
  s.seq_len = 8;
  for (int r = 0; r < 2; ++r) {
    Program p;
    p.rank = r;
    p.device = r;
    Op recv;
    recv.kind = OpKind::kRecv;
    recv.stream = Stream::kComm;
    recv.peer = 1 - r;
    recv.tag = r;
    Op forward;
    forward.kind = OpKind::kForward;
    forward.layer_end = 1;
    forward.sequences = 1;
    forward.deps = {0};
    Op send;
    send.kind = OpKind::kSend;
    send.stream = Stream::kComm;
    send.peer = 1 - r;
    send.tag = 1 - r;
    send.deps = {1};
    // Both compute on what the other sends only after computing: each host waits inside its
    // forward for data that never comes. (A receive alone does not wait: it is posted, and the
    // send after it goes out.)
    p.ops = {recv, forward, send};
    s.programs.push_back(p);
  }
  Cluster cluster = FastCluster(2);
  ModelSpec m = LayerHeavyModel(1);
  CostModel costs(cluster, m, nullptr, 8, Precision::kBf16, true);
  Result<SimResult> r = Simulate(s, cluster, costs);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank 0 waits at op 1 (forward)"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("rank 1 waits at op 1 (forward)"), std::string::npos)
      << r.status().message();

  // Without the forward between them, the same receives and sends finish.
  for (Program& p : s.programs) p.ops = {p.ops[0], p.ops[2]};
  for (Program& p : s.programs) p.ops[1].deps.clear();
  EXPECT_TRUE(Simulate(s, cluster, costs).ok());
}

// One rank, a host link of 1 GB/s each way. A parameter prefetch of 100 MB and an activation
// prefetch of 10 MB, both free to start at once, share the link (the runtime feeds parameter
// copies in pieces, so the small copy does not queue behind the large one); a second parameter
// prefetch queues behind the first on its lane; an offload of 100 MB uses the other direction.
TEST(Simulator, ActivationCopiesShareTheHostLinkWithParameterCopiesInsteadOfQueueing) {
  Cluster cluster = OneGBpsCluster();  // rank 0 on device 0
  ModelSpec model = LayerHeavyModel(1);
  CostModel costs(cluster, model, nullptr, 128, Precision::kBf16, true);
  auto copy = [](OpKind kind, Stream stream, double bytes) {
    Op op;
    op.kind = kind;
    op.stream = stream;
    op.bytes = bytes;
    return op;
  };
  Schedule s;
  s.seq_len = 128;
  Program p;
  p.ops = {copy(OpKind::kParamPrefetch, Stream::kH2D, 100e6), copy(OpKind::kActPrefetch, Stream::kH2D, 10e6),
           copy(OpKind::kParamPrefetch, Stream::kH2D, 100e6),
           copy(OpKind::kParamOffload, Stream::kD2H, 100e6)};
  s.programs.push_back(p);
  Result<SimResult> r = Simulate(s, cluster, costs, {.record_trace = true});
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<double> end(p.ops.size());
  for (const TraceEvent& t : r->trace) end[t.op] = t.end_s;
  EXPECT_NEAR(end[1], 0.020, 1e-9);  // half the link while both run
  EXPECT_NEAR(end[0], 0.110, 1e-9);  // all 110 MB through the link by then
  EXPECT_NEAR(end[2], 0.210, 1e-9);  // in order behind the first parameter copy
  EXPECT_NEAR(end[3], 0.100, 1e-9);  // the other direction is not shared
  EXPECT_NEAR(r->step_time_s, 0.210, 1e-9);
  EXPECT_EQ(r->num_events, 4);  // superseded completion events are not counted
  const std::string trace = ChromeTraceJson(s, cluster, *r);
  EXPECT_NE(trace.find("h2d activations"), std::string::npos);
}

}  // namespace
}  // namespace motley
