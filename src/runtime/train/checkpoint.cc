// Reading checkpoints and model folders (checkpoint.h): checksums, the step, weights whole or by
// part, the training state; writing them is checkpoint_save.cc.
#include "runtime/train/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/checkpoint_format.h"
#include "core/file_io.h"
#include "core/json_read.h"
#include "core/model_parse.h"
#include "core/precision.h"
#include "core/shard_index.h"
#include "runtime/model/precision_dtypes.h"
#include "runtime/model/tensor_parallel.h"
#include "runtime/train/safetensors.h"

namespace motley {
namespace fs = std::filesystem;
namespace {

// Beyond fp16's largest value (65,504) many times over: no trained weight is this large.
constexpr double kLargestPlausibleWeight = 1e8;

std::string Hex(uint32_t v) { return fmt::format("{:08x}", v); }

Result<TrainerStateFile> ReadStateFile(const std::string& dir) {
  const std::string path = (fs::path(dir) / kTrainerStateFile).string();
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseTrainerState(text, path);
}

}  // namespace

Result<int64_t> CheckpointStep(const std::string& dir) {
  MOTLEY_ASSIGN_OR_RETURN(TrainerStateFile f, ReadStateFile(dir));
  return f.state.step;
}

Result<TrainerState> CheckpointTrainerState(const std::string& dir) {
  MOTLEY_ASSIGN_OR_RETURN(TrainerStateFile f, ReadStateFile(dir));
  return f.state;
}

namespace {

// Verifies a file's size and CRC-32 against what the trainer state recorded.
Status VerifyFile(const std::string& dir, const std::string& name, const CheckpointFileRecord& record) {
  const std::string path = (fs::path(dir) / name).string();
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return Status::NotFound(fmt::format("{}: missing from the checkpoint", path));
  if (static_cast<int64_t>(size) != record.bytes)
    return Status::InvalidArgument(
        fmt::format("{}: {} bytes but the checkpoint recorded {} (truncated or "
                    "replaced); use another checkpoint",
                    path, size, record.bytes));
  MOTLEY_ASSIGN_OR_RETURN(uint32_t crc, FileCrc32(path));
  if (crc != record.crc32)
    return Status::InvalidArgument(
        fmt::format("{}: checksum mismatch (crc32 {} , recorded {}): the file is "
                    "corrupted; use another checkpoint",
                    path, Hex(crc), Hex(record.crc32)));
  return Status::Ok();
}

// Verifies every file the state lists but the rank files of a sharded checkpoint (each checked
// when a reader opens it: a rank reads only the files that hold its parameters).
Status VerifyFiles(const std::string& dir, const TrainerStateFile& state) {
  for (const auto& [name, record] : state.files)
    if (!name.starts_with("rank-")) MOTLEY_RETURN_IF_ERROR(VerifyFile(dir, name, record));
  return Status::Ok();
}

}  // namespace

Result<torch::Tensor> AssembleParameter(
    const ModelSpec& spec, const std::string& name, const ShardedParameter& param,
    const std::vector<const ShardPiece*>& pieces,
    const std::function<Result<torch::Tensor>(const ShardPiece&)>& elements, torch::Dtype dtype) {
  const int64_t slice = SliceElements(param);
  std::vector<torch::Tensor> slices;
  for (int t = 0; t < param.tp_degree; ++t) slices.push_back(torch::empty({slice}, dtype));
  for (const ShardPiece* p : pieces) {
    MOTLEY_ASSIGN_OR_RETURN(torch::Tensor t, elements(*p));
    if (t.numel() != p->count)
      return Status::InvalidArgument(fmt::format("{}: a piece of {} holds {} elements where {} were expected",
                                                 p->file, name, t.numel(), p->count));
    slices[p->tp_index].narrow(0, p->begin, p->count).copy_(t.reshape(-1));
  }
  if (param.tp_degree == 1) return slices[0].view(param.shape);
  if (!IsSplitParameter(name))
    return Status::InvalidArgument(
        fmt::format("{} is stored as {} slices but is not a weight tensor parallelism "
                    "splits; use another checkpoint",
                    name, param.tp_degree));
  const std::vector<int64_t> shape = SliceParameterShape(spec, name, param.shape, param.tp_degree);
  for (auto& s : slices) s = s.view(shape);
  return JoinParameter(spec, name, slices);
}

namespace {

// A sharded checkpoint being read: its index, and its rank files opened (and verified) on first use.
class ShardedReader {
 public:
  static Result<ShardedReader> Open(const std::string& dir, const TrainerStateFile& state) {
    ShardedReader r;
    r.dir_ = dir;
    r.state_ = state;
    const std::string path = (fs::path(dir) / kShardIndexFile).string();
    if (!state.files.count(kShardIndexFile))
      return Status::InvalidArgument(fmt::format(
          "{}: the trainer state does not list {}; use another checkpoint", dir, kShardIndexFile));
    MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    MOTLEY_ASSIGN_OR_RETURN(r.index_, ParseShardIndex(text, path));
    for (const ShardPiece& p : r.index_.pieces) {
      if (!state.files.count(p.file))
        return Status::InvalidArgument(
            fmt::format("{}: names {}, which the trainer state does not list; use another "
                        "checkpoint",
                        path, p.file));
      r.pieces_[p.param].push_back(&p - r.index_.pieces.data());
    }
    return r;
  }
  const ShardIndex& index() const { return index_; }
  bool has(const std::string& name) const { return index_.parameters.count(name) > 0; }

  // The whole parameter `name` (values or a moment), assembled from its pieces, in `dtype`.
  Result<torch::Tensor> Load(const ModelSpec& spec, const std::string& name, ShardTensor what,
                             torch::Dtype dtype) {
    std::vector<const ShardPiece*> pieces;
    for (size_t i : pieces_[name]) pieces.push_back(&index_.pieces[i]);
    return AssembleParameter(
        spec, name, index_.parameters.at(name), pieces,
        [&](const ShardPiece& p) -> Result<torch::Tensor> {
          MOTLEY_ASSIGN_OR_RETURN(const SafetensorsFile* f, File(p.file));
          const std::string key = ShardTensorName(p.param, p.tp_index, p.begin, what);
          if (!f->contains(key))
            return Status::InvalidArgument(
                fmt::format("{}: lacks {}, which {} says it holds; use another checkpoint", f->path(), key,
                            kShardIndexFile));
          return f->Load(key, dtype);
        },
        dtype);
  }

 private:
  Result<const SafetensorsFile*> File(const std::string& name) {
    auto it = open_.find(name);
    if (it == open_.end()) {
      MOTLEY_RETURN_IF_ERROR(VerifyFile(dir_, name, state_.files.at(name)));
      MOTLEY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open((fs::path(dir_) / name).string()));
      it = open_.emplace(name, std::move(f)).first;
    }
    return &it->second;
  }

  std::string dir_;
  TrainerStateFile state_;
  ShardIndex index_;
  std::map<std::string, std::vector<size_t>> pieces_;  // by parameter: indices into index_.pieces
  std::map<std::string, SafetensorsFile> open_;
};

// Name -> file for the weights: model.safetensors, or the shards of model.safetensors.index.json.
Result<std::map<std::string, std::string>> WeightFiles(const std::string& dir) {
  std::map<std::string, std::string> files;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    MOTLEY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(single.string()));
    for (const auto& [name, e] : f.entries()) files[name] = single.string();
    return files;
  }
  if (!fs::exists(index))
    return Status::NotFound(
        fmt::format("{}: no model.safetensors or model.safetensors.index.json; not a checkpoint "
                    "directory",
                    dir));
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index.string()));
  MOTLEY_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, index.string()));
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    return Status::InvalidArgument(
        fmt::format("{}: expected a JSON object with \"weight_map\"", index.string()));
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string())
      return Status::InvalidArgument(
          fmt::format("{}: weight_map[\"{}\"] must be a file name", index.string(), name));
    // A file of the folder itself: never a path out of it (../, absolute) nor into a subfolder.
    const std::string f = file.get<std::string>();
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos ||
        f.find('\\') != std::string::npos)
      return Status::InvalidArgument(
          fmt::format("{}: weight_map[\"{}\"] is \"{}\", not the name of a file in the folder; an index "
                      "names only its own "
                      "folder's files (download the folder again)",
                      index.string(), name, f));
    files[name] = (fs::path(dir) / f).string();
  }
  return files;
}

}  // namespace

bool IsShardedCheckpoint(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / kShardIndexFile, ec);
}

namespace {

// The run folder's checkpoint folder of the highest step (by number), or "" when it has none.
std::string NewestCheckpointFolder(const fs::path& run_dir) {
  std::error_code ec;
  std::pair<int64_t, std::string> newest{-1, ""};
  for (const auto& entry : fs::directory_iterator(run_dir, ec))
    if (const auto step = CheckpointFolderStep(entry.path().filename().string());
        step && entry.is_directory(ec))
      newest = std::max(newest, {*step, entry.path().string()});
  return newest.second;
}

}  // namespace

Result<std::string> ResolveCheckpointDir(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    return Status::NotFound(fmt::format("{}: no such checkpoint directory", path));
  const fs::path latest = fs::path(path) / "latest";
  const std::string newest = NewestCheckpointFolder(path);
  if (fs::exists(latest)) {
    MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(latest.string()));
    Result<std::string> name = ParseLatest(text, latest.string());
    if (!name.ok() && !newest.empty())
      return Status::InvalidArgument(
          fmt::format("{}; the newest checkpoint folder there is {}", name.status().message(), newest));
    if (!name.ok()) return name.status();
    const fs::path dir = fs::path(path) / *name;
    if (!fs::is_directory(dir))
      return Status::NotFound(fmt::format("{}: names {}, which is missing{}", latest.string(), dir.string(),
                                          newest.empty()
                                              ? ""
                                              : fmt::format("; the newest checkpoint folder there is {}: "
                                                            "resume from it, or write its name into {}",
                                                            newest, latest.string())));
    return dir.string();
  }
  // A run folder without `latest` (it was lost): not a checkpoint itself; name the newest one.
  if (!newest.empty() && !fs::exists(fs::path(path) / kTrainerStateFile) &&
      !fs::exists(fs::path(path) / "config.json"))
    return Status::NotFound(
        fmt::format("{}: a run folder without its latest file; the newest checkpoint folder there "
                    "is {}: resume from it",
                    path, newest));
  return path;
}

Result<ModelSpec> LoadCheckpointModelSpec(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseHfConfigJson(text, path);
}

namespace {

// The sharded form of LoadModelWeights.
Status LoadShardedWeights(const std::string& dir, const TrainerStateFile& state, LlamaModelImpl& model,
                          const std::set<std::string>& only, WeightSlice slice) {
  MOTLEY_ASSIGN_OR_RETURN(ShardedReader reader, ShardedReader::Open(dir, state));
  std::vector<std::string> missing;
  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters()) {
    if (!only.empty() && !only.count(p.key())) continue;
    if (!reader.has(p.key())) {
      missing.push_back(p.key());
      continue;
    }
    MOTLEY_ASSIGN_OR_RETURN(
        torch::Tensor t, reader.Load(model.spec(), p.key(), ShardTensor::kValues, p.value().scalar_type()));
    if (slice.tp > 1 && IsSplitParameter(p.key()) && t.sizes() == LlamaParameterShape(model.spec(), p.key()))
      t = SliceParameter(model.spec(), p.key(), t, slice.index, slice.tp);
    if (t.sizes() != p.value().sizes())
      return Status::InvalidArgument(fmt::format("{}: {} has shape {} but the model (config.json) needs {}",
                                                 dir, p.key(), fmt::join(t.sizes().vec(), "x"),
                                                 fmt::join(p.value().sizes().vec(), "x")));
    p.value().copy_(t);
  }
  if (!missing.empty())
    return Status::InvalidArgument(
        fmt::format("{}: missing {} weight(s), first {}: the weights do not match "
                    "config.json",
                    dir, missing.size(), missing.front()));
  if (only.empty()) {
    const auto named = model.named_parameters();
    for (const auto& [name, param] : reader.index().parameters)
      if (!named.contains(name))
        return Status::InvalidArgument(
            fmt::format("{}: holds {}, which the model does not have: the weights do not "
                        "match config.json",
                        dir, name));
  }
  return Status::Ok();
}

// A weight no trained model holds (not finite, or of a magnitude beyond fp16's range many times
// over) is taken for corruption rather than evaluated: a Hugging Face folder has no checksums.
Status CheckPlausibleWeight(const std::string& file, const std::string& name, const torch::Tensor& t) {
  if (!t.is_floating_point() || t.numel() == 0) return Status::Ok();
  const double largest = std::max(t.max().item<double>(), -t.min().item<double>());
  if (std::isfinite(largest) && largest <= kLargestPlausibleWeight) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "{}: {} holds {} (largest magnitude {:g}): no trained model has such weights, so the file is taken for "
      "corrupted; download or export it again",
      file, name, std::isfinite(largest) ? "an implausibly large value" : "NaN or infinite values", largest));
}

// The folder's weights against the model's: one error naming the first missing or extra one.
Status CheckWeightNames(const std::string& dir, const std::vector<std::string>& missing,
                        const std::vector<std::string>& unexpected) {
  if (!missing.empty())
    return Status::InvalidArgument(
        fmt::format("{}: missing {} weight(s), first {}: the weights do not match "
                    "config.json",
                    dir, missing.size(), missing.front()));
  if (!unexpected.empty())
    return Status::InvalidArgument(
        fmt::format("{}: {} weight(s) the model does not have, first {}: the weights do not "
                    "match config.json",
                    dir, unexpected.size(), unexpected.front()));
  return Status::Ok();
}

}  // namespace

Result<std::function<Status(const std::string&, int64_t, torch::Tensor)>> FolderShardSource(
    const std::string& dir, LlamaModelImpl& model) {
  if (IsShardedCheckpoint(dir))
    return Status::InvalidArgument(
        fmt::format("{}: a sharded checkpoint; export it first (motley checkpoint export)", dir));
  MOTLEY_ASSIGN_OR_RETURN(auto files, WeightFiles(dir));
  std::vector<std::string> missing, unexpected;
  const auto named = model.named_parameters();
  for (const auto& p : named)
    if (!files.count(p.key())) missing.push_back(p.key());
  for (const auto& [name, file] : files)
    if (!named.contains(name) && !name.ends_with("rotary_emb.inv_freq")) unexpected.push_back(name);
  MOTLEY_RETURN_IF_ERROR(CheckWeightNames(dir, missing, unexpected));
  const bool tied = model.spec().tie_embeddings;
  auto open = std::make_shared<std::map<std::string, SafetensorsFile>>();
  return std::function<Status(const std::string&, int64_t, torch::Tensor)>(
      [files = std::move(files), open, tied](const std::string& param, int64_t begin,
                                             torch::Tensor dest) -> Status {
        const std::string name = tied && param == "lm_head.weight" ? "model.embed_tokens.weight" : param;
        auto it = files.find(name);
        if (it == files.end()) return Status::NotFound(fmt::format("no file holds {}", name));
        if (!open->count(it->second)) {
          MOTLEY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(it->second));
          open->emplace(it->second, std::move(f));
        }
        MOTLEY_ASSIGN_OR_RETURN(torch::Tensor mapped, open->at(it->second).Map(name));
        const torch::Tensor range = mapped.reshape({-1}).narrow(0, begin, dest.numel());
        MOTLEY_RETURN_IF_ERROR(CheckPlausibleWeight(it->second, name, range));
        torch::NoGradGuard no_grad;
        dest.copy_(range);
        return Status::Ok();
      });
}

namespace {

// A motley checkpoint's weights are checksummed, so only their values can be wrong: one with NaN
// or infinite weights was written after a run diverged (motley no longer writes one) and is
// refused for resuming, exporting and evaluating alike.
Status CheckFiniteWeights(const std::string& dir, LlamaModelImpl& model, const std::set<std::string>& only) {
  torch::NoGradGuard no_grad;
  for (const auto& p : model.named_parameters()) {
    if ((!only.empty() && !only.count(p.key())) || IsPlaceholder(p.value()) || !p.value().is_floating_point())
      continue;
    if (!torch::isfinite(p.value()).all().item<bool>())
      return Status::InvalidArgument(
          fmt::format("{}: {} holds NaN or infinite values: the run had diverged when it wrote this "
                      "checkpoint; resume, export "
                      "or evaluate an earlier one (its folder's other step-* checkpoints)",
                      dir, p.key()));
  }
  return Status::Ok();
}

}  // namespace

// LoadModelWeights after the checksums (`verify`: checks them first).
static Status LoadWeights(const std::string& dir, LlamaModelImpl& model, const std::set<std::string>& only,
                          WeightSlice slice, bool verify) {
  const bool checksummed = fs::exists(fs::path(dir) / kTrainerStateFile);
  if (checksummed) {
    MOTLEY_ASSIGN_OR_RETURN(TrainerStateFile state, ReadStateFile(dir));
    if (verify) MOTLEY_RETURN_IF_ERROR(VerifyFiles(dir, state));
    if (IsShardedCheckpoint(dir)) {
      MOTLEY_RETURN_IF_ERROR(LoadShardedWeights(dir, state, model, only, slice));
      return CheckFiniteWeights(dir, model, only);
    }
  }
  MOTLEY_ASSIGN_OR_RETURN(auto files, WeightFiles(dir));
  std::map<std::string, SafetensorsFile> open;
  std::vector<std::string> missing;
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters()) {
    if (!only.empty() && !only.count(p.key())) {
      used.insert(p.key());
      continue;
    }
    auto it = files.find(p.key());
    if (it == files.end()) {
      missing.push_back(p.key());
      continue;
    }
    used.insert(p.key());
    if (!open.count(it->second)) {
      MOTLEY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(it->second));
      open.emplace(it->second, std::move(f));
    }
    const SafetensorsFile& f = open.at(it->second);
    if (!f.contains(p.key()))
      return Status::InvalidArgument(
          fmt::format("{}: the index names this file for {} but it lacks it", it->second, p.key()));
    const std::vector<int64_t>& shape = f.entries().at(p.key()).shape;
    const bool sliced = slice.tp > 1 && IsSplitParameter(p.key());
    const std::vector<int64_t> want =
        sliced ? LlamaParameterShape(model.spec(), p.key()) : p.value().sizes().vec();
    if (shape != want)
      return Status::InvalidArgument(fmt::format("{}: {} has shape {} but the model (config.json) needs {}",
                                                 it->second, p.key(), fmt::join(shape, "x"),
                                                 fmt::join(want, "x")));
    if (sliced) {
      // This rank's slice, from the file's pages that hold it.
      MOTLEY_ASSIGN_OR_RETURN(torch::Tensor mapped, f.Map(p.key()));
      p.value().copy_(SliceParameter(model.spec(), p.key(), mapped, slice.index, slice.tp));
    } else {
      // Straight into the parameter (nothing beside it when the file holds its dtype).
      MOTLEY_RETURN_IF_ERROR(f.LoadInto(p.key(), p.value()));
    }
    if (!checksummed) MOTLEY_RETURN_IF_ERROR(CheckPlausibleWeight(it->second, p.key(), p.value()));
  }
  std::vector<std::string> unexpected;
  if (missing.empty())
    for (const auto& [name, file] : files)
      if (!used.count(name) && !name.ends_with("rotary_emb.inv_freq")) unexpected.push_back(name);
  MOTLEY_RETURN_IF_ERROR(CheckWeightNames(dir, missing, unexpected));
  return checksummed ? CheckFiniteWeights(dir, model, only) : Status::Ok();
}

Status LoadModelWeights(const std::string& dir, LlamaModelImpl& model, const std::set<std::string>& only,
                        WeightSlice slice) {
  return LoadWeights(dir, model, only, slice, /*verify=*/true);
}

Status CheckCheckpointLoads(const std::string& dir) {
  MOTLEY_ASSIGN_OR_RETURN(const ModelSpec spec, LoadCheckpointModelSpec(dir));
  MOTLEY_ASSIGN_OR_RETURN(const TrainerStateFile state, ReadStateFile(dir));
  const std::optional<Precision> precision = PrecisionFromName(state.state.precision);
  const torch::Dtype dtype = precision ? MasterDtype(*precision) : torch::kFloat32;
  // The parameters a layer at a time (a model larger than this host's memory is still checked),
  // each group loaded as a resume loads it: names, shapes, values.
  std::map<std::string, std::set<std::string>> groups;
  for (const auto& p : LlamaModel(spec, 0, std::set<std::string>{})->named_parameters()) {
    const std::string& name = p.key();
    const size_t at = name.rfind("model.layers.", 0) == 0 ? name.find('.', 13) : std::string::npos;
    groups[at == std::string::npos ? "rest" : name.substr(0, at)].insert(name);
  }
  for (const auto& [group, names] : groups) {
    LlamaModel part(spec, 0, names, dtype);
    MOTLEY_RETURN_IF_ERROR(LoadWeights(dir, *part, names, {}, /*verify=*/false));
  }
  return Status::Ok();
}

Result<std::map<std::string, torch::Tensor>> LoadShardedOuterMomentum(const std::string& dir,
                                                                      const std::vector<std::string>& names,
                                                                      torch::Dtype dtype) {
  MOTLEY_ASSIGN_OR_RETURN(TrainerStateFile file, ReadStateFile(dir));
  MOTLEY_ASSIGN_OR_RETURN(ShardedReader reader, ShardedReader::Open(dir, file));
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec spec, LoadCheckpointModelSpec(dir));
  std::map<std::string, torch::Tensor> out;
  torch::NoGradGuard no_grad;
  for (const std::string& name : names) {
    if (!reader.has(name))
      return Status::InvalidArgument(fmt::format("{}: no outer momentum for {}", dir, name));
    MOTLEY_ASSIGN_OR_RETURN(out[name], reader.Load(spec, name, ShardTensor::kOuterMomentum, dtype));
  }
  return out;
}

Result<TrainerState> LoadTrainingState(const std::string& dir, std::vector<ParamShard>& shards) {
  if (!fs::exists(fs::path(dir) / kTrainerStateFile))
    return Status::NotFound(
        fmt::format("{}: no {}; resuming needs a motley checkpoint (a Hugging Face directory "
                    "only holds weights)",
                    dir, kTrainerStateFile));
  MOTLEY_ASSIGN_OR_RETURN(TrainerStateFile file, ReadStateFile(dir));
  MOTLEY_RETURN_IF_ERROR(VerifyFiles(dir, file));
  const TrainerState s = file.state;
  torch::NoGradGuard no_grad;
  if (IsShardedCheckpoint(dir)) {
    MOTLEY_ASSIGN_OR_RETURN(ShardedReader reader, ShardedReader::Open(dir, file));
    MOTLEY_ASSIGN_OR_RETURN(ModelSpec spec, LoadCheckpointModelSpec(dir));
    for (auto& shard : shards) {
      if (!reader.has(shard.name))
        return Status::InvalidArgument(fmt::format("{}: no moments for {}", dir, shard.name));
      const torch::Dtype dtype = shard.param.scalar_type();
      MOTLEY_ASSIGN_OR_RETURN(shard.exp_avg, reader.Load(spec, shard.name, ShardTensor::kExpAvg, dtype));
      MOTLEY_ASSIGN_OR_RETURN(shard.exp_avg_sq, reader.Load(spec, shard.name, ShardTensor::kExpAvgSq, dtype));
      if (shard.exp_avg.sizes() != shard.param.sizes())
        return Status::InvalidArgument(
            fmt::format("{}: the moments of {} have another shape than the parameter", dir, shard.name));
      shard.exp_avg = shard.exp_avg.to(shard.param.device());
      shard.exp_avg_sq = shard.exp_avg_sq.to(shard.param.device());
    }
    return s;
  }
  MOTLEY_ASSIGN_OR_RETURN(SafetensorsFile f,
                          SafetensorsFile::Open((fs::path(dir) / "optimizer.safetensors").string()));
  for (auto& shard : shards) {
    if (!f.contains(shard.name + ".exp_avg")) {
      if (s.step > 0)
        return Status::InvalidArgument(fmt::format("{}: no moments for {}", f.path(), shard.name));
      continue;
    }
    // In the parameter's dtype: a checkpoint of another precision resumes in this one.
    MOTLEY_ASSIGN_OR_RETURN(shard.exp_avg, f.Load(shard.name + ".exp_avg", shard.param.scalar_type()));
    MOTLEY_ASSIGN_OR_RETURN(shard.exp_avg_sq, f.Load(shard.name + ".exp_avg_sq", shard.param.scalar_type()));
    shard.exp_avg = shard.exp_avg.to(shard.param.device());
    shard.exp_avg_sq = shard.exp_avg_sq.to(shard.param.device());
    if (shard.exp_avg.sizes() != shard.param.sizes())
      return Status::InvalidArgument(
          fmt::format("{}: the moments of {} have another shape than the parameter", f.path(), shard.name));
  }
  return s;
}

Result<TrainerStateFile> VerifyCheckpoint(const std::string& dir) {
  if (!fs::exists(fs::path(dir) / kTrainerStateFile))
    return Status::NotFound(fmt::format("{}: no {}; not a motley checkpoint", dir, kTrainerStateFile));
  MOTLEY_ASSIGN_OR_RETURN(TrainerStateFile state, ReadStateFile(dir));
  for (const auto& [name, record] : state.files) MOTLEY_RETURN_IF_ERROR(VerifyFile(dir, name, record));
  if (IsShardedCheckpoint(dir)) MOTLEY_RETURN_IF_ERROR(ShardedReader::Open(dir, state).status());
  return state;
}

}  // namespace motley
