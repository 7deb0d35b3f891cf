// Reading model shapes: a TOML model file, a Hugging Face config.json (as is), or a preset name.
#include "core/model_parse.h"
#include "core/json_read.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/rope.h"
#include "core/suggest.h"
#include "core/toml_reader.h"

namespace motley {
namespace {

constexpr int64_t kMaxHidden = 1 << 17;
constexpr int64_t kMaxLayers = 1 << 12;
constexpr int64_t kMaxVocab = 1 << 24;
constexpr int64_t kMaxSeqLen = 1 << 24;

// Where the message for one field goes: a TOML key with its position, or a JSON key.
using ErrorAt = std::function<void(std::string_view key, const std::string& message)>;

// Consistency checks shared by the TOML and JSON readers; `key` maps our field names to the
// file's own key names so messages speak the file's language.
void CheckShape(const ModelSpec& m, const std::function<std::string(std::string_view)>& key,
                const ErrorAt& error) {
  if (m.num_heads > 0 && m.hidden_size > 0 && m.hidden_size % m.num_heads != 0) {
    error(key("num_heads"),
          fmt::format("{} ({}) must divide {} ({}): {} / {} = {:.2f}; choose a head count that divides "
                      "the hidden size",
                      key("num_heads"), m.num_heads, key("hidden_size"), m.hidden_size, m.hidden_size,
                      m.num_heads, static_cast<double>(m.hidden_size) / m.num_heads));
    return;
  }
  if (m.num_kv_heads > 0 && m.num_heads > 0 && m.num_heads % m.num_kv_heads != 0) {
    error(key("num_kv_heads"),
          fmt::format("{} ({}) must divide {} ({}): {} / {} = {:.2f}; each key/value head serves a whole "
                      "group of query heads",
                      key("num_kv_heads"), m.num_kv_heads, key("num_heads"), m.num_heads, m.num_heads,
                      m.num_kv_heads, static_cast<double>(m.num_heads) / m.num_kv_heads));
  }
  if (m.num_heads > 0 && m.hidden_size > 0 && m.hidden_size % m.num_heads == 0 && m.head_dim() % 2 != 0) {
    error(key("num_heads"),
          fmt::format("the head dimension {} / {} = {} is odd; rotary embeddings need an even head "
                      "dimension",
                      key("hidden_size"), key("num_heads"), m.head_dim()));
  }
}

// What each rope type needs of its fields (`key` as in CheckShape: the file's own names).
void CheckRopeScaling(const RopeScaling& r, const std::function<std::string(std::string_view)>& key,
                      const ErrorAt& error) {
  using Type = RopeScaling::Type;
  if (r.type == Type::kNone) return;
  const bool linear = r.type == Type::kLinear;
  if (linear ? !(r.factor > 0) : !(r.factor >= 1))
    error(key("factor"),
          fmt::format("{} {}: a {} scaling needs a factor {}", key("factor"), r.factor,
                      RopeScalingTypeName(r.type), linear ? "> 0" : ">= 1 (it extends the context)"));
  if (r.type != Type::kLlama3) return;
  if (!(r.low_freq_factor > 0))
    error(key("low_freq_factor"),
          fmt::format("{} {} must be > 0", key("low_freq_factor"), r.low_freq_factor));
  if (!(r.high_freq_factor > r.low_freq_factor))
    error(
        key("high_freq_factor"),
        fmt::format("{} ({}) must be greater than {} ({}): llama3 scaling interpolates between the two",
                    key("high_freq_factor"), r.high_freq_factor, key("low_freq_factor"), r.low_freq_factor));
  if (r.original_max_position_embeddings < 1)
    error(key("original_max_position_embeddings"),
          fmt::format("{} must be a positive integer: the context the model was pre-trained on",
                      key("original_max_position_embeddings")));
}

constexpr const char* kRopeTypesSupported =
    "motley supports \"default\", \"linear\", \"dynamic\" and \"llama3\"";

}  // namespace

Result<ModelSpec> ParseModelToml(std::string_view text, const std::string& file) {
  Diagnostics diag;
  auto table = ParseTomlText(text, file, &diag);
  if (!table) return diag.ToStatus();
  TomlTable t(*table, "", file, &diag);

  ModelSpec m;
  bool have_base = false;
  if (auto base = t.String("base")) {
    if (const ModelSpec* p = FindModelPreset(*base)) {
      m = *p;
      have_base = true;
    } else {
      t.Error("base",
              fmt::format("unknown model preset '{}'{} Presets: {}", *base,
                          DidYouMeanOrPeriod(*base, ModelPresetNames()), JoinNames(ModelPresetNames())));
    }
  }
  Need need = have_base ? Need::kOptional : Need::kRequired;
  if (auto v = t.String("name")) m.name = *v;
  if (auto v = t.Int("hidden_size", 1, kMaxHidden, need)) m.hidden_size = *v;
  if (auto v = t.Int("num_layers", 1, kMaxLayers, need)) m.num_layers = *v;
  if (auto v = t.Int("num_heads", 1, kMaxHidden, need)) m.num_heads = *v;
  if (auto v = t.Int("num_kv_heads", 1, kMaxHidden)) {
    m.num_kv_heads = *v;
  } else if (!t.Has("num_kv_heads") && (!have_base || t.Has("num_heads"))) {
    m.num_kv_heads = m.num_heads;  // multi-head attention unless said otherwise
  }
  if (auto v = t.Int("ffn_size", 1, 8 * kMaxHidden, need)) m.ffn_size = *v;
  if (auto v = t.Int("vocab_size", 1, kMaxVocab, need)) m.vocab_size = *v;
  if (auto v = t.Int("max_seq_len", 1, kMaxSeqLen, need)) m.max_seq_len = *v;
  if (auto v = t.Number("rope_theta", 0.0, 1e12, Need::kOptional, true)) m.rope_theta = *v;
  if (auto v = t.Number("norm_eps", 0.0, 1.0, Need::kOptional, true)) m.norm_eps = *v;
  if (auto v = t.Bool("tie_embeddings")) m.tie_embeddings = *v;
  if (auto r = t.Table("rope_scaling")) {
    // As a config.json's rope_scaling: type = "llama3" with its factors, "linear" or "dynamic".
    RopeScaling& rs = m.rope_scaling;
    if (auto type = r->Choice("type", {"default", "linear", "dynamic", "llama3"}, Need::kRequired)) {
      rs = RopeScaling{};
      rs.type = *type == "linear"    ? RopeScaling::Type::kLinear
                : *type == "dynamic" ? RopeScaling::Type::kDynamic
                : *type == "llama3"  ? RopeScaling::Type::kLlama3
                                     : RopeScaling::Type::kNone;
    }
    const Need need = rs.type == RopeScaling::Type::kNone ? Need::kOptional : Need::kRequired;
    const Need llama3 = rs.type == RopeScaling::Type::kLlama3 ? Need::kRequired : Need::kOptional;
    if (auto v = r->Number("factor", 0.0, 1e6, need, true)) rs.factor = *v;
    if (auto v = r->Number("low_freq_factor", 0.0, 1e6, llama3, true)) rs.low_freq_factor = *v;
    if (auto v = r->Number("high_freq_factor", 0.0, 1e6, llama3, true)) rs.high_freq_factor = *v;
    if (auto v = r->Int("original_max_position_embeddings", 1, kMaxSeqLen, llama3))
      rs.original_max_position_embeddings = *v;
    r->Finish();
    if (!diag.has_errors())
      CheckRopeScaling(
          rs, [](std::string_view k) { return fmt::format("rope_scaling.{}", k); },
          [&](std::string_view key, const std::string& msg) { r->Error(key, msg); });
  }
  t.Finish();
  if (m.name.empty()) m.name = std::filesystem::path(file).stem().string();
  if (!diag.has_errors()) {
    CheckShape(
        m, [](std::string_view k) { return std::string(k); },
        [&](std::string_view key, const std::string& msg) { t.Error(key, msg); });
  }
  MOTLEY_RETURN_IF_ERROR(diag.ToStatus());
  return m;
}

std::string HfConfigJson(const ModelSpec& m, std::string_view torch_dtype) {
  nlohmann::ordered_json j = {{"architectures", {"LlamaForCausalLM"}},
                              {"model_type", "llama"},
                              {"hidden_size", m.hidden_size},
                              {"num_hidden_layers", m.num_layers},
                              {"num_attention_heads", m.num_heads},
                              {"num_key_value_heads", m.num_kv_heads},
                              {"intermediate_size", m.ffn_size},
                              {"vocab_size", m.vocab_size},
                              {"max_position_embeddings", m.max_seq_len},
                              {"rope_theta", m.rope_theta},
                              {"rms_norm_eps", m.norm_eps},
                              {"tie_word_embeddings", m.tie_embeddings},
                              {"hidden_act", "silu"},
                              {"attention_bias", false},
                              {"torch_dtype", torch_dtype}};
  const RopeScaling& r = m.rope_scaling;
  if (r.type == RopeScaling::Type::kNone) {
    j["rope_scaling"] = nullptr;
  } else {
    nlohmann::ordered_json rs = {{"rope_type", RopeScalingTypeName(r.type)}, {"factor", r.factor}};
    if (r.type == RopeScaling::Type::kLlama3) {
      rs["low_freq_factor"] = r.low_freq_factor;
      rs["high_freq_factor"] = r.high_freq_factor;
      rs["original_max_position_embeddings"] = r.original_max_position_embeddings;
    }
    j["rope_scaling"] = rs;
  }
  return j.dump(2) + "\n";
}

namespace {

// A config.json's rope_scaling object (rope_type/type and its keys) into `rs`: the types motley
// implements (default, linear, dynamic, llama3), each with exactly its keys; anything else refused
// through `rs_error` (a key, a message).
void ParseHfRopeScaling(const nlohmann::json& r, RopeScaling& rs,
                        const std::function<void(std::string_view, const std::string&)>& rs_error) {
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    auto t = r.find(key);
    if (t == r.end()) continue;
    if (!t->is_string()) {
      rs_error(key, fmt::format("{} {}: expected a string; {}", key, t->dump(), kRopeTypesSupported));
    } else if (!type.empty() && t->get<std::string>() != type) {
      rs_error(key, fmt::format("\"type\" and \"rope_type\" disagree (\"{}\" and \"{}\")", type,
                                t->get<std::string>()));
    } else {
      type = t->get<std::string>();
    }
  }
  using Type = RopeScaling::Type;
  std::vector<std::string> keys = {"rope_type", "type"};
  if (type == "default") {
    rs.type = Type::kNone;
  } else if (type == "linear" || type == "dynamic") {
    rs.type = type == "linear" ? Type::kLinear : Type::kDynamic;
    keys.push_back("factor");
  } else if (type == "llama3") {
    rs.type = Type::kLlama3;
    keys.insert(keys.end(),
                {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  } else if (type.empty()) {
    rs_error("rope_scaling", fmt::format("names no rope_type; {}", kRopeTypesSupported));
  } else {
    rs_error(r.contains("rope_type") ? "rope_type" : "type",
             fmt::format("rope type \"{}\" is not implemented; {}", type, kRopeTypesSupported));
  }
  if (!type.empty() && type != "default" && (type == "linear" || type == "dynamic" || type == "llama3")) {
    auto number = [&](const char* key, double* out) {
      auto v = r.find(key);
      if (v == r.end() || v->is_null())
        rs_error(key, fmt::format("a {} scaling needs \"{}\"", type, key));
      else if (!v->is_number())
        rs_error(key, fmt::format("{} {}: expected a number", key, v->dump()));
      else
        *out = v->get<double>();
    };
    number("factor", &rs.factor);
    if (rs.type == Type::kLlama3) {
      number("low_freq_factor", &rs.low_freq_factor);
      number("high_freq_factor", &rs.high_freq_factor);
      double original = 0;
      number("original_max_position_embeddings", &original);
      rs.original_max_position_embeddings = static_cast<int64_t>(original);
      if (original != static_cast<double>(rs.original_max_position_embeddings))
        rs_error("original_max_position_embeddings", "expected an integer");
    }
    // A key motley does not know may change the math (attention_factor, beta_fast, ...): refused.
    for (const auto& [key, value] : r.items()) {
      if (std::find(keys.begin(), keys.end(), key) != keys.end() || value.is_null()) continue;
      rs_error(key, fmt::format("\"{}\" is not part of a {} scaling as motley implements it (its keys: {}); "
                                "remove it or use a model whose config does without",
                                key, type, fmt::join(keys, ", ")));
    }
    CheckRopeScaling(
        rs, [](std::string_view k) { return std::string(k); }, rs_error);
  }
}

}  // namespace

namespace {

// The fields of a config.json whose other values change the math motley runs: biases, another
// activation, dropout; each refused through `error` (a key, a message), naming what is supported.
void RefuseUnsupportedFields(const nlohmann::json& j,
                             const std::function<void(std::string_view, const std::string&)>& error) {
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) continue;
    error(key,
          fmt::format("{} {}: motley's Llama has no biases in its {} projections; it supports {} = false",
                      key, it->dump(), std::string_view(key) == "mlp_bias" ? "MLP" : "attention", key));
  }
  if (auto it = j.find("hidden_act"); it != j.end() && !it->is_null()) {
    const bool silu =
        it->is_string() && (it->get<std::string>() == "silu" || it->get<std::string>() == "swish");
    if (!silu)
      error("hidden_act",
            fmt::format("{}: motley's Llama MLP is SwiGLU; it supports hidden_act \"silu\"", it->dump()));
  }
  if (auto it = j.find("attention_dropout"); it != j.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() != 0.0)
      error("attention_dropout",
            fmt::format("{}: motley trains without dropout; it supports attention_dropout 0.0", it->dump()));
  }
}

}  // namespace

Result<ModelSpec> ParseHfConfigJson(std::string_view text, const std::string& file) {
  MOTLEY_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, file));
  if (!j.is_object()) return Status::InvalidArgument(fmt::format("{}: error: expected a JSON object", file));

  Diagnostics diag;
  // JSON has no positions in nlohmann; find the key's line by searching the text.
  auto pos_of = [&](std::string_view key) {
    SourcePos pos{file, 0, 0};
    size_t at = text.find(fmt::format("\"{}\"", key));
    if (at == std::string_view::npos) return pos;
    pos.line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
    size_t line_start = text.rfind('\n', at);
    pos.column = static_cast<int>(at - (line_start == std::string_view::npos ? 0 : line_start + 1)) + 1;
    return pos;
  };
  auto error = [&](std::string_view key, const std::string& msg) {
    diag.Error(pos_of(key), fmt::format("{}: {}", key, msg));
  };
  auto get_int = [&](std::string_view key, int64_t max, bool required) -> std::optional<int64_t> {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (required)
        diag.Error(SourcePos{file, 0, 0},
                   fmt::format("missing required key \"{}\"; a Llama config.json has it", key));
      return std::nullopt;
    }
    if (!it->is_number_integer()) {
      error(key, fmt::format("expected an integer, got {}", it->dump()));
      return std::nullopt;
    }
    const std::optional<int64_t> v = JsonInt64(*it);
    if (!v || *v < 1 || *v > max) {
      error(key, fmt::format("{} is out of range; it must be between 1 and {}", it->dump(), max));
      return std::nullopt;
    }
    return *v;
  };
  auto get_number = [&](std::string_view key, double max) -> std::optional<double> {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) {
      error(key, fmt::format("expected a number, got {}", it->dump()));
      return std::nullopt;
    }
    double v = it->get<double>();
    if (!(v > 0) || v > max) {
      error(key, fmt::format("{} is out of range; it must be > 0 and <= {}", v, max));
      return std::nullopt;
    }
    return v;
  };

  if (auto it = j.find("model_type"); it != j.end()) {
    if (!it->is_string() || it->get<std::string>() != "llama") {
      error("model_type",
            fmt::format("motley trains Llama models; this config says model_type {}", it->dump()));
    }
  }
  ModelSpec m;
  m.name = std::filesystem::path(file).parent_path().filename().string();
  if (m.name.empty()) m.name = "hf-model";
  if (auto v = get_int("hidden_size", kMaxHidden, true)) m.hidden_size = *v;
  if (auto v = get_int("num_hidden_layers", kMaxLayers, true)) m.num_layers = *v;
  if (auto v = get_int("num_attention_heads", kMaxHidden, true)) m.num_heads = *v;
  m.num_kv_heads = get_int("num_key_value_heads", kMaxHidden, false).value_or(m.num_heads);
  if (auto v = get_int("intermediate_size", 8 * kMaxHidden, true)) m.ffn_size = *v;
  if (auto v = get_int("vocab_size", kMaxVocab, true)) m.vocab_size = *v;
  if (auto v = get_int("max_position_embeddings", kMaxSeqLen, true)) m.max_seq_len = *v;
  if (auto v = get_number("rope_theta", 1e12)) m.rope_theta = *v;
  if (auto v = get_number("rms_norm_eps", 1.0)) m.norm_eps = *v;
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && !it->is_null()) {
    if (it->is_boolean()) {
      m.tie_embeddings = it->get<bool>();
    } else {
      error("tie_word_embeddings", fmt::format("expected true or false, got {}", it->dump()));
    }
  }
  // Every other field that changes the math is honoured (rope_scaling) or refused, naming what
  // motley supports: a model trained or evaluated here is the model the file describes.
  RefuseUnsupportedFields(j, error);
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    if (!it->is_object())
      error("rope_scaling", fmt::format("expected an object or null, got {}", it->dump()));
    else
      ParseHfRopeScaling(*it, m.rope_scaling, [&](std::string_view key, const std::string& msg) {
        error(key, "rope_scaling: " + msg);
      });
  }
  if (auto v = get_int("head_dim", kMaxHidden, false);
      v && m.num_heads > 0 && m.hidden_size > 0 && *v * m.num_heads != m.hidden_size) {
    error("head_dim", fmt::format("head_dim ({}) x num_attention_heads ({}) = {} != hidden_size ({}); "
                                  "motley supports head_dim = hidden_size / num_attention_heads",
                                  *v, m.num_heads, *v * m.num_heads, m.hidden_size));
  }
  if (!diag.has_errors()) {
    auto hf_key = [](std::string_view k) -> std::string {
      if (k == "num_heads") return "num_attention_heads";
      if (k == "num_kv_heads") return "num_key_value_heads";
      return std::string(k);
    };
    CheckShape(m, hf_key, error);
  }
  MOTLEY_RETURN_IF_ERROR(diag.ToStatus());
  return m;
}

Result<ModelSpec> LoadModel(const std::string& name_or_path) {
  if (const ModelSpec* preset = FindModelPreset(name_or_path)) return *preset;
  std::filesystem::path path(name_or_path);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) path /= "config.json";
  if (!std::filesystem::exists(path, ec)) {
    auto names = ModelPresetNames();
    return Status::NotFound(fmt::format(
        "unknown model '{}'{} It is neither a preset ({}) nor an existing .toml file, config.json or "
        "directory holding one",
        name_or_path, DidYouMeanOrPeriod(name_or_path, names), JoinNames(names)));
  }
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path.string()));
  if (path.extension() == ".json") return ParseHfConfigJson(text, path.string());
  return ParseModelToml(text, path.string());
}

}  // namespace motley
