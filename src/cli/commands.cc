#include "cli/command.h"

#ifdef MOTLEY_TORCH_HELPER
#include "cli/torch_helper.h"
#endif

namespace motley::cli {
#ifdef MOTLEY_TORCH_HELPER
namespace {
// `motley` without libtorch: these run in `motley-torch` (torch_helper.h), named by index.
constexpr const char* kTorchCommands[] = {"train", "eval", "profile", "comm", "checkpoint", "init-model"};
template <int kCommand>
int RunInHelper(const std::vector<std::string>& args) {
  std::vector<std::string> all = {kTorchCommands[kCommand]};
  all.insert(all.end(), args.begin(), args.end());
  return ExecTorchHelper(all);
}
}  // namespace
#endif

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
    {"demo", "run motley's main job on the built-in default (an emulated 4-device cluster)", &RunDemo},
    {"validate", "check cluster, model and job files; report every problem with file:line", &RunValidate},
    {"catalog", "list the GPU types motley knows, with their spec figures", &RunCatalog},
    {"describe",
     "derived figures of a cluster (devices, TFLOPs, links) or a model (parameters, FLOPs, memory)",
     &RunDescribe},
    {"plan", "choose the best plan for a cluster, model and batch (auto, or one strategy; --compare)",
     &RunPlan},
    {"schedule", "lower a plan to its per-rank op programs (the contract the simulator and runtime run)",
     &RunSchedule},
    {"simulate", "simulate a training step of a plan: step time, TFLOPs, HFU, memory per device, trace",
     &RunSimulate},
    {"report",
     "one HTML page on a plan, its simulated step, memory and every strategy, and a run's measurements",
     &RunReport},
    {"calibrate", "scale a profile's compute times to what a real run of a plan measured (online profiling)",
     &RunCalibrate},
#if defined(MOTLEY_WITH_TORCH) || defined(MOTLEY_TORCH_HELPER)
#ifdef MOTLEY_WITH_TORCH
#define MOTLEY_TORCH_COMMAND(f, k) &f
#else
#define MOTLEY_TORCH_COMMAND(f, k) &RunInHelper<k>
#endif
    {"train", "train a job's model on its data: progress, validation, metrics, checkpoints, --resume",
     MOTLEY_TORCH_COMMAND(RunTrain, 0)},
    {"eval", "mean next-token loss of a checkpoint (motley's or Hugging Face's) on a token file",
     MOTLEY_TORCH_COMMAND(RunEval, 1)},
    {"profile",
     "measure a cluster's device types for a model: layer times by microbatch, the largest that fits",
     MOTLEY_TORCH_COMMAND(RunProfile, 2)},
    {"comm", "check that launched ranks can talk: collectives with known values, bandwidth",
     MOTLEY_TORCH_COMMAND(RunComm, 3)},
    {"checkpoint",
     "a checkpoint's contents (info), or a sharded one consolidated for Hugging Face and eval (export)",
     MOTLEY_TORCH_COMMAND(RunCheckpoint, 4)},
    {"init-model", "write a Hugging Face model folder of freshly initialised weights for a run to start from",
     MOTLEY_TORCH_COMMAND(RunInitModel, 5)},
#undef MOTLEY_TORCH_COMMAND
#endif
    {"launch", "start N local ranks of a command with the rendezvous set; stop all when one fails",
     &RunLaunch},
    {"agent",
     "one host's ranks of a launch across hosts (motley launch --hosts starts it): start, report, stop",
     &RunAgent},
    {"data",
     "prepare training data (byte, sentencepiece or a model's tokenizer.json; text, folders, JSONL), "
     "or train a tokenizer",
     &RunData},
  };
  return commands;
}

}  // namespace motley::cli
