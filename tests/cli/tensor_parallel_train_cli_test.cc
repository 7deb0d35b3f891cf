// The correctness contract for tensor-parallel teams across processes (docs/design.md): FlexTP's
// modes keep it (lossless ones exactly in fp64, lossy ones within their stated bound), migration in
// a team of four either way, tied embeddings split over the vocabulary and across ministages, and a
// width that does not divide the vocabulary. The fixture: distributed_equivalence.h.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "cli/distributed_equivalence.h"
#include "cli/plan_cases.h"
#include "cli/training_fixtures.h"
#include "core/file_io.h"
#include "core/units.h"

namespace {

using namespace motley_test;

class TensorParallelEquivalence : public DistributedEquivalenceBase {};

// A plan's body: one tensor-parallel team of three ranks, the whole model, 12 sequences a step.
constexpr const char* kTeamOfThree = R"(schedule = "gpipe"
zero_stage = 0
[[groups]]
ministages = [[0, 2]]
tp_degree = 3
devices = [0, 1, 2]
microbatch_size = [4, 4, 4]
num_microbatches = [3, 3, 3]
)";

// FlexTP's modes on tensor-parallel teams (issue #9 §6): `off` and `migrate` are exact with or
// without a straggler; the lossy modes never act without one (`semi` stays exact) and `resize`
// prunes (and so departs from exact training) with one.
TEST_F(TensorParallelEquivalence, TensorParallelModesKeepTheContract) {
  struct ModeCase {
    const char* name;
    const char* plan;  // a kPlans entry
    const char* mode;
    int straggler;  // the slowed rank, or -1
    bool exact;
    double slowdown = 4;
    const char* slows = "compute";  // what the straggler's slowdown slows
  };
  const ModeCase cases[] = {
      {"off-straggler", "tp2-zero0", "off", 1, true},
      {"migrate-straggler", "tp2-zero0", "migrate", 1, true, 8},
      {"migrate-matmul-straggler", "tp2-zero0", "migrate", 1, true, 8, "matmul"},  // FlexTP's kind
      {"migrate-no-straggler", "tp2-zero0", "migrate", -1, true},
      {"migrate-straggler-dp2-zero2", "tp2-dp2-zero2-uneven-no-checkpointing", "migrate", 3, true},
      {"semi-no-straggler", "tp2-zero0", "semi", -1, true},
      {"resize-no-straggler", "tp2-zero0", "resize", -1, true},
      {"resize-straggler", "tp2-zero0", "resize", 1, false},
      {"semi-straggler", "tp2-zero0", "semi", 1, false},
  };
  // Each step's loss in a metrics file.
  auto losses = [&](const std::string& file) {
    std::map<int64_t, double> out;
    std::ifstream in(dir_->Join(file));
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.contains("loss") && j.contains("step")) out[j["step"].get<int64_t>()] = j["loss"].get<double>();
    }
    return out;
  };
  for (const ModeCase& c : cases) {
    SCOPED_TRACE(c.name);
    const PlanCase& plan = Case(c.plan);
    const std::string name = std::string("mode-") + c.name;
    std::string job = std::string("[tensor_parallel]\nmode = \"") + c.mode + "\"\n";
    // Without an emulated straggler, CPU timing noise alone must not count as one.
    if (c.straggler < 0) job += "straggler_threshold = 0.5\n";
    if (c.straggler >= 0)
      job += "[[emulation.stragglers]]\nrank = " + std::to_string(c.straggler) +
             "\nslowdown = " + std::to_string(c.slowdown) + "\nfrom_step = 2\nslows = \"" + c.slows + "\"\n";
    auto d = Train(plan, name, Reference(plan.clip, plan.checkpointing), "", job);
    if (!d) continue;
    // What the team did, from the metrics: units moved, units pruned.
    double moved = 0, pruned = 0;
    int64_t straggler_gave =
        0;  // the most units and groups the straggler gave in a step, by its ranks' metrics
    std::ifstream metrics(dir_->Join(name + ".jsonl"));
    for (std::string line; std::getline(metrics, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (!j.contains("migrated_units")) continue;
      moved = std::max(moved, j["migrated_units"].get<double>());
      pruned = std::max(pruned, j["pruned_fraction"].get<double>());
      // Each rank's part of the balance: what the teams gave is what they received.
      int64_t given = 0, received = 0;
      for (const auto& r : j["ranks"]) {
        ASSERT_EQ(r.contains("flextp"), std::string(c.mode) != "off") << line;
        if (!r.contains("flextp")) continue;
        const auto& f = r["flextp"];
        given += f["units_given"].get<int64_t>() + f["heads_given"].get<int64_t>();
        received += f["units_received"].get<int64_t>() + f["heads_received"].get<int64_t>();
        if (r["rank"].get<int>() == c.straggler)
          straggler_gave =
              std::max(straggler_gave, f["units_given"].get<int64_t>() + f["heads_given"].get<int64_t>());
      }
      EXPECT_EQ(given, received) << line;
      EXPECT_GE(static_cast<double>(given), j["migrated_units"].get<double>())
          << line;  // (the most of any team)
    }
    const bool slowed = c.straggler >= 0 && std::string(c.mode) != "off";
    if (c.exact) {
      EXPECT_LT(d->params, kFp64Tolerance);
      EXPECT_LT(d->moments, kFp64Tolerance);
      EXPECT_EQ(pruned, 0);
      EXPECT_EQ(moved > 0, slowed) << "moved " << moved;
      EXPECT_EQ(straggler_gave > 0, slowed) << "the straggler's metrics say it gave " << straggler_gave;
      // An 8x straggler on two ranks must hand over ~80% of its work, well beyond its MLP's share
      // (its 32 MLP units): the attention group moves too, and the training stays exact.
      if (slowed && c.slowdown >= 8 && std::string(c.slows) == "compute") {
        EXPECT_GT(moved, 32) << "attention groups stayed home";
      }
    } else if (pruned == 0) {
      // `resize` has one answer to a straggler past the threshold: prune.
      EXPECT_NE(std::string(c.mode), "resize") << "a 4x straggler and nothing pruned";
      // SEMI chose by its cost model not to prune (migration alone, or nothing where the measured
      // gap did not pay for a move — a slow CPU's step times can say so): then training is exact,
      // whatever it moved. Which it chose follows measured times, so only the guarantee is asserted.
      std::cout << c.name << ": nothing pruned, moved " << moved << "\n";
      EXPECT_LT(d->params, kFp64Tolerance);
      EXPECT_LT(d->moments, kFp64Tolerance);
    } else {
      EXPECT_GT(d->params, 1e-4) << "pruning changes the training";
      // ... within its stated bound: every step's loss within 2% of the exact run's. How much is
      // pruned, in which layers and from which step follows the measured step times, so the figure
      // moves between runs: 0.15-1.1% across the twelve measured (six runs) on this team, a 4x
      // straggler pruning up to half of its 32 units a layer; FlexTP's bench (512 units a rank)
      // stays within 0.6% at 4x.
      const auto got = losses(name + ".jsonl"),
                 want = losses(Reference(plan.clip, plan.checkpointing) + ".jsonl");
      ASSERT_EQ(got.size(), want.size());
      double worst = 0;
      for (const auto& [step, loss] : want) worst = std::max(worst, std::abs(got.at(step) - loss) / loss);
      std::cout << c.name << ": pruned " << pruned << " of the team's units, moved " << moved
                << "; the loss at most " << worst << " from the exact run's\n";
      EXPECT_LT(worst, 0.02);
    }
  }
}

// Migration in a team of four (FlexTP §IV-A), both ways a straggler's units travel: broadcast-reduce
// (the straggler broadcasts its whole block, each normal rank computes its run, the gradients come
// home in one sum-reduce per block) and point to point. Both are exact in fp64, with one straggler
// and with two (two blocks, each broadcast to every rank).
TEST_F(TensorParallelEquivalence, MigrationInATeamOfFourIsExactEitherWay) {
  // Four key/value heads, so that each of four ranks holds an attention group.
  std::string model = kModel;
  model.replace(model.find("num_kv_heads = 2"), 16, "num_kv_heads = 4");
  dir_->Write("model-mha.toml", model);
  auto with_model = [](std::string text) {
    text.replace(text.find("model.toml"), 10, "model-mha.toml");
    return text;
  };
  dir_->Write("ref-mha.toml", with_model(Job(dir_->Join("ref-mha"), 0, true)));
  ASSERT_EQ(Motley("train ref-mha.toml --single-process", false, dir_->path().string()).exit_code, 0);
  const std::string plan = dir_->Write(
      "tp4.plan.toml", with_model(PlanHeader()) + "gradient_clipping = false\n" + R"(schedule = "gpipe"
zero_stage = 0
[[groups]]
ministages = [[0, 2], [2, 4]]
tp_degree = 4
devices = [0, 1, 2, 3]
microbatch_size = [3, 3, 3, 3]
num_microbatches = [4, 4, 4, 4]
)");
  struct MigrationCase {
    const char* name;
    const char* migration;
    std::vector<int> stragglers;
  };
  const MigrationCase cases[] = {
      {"broadcast-one", "broadcast-reduce", {3}},
      {"point-to-point-one", "point-to-point", {3}},
      {"broadcast-two", "broadcast-reduce", {1, 3}},
  };
  for (const MigrationCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string name = std::string("tp4-") + c.name;
    std::string job = with_model(Job(dir_->Join(name), 0, true)) +
                      "[tensor_parallel]\nmode = \"migrate\"\nmigration = \"" + c.migration + "\"\n";
    for (int s : c.stragglers)
      job += "[[emulation.stragglers]]\nrank = " + std::to_string(s) + "\nslowdown = 6\nfrom_step = 2\n";
    dir_->Write(name + ".toml", job);
    CliRun r = Motley("launch --nproc 4 -- " + std::string(MOTLEY_BIN) + " train " + name + ".toml --plan " +
                          plan + " --metrics " + name + ".jsonl",
                      false, dir_->path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    double moved = 0;
    std::ifstream metrics(dir_->Join(name + ".jsonl"));
    for (std::string line; std::getline(metrics, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.contains("migrated_units")) moved = std::max(moved, j["migrated_units"].get<double>());
    }
    EXPECT_GT(moved, 0) << "nothing migrated";
    const std::string got = dir_->Join(name + "/step-000005/"), ref = dir_->Join("ref-mha/step-000005/");
    const double params = MaxRelativeDifference(got + "model.safetensors", ref + "model.safetensors");
    const double moments =
        MaxRelativeDifference(got + "optimizer.safetensors", ref + "optimizer.safetensors");
    std::cout << name << ": moved up to " << moved << " units; relative difference of the parameters "
              << params << ", of the moments " << moments << "\n";
    EXPECT_GE(params, 0);
    EXPECT_LT(params, kFp64Tolerance);
    EXPECT_LT(moments, kFp64Tolerance);
  }
}

// Tied embeddings under tensor parallelism (issue #26): the team splits the one matrix by vocabulary
// rows (the lookup and the head both use a rank's rows; the loss from its logit columns) — exact in
// fp64 against one process, with clipping (the slices' gradient norm counted once) and with ZeRO-2
// across two teams without checkpointing.
TEST_F(TensorParallelEquivalence, TiedEmbeddingsSplitTheVocabularyExactly) {
  dir_->Write("model-tied.toml", std::string(kModel) + "tie_embeddings = true\n");
  auto with_model = [](std::string text) {
    text.replace(text.find("model.toml"), 10, "model-tied.toml");
    return text;
  };
  struct TiedCase {
    const char* name;
    int ranks;
    double clip;
    bool checkpointing;
    const char* body;
  };
  const TiedCase cases[] = {
      {"tied-tp2-clip", 2, 1, true, R"(schedule = "gpipe"
zero_stage = 0
[[groups]]
ministages = [[0, 4]]
tp_degree = 2
devices = [0, 1]
microbatch_size = [3, 3]
num_microbatches = [4, 4]
)"},
      {"tied-tp2-dp2-zero2", 4, 0, false, Case("tp2-dp2-zero2-uneven-no-checkpointing").body},
  };
  for (const TiedCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string ref = std::string(c.name) + "-ref";
    dir_->Write(ref + ".toml", with_model(Job(dir_->Join(ref), c.clip, c.checkpointing)));
    CliRun r = Motley("train " + ref + ".toml --single-process", false, dir_->path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string plan =
        dir_->Write(std::string(c.name) + ".plan.toml",
                    with_model(PlanHeader()) + (c.clip > 0 ? "" : "gradient_clipping = false\n") + c.body);
    dir_->Write(std::string(c.name) + ".toml", with_model(Job(dir_->Join(c.name), c.clip, c.checkpointing)));
    r = Motley("launch --nproc " + std::to_string(c.ranks) + " -- " + MOTLEY_BIN + " train " + c.name +
                   ".toml --plan " + plan,
               false, dir_->path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string got = dir_->Join(std::string(c.name) + "/step-000005/"),
                      want = dir_->Join(ref + "/step-000005/");
    const double params = MaxRelativeDifference(got + "model.safetensors", want + "model.safetensors");
    const double moments =
        MaxRelativeDifference(got + "optimizer.safetensors", want + "optimizer.safetensors");
    std::cout << c.name << ": relative difference of the parameters " << params << ", of the moments "
              << moments << "\n";
    EXPECT_GE(params, 0) << "the checkpoints differ in their tensors";
    EXPECT_LT(params, kFp64Tolerance);
    EXPECT_LT(moments, kFp64Tolerance);
  }
}

// A tied model in several ministages (issue #26): the head's ministage holds a copy of the matrix
// and the schedule sums the two copies' gradients before either is reduced — on each rank when one
// group holds both, between the groups' ranks with the same vocabulary rows when two do. Exact in
// fp64 against one process for the plan families that split a model: data parallelism with several
// ministages (ZeRO-1; ZeRO-3's per-layer ministages, whose reductions run per microbatch), pipelines
// of replicated groups (1F1B, routing, clipping), interleaved groups with uneven microbatch counts
// and offload, ZeRO-3 with routing over 6 ranks, and tensor-parallel teams in both groups. A
// checkpoint holds the one matrix, so a tied run resumes under a plan of one ministage and back.
// Groups that split the vocabulary differently are one clear error.
TEST_F(TensorParallelEquivalence, TiedEmbeddingsAcrossMinistagesTrainExactly) {
  dir_->Write("model-tied.toml", std::string(kModel) + "tie_embeddings = true\n");
  auto with_model = [](std::string text) {
    text.replace(text.find("model.toml"), 10, "model-tied.toml");
    return text;
  };
  const PlanCase both_tp2{"pipeline-tp2-both", 4, 1, true, R"(schedule = "gpipe"
zero_stage = 1
[[groups]]
ministages = [[0, 2]]
tp_degree = 2
devices = [0, 1]
microbatch_size = [2, 2]
num_microbatches = [6, 6]
[[groups]]
ministages = [[2, 4]]
tp_degree = 2
devices = [2, 3]
microbatch_size = [2, 2]
num_microbatches = [6, 6]
)"};
  std::vector<PlanCase> cases;
  for (const char* name : {"dp2-zero1-4-ministages-no-checkpointing", "poplar-dp4-zero3-per-layer-prefetch",
                           "pipeline2x2-1f1b-round-robin", "interleaved-offload-uneven",
                           "interleaved-zero3-routing-6-ranks", "dp3-zero0-last-batch"})
    cases.push_back(Case(name));
  cases.push_back(both_tp2);
  std::set<std::string> references;
  for (const PlanCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string ref = std::string("tied-ref-") + Reference(c.clip, c.checkpointing);
    if (references.insert(ref).second) {
      dir_->Write(ref + ".toml", with_model(Job(dir_->Join(ref), c.clip, c.checkpointing)));
      CliRun r = Motley("train " + ref + ".toml --single-process", false, dir_->path().string());
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    const std::string name = std::string("tied-") + c.name;
    const std::string plan =
        dir_->Write(name + ".plan.toml",
                    with_model(PlanHeader()) + (c.clip > 0 ? "" : "gradient_clipping = false\n") + c.body);
    dir_->Write(name + ".toml", with_model(Job(dir_->Join(name), c.clip, c.checkpointing)) +
                                    "interval_steps = 2\nkeep = 5\n");
    CliRun r = Motley("launch --nproc " + std::to_string(c.ranks) + " -- " + MOTLEY_BIN + " train " + name +
                          ".toml --plan " + plan,
                      false, dir_->path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string got = dir_->Join(name + "/step-000005/"), want = dir_->Join(ref + "/step-000005/");
    const double params = MaxRelativeDifference(got + "model.safetensors", want + "model.safetensors");
    const double moments =
        MaxRelativeDifference(got + "optimizer.safetensors", want + "optimizer.safetensors");
    std::cout << name << ": relative difference of the parameters " << params << ", of the moments "
              << moments << "\n";
    EXPECT_GE(params, 0) << "the checkpoints differ in their tensors (a tied model saves one matrix)";
    EXPECT_LT(params, kFp64Tolerance);
    EXPECT_LT(moments, kFp64Tolerance);
  }
  // Step 2 of a pipeline resumed by one ministage on three ranks, and of that plan by a pipeline.
  for (const auto& [from, to] : {std::pair{"pipeline2x2-1f1b-round-robin", "dp3-zero0-last-batch"},
                                 std::pair{"dp3-zero0-last-batch", "pipeline2x2-1f1b-round-robin"}}) {
    SCOPED_TRACE(std::string(from) + " -> " + to);
    const PlanCase& c = Case(to);
    const std::string name = std::string("tied-resume-") + from + "-as-" + to;
    const std::string plan = dir_->Write(name + ".plan.toml", with_model(PlanHeader()) + c.body);
    dir_->Write(name + ".toml", with_model(Job(dir_->Join(name), c.clip, c.checkpointing)));
    CliRun r = Motley("launch --nproc " + std::to_string(c.ranks) + " -- " + MOTLEY_BIN + " train " + name +
                          ".toml --plan " + plan + " --resume " +
                          dir_->Join(std::string("tied-") + from + "/step-000002"),
                      false, dir_->path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "steps 3..5 of 5");
    const std::string got = dir_->Join(name + "/step-000005/"),
                      want = dir_->Join("tied-ref-" + Reference(1, true) + "/step-000005/");
    const double params = MaxRelativeDifference(got + "model.safetensors", want + "model.safetensors");
    const double moments =
        MaxRelativeDifference(got + "optimizer.safetensors", want + "optimizer.safetensors");
    std::cout << name << ": relative difference of the parameters " << params << ", of the moments "
              << moments << "\n";
    EXPECT_GE(params, 0);
    EXPECT_LT(params, kFp64Tolerance);
    EXPECT_LT(moments, kFp64Tolerance);
  }
  const std::string mismatched = dir_->Write(
      "tied-mismatched.plan.toml", with_model(PlanHeader()) + Case("pipeline-tp2-then-tp1-offload").body);
  CliRun r = Motley("simulate --plan " + mismatched, false, dir_->path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output,
                  "ties them (tie_embeddings = true), so both groups must split its vocabulary alike");
}

// A team whose width does not divide the vocabulary (#47): three ranks over 256 tokens pad it as
// Megatron does (to 264: a multiple of 3 x 8), the padded rows zero, out of the loss, never
// trained — the run ends equal to one process (fp64), tied or untied, and what it exports holds the
// model's 256 rows.
TEST_F(TensorParallelEquivalence, AWidthThatDoesNotDivideTheVocabularyPadsItExactly) {
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const std::string tag = tied ? "tied" : "untied";
    dir_->Write("eq6-" + tag + ".toml",
                std::string("name = \"eq6\"\nhidden_size = 48\nnum_layers = 2\nnum_heads = 6\n"
                            "num_kv_heads = 3\nffn_size = 96\nvocab_size = 256\n"
                            "max_seq_len = 64\ntie_embeddings = ") +
                    (tied ? "true" : "false") + "\n");
    auto job = [&](const std::string& name) {
      std::string j = Job(dir_->Join(name), 1.0, true);
      j.replace(j.find("model.toml"), 10, "eq6-" + tag + ".toml");
      return dir_->Write(name + ".toml", j);
    };
    job("vp-ref-" + tag);
    CliRun r = Motley("train vp-ref-" + tag + ".toml --single-process", false, dir_->path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::string header = PlanHeader();
    header.replace(header.find("model.toml"), 10, "eq6-" + tag + ".toml");
    const std::string plan = dir_->Write("vp-" + tag + ".plan.toml", header + kTeamOfThree);
    job("vp-tp3-" + tag);
    r = Motley(
        "launch --nproc 3 -- " + std::string(MOTLEY_BIN) + " train vp-tp3-" + tag + ".toml --plan " + plan,
        false, dir_->path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string ref = dir_->Join("vp-ref-" + tag + "/step-000005/"),
                      got = dir_->Join("vp-tp3-" + tag + "/step-000005/");
    EXPECT_LT(MaxRelativeDifference(got + "model.safetensors", ref + "model.safetensors"), kFp64Tolerance);
    EXPECT_LT(MaxRelativeDifference(got + "optimizer.safetensors", ref + "optimizer.safetensors"),
              kFp64Tolerance);
    const SafetensorsValues exported = ReadSafetensors(got + "model.safetensors");
    ASSERT_TRUE(exported.tensors.count("model.embed_tokens.weight"));
    EXPECT_EQ(exported.tensors.at("model.embed_tokens.weight").size(), 256u * 48u);
    EXPECT_EQ(exported.tensors.count("lm_head.weight"), tied ? 0u : 1u);
  }
}

// Grouped-query attention with one key/value group a rank (Llama 3 8B's ranks at width 8): a
// straggler's query heads move point to point, and their owner sends each receiver the key and value
// of the group every forward and takes their gradients back in the backward (issue #47 §8b) — or,
// lending projections, the receiver sends the heads' queries and takes their scores' output back,
// the owner attending with its own key and value — exact in fp64 against one process either way,
// with and without recomputation (a checkpointed layer's first forward sends them too) and with
// validation forwards between the steps.
TEST_F(TensorParallelEquivalence, LentQueryHeadsTakeTheirKeysAndValuesFromTheirOwnerExactly) {
  dir_->Write("gqa6.toml",
              "name = \"gqa6\"\nhidden_size = 48\nnum_layers = 2\nnum_heads = 6\nnum_kv_heads = 3\n"
              "ffn_size = 96\nvocab_size = 256\nmax_seq_len = 64\n");
  auto with_model = [](std::string text) {
    text.replace(text.find("model.toml"), 10, "gqa6.toml");
    return text;
  };
  const std::string plan = dir_->Write("gqa6-tp3.plan.toml", with_model(PlanHeader()) + kTeamOfThree);
  for (const auto& [lend, checkpointing] : std::vector<std::pair<std::string, bool>>{
           {"heads", false}, {"heads", true}, {"projections", false}, {"projections", true}}) {
    const std::string tag = std::string(checkpointing ? "recompute" : "stored");
    SCOPED_TRACE(lend + ", " + tag);
    auto job = [&](const std::string& name, const std::string& extra) {
      std::string j = with_model(Job(dir_->Join(name), 1.0, checkpointing)) + extra;
      j.replace(j.find("validation_interval_steps = 0"), 29, "validation_interval_steps = 2");
      return dir_->Write(name + ".toml", j);
    };
    if (lend == "heads") {  // the reference, once for each
      job("gqa6-ref-" + tag, "");
      const CliRun ref =
          Motley("train gqa6-ref-" + tag + ".toml --single-process", false, dir_->path().string());
      ASSERT_EQ(ref.exit_code, 0) << ref.output;
    }
    const std::string name = "gqa6-" + lend + "-" + tag;
    job(name, "[tensor_parallel]\nmode = \"migrate\"\nmigration = \"point-to-point\"\nlend_attention = \"" +
                  lend + "\"\n[[emulation.stragglers]]\nrank = 1\nslowdown = 6\nfrom_step = 2\n");
    const CliRun r = Motley("launch --nproc 3 -- " + std::string(MOTLEY_BIN) + " train " + name +
                                ".toml --plan " + plan + " --metrics " + name + ".jsonl",
                            false, dir_->path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    int64_t heads_lent = 0;
    bool projections = false;
    std::set<int> receivers;
    std::ifstream metrics(dir_->Join(name + ".jsonl"));
    for (std::string line; std::getline(metrics, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (!j.contains("ranks")) continue;
      for (const auto& rank : j["ranks"]) {
        if (!rank.contains("flextp")) continue;
        heads_lent = std::max(heads_lent, rank["flextp"].value("heads_given", int64_t{0}));
        if (rank["flextp"].value("heads_received", int64_t{0}) > 0) receivers.insert(rank["rank"].get<int>());
        projections = projections || rank["flextp"].value("lend_projections", false);
      }
    }
    EXPECT_GT(heads_lent, 0) << "no query head moved: the case does not test the keys' and values' travel";
    EXPECT_EQ(projections, lend == "projections") << "the heads did not move as told";
    std::cout << name << ": up to " << heads_lent << " heads lent, to " << receivers.size() << " rank(s)\n";
    const std::string ref = dir_->Join("gqa6-ref-" + tag + "/step-000005/"),
                      got = dir_->Join(name + "/step-000005/");
    EXPECT_LT(MaxRelativeDifference(got + "model.safetensors", ref + "model.safetensors"), kFp64Tolerance);
    EXPECT_LT(MaxRelativeDifference(got + "optimizer.safetensors", ref + "optimizer.safetensors"),
              kFp64Tolerance);
  }
}

}  // namespace
