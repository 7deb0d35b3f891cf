// Checkpoints: a directory a Hugging Face tool can read, plus what resuming needs.
//
//   config.json            Hugging Face LlamaForCausalLM fields (core/model_parse.h)
//   model.safetensors      the weights under Hugging Face names, fp32 (the master copy)
//   optimizer.safetensors  AdamW moments, "<parameter>.exp_avg" / ".exp_avg_sq"
//   trainer_state.json     step, seed, tokens seen, loss scale; each file's size and CRC-32, and
//                          its own checksum
//   islands.safetensors    a run of islands' (#52): the outer steps, the outer momentum and (one
//                          process's) the other islands' moments (runtime/train/islands_trainer.cc);
//                          launched islands keep theirs in islands/island-<i>/ of the run folder
//                          (core/checkpoint_format.h), and in the sharded form the momentum in the
//                          rank files' pieces; absent otherwise
//
// A checkpoint is written into "<dir>.tmp", every file fsynced, then renamed to <dir>: a crash
// leaves the previous checkpoint intact. Loading verifies every checksum first. A run directory
// holds step-NNNNNN checkpoints and a `latest` file naming the newest; older ones beyond `keep` go.
// Loading weights also accepts a Hugging Face directory: config.json with model.safetensors, or
// shards listed in model.safetensors.index.json.
//
// A distributed run writes a sharded checkpoint instead of model/optimizer.safetensors: every rank
// writes the state it owns into rank-NNNNN.safetensors at once (nothing is gathered), rank 0 then
// writes shards.json (core/shard_index.h: which file holds which elements) and the trainer state
// listing every file's size and CRC-32, and moves the folder into place. Loading assembles each
// parameter a rank needs from the pieces, whatever plan wrote them (resharding); `motley
// checkpoint export` writes the consolidated form above.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/checkpoint_format.h"
#include "core/job.h"
#include "core/model.h"
#include "core/shard_index.h"
#include "core/status.h"
#include "runtime/model/llama_model.h"
#include "runtime/optim/adamw.h"
#include "runtime/optim/state_piece.h"
#include "runtime/train/safetensors.h"

namespace motley {

/// The file of a motley checkpoint that holds its trainer state and the other files' checksums.
inline constexpr char kTrainerStateFile[] = "trainer_state.json";

/// Held by the process that writes a run's checkpoints and metrics (rank 0, or the single process):
/// an exclusive lock on `<run_dir>/.lock`, which names the holder. A second run into the same
/// folder gets an error naming the first; the kernel releases the lock when the process ends, even
/// when it is killed.
class RunDirLock {
 public:
  static Result<std::unique_ptr<RunDirLock>> Acquire(const std::string& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  explicit RunDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

/// Whether a run that is not resuming may write its checkpoints into `run_dir`: not when the folder
/// holds another run's (a `latest`), unless `overwrite` — then that run's step folders, `latest` and
/// metrics.jsonl are removed (only when `clean`; without, nothing is touched).
Status ClaimRunDir(const std::string& run_dir, bool resuming, bool overwrite, bool clean);

/// A file a checkpoint holds beside the model and its optimizer (a run of islands'
/// islands.safetensors), written, checksummed and verified as they are.
struct CheckpointExtraFile {
  std::string name;
  std::vector<NamedTensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// Writes a checkpoint into `dir`, replacing one there atomically (the old one is in place until
/// the new one is whole).
Status SaveCheckpoint(const std::string& dir, LlamaModelImpl& model, const std::vector<ParamShard>& shards,
                      const TrainerState& state, const std::vector<CheckpointExtraFile>& extra = {});

/// Saves `<run_dir>/step-NNNNNN`, points `<run_dir>/latest` at it, keeps the newest `keep`. First
/// removes what an interrupted save left (`step-*.tmp`).
/// Returns the checkpoint's directory.
Result<std::string> SaveRunCheckpoint(const std::string& run_dir, int64_t keep, LlamaModelImpl& model,
                                      const std::vector<ParamShard>& shards, const TrainerState& state,
                                      const std::vector<CheckpointExtraFile>& extra = {});

/// Rank 0, before the ranks write: `<run_dir>/step-NNNNNN.tmp`, empty (what interrupted saves left
/// is removed). Returns its path.
Result<std::string> BeginShardedCheckpoint(const std::string& run_dir, int64_t step);

/// Every rank: its pieces into `<tmp>`/rank-NNNNN.safetensors, written and fsynced. A rank with
/// no pieces writes nothing (bytes 0).
Result<CheckpointFileRecord> WriteRankShards(const std::string& tmp, int rank,
                                             const std::vector<StatePiece>& pieces);

/// Rank 0, after every rank wrote (`rank_files`: each rank's record, by rank): checks the pieces
/// tile every parameter of `spec` exactly once, writes shards.json, config.json and the trainer
/// state (and `extra`: rank 0's files beside them), moves the folder into place, points `latest` at it
/// and keeps the newest `keep`.
Result<std::string> FinishShardedCheckpoint(const std::string& run_dir, int64_t keep, const std::string& tmp,
                                            const ModelSpec& spec,
                                            const std::vector<CheckpointFileRecord>& rank_files,
                                            const TrainerState& state,
                                            const std::vector<CheckpointExtraFile>& extra = {});

/// A whole parameter (or one of its moments) from pieces that tile it (shard_index.h), in `dtype`:
/// `elements(p)` gives piece p's elements; tensor-parallel slices are joined as the model splits
/// them. (Loading a sharded checkpoint, and live rebalancing's state moves.)
Result<torch::Tensor> AssembleParameter(
    const ModelSpec& spec, const std::string& name, const ShardedParameter& param,
    const std::vector<const ShardPiece*>& pieces,
    const std::function<Result<torch::Tensor>(const ShardPiece&)>& elements, torch::Dtype dtype);

/// Whether `dir` holds a sharded checkpoint (a shards.json).
bool IsShardedCheckpoint(const std::string& dir);

/// The step a checkpoint was written after (its trainer state, checksum verified).
Result<int64_t> CheckpointStep(const std::string& dir);
/// A checkpoint's trainer state (checksum verified; its files are not read).
Result<TrainerState> CheckpointTrainerState(const std::string& dir);

/// A checkpoint directory as given, or the one a run directory's `latest` names.
Result<std::string> ResolveCheckpointDir(const std::string& path);

/// The model shape in `dir`/config.json.
Result<ModelSpec> LoadCheckpointModelSpec(const std::string& dir);

/// A tensor-parallel rank's slices: rank `index` of a `tp`-wide team reads its slice of every split
/// parameter (tensor_parallel.h: SliceParameter), into a model parameter of the slice's shape.
struct WeightSlice {
  int index = 0;
  int tp = 1;  // 1: whole tensors
};

/// Loads the weights into `model` (converted to its dtype). Every model parameter must be present
/// with its shape; a motley checkpoint's checksums are verified first (of a sharded one: the files
/// it reads). `only`: when not empty, only the parameters it names are read (a rank's own).
/// `slice`: a tensor-parallel rank's slices of them (from a single-file or Hugging Face folder, the
/// slice's pages of the file only).
Status LoadModelWeights(const std::string& dir, LlamaModelImpl& model, const std::set<std::string>& only = {},
                        WeightSlice slice = {});

/// What a ZeRO-3 rank reads of a folder (ExecutorConfig::shard_source): a range of one parameter's
/// elements, from the pages of the file that hold them. Checks first that the folder holds every
/// parameter of `model` and no other (a sharded motley checkpoint is not such a folder: an error).
/// A tied model's head copy ("lm_head.weight") reads the embedding.
Result<std::function<Status(const std::string&, int64_t, torch::Tensor)>> FolderShardSource(
    const std::string& dir, LlamaModelImpl& model);

/// Loads the optimizer moments into `shards` and returns the trainer state (motley checkpoints only).
Result<TrainerState> LoadTrainingState(const std::string& dir, std::vector<ParamShard>& shards);

/// A run of islands' sharded checkpoint (#52): the outer momentum of the parameters `names`, whole, in
/// `dtype`, assembled from the pieces that hold it (core/shard_index.h: ShardTensor::kOuterMomentum).
Result<std::map<std::string, torch::Tensor>> LoadShardedOuterMomentum(const std::string& dir,
                                                                      const std::vector<std::string>& names,
                                                                      torch::Dtype dtype);

/// Every file of a motley checkpoint against its recorded size and CRC-32 (a sharded one's index
/// too). Returns the checkpoint's trainer state.
Result<TrainerStateFile> VerifyCheckpoint(const std::string& dir);
/// Whether a checkpoint (verified) loads: every weight its config.json needs is there with its
/// shape and finite values, read a layer at a time as a resume reads them.
Status CheckCheckpointLoads(const std::string& dir);

/// Writes a checkpoint of any form as a consolidated one at `out` (resumable, and what Hugging Face
/// tools read): the whole model assembled on the host, and a run of islands' outer state with it
/// (islands.safetensors, the momentum assembled from the pieces where a sharded one holds it there).
Status ExportCheckpoint(const std::string& dir, const std::string& out);

}  // namespace motley
