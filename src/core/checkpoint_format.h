// The text files of a motley checkpoint, read and written without torch (so that they are fuzzed
// and checked like every other reader): a checkpoint's trainer_state.json, and a run folder's
// `latest`. The tensors themselves are safetensors files (core/safetensors_header.h).
//
//   trainer_state.json  {"format": "motley-checkpoint-1", "step": 12, "updates": 12, "total_steps": 300,
//                        "seed": 1234, "tokens_seen": 49152, "loss_scale": 1.0,
//                        "loss_scale_good_steps": 0, "precision": "fp32", "job_file": "job.toml",
//                        "files": {"model.safetensors": {"bytes": 4200, "crc32": "0a1b2c3d"}, ...},
//                        "checksum": "<CRC-32 of the document without this field>"}
//   latest              the newest checkpoint's folder name, "step-000012\n"
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace motley {

struct TrainerState {
  int64_t step = 0;         // training steps done; the next step to run
  int64_t updates = 0;      // optimizer updates applied (fewer than steps when fp16 skipped some)
  int64_t total_steps = 0;  // the run's length (the learning-rate schedule depends on it)
  uint64_t seed = 0;        // data order: the sampler is counter-based, (seed, step, index) is its state
  int64_t tokens_seen = 0;
  double loss_scale = 1.0;  // fp16's dynamic loss scale
  int64_t loss_scale_good_steps = 0;
  std::string precision;
  std::string job_file;
  // After rollbacks from a diverged step ([divergence] action = "rollback"): the learning rate
  // from here on is the schedule's times lr_factor, and step k draws the data windows of step
  // k + data_skip_steps.
  double lr_factor = 1.0;
  int64_t data_skip_steps = 0;
  int64_t rollbacks = 0;
  // The plan the run was on when it wrote the checkpoint, where a live rebalance had switched it
  // from the one it was launched with (TOML; "" = the launched one): a resume takes it up again.
  std::string plan_toml;
};

/// A file of the checkpoint as it was written: its size and CRC-32, checked before loading.
struct CheckpointFileRecord {
  int64_t bytes = 0;
  uint32_t crc32 = 0;
};

struct TrainerStateFile {
  TrainerState state;
  std::map<std::string, CheckpointFileRecord> files;  // by name within the checkpoint's folder
};

/// Reads trainer_state.json (`path` for messages): its checksum first, then every field's type
/// and range. Every error names the file and says what to do.
Result<TrainerStateFile> ParseTrainerState(std::string_view text, const std::string& path);

/// The document ParseTrainerState reads back, checksum included.
std::string TrainerStateJson(const TrainerStateFile& file);

/// The checkpoint folder a run folder's `latest` names (`path` for messages): one line holding
/// "step-" and digits, as motley writes it.
Result<std::string> ParseLatest(std::string_view text, const std::string& path);

/// The name of the checkpoint folder after `step` steps: "step-000012".
std::string CheckpointFolderName(int64_t step);
/// The step a checkpoint folder's name says ("step-" and 1-18 digits, as CheckpointFolderName
/// writes it), or nullopt for any other name. Folders are ordered by it, never by their names as text
/// (step-1000000 comes after step-999999).
std::optional<int64_t> CheckpointFolderStep(std::string_view name);

/// Islands' own checkpoints (#52). The first island present writes a run of islands' checkpoint (the
/// weights, alike on every island after an outer round; its own moments; the outer state); every other
/// island present writes its inner state (its AdamW moments: islands differ there) as a checkpoint of
/// its own, at its own step count, into "<run_dir>/islands/island-<i>", before the run's `latest`
/// names the step. This is that folder.
std::string IslandCheckpointRunDir(const std::string& run_dir, int island);
/// The checkpoint of island `island`'s own inner state beside the run checkpoint `checkpoint_dir` (a
/// folder of a run folder), its island having taken `own_steps` steps by then: its path, or "" where
/// there is none (an island that was lost then, or that the run did not have).
std::string IslandMomentsCheckpoint(const std::string& checkpoint_dir, int island, int64_t own_steps);

}  // namespace motley
