// motley checkpoint info CKPT | export CKPT OUT
#include <cstdint>
#include <filesystem>

#include <fmt/format.h>

#include "cli/args.h"
#include "cli/command.h"
#include "runtime/train/checkpoint.h"

namespace motley::cli {

int RunCheckpoint(const std::vector<std::string>& args) {
  CLI::App app("A motley checkpoint: what it holds (info), or a sharded one consolidated (export).",
               "motley checkpoint");
  app.require_subcommand(1);
  std::string in, out;
  CLI::App* info =
      app.add_subcommand("info", "step, form and files of a checkpoint, every checksum verified");
  info->add_option("checkpoint", in, "a checkpoint folder, or a run folder (its latest)")->required();
  CLI::App* exp = app.add_subcommand(
      "export",
      "write a checkpoint (sharded or not) as one consolidated folder: config.json, model.safetensors "
      "(what Hugging Face tools and motley eval read), optimizer.safetensors and the trainer state "
      "(resumable)");
  exp->add_option("checkpoint", in, "a checkpoint folder, or a run folder (its latest)")->required();
  exp->add_option("out", out, "the folder to write (replaced atomically when it holds a checkpoint)")
      ->required();
  if (auto rc = ParseArgs(app, args)) return *rc;

  auto fail = [](const Status& s) {
    fmt::print(stderr, "motley checkpoint: {}\n", s.message());
    return kExitFailure;
  };
  Result<std::string> dir = ResolveCheckpointDir(in);
  if (!dir.ok()) return fail(dir.status());
  if (info->parsed()) {
    Result<TrainerStateFile> state = VerifyCheckpoint(*dir);
    if (!state.ok()) return fail(state.status());
    if (Status loads = CheckCheckpointLoads(*dir); !loads.ok())
      return fail(Status::InvalidArgument(
          fmt::format("every checksum verified, but the checkpoint does not load: {}", loads.message())));
    int64_t bytes = 0, ranks = 0;
    for (const auto& [name, record] : state->files) {
      bytes += record.bytes;
      ranks += name.starts_with("rank-") ? 1 : 0;
    }
    fmt::print("{}: step {} of {}, {}, {} file(s), {:.1f} MiB, every checksum verified\n", *dir,
               state->state.step, state->state.total_steps,
               IsShardedCheckpoint(*dir) ? fmt::format("sharded: {} rank file(s) and an index", ranks)
                                         : std::string("consolidated"),
               state->files.size(), static_cast<double>(bytes) / (1 << 20));
    fmt::print("  every weight loads (names, shapes, finite values)\n");
    for (const auto& [name, record] : state->files) fmt::print("  {:<28} {:>12} bytes\n", name, record.bytes);
    return kExitOk;
  }
  if (Status s = ExportCheckpoint(*dir, out); !s.ok()) return fail(s);
  fmt::print(
      "{} -> {}: consolidated (config.json, model.safetensors, optimizer.safetensors, trainer_state.json)\n",
      *dir, out);
  return kExitOk;
}

}  // namespace motley::cli
