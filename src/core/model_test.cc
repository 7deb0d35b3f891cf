#include "core/model.h"

#include <cstdint>
#include <gtest/gtest.h>

#include "core/builtin_files.h"
#include "core/model_parse.h"

namespace motley {
namespace {

TEST(Model, LlamaParameterCountsMatchThePublishedSizes) {
  // Within 1% of the LLaMA paper's counts (issue #2): 6.74e9, 13.02e9, 32.53e9, 65.29e9.
  struct Case {
    const char* name;
    double params;
  } cases[] = {{"llama-7b", 6.74e9},   {"llama-13b", 13.02e9}, {"llama-33b", 32.53e9},
               {"llama-65b", 65.29e9}, {"llama3-8b", 8.03e9},  {"tinyllama-1.1b", 1.10e9}};
  for (const auto& c : cases) {
    const ModelSpec* m = FindModelPreset(c.name);
    ASSERT_NE(m, nullptr) << c.name;
    EXPECT_NEAR(TotalParams(*m), c.params, c.params * 0.01) << c.name;
  }
}

TEST(Model, PerLayerCountMatchesZorseMeasurementStats) {
  // shared/data/zorse-measured/model_stats.json: deepspeedllama_7b parameters_per_layer = 202,383,360.
  EXPECT_EQ(ParamsPerLayer(*FindModelPreset("llama-7b")), 202383360);
  EXPECT_EQ(ParamsPerLayer(*FindModelPreset("llama-65b")), 809517056);
}

TEST(Model, GroupedQueryAttentionShrinksKeyValueProjections) {
  ModelSpec m = *FindModelPreset("llama3-8b");
  EXPECT_EQ(m.head_dim(), 128);
  EXPECT_EQ(m.kv_dim(), 1024);
  ModelSpec mha = m;
  mha.num_kv_heads = mha.num_heads;
  EXPECT_EQ(ParamsPerLayer(mha) - ParamsPerLayer(m), 2 * 4096 * (4096 - 1024));
}

TEST(Model, TiedEmbeddingsDropTheHead) {
  ModelSpec m = *FindModelPreset("llama-1m");
  int64_t untied = TotalParams(m);
  m.tie_embeddings = true;
  EXPECT_EQ(untied - TotalParams(m), m.vocab_size * m.hidden_size);
}

TEST(Model, FlopsPerTokenFollowTheParameterCount) {
  const ModelSpec& m = *FindModelPreset("llama-7b");
  // At sequence length 1 attention is negligible: forward is 2 FLOPs per matmul parameter.
  const double matmul_params = static_cast<double>(TotalParams(m) - EmbeddingParams(m)) -
                               m.num_layers * 2.0 * m.hidden_size - m.hidden_size;
  EXPECT_NEAR(ForwardFlopsPerToken(m, 1), 2 * matmul_params, 2 * matmul_params * 1e-3);
  EXPECT_DOUBLE_EQ(BackwardFlopsPerToken(m, 2048), 2 * ForwardFlopsPerToken(m, 2048));
  EXPECT_DOUBLE_EQ(TrainFlopsPerToken(m, 2048, false), 3 * ForwardFlopsPerToken(m, 2048));
  EXPECT_DOUBLE_EQ(TrainFlopsPerToken(m, 2048, true) - TrainFlopsPerToken(m, 2048, false),
                   m.num_layers * LayerForwardFlopsPerToken(m, 2048));
  // Attention adds 4 * seq * hidden per layer.
  EXPECT_DOUBLE_EQ(LayerForwardFlopsPerToken(m, 2048) - LayerForwardFlopsPerToken(m, 1024),
                   4.0 * 1024 * 4096);
}

TEST(Model, StateBytesPerPrecision) {
  EXPECT_DOUBLE_EQ(StateBytes(Precision::kBf16).total(), 16);  // 2 + 2 + 12 (ZeRO paper's K=12)
  EXPECT_DOUBLE_EQ(StateBytes(Precision::kFp32).total(), 16);  // 4 + 4 + 8
  EXPECT_DOUBLE_EQ(StateBytes(Precision::kFp16).optimizer, 12);
  EXPECT_DOUBLE_EQ(StateBytes(Precision::kFp64).total(), 32);  // 8 + 8 + 16
  EXPECT_EQ(BytesPerElement(Precision::kFp64), 8);
  const ModelSpec& m = *FindModelPreset("llama-7b");
  EXPECT_DOUBLE_EQ(BoundaryActivationBytesPerToken(m, Precision::kBf16), 8192);
  EXPECT_GT(LayerActivationBytesPerToken(m, 2048, Precision::kBf16, false),
            LayerActivationBytesPerToken(m, 2048, Precision::kBf16, true));
}

TEST(Model, Fp64DoublesEveryByteCountOfFp32) {
  const ModelSpec& m = *FindModelPreset("llama-7b");
  EXPECT_DOUBLE_EQ(BoundaryActivationBytesPerToken(m, Precision::kFp64), 2 * BoundaryActivationBytesPerToken(m, Precision::kFp32));
  EXPECT_DOUBLE_EQ(LayerActivationBytesPerToken(m, 2048, Precision::kFp64, false),
                   2 * LayerActivationBytesPerToken(m, 2048, Precision::kFp32, false));
  EXPECT_DOUBLE_EQ(LogitsBytesPerToken(m, Precision::kFp64), 2 * 32000 * 8.0);
  EXPECT_DOUBLE_EQ(LogitsBytesPerToken(m, Precision::kBf16), 2 * 32000 * 4.0);  // fp32 logits in mixed precision
}

TEST(Model, TensorParallelRanksHoldTheirShareOfALayersActivations) {
  // Megatron's layout, as motley's runtime keeps it in bf16 (the ledger confirms fp32 and fp64:
  // runtime/model/tensor_parallel_test.cc). On every rank: the layer input and the residual sum
  // (2 bytes each), and per RMSNorm its fp32 input copy and normalised values and their bf16 cast
  // and weighted output (4 + 4 + 2 + 2). Split over the ranks: q, k, v (k and v repeated to the
  // query heads), the attention output and the MLP's four intermediates in bf16, and the
  // probabilities in fp32 and in bf16.
  const ModelSpec& m = *FindModelPreset("llama-7b");
  const double h = 4096, f = 11008, heads = 32, seq = 2048;
  for (int tp : {1, 2, 8}) {
    const double expected = h * (2 * 2 + 2 * 12) + (4 * h + 4 * f) * 2 / tp + heads / tp * seq * (4 + 2);
    EXPECT_DOUBLE_EQ(LayerActivationBytesPerToken(m, 2048, Precision::kBf16, false, tp), expected) << tp;
  }
  // The backward holds more while it runs: a fifth on top.
  EXPECT_DOUBLE_EQ(LayerBackwardBytesPerToken(m, 2048, Precision::kBf16, false, 2),
                   1.2 * LayerActivationBytesPerToken(m, 2048, Precision::kBf16, false, 2));
}

TEST(Precision, NamesRoundTripAndAliasesParse) {
  for (const std::string& name : PrecisionNames()) {
    ASSERT_TRUE(PrecisionFromName(name).has_value()) << name;
    EXPECT_EQ(PrecisionName(*PrecisionFromName(name)), name);
  }
  EXPECT_EQ(PrecisionFromName("float64"), Precision::kFp64);
  EXPECT_EQ(PrecisionFromName("bfloat16"), Precision::kBf16);
  EXPECT_FALSE(PrecisionFromName("fp8").has_value());
  EXPECT_EQ(MasterPrecision(Precision::kBf16), Precision::kFp32);
  EXPECT_EQ(MasterPrecision(Precision::kFp64), Precision::kFp64);
  EXPECT_TRUE(IsMixed(Precision::kFp16));
  EXPECT_FALSE(IsMixed(Precision::kFp64));
}

TEST(Model, ExampleFilesEqualThePresets) {
  int files = 0;
  for (const auto& f : BuiltinFiles()) {
    if (f.kind != "models") continue;
    Result<ModelSpec> m = ParseModelToml(f.text, std::string(f.path));
    ASSERT_TRUE(m.ok()) << m.status().message();
    const ModelSpec* p = FindModelPreset(f.name);
    if (p == nullptr) continue;  // a variant, not a preset's file
    ++files;
    EXPECT_EQ(m->hidden_size, p->hidden_size) << m->name;
    EXPECT_EQ(m->num_layers, p->num_layers) << m->name;
    EXPECT_EQ(m->num_heads, p->num_heads) << m->name;
    EXPECT_EQ(m->num_kv_heads, p->num_kv_heads) << m->name;
    EXPECT_EQ(m->ffn_size, p->ffn_size) << m->name;
    EXPECT_EQ(m->vocab_size, p->vocab_size) << m->name;
    EXPECT_EQ(m->max_seq_len, p->max_seq_len) << m->name;
    EXPECT_DOUBLE_EQ(m->rope_theta, p->rope_theta) << m->name;
    EXPECT_DOUBLE_EQ(m->norm_eps, p->norm_eps) << m->name;
    EXPECT_EQ(m->tie_embeddings, p->tie_embeddings) << m->name;
  }
  EXPECT_EQ(files, static_cast<int>(ModelPresets().size()));
}

TEST(ModelParse, BaseWithOverrides) {
  Result<ModelSpec> m = ParseModelToml("base = \"llama-7b\"\nnum_layers = 4\n", "m.toml");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->num_layers, 4);
  EXPECT_EQ(m->hidden_size, 4096);
  EXPECT_EQ(m->num_kv_heads, 32);
}

TEST(ModelParse, HuggingFaceConfigAsIs) {
  const char* config = R"({
  "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "intermediate_size": 5632,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 22,
  "num_key_value_heads": 4,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 32000
})";
  Result<ModelSpec> m = ParseHfConfigJson(config, "tinyllama/config.json");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->name, "tinyllama");
  EXPECT_EQ(TotalParams(*m), TotalParams(*FindModelPreset("tinyllama-1.1b")));
  EXPECT_DOUBLE_EQ(m->norm_eps, 1e-5);
}

TEST(ModelParse, HuggingFaceConfigRoundTrips) {
  for (const ModelSpec& preset : ModelPresets()) {
    ModelSpec back = ParseHfConfigJson(HfConfigJson(preset), "config.json").value();
    EXPECT_EQ(back.hidden_size, preset.hidden_size);
    EXPECT_EQ(back.num_layers, preset.num_layers);
    EXPECT_EQ(back.num_heads, preset.num_heads);
    EXPECT_EQ(back.num_kv_heads, preset.num_kv_heads);
    EXPECT_EQ(back.ffn_size, preset.ffn_size);
    EXPECT_EQ(back.vocab_size, preset.vocab_size);
    EXPECT_EQ(back.max_seq_len, preset.max_seq_len);
    EXPECT_EQ(back.rope_theta, preset.rope_theta);
    EXPECT_EQ(back.norm_eps, preset.norm_eps);
    EXPECT_EQ(back.tie_embeddings, preset.tie_embeddings);
  }
}

TEST(ModelParseErrors, HeadsMustDivideHiddenWithEveryFactorPrinted) {
  Result<ModelSpec> m = ParseModelToml("base = \"llama-7b\"\nnum_heads = 30\n", "m.toml");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("m.toml:2:13: error: num_heads: num_heads (30) must divide hidden_size "
                                      "(4096): 4096 / 30 = 136.53"),
            std::string::npos)
      << m.status().message();
}

TEST(ModelParseErrors, KvHeadsMustDivideHeads) {
  Result<ModelSpec> m = ParseModelToml("base = \"llama-7b\"\nnum_kv_heads = 5\n", "m.toml");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("m.toml:2:16: error: num_kv_heads: num_kv_heads (5) must divide "
                                      "num_heads (32): 32 / 5 = 6.40"),
            std::string::npos)
      << m.status().message();
}

TEST(ModelParseErrors, SizesMustBePositive) {
  Result<ModelSpec> m = ParseModelToml("base = \"llama-7b\"\nhidden_size = 0\nffn_size = -4\n", "m.toml");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(
      m.status().message().find("m.toml:2:15: error: hidden_size: 0 is out of range; it must be between 1"),
      std::string::npos)
      << m.status().message();
  EXPECT_NE(m.status().message().find("m.toml:3:12: error: ffn_size: -4 is out of range"), std::string::npos)
      << m.status().message();
}

TEST(ModelParseErrors, MissingKeysAndUnknownPreset) {
  Result<ModelSpec> m = ParseModelToml("hidden_size = 64\n", "m.toml");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("missing required key 'num_layers'"), std::string::npos);
  Result<ModelSpec> p = ParseModelToml("base = \"llama-7bb\"\n", "m.toml");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("unknown model preset 'llama-7bb'; did you mean 'llama-7b'?"),
            std::string::npos)
      << p.status().message();
  Result<ModelSpec> l = LoadModel("llama-65");
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("did you mean 'llama-65b'?"), std::string::npos)
      << l.status().message();
}

TEST(ModelParseErrors, HuggingFaceConfigProblemsNameTheJsonKey) {
  Result<ModelSpec> bad = ParseHfConfigJson(
      "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 100,\n  \"num_hidden_layers\": 2,\n"
      "  \"num_attention_heads\": 3,\n  \"intermediate_size\": 64,\n  \"vocab_size\": 10,\n"
      "  \"max_position_embeddings\": 16\n}",
      "config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      bad.status().message().find("config.json:5:3: error: num_attention_heads: num_attention_heads (3) "
                                  "must divide hidden_size (100)"),
      std::string::npos)
      << bad.status().message();
  Result<ModelSpec> gpt = ParseHfConfigJson("{\"model_type\": \"gpt2\"}", "config.json");
  ASSERT_FALSE(gpt.ok());
  EXPECT_NE(gpt.status().message().find("motley trains Llama models"), std::string::npos);
  Result<ModelSpec> syntax = ParseHfConfigJson("{\n  \"hidden_size\": 12,\n  oops\n}", "config.json");
  ASSERT_FALSE(syntax.ok());
  EXPECT_NE(syntax.status().message().find("config.json:3:"), std::string::npos) << syntax.status().message();
}

}  // namespace
}  // namespace motley
