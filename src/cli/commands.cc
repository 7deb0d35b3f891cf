#include "cli/command.h"

namespace motley::cli {

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
      {"calibrate", "scale a profile's compute times to what a real run of a plan measured (online profiling)",
       &RunCalibrate},
#ifdef MOTLEY_WITH_TORCH
      {"train", "train a job's model on its data: progress, validation, metrics, checkpoints, --resume", &RunTrain},
      {"eval", "mean next-token loss of a checkpoint (motley's or Hugging Face's) on a token file", &RunEval},
      {"profile", "measure a cluster's device types for a model: layer times by microbatch, the largest that fits",
       &RunProfile},
      {"comm", "check that launched ranks can talk: collectives with known values, bandwidth", &RunComm},
#endif
      {"launch", "start N local ranks of a command with the rendezvous set; stop all when one fails", &RunLaunch},
      {"data", "prepare training data: tokenize text files into .bin shards (byte or sentencepiece)", &RunData},
  };
  return commands;
}

}  // namespace motley::cli
