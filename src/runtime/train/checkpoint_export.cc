// `motley checkpoint export` (checkpoint.h: ExportCheckpoint): a checkpoint of any form written as a
// consolidated one, with a run of islands' outer state.
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "core/precision.h"
#include "runtime/train/checkpoint.h"

namespace motley {
namespace fs = std::filesystem;

namespace {

// A run of islands' outer state (islands.safetensors, #52) as an export carries it, consolidated: its
// tensors, and where a sharded checkpoint's pieces hold the outer momentum, that assembled into them
// (as launched islands gather it into a consolidated checkpoint). None: an empty list.
Result<std::vector<CheckpointExtraFile>> ExportedIslandsFile(const std::string& dir,
                                                             const std::vector<ParamShard>& shards) {
  const torch::Dtype dtype = shards.at(0).param.scalar_type();
  const fs::path path = fs::path(dir) / "islands.safetensors";
  if (!fs::exists(path)) return std::vector<CheckpointExtraFile>{};
  MOTLEY_ASSIGN_OR_RETURN(const SafetensorsFile f, SafetensorsFile::Open(path.string()));
  CheckpointExtraFile out{"islands.safetensors", {}, f.metadata()};
  for (const auto& [name, entry] : f.entries()) {
    MOTLEY_ASSIGN_OR_RETURN(torch::Tensor t, f.Load(name, dtype));
    out.tensors.push_back({name, std::move(t)});
  }
  if (out.metadata.count("momentum") > 0 && out.metadata.at("momentum") == "shards") {
    out.metadata.erase("momentum");
    std::vector<std::string> names;
    for (const ParamShard& s : shards) names.push_back(s.name);
    MOTLEY_ASSIGN_OR_RETURN(const auto momentum, LoadShardedOuterMomentum(dir, names, dtype));
    for (const auto& [name, m] : momentum) out.tensors.push_back({"outer." + name + ".momentum", m});
  }
  return std::vector<CheckpointExtraFile>{std::move(out)};
}

}  // namespace

Status ExportCheckpoint(const std::string& dir, const std::string& out) {
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec spec, LoadCheckpointModelSpec(dir));
  MOTLEY_ASSIGN_OR_RETURN(TrainerState state, CheckpointTrainerState(dir));
  LlamaModel model(spec, 0);
  // In the master dtype the checkpoint holds (an fp64 run's stays fp64).
  if (const std::optional<Precision> p = PrecisionFromName(state.precision)) model->set_precision(*p);
  MOTLEY_RETURN_IF_ERROR(LoadModelWeights(dir, *model));
  std::vector<ParamShard> shards = WholeParameterShards(*model);
  MOTLEY_ASSIGN_OR_RETURN(TrainerState loaded, LoadTrainingState(dir, shards));
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::exists(fs::path(out) / kTrainerStateFile, ec) && !fs::is_empty(out, ec))
    return Status::InvalidArgument(
        fmt::format("{}: exists and is not a checkpoint; export into a new folder", out));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<CheckpointExtraFile> extra, ExportedIslandsFile(dir, shards));
  return SaveCheckpoint(out, *model, shards, loaded, extra);
}

}  // namespace motley
