// motley eval --checkpoint DIR --data FILE.bin --seq-len S --num-sequences N [--json]
#include <fmt/format.h>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command.h"
#include "data/training_data.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/evaluate.h"

namespace motley::cli {

int RunEval(const std::vector<std::string>& args) {
  CLI::App app(
      "Mean next-token cross-entropy of a checkpoint (motley's or a Hugging Face Llama directory) over the "
      "first N non-overlapping windows of a token file.",
      "motley eval");
  std::string checkpoint, data_path, device_name = "auto";
  int64_t seq_len = 0, num_sequences = 0;
  bool json = false;
  app.add_option("--checkpoint", checkpoint,
                 "a checkpoint directory (config.json + safetensors), or a run directory")
      ->required();
  app.add_option("--data", data_path,
                 "a .bin token file, or a directory from `motley data prepare` (its val.bin)")
      ->required();
  app.add_option("--seq-len", seq_len, "tokens per window")->required()->check(CLI::PositiveNumber);
  app.add_option("--num-sequences", num_sequences, "how many windows, from the start")
      ->required()
      ->check(CLI::PositiveNumber);
  app.add_option("--device", device_name, "auto, cpu or cuda")->capture_default_str();
  app.add_flag("--json", json, "print JSON ({\"loss\": ...})");
  if (auto rc = ParseArgs(app, args)) return *rc;

  auto fail = [](const Status& s) {
    fmt::print(stderr, "motley eval: {}\n", s.message());
    return kExitFailure;
  };
  Result<std::string> dir = ResolveCheckpointDir(checkpoint);
  if (!dir.ok()) return fail(dir.status());
  Result<ModelSpec> spec = LoadCheckpointModelSpec(*dir);
  if (!spec.ok()) return fail(spec.status());
  if (seq_len > spec->max_seq_len)
    return fail(
        Status::InvalidArgument(fmt::format("--seq-len {}: longer than the {} positions {} was made for (its "
                                            "config.json's max_position_embeddings); "
                                            "give at most {}",
                                            seq_len, spec->max_seq_len, *dir, spec->max_seq_len)));
  Result<TokenDataset> data = OpenTokenData(data_path, "val", spec->vocab_size);
  if (!data.ok()) return fail(data.status());
  const int64_t available = NumEvaluationWindows(*data, seq_len);
  if (num_sequences > available)
    return fail(Status::InvalidArgument(
        fmt::format("--num-sequences {}: {} holds {} tokens, {} windows of {} (+1 "
                    "target); ask for at most {}",
                    num_sequences, data->name(), data->num_tokens(), available, seq_len, available)));
  const bool cuda = device_name == "cuda" || (device_name == "auto" && torch::cuda::is_available());
  if (cuda && !torch::cuda::is_available())
    return fail(Status::InvalidArgument("--device cuda: no CUDA device"));
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  LlamaModel model(*spec, 0);
  Status loaded = LoadModelWeights(*dir, *model);
  if (!loaded.ok()) return fail(loaded);
  model->to(device);
  model->eval();
  const Result<EvalResult> evaluated = EvaluateLoss(*model, *data, seq_len, num_sequences, device);
  if (!evaluated.ok()) return fail(evaluated.status());
  const EvalResult& r = *evaluated;
  if (!std::isfinite(r.loss))
    return fail(Status::InvalidArgument(fmt::format(
        "{}: the loss is {} on {}: the weights or the data are corrupted", *dir, r.loss, data->name())));
  if (json) {
    fmt::print("{}\n", nlohmann::json({{"loss", r.loss},
                                       {"sequences", r.sequences},
                                       {"tokens", r.tokens},
                                       {"checkpoint", *dir},
                                       {"data", data->name()}})
                           .dump());
  } else {
    fmt::print("{}: loss {:.6f} nats/token (perplexity {:.3f}) over {} windows of {} tokens of {}\n", *dir,
               r.loss, std::exp(r.loss), r.sequences, seq_len, data->name());
  }
  return kExitOk;
}

}  // namespace motley::cli
