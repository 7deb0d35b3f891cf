// motley's Llama against a reference it shares no code with: tests/reference/llama_reference.py,
// a forward pass written from Hugging Face's published formulas in Debian's python3-torch. A
// folder motley writes (config.json with its rope_scaling, model.safetensors) is read back by
// motley and by the reference, and both give the same logits. Skipped where python3-torch is
// missing (scripts/setup.sh installs it).
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/model_parse.h"
#include "runtime/model/precision_dtypes.h"
#include "runtime/optim/adamw.h"
#include "runtime/train/checkpoint.h"

namespace motley {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";  // Debian's, which python3-torch is built for

bool ReferenceAvailable() {
  return std::system(fmt::format("{} -c 'import torch' >/dev/null 2>&1", kPython).c_str()) == 0;
}

// The reference's logits for `tokens` from the folder `dir`, in `dtype` (float32 or float64).
torch::Tensor ReferenceLogits(const fs::path& dir, const torch::Tensor& tokens, const std::string& dtype,
                              int64_t vocab) {
  nlohmann::json ids = nlohmann::json::array();
  for (int64_t b = 0; b < tokens.size(0); ++b) {
    nlohmann::json row = nlohmann::json::array();
    for (int64_t s = 0; s < tokens.size(1); ++s) row.push_back(tokens.index({b, s}).item<int64_t>());
    ids.push_back(row);
  }
  std::ofstream(dir / "tokens.json") << ids.dump();
  const fs::path out = dir / "reference_logits.bin";
  const std::string cmd =
      fmt::format("{} {}/tests/reference/llama_reference.py {} {} {} --dtype {} 2>&1", kPython,
                  MOTLEY_SOURCE_DIR, dir.string(), (dir / "tokens.json").string(), out.string(), dtype);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const torch::Dtype t = dtype == "float64" ? torch::kFloat64 : torch::kFloat32;
  std::ifstream in(out, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int64_t n = tokens.numel() * vocab;
  EXPECT_EQ(static_cast<int64_t>(bytes.size()), n * static_cast<int64_t>(torch::elementSize(t)));
  return torch::from_blob(bytes.data(), {tokens.size(0), tokens.size(1), vocab}, t).clone();
}

ModelSpec SmallLlama32(RopeScaling scaling) {
  ModelSpec m = *FindModelPreset("llama-tiny");  // hidden 32, 2 layers, 4 heads, 2 key/value heads: GQA
  m.vocab_size = 97;
  m.max_seq_len = 64;
  m.tie_embeddings = true;  // as Llama 3.2 1B and 3B
  m.rope_scaling = scaling;
  return m;
}

// Head dimension 8, theta 10,000: wavelengths 6.3, 63, 628 and 6,283 positions. The llama3 scaling
// below (pre-trained context 64, high 8, low 1: bands at 8 and 64 positions) keeps the first,
// blends the second and divides the last two; 80 positions go beyond the pre-trained 64.
TEST(HfReference, ExportedTiedFolderGivesTheReferencesLogitsUnderEveryRopeScaling) {
  if (!ReferenceAvailable()) GTEST_SKIP() << kPython << " has no torch: apt-get install python3-torch";
  const std::vector<RopeScaling> scalings = {
      {RopeScaling::Type::kLlama3, 4.0, 1.0, 8.0, 64},
      {RopeScaling::Type::kLinear, 2.5},
      {RopeScaling::Type::kDynamic, 2.0},
      {},
  };
  for (const RopeScaling& scaling : scalings) {
    SCOPED_TRACE(RopeScalingTypeName(scaling.type));
    const fs::path dir = fs::temp_directory_path() /
                         fmt::format("motley_hfref_{}_{}", ::getpid(), RopeScalingTypeName(scaling.type));
    fs::remove_all(dir);
    LlamaModel source(SmallLlama32(scaling), 23);
    {
      // Queries and keys large enough that attention is sharp and the positions' phases show.
      torch::NoGradGuard no_grad;
      for (auto& p : source->named_parameters())
        if (p.key().find("q_proj") != std::string::npos || p.key().find("k_proj") != std::string::npos)
          p.value().mul_(20);
    }
    std::vector<ParamShard> shards = WholeParameterShards(*source);
    ASSERT_TRUE(SaveCheckpoint(dir.string(), *source, shards, TrainerState{}).ok());

    // Read back as a user's folder would be: the shape from config.json, the weights by name.
    Result<ModelSpec> spec = LoadCheckpointModelSpec(dir.string());
    ASSERT_TRUE(spec.ok()) << spec.status().message();
    EXPECT_EQ(spec->rope_scaling, scaling);
    EXPECT_TRUE(spec->tie_embeddings);
    LlamaModel loaded(*spec, 0);
    ASSERT_TRUE(LoadModelWeights(dir.string(), *loaded).ok());
    torch::manual_seed(3);
    const torch::Tensor tokens = torch::randint(0, spec->vocab_size, {2, 80});
    torch::NoGradGuard no_grad;
    loaded->eval();

    // fp32: the file's own precision, within 1e-6.
    const torch::Tensor fp32 = loaded->forward(tokens);
    const torch::Tensor ref32 = ReferenceLogits(dir, tokens, "float32", spec->vocab_size);
    ASSERT_EQ(fp32.sizes(), ref32.sizes());
    EXPECT_LT((fp32 - ref32).abs().max().item<double>(), 1e-6);
    // fp64: the same weights, no rounding between the two but reassociation's.
    loaded->set_precision(Precision::kFp64);
    const torch::Tensor fp64 = loaded->forward(tokens);
    const torch::Tensor ref64 = ReferenceLogits(dir, tokens, "float64", spec->vocab_size);
    EXPECT_LT((fp64 - ref64).abs().max().item<double>(), 1e-12);
    // The scaling matters at these positions: without it the logits differ well beyond the tolerance.
    if (scaling.type != RopeScaling::Type::kNone) {
      ModelSpec plain = *spec;
      plain.rope_scaling = {};
      LlamaModel unscaled(plain, 0);
      ASSERT_TRUE(LoadModelWeights(dir.string(), *unscaled).ok());
      unscaled->set_precision(Precision::kFp64);
      EXPECT_GT((unscaled->forward(tokens) - ref64).abs().max().item<double>(), 1e-6);
    }
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace motley
