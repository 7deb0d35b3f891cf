// motley init-model --hf DIR --model PRESET|FILE [--seed N] [--dtype bf16|fp32]
//
// Writes a Hugging Face model folder of freshly initialised weights — config.json and
// model.safetensors, as Hugging Face tools write them — into DIR, for a run to start from
// ([model] init_from). A tokenizer.json already in DIR sets the vocabulary (its size).
#include <cstdint>
#include <filesystem>

#include <fmt/format.h>

#include "cli/args.h"
#include "cli/command.h"
#include "core/file_io.h"
#include "core/model_parse.h"
#include "data/hf_tokenizer.h"
#include "runtime/model/llama_model.h"
#include "runtime/train/safetensors.h"

namespace motley::cli {

int RunInitModel(const std::vector<std::string>& args) {
  CLI::App app(
      "Write a Hugging Face model folder (config.json, model.safetensors) of a model with freshly "
      "initialised weights, for a run to start from ([model] init_from).",
      "motley init-model");
  std::string dir, model_ref, dtype = "bf16";
  uint64_t seed = 1234;
  app.add_option("--hf", dir, "the folder to write (a tokenizer.json there sets the vocabulary)")->required();
  app.add_option("--model", model_ref, "a preset (llama-tiny, llama-1m, ...), a model .toml or a config.json")
      ->required();
  app.add_option("--seed", seed, "the initialisation's seed")->capture_default_str();
  app.add_option("--dtype", dtype, "the weights' type in the file, as Hugging Face folders keep them")
      ->check(CLI::IsMember({"bf16", "fp32"}))
      ->capture_default_str();
  if (auto rc = ParseArgs(app, args)) return *rc;
  auto fail = [](const std::string& message) {
    fmt::print(stderr, "motley init-model: {}\n", message);
    return kExitFailure;
  };
  Result<ModelSpec> spec = LoadModel(model_ref);
  if (!spec.ok()) return fail(spec.status().message());
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string note;
  if (fs::is_regular_file(fs::path(dir) / "tokenizer.json", ec)) {
    Result<std::unique_ptr<HfTokenizer>> t = HfTokenizer::Load(dir);
    if (!t.ok()) return fail(t.status().message());
    if ((*t)->vocab_size() != spec->vocab_size) {
      note = fmt::format(" (vocabulary {} from {}/tokenizer.json; {} has {})", (*t)->vocab_size(), dir,
                         model_ref, spec->vocab_size);
      spec->vocab_size = (*t)->vocab_size();
    }
  }
  fs::create_directories(dir, ec);
  if (ec) return fail(fmt::format("{}: cannot create the folder: {}", dir, ec.message()));
  LlamaModel model(*spec, seed);
  std::vector<NamedTensor> tensors;
  for (const auto& p : model->named_parameters())
    tensors.push_back({p.key(), dtype == "bf16" ? p.value().to(torch::kBFloat16) : p.value()});
  Status s = WriteSafetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  if (s.ok())
    s = AtomicWriteFile((fs::path(dir) / "config.json").string(),
                        HfConfigJson(*spec, dtype == "bf16" ? "bfloat16" : "float32"));
  if (!s.ok()) return fail(s.message());
  fmt::print("{}: {} ({:.2f}M parameters{}), {} weights, seed {}\n", dir, spec->name,
             static_cast<double>(TotalParams(*spec)) / 1e6, note, dtype, seed);
  return kExitOk;
}

}  // namespace motley::cli
