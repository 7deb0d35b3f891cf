// The fixture of the correctness contract across processes (distributed_train_cli_test.cc,
// tensor_parallel_train_cli_test.cc): single-process references in fp64 for every (clipping,
// checkpointing) setting, and a plan case trained by `motley launch` compared with one of them.
#pragma once

#include <iostream>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "cli/cli_helpers.h"
#include "cli/plan_cases.h"
#include "cli/training_fixtures.h"

namespace motley_test {

class DistributedEquivalenceBase : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    dir_->Write("cluster.toml", kCluster);
    dir_->Write("model.toml", kModel);
    // Single-process references in fp64, one per (clipping, checkpointing) setting.
    for (double clip : {0.0, 1.0})
      for (bool ckpt : {true, false}) {
        const std::string name = Reference(clip, ckpt);
        dir_->Write(name + ".toml", Job(dir_->Join(name), clip, ckpt));
        CliRun r = Motley("train " + name + ".toml --single-process --metrics " + name + ".jsonl", false,
                          dir_->path().string());
        ASSERT_EQ(r.exit_code, 0) << r.output;
      }
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Reference(double clip, bool ckpt) {
    return std::string("ref-clip") + (clip > 0 ? "1" : "0") + (ckpt ? "" : "-nockpt");
  }
  static const PlanCase& Case(const std::string& name) { return PlanNamed(name); }
  // Trains plan case `c` under `name` on its ranks with `extra` flags (and `job_extra` appended to
  // the job) in `precision`; returns the relative differences of its parameters and moments after
  // 5 steps from `reference`'s, or nothing when the run failed (the failure recorded).
  struct Differences {
    double params = -1, moments = -1;
    std::string output;
  };
  static std::optional<Differences> Train(const PlanCase& c, const std::string& name,
                                          const std::string& reference, const std::string& extra = "",
                                          const std::string& job_extra = "",
                                          const std::string& precision = "fp64") {
    const std::string plan =
        dir_->Write(name + ".plan.toml",
                    PlanHeader(precision) + (c.clip > 0 ? "" : "gradient_clipping = false\n") + c.body);
    dir_->Write(name + ".toml", Job(dir_->Join(name), c.clip, c.checkpointing, precision) + job_extra);
    CliRun r = Motley("launch --nproc " + std::to_string(c.ranks) + " -- " + MOTLEY_BIN + " train " + name +
                          ".toml --plan " + plan + " --metrics " + name + ".jsonl " + extra,
                      false, dir_->path().string());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (r.exit_code != 0) return std::nullopt;
    const std::string ref = dir_->Join(reference + "/step-000005/");
    const std::string got = dir_->Join(name + "/step-000005/");
    if (precision == "fp64") {
      EXPECT_TRUE(AllF64(got + "model.safetensors")) << "an fp64 run checkpoints in fp64";
      EXPECT_TRUE(AllF64(got + "optimizer.safetensors"));
    }
    Differences d;
    d.params = MaxRelativeDifference(got + "model.safetensors", ref + "model.safetensors");
    d.moments = MaxRelativeDifference(got + "optimizer.safetensors", ref + "optimizer.safetensors");
    d.output = r.output;
    std::cout << name << " (" << precision << "): relative difference of the parameters " << d.params
              << ", of the moments " << d.moments << "\n";
    EXPECT_GE(d.params, 0) << "the checkpoints differ in their tensors";
    EXPECT_GE(d.moments, 0) << "the checkpoints differ in their tensors";
    return d;
  }
  inline static TempDir* dir_ = nullptr;
};

}  // namespace motley_test
