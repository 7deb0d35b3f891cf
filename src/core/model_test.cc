#include "core/model.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <cstdint>

#include "core/builtin_files.h"
#include "core/model_parse.h"
#include "core/rope.h"

#include <cmath>
#include <numbers>
#include <string>

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
  EXPECT_DOUBLE_EQ(BoundaryActivationBytesPerToken(m, Precision::kFp64),
                   2 * BoundaryActivationBytesPerToken(m, Precision::kFp32));
  EXPECT_DOUBLE_EQ(LayerActivationBytesPerToken(m, 2048, Precision::kFp64, false),
                   2 * LayerActivationBytesPerToken(m, 2048, Precision::kFp32, false));
  EXPECT_DOUBLE_EQ(LogitsBytesPerToken(m, Precision::kFp64), 2 * 32000 * 8.0);
  EXPECT_DOUBLE_EQ(LogitsBytesPerToken(m, Precision::kBf16),
                   32000 * (2 + 4.0));  // bf16 logits, the loss's fp32 copy
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
  // The backward holds more while it runs (a fifth and a bit on top), and the gradient of its
  // output: h values in bf16 on every rank.
  EXPECT_DOUBLE_EQ(LayerBackwardBytesPerToken(m, 2048, Precision::kBf16, false, 2),
                   1.21 * LayerActivationBytesPerToken(m, 2048, Precision::kBf16, false, 2) + h * 2);
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

// #48: a number past int64 is shown as written, not as nlohmann wraps it (-1, -9223372036854775808).
TEST(ModelParse, AHuggingFaceSizeBeyondInt64IsShownAsWritten) {
  for (const char* big : {"18446744073709551615", "9223372036854775808"}) {
    std::string config = HfConfigJson(*FindModelPreset("llama-1m"));
    const size_t at = config.find("\"max_position_embeddings\": ");
    ASSERT_NE(at, std::string::npos);
    const size_t value = at + std::string("\"max_position_embeddings\": ").size();
    config.replace(value, config.find(',', value) - value, big);
    Result<ModelSpec> m = ParseHfConfigJson(config, "config.json");
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(std::string("max_position_embeddings: ") + big + " is out of range"),
              std::string::npos)
        << m.status().message();
  }
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

// Llama 3.2 1B's config.json as Hugging Face publishes it (the fields that shape the model).
std::string Llama32Config(const std::string& rope_scaling, const std::string& extra = "") {
  return R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": )" +
         rope_scaling + R"(,
  "rope_theta": 500000.0,)" +
         extra + R"(
  "tie_word_embeddings": true,
  "vocab_size": 128256
})";
}

constexpr const char* kLlama3Scaling = R"({"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"})";

TEST(ModelParse, Llama3RopeScalingIsReadAndWrittenBack) {
  Result<ModelSpec> m = ParseHfConfigJson(Llama32Config(kLlama3Scaling), "llama-3.2-1b/config.json");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(m->rope_scaling.factor, 32.0);
  EXPECT_EQ(m->rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(m->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(m->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(m->tie_embeddings);
  ModelSpec back = ParseHfConfigJson(HfConfigJson(*m), "config.json").value();
  EXPECT_EQ(back.rope_scaling, m->rope_scaling);
  // Older configs name the type "type"; linear and dynamic need only a factor.
  for (const char* type : {"linear", "dynamic"}) {
    Result<ModelSpec> t = ParseHfConfigJson(
        Llama32Config(fmt::format(R"({{"type": "{}", "factor": 2.0}})", type)), "config.json");
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_STREQ(RopeScalingTypeName(t->rope_scaling.type), type);
    EXPECT_EQ(ParseHfConfigJson(HfConfigJson(*t), "c.json").value().rope_scaling, t->rope_scaling);
  }
  Result<ModelSpec> plain = ParseHfConfigJson(Llama32Config(R"({"rope_type": "default"})"), "config.json");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->rope_scaling.type, RopeScaling::Type::kNone);
  // In a model .toml as a table.
  Result<ModelSpec> toml = ParseModelToml(
      "base = \"llama-tiny\"\n[rope_scaling]\ntype = \"llama3\"\nfactor = 8.0\nlow_freq_factor = 1.0\n"
      "high_freq_factor = 4.0\noriginal_max_position_embeddings = 32\n",
      "m.toml");
  ASSERT_TRUE(toml.ok()) << toml.status().message();
  EXPECT_EQ(toml->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(toml->rope_scaling.original_max_position_embeddings, 32);
}

// Llama 3.2's config with one field's text replaced.
std::string Replaced(const std::string& from, const std::string& to) {
  std::string c = Llama32Config("null");
  c.replace(c.find(from), from.size(), to);
  return c;
}

TEST(ModelParseErrors, FieldsThatChangeTheMathAreRefusedByName) {
  struct Case {
    std::string config, expected;
  };
  const std::vector<Case> cases = {
      {Llama32Config(R"({"rope_type": "yarn", "factor": 4.0})"),
       "rope_scaling: rope type \"yarn\" is not implemented; motley supports \"default\", \"linear\", "
       "\"dynamic\" "
       "and \"llama3\""},
      {Llama32Config(R"({"rope_type": "longrope", "factor": 4.0})"),
       "rope type \"longrope\" is not implemented"},
      {Llama32Config(R"({"rope_type": "linear", "factor": 2.0, "attention_factor": 0.5})"),
       "\"attention_factor\" is not part of a linear scaling"},
      {Llama32Config(
           R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192})"),
       "high_freq_factor (1) must be greater than low_freq_factor (4)"},
      {Llama32Config(R"({"rope_type": "llama3", "factor": 8.0})"),
       "a llama3 scaling needs \"low_freq_factor\""},
      {Llama32Config(R"({"rope_type": "dynamic", "factor": 0.5})"),
       "factor 0.5: a dynamic scaling needs a factor >= 1"},
      {Replaced("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\""),
       "hidden_act: \"gelu\": motley's Llama MLP is SwiGLU"},
      {Replaced("\"mlp_bias\": false", "\"mlp_bias\": true"),
       "mlp_bias true: motley's Llama has no biases in its MLP"},
      {Replaced("\"attention_dropout\": 0.0", "\"attention_dropout\": 0.1"), "motley trains without dropout"},
  };
  for (const Case& c : cases) {
    Result<ModelSpec> m = ParseHfConfigJson(c.config, "config.json");
    ASSERT_FALSE(m.ok()) << c.expected;
    EXPECT_NE(m.status().message().find(c.expected), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find("config.json:"), std::string::npos) << m.status().message();
  }
  std::string biased = Llama32Config("null");
  biased.replace(biased.find("\"attention_bias\": false"), 23, "\"attention_bias\": true");
  Result<ModelSpec> b = ParseHfConfigJson(biased, "config.json");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(
      b.status().message().find("config.json:3:3: error: attention_bias: attention_bias true: motley's Llama "
                                "has no biases in its attention projections; it supports attention_bias = "
                                "false"),
      std::string::npos)
      << b.status().message();
  std::string head_dim = Llama32Config("null");
  head_dim.replace(head_dim.find("\"head_dim\": 64"), 14, "\"head_dim\": 128");
  Result<ModelSpec> h = ParseHfConfigJson(head_dim, "config.json");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("motley supports head_dim = hidden_size / num_attention_heads"),
            std::string::npos);
  Result<ModelSpec> toml =
      ParseModelToml("base = \"llama-tiny\"\n[rope_scaling]\ntype = \"yarn\"\n", "m.toml");
  ASSERT_FALSE(toml.ok());
  EXPECT_NE(toml.status().message().find("m.toml:3:8"), std::string::npos) << toml.status().message();
}

TEST(Rope, PlainLinearAndDynamicFrequencies) {
  ModelSpec m = *FindModelPreset("llama-tiny");  // head dimension 8, 64 positions
  const std::vector<double> plain = RopeInverseFrequencies(m, 16);
  ASSERT_EQ(plain.size(), 4u);
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_DOUBLE_EQ(plain[i], 1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / 8.0));
  m.rope_scaling = {RopeScaling::Type::kLinear, 4.0};
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_DOUBLE_EQ(RopeInverseFrequencies(m, 16)[i], plain[i] / 4.0);
  // Dynamic NTK: plain RoPE within the context; beyond it, theta grows by (f S / P - (f - 1))^(d / (d - 2)).
  m.rope_scaling = {RopeScaling::Type::kDynamic, 2.0};
  EXPECT_EQ(RopeInverseFrequencies(m, 64), plain);
  const double theta = 10000.0 * std::pow(2.0 * 128 / 64 - 1, 8.0 / 6.0);
  const std::vector<double> longer = RopeInverseFrequencies(m, 128);
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_NEAR(longer[i], 1.0 / std::pow(theta, 2.0 * static_cast<double>(i) / 8.0), 1e-15);
}

TEST(Rope, Llama3KeepsHighFrequenciesDividesLowOnesAndBlendsBetween) {
  ModelSpec m = ParseHfConfigJson(Llama32Config(kLlama3Scaling), "config.json").value();
  ModelSpec plain_model = m;
  plain_model.rope_scaling = {};
  const std::vector<double> plain = RopeInverseFrequencies(plain_model, 4096),
                            scaled = RopeInverseFrequencies(m, 4096);
  ASSERT_EQ(scaled.size(), 32u);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < scaled.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / plain[i], ratio = scaled[i] / plain[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(ratio, 1.0) << i;
      ++kept;
    } else if (wavelen > 8192.0 / 1) {
      EXPECT_DOUBLE_EQ(ratio, 1.0 / 32) << i;
      ++divided;
    } else {
      EXPECT_GT(ratio, 1.0 / 32) << i;
      EXPECT_LT(ratio, 1.0) << i;
      ++blended;
    }
    if (i > 0) {
      EXPECT_LE(ratio, scaled[i - 1] / plain[i - 1]) << i;  // longer waves are scaled more
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
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
