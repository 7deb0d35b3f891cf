// Reading model shapes: TOML model files (examples/models/), Hugging Face config.json files, and
// preset names.
#pragma once

#include <string>
#include <string_view>

#include "core/model.h"
#include "core/status.h"

namespace motley {

Result<ModelSpec> ParseModelToml(std::string_view text, const std::string& file);
/// A Hugging Face LlamaForCausalLM config.json, as is: keys motley does not need are ignored.
Result<ModelSpec> ParseHfConfigJson(std::string_view text, const std::string& file);
/// The Hugging Face LlamaForCausalLM config.json of `m` (what checkpoints carry beside the weights);
/// ParseHfConfigJson reads it back to the same shape. `torch_dtype` as HF names it ("float32").
std::string HfConfigJson(const ModelSpec& m, std::string_view torch_dtype = "float32");
/// A preset name ("llama-7b"), a .toml model file, a config.json, or a directory holding one.
Result<ModelSpec> LoadModel(const std::string& name_or_path);

}  // namespace motley
