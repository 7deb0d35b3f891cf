// A planned run's moments with the whole model: validation (rank 0 evaluates the gathered model)
// and checkpoints (sharded: every rank writes its own state; consolidated: rank 0 the gathered).
#include "runtime/train/planned_run.h"

#include <csignal>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/emulation/memory_ledger.h"
#include "runtime/model/llama_model.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/evaluate.h"

namespace motley {
namespace fs = std::filesystem;
namespace {

// A whole model on rank 0 holding the gathered parameters, with AdamW shards for checkpoints.
struct AssembledModel {
  LlamaModel model{nullptr};
  std::vector<ParamShard> shards;
};
AssembledModel Assemble(const ModelSpec& spec, Precision precision, const Executor::FullState& state) {
  AssembledModel a;
  a.model = LlamaModel(spec, 0);
  a.model->set_precision(precision);
  torch::NoGradGuard no_grad;
  for (auto& p : a.model->named_parameters()) p.value().copy_(state.params.at(p.key()));
  a.shards = WholeParameterShards(*a.model);
  for (auto& s : a.shards) {
    s.exp_avg = state.exp_avg.at(s.name);
    s.exp_avg_sq = state.exp_avg_sq.at(s.name);
  }
  return a;
}

}  // namespace

Status PlannedRun::Validate(int64_t step) {
  if (val_sequences_ <= 0 || !options_.validate) return Status::Ok();
  HostMemoryScope host;  // the gathered model is host memory, not the (emulated) device's
  MOTLEY_ASSIGN_OR_RETURN(Executor::FullState full, executor_->GatherFullState());
  if (lead_) {
    AssembledModel a = Assemble(job_.model, job_.training.precision, full);
    a.model->eval();
    MOTLEY_ASSIGN_OR_RETURN(
        const EvalResult eval,
        EvaluateLoss(*a.model, *data_->validation, job_.training.seq_len, val_sequences_, torch::kCPU));
    const double loss = eval.loss;
    if (!summary_.first_validation_loss) summary_.first_validation_loss = loss;
    summary_.last_validation_loss = loss;
    MOTLEY_RETURN_IF_ERROR(metrics_.Write({{"step", step}, {"val_loss", loss}}));
    observer_->OnValidation(step, loss);
  }
  return comm_->Barrier(comm_->world());
}

// A checkpoint, in the job's form (written by writer_, an island's own too; announced by lead_). The
// metrics record how much host memory it took on a rank (sharded: the most any rank added;
// consolidated: rank 0's, which holds the whole model).
Status PlannedRun::Checkpoint(const std::vector<CheckpointExtraFile>& extra, const OwnedStateFn& owned) {
  MemoryLedger& ledger = MemoryLedger::Install();
  ledger.ResetHostPeak();
  const int64_t host_before = ledger.host_used_bytes();
  int64_t host_bytes = 0;
  if (job_.checkpoint.format == "sharded") {
    MOTLEY_RETURN_IF_ERROR(ShardedCheckpoint(&host_bytes, extra, owned));
  } else {
    HostMemoryScope host;  // the gathered model is host memory, not the (emulated) device's
    MOTLEY_ASSIGN_OR_RETURN(Executor::FullState full, executor_->GatherFullState());
    if (writer_) {
      AssembledModel a = Assemble(job_.model, job_.training.precision, full);
      MOTLEY_ASSIGN_OR_RETURN(
          summary_.checkpoint_dir,
          SaveRunCheckpoint(job_.checkpoint.dir, job_.checkpoint.keep, *a.model, a.shards, state_, extra));
      host_bytes = ledger.host_peak_bytes() - host_before;
    }
  }
  if (lead_) {
    MOTLEY_RETURN_IF_ERROR(metrics_.Write({{"event", "checkpoint"},
                                           {"step", state_.step},
                                           {"form", job_.checkpoint.format},
                                           {"dir", summary_.checkpoint_dir},
                                           {"host_bytes", host_bytes}}));
    observer_->OnCheckpoint(summary_.checkpoint_dir);
  }
  return comm_->Barrier(comm_->world());
}

// Every rank writes the state it owns at once; rank 0 then writes the index and moves the folder
// into place (checkpoint.h). Nothing is gathered: a rank's host holds no more than its own state.
// `host_bytes` (rank 0): the most host memory a rank added while writing.
Status PlannedRun::ShardedCheckpoint(int64_t* host_bytes, const std::vector<CheckpointExtraFile>& extra,
                                     const OwnedStateFn& owned) {
  MemoryLedger& ledger = MemoryLedger::Install();
  const int64_t host_before = ledger.host_used_bytes();
  HostMemoryScope host;  // the pieces' host copies are host memory, not the (emulated) device's
  std::string tmp;
  if (writer_) {
    MOTLEY_ASSIGN_OR_RETURN(tmp, BeginShardedCheckpoint(job_.checkpoint.dir, state_.step));
  }
  MOTLEY_RETURN_IF_ERROR(comm_->Barrier(comm_->world()));
  if (!writer_) tmp = (fs::path(job_.checkpoint.dir) / (CheckpointFolderName(state_.step) + ".tmp")).string();
  std::vector<StatePiece> pieces;
  if (owned) {
    MOTLEY_ASSIGN_OR_RETURN(pieces, owned());
  } else {
    pieces = executor_->OwnedState();
  }
  MOTLEY_ASSIGN_OR_RETURN(const CheckpointFileRecord mine, WriteRankShards(tmp, comm_->rank(), pieces));
  if (comm_->rank() == options_.faults.die_rank && options_.faults.die_in_checkpoint &&
      state_.step == options_.faults.die_at_step)
    ::raise(SIGKILL);  // fault injection: a rank lost with the checkpoint half written
  // Each rank's file record and host memory to every rank: bytes, CRC-32, host bytes added.
  torch::Tensor record = torch::tensor(
      {mine.bytes, static_cast<int64_t>(mine.crc32), ledger.host_peak_bytes() - host_before}, torch::kInt64);
  torch::Tensor records = torch::empty({3 * comm_->world_size()}, torch::kInt64);
  MOTLEY_RETURN_IF_ERROR(comm_->AllGather(comm_->world(), record, records));
  if (writer_) {
    std::vector<CheckpointFileRecord> files;
    for (int r = 0; r < comm_->world_size(); ++r) {
      files.push_back(
          {records[3 * r].item<int64_t>(), static_cast<uint32_t>(records[3 * r + 1].item<int64_t>())});
      *host_bytes = std::max(*host_bytes, records[3 * r + 2].item<int64_t>());
    }
    MOTLEY_ASSIGN_OR_RETURN(summary_.checkpoint_dir,
                            FinishShardedCheckpoint(job_.checkpoint.dir, job_.checkpoint.keep, tmp,
                                                    job_.model, files, state_, extra));
  }
  return Status::Ok();
}

Status PlannedRun::LeadOutputs(TrainObserver* observer) {
  if (comm_->rank() != 0) return Status::Ok();
  // The run's folder: its lock (the lost island's lead held it; its end let it go), then its metrics.
  MOTLEY_ASSIGN_OR_RETURN(dir_lock_, RunDirLock::Acquire(job_.checkpoint.dir));
  lead_ = writer_ = summary_.led = true;
  if (observer != nullptr) observer_ = observer;
  const std::string metrics_path = options_.metrics_path.empty()
                                       ? (fs::path(job_.checkpoint.dir) / "metrics.jsonl").string()
                                       : options_.metrics_path;
  MOTLEY_RETURN_IF_ERROR(metrics_.Open(metrics_path, /*append=*/true, options_.overwrite));
  return LogUnlogged(metrics_path);
}

}  // namespace motley
