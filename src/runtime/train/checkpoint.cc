#include "runtime/train/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/json_read.h"
#include "core/checkpoint_format.h"
#include "core/model_parse.h"
#include "core/precision.h"
#include "core/shard_index.h"
#include "runtime/model/tensor_parallel.h"
#include "runtime/train/safetensors.h"

namespace motley {
namespace fs = std::filesystem;
namespace {

constexpr const char* kStateFile = "trainer_state.json";
// Beyond fp16's largest value (65,504) many times over: no trained weight is this large.
constexpr double kLargestPlausibleWeight = 1e8;

std::string Hex(uint32_t v) { return fmt::format("{:08x}", v); }

Result<TrainerStateFile> ReadStateFile(const std::string& dir) {
  const std::string path = (fs::path(dir) / kStateFile).string();
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseTrainerState(text, path);
}

}  // namespace

Result<int64_t> CheckpointStep(const std::string& dir) {
  MOTLEY_ASSIGN_OR_RETURN(TrainerStateFile f, ReadStateFile(dir));
  return f.state.step;
}

namespace {

// Verifies a file's size and CRC-32 against what the trainer state recorded.
Status VerifyFile(const std::string& dir, const std::string& name, const CheckpointFileRecord& record) {
  const std::string path = (fs::path(dir) / name).string();
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return Status::NotFound(fmt::format("{}: missing from the checkpoint", path));
  if (static_cast<int64_t>(size) != record.bytes)
    return Status::InvalidArgument(fmt::format("{}: {} bytes but the checkpoint recorded {} (truncated or "
                                               "replaced); use another checkpoint",
                                               path, size, record.bytes));
  MOTLEY_ASSIGN_OR_RETURN(uint32_t crc, FileCrc32(path));
  if (crc != record.crc32)
    return Status::InvalidArgument(fmt::format("{}: checksum mismatch (crc32 {} , recorded {}): the file is "
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

Result<torch::Tensor> AssembleParameter(const ModelSpec& spec, const std::string& name, const ShardedParameter& param,
                                        const std::vector<const ShardPiece*>& pieces,
                                        const std::function<Result<torch::Tensor>(const ShardPiece&)>& elements,
                                        torch::Dtype dtype) {
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
    return Status::InvalidArgument(fmt::format("{} is stored as {} slices but is not a weight tensor parallelism "
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
      return Status::InvalidArgument(fmt::format("{}: the trainer state does not list {}; use another checkpoint",
                                                 dir, kShardIndexFile));
    MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    MOTLEY_ASSIGN_OR_RETURN(r.index_, ParseShardIndex(text, path));
    for (const ShardPiece& p : r.index_.pieces) {
      if (!state.files.count(p.file))
        return Status::InvalidArgument(fmt::format("{}: names {}, which the trainer state does not list; use another "
                                                   "checkpoint",
                                                   path, p.file));
      r.pieces_[p.param].push_back(&p - r.index_.pieces.data());
    }
    return r;
  }
  const ShardIndex& index() const { return index_; }
  bool has(const std::string& name) const { return index_.parameters.count(name) > 0; }

  // The whole parameter `name` (values or a moment), assembled from its pieces, in `dtype`.
  Result<torch::Tensor> Load(const ModelSpec& spec, const std::string& name, ShardTensor what, torch::Dtype dtype) {
    std::vector<const ShardPiece*> pieces;
    for (size_t i : pieces_[name]) pieces.push_back(&index_.pieces[i]);
    return AssembleParameter(
        spec, name, index_.parameters.at(name), pieces,
        [&](const ShardPiece& p) -> Result<torch::Tensor> {
          MOTLEY_ASSIGN_OR_RETURN(const SafetensorsFile* f, File(p.file));
          const std::string key = ShardTensorName(p.param, p.tp_index, p.begin, what);
          if (!f->contains(key))
            return Status::InvalidArgument(fmt::format("{}: lacks {}, which {} says it holds; use another checkpoint",
                                                       f->path(), key, kShardIndexFile));
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
    return Status::NotFound(fmt::format("{}: no model.safetensors or model.safetensors.index.json; not a checkpoint "
                                        "directory",
                                        dir));
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index.string()));
  MOTLEY_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, index.string()));
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    return Status::InvalidArgument(fmt::format("{}: expected a JSON object with \"weight_map\"", index.string()));
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string())
      return Status::InvalidArgument(fmt::format("{}: weight_map[\"{}\"] must be a file name", index.string(), name));
    files[name] = (fs::path(dir) / file.get<std::string>()).string();
  }
  return files;
}

}  // namespace

Result<std::unique_ptr<RunDirLock>> RunDirLock::Acquire(const std::string& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return Status::IoError(fmt::format("{}: cannot create the checkpoint directory: {}", run_dir, ec.message()));
  const std::string path = (fs::path(run_dir) / ".lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char holder[256] = {};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "another process";
    while (!who.empty() && std::isspace(static_cast<unsigned char>(who.back()))) who.pop_back();
    return Status::InvalidArgument(fmt::format(
        "{}: another run is writing its checkpoints and metrics here ({}); wait for it to end, or give this run "
        "another folder ([checkpoint] dir in the job file)",
        run_dir, who));
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string me = fmt::format("pid {} on {}\n", ::getpid(), host);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    // The lock holds without the note; only the message to a second run is poorer.
  }
  return std::unique_ptr<RunDirLock>(new RunDirLock(fd));
}

Status ClaimRunDir(const std::string& run_dir, bool resuming, bool overwrite, bool clean) {
  std::error_code ec;
  const fs::path latest = fs::path(run_dir) / "latest";
  if (resuming || !fs::exists(latest, ec)) return Status::Ok();
  if (!overwrite) {
    Result<std::string> name = ReadFileToString(latest.string());
    std::string step = name.ok() ? *name : "?";
    while (!step.empty() && std::isspace(static_cast<unsigned char>(step.back()))) step.pop_back();
    return Status::InvalidArgument(fmt::format(
        "{}: holds another run's checkpoints (latest: {}); continue that run with --resume {}, start over here with "
        "--overwrite (its checkpoints and metrics are removed), or give this run another folder ([checkpoint] dir)",
        run_dir, step.size() > 64 ? step.substr(0, 64) + "..." : step, run_dir));
  }
  if (!clean) return Status::Ok();
  for (const auto& entry : fs::directory_iterator(run_dir, ec))
    if (entry.is_directory() && entry.path().filename().string().starts_with("step-")) fs::remove_all(entry.path(), ec);
  fs::remove(latest, ec);
  fs::remove(fs::path(run_dir) / "metrics.jsonl", ec);
  return Status::Ok();
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

namespace {

// A whole checkpoint folder `tmp` into place as `dir`: swapped with the checkpoint there in one step
// (renameat2's RENAME_EXCHANGE), so a crash leaves one whole checkpoint under the name, never none;
// the old one is then removed.
Status MoveIntoPlace(const std::string& tmp, const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0)
      return Status::IoError(fmt::format("{}: cannot swap {} into place: {}", dir, tmp, std::strerror(errno)));
    fs::remove_all(tmp, ec);
  } else {
    fs::rename(tmp, dir, ec);
    if (ec) return Status::IoError(fmt::format("{}: cannot rename {} into place: {}", dir, tmp, ec.message()));
  }
  const fs::path parent = fs::path(dir).parent_path();
  return FsyncDirectory(parent.empty() ? "." : parent.string());
}

// What interrupted saves left in a run folder (step-*.tmp).
void RemoveInterruptedSaves(const std::string& run_dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (entry.is_directory() && file.starts_with("step-") && file.ends_with(".tmp")) fs::remove_all(entry.path(), ec);
  }
}

// `latest` names the new checkpoint `name`; of the older ones, the newest `keep` stay.
Status PointLatestAndPrune(const std::string& run_dir, const std::string& name, int64_t keep) {
  MOTLEY_RETURN_IF_ERROR(AtomicWriteFile((fs::path(run_dir) / "latest").string(), name + "\n"));
  std::error_code ec;
  std::vector<std::string> steps;
  for (const auto& entry : fs::directory_iterator(run_dir, ec))
    if (entry.is_directory() && entry.path().filename().string().starts_with("step-") &&
        !entry.path().filename().string().ends_with(".tmp"))
      steps.push_back(entry.path().filename().string());
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; keep > 0 && i + static_cast<size_t>(keep) < steps.size(); ++i)
    if (steps[i] != name) fs::remove_all(fs::path(run_dir) / steps[i], ec);
  return Status::Ok();
}

}  // namespace

Status SaveCheckpoint(const std::string& dir, LlamaModelImpl& model, const std::vector<ParamShard>& shards,
                      const TrainerState& state) {
  const std::string tmp = dir + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return Status::IoError(fmt::format("{}: cannot create: {}", tmp, ec.message()));
  TrainerStateFile out;
  out.state = state;
  auto record = [&](const std::string& name, uint32_t crc) {
    out.files[name] = {static_cast<int64_t>(fs::file_size(fs::path(tmp) / name)), crc};
  };
  uint32_t crc = 0;
  MOTLEY_RETURN_IF_ERROR(AtomicWriteFile((fs::path(tmp) / "config.json").string(), HfConfigJson(model.spec()), &crc));
  record("config.json", crc);

  std::vector<NamedTensor> weights;
  // In the master dtype: fp32, or fp64 for an fp64 run.
  for (const auto& p : model.named_parameters())
    weights.push_back({p.key(), p.value().scalar_type() == torch::kFloat64 ? p.value() : p.value().to(torch::kFloat32)});
  MOTLEY_RETURN_IF_ERROR(WriteSafetensors((fs::path(tmp) / "model.safetensors").string(), weights,
                                          {{"format", "pt"}}, &crc));
  record("model.safetensors", crc);

  std::vector<NamedTensor> moments;
  for (const auto& s : shards) {
    if (!s.exp_avg.defined()) continue;
    moments.push_back({s.name + ".exp_avg", s.exp_avg});
    moments.push_back({s.name + ".exp_avg_sq", s.exp_avg_sq});
  }
  MOTLEY_RETURN_IF_ERROR(WriteSafetensors((fs::path(tmp) / "optimizer.safetensors").string(), moments, {}, &crc));
  record("optimizer.safetensors", crc);

  MOTLEY_RETURN_IF_ERROR(AtomicWriteFile((fs::path(tmp) / kStateFile).string(), TrainerStateJson(out)));
  return MoveIntoPlace(tmp, dir);
}

Result<std::string> SaveRunCheckpoint(const std::string& run_dir, int64_t keep, LlamaModelImpl& model,
                                      const std::vector<ParamShard>& shards, const TrainerState& state) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return Status::IoError(fmt::format("{}: cannot create the checkpoint directory: {}", run_dir, ec.message()));
  const std::string name = CheckpointFolderName(state.step);
  const std::string dir = (fs::path(run_dir) / name).string();
  RemoveInterruptedSaves(run_dir);
  MOTLEY_RETURN_IF_ERROR(SaveCheckpoint(dir, model, shards, state));
  MOTLEY_RETURN_IF_ERROR(PointLatestAndPrune(run_dir, name, keep));
  return dir;
}

Result<std::string> BeginShardedCheckpoint(const std::string& run_dir, int64_t step) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return Status::IoError(fmt::format("{}: cannot create the checkpoint directory: {}", run_dir, ec.message()));
  RemoveInterruptedSaves(run_dir);
  const std::string tmp = (fs::path(run_dir) / (CheckpointFolderName(step) + ".tmp")).string();
  fs::create_directories(tmp, ec);
  if (ec) return Status::IoError(fmt::format("{}: cannot create: {}", tmp, ec.message()));
  return tmp;
}

Result<CheckpointFileRecord> WriteRankShards(const std::string& tmp, int rank, const std::vector<StatePiece>& pieces) {
  CheckpointFileRecord record;
  if (pieces.empty()) return record;
  // The parameters' shapes and splits travel in the file's metadata, for the index rank 0 writes.
  nlohmann::json params = nlohmann::json::object();
  std::vector<NamedTensor> tensors;
  for (const StatePiece& p : pieces) {
    params[p.param] = {{"shape", p.shape}, {"tp_degree", p.tp_degree}};
    if (p.padded_rows > 0) params[p.param]["padded_rows"] = p.padded_rows;
    tensors.push_back({ShardTensorName(p.param, p.tp_index, p.begin, ShardTensor::kValues), p.values});
    tensors.push_back({ShardTensorName(p.param, p.tp_index, p.begin, ShardTensor::kExpAvg), p.exp_avg});
    tensors.push_back({ShardTensorName(p.param, p.tp_index, p.begin, ShardTensor::kExpAvgSq), p.exp_avg_sq});
  }
  const std::string path = (fs::path(tmp) / RankShardFileName(rank)).string();
  MOTLEY_RETURN_IF_ERROR(WriteSafetensors(path, tensors, {{"parameters", params.dump()}}, &record.crc32));
  std::error_code ec;
  record.bytes = static_cast<int64_t>(fs::file_size(path, ec));
  if (ec) return Status::IoError(fmt::format("{}: written but unreadable: {}", path, ec.message()));
  return record;
}

Result<std::string> FinishShardedCheckpoint(const std::string& run_dir, int64_t keep, const std::string& tmp,
                                            const ModelSpec& spec, const std::vector<CheckpointFileRecord>& rank_files,
                                            const TrainerState& state) {
  // The index, from the rank files' headers.
  ShardIndex index;
  TrainerStateFile out;
  out.state = state;
  for (size_t r = 0; r < rank_files.size(); ++r) {
    if (rank_files[r].bytes == 0) continue;
    const std::string file = RankShardFileName(static_cast<int>(r));
    out.files[file] = rank_files[r];
    MOTLEY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open((fs::path(tmp) / file).string()));
    auto meta = f.metadata().find("parameters");
    if (meta == f.metadata().end())
      return Status::Internal(fmt::format("{}: no parameter shapes in its metadata", f.path()));
    MOTLEY_ASSIGN_OR_RETURN(nlohmann::json params, ParseJson(meta->second, f.path()));
    for (const auto& [name, p] : params.items()) {
      ShardedParameter param{p.at("shape").get<std::vector<int64_t>>(), p.at("tp_degree").get<int>(),
                             p.value("padded_rows", int64_t{0})};
      auto [it, inserted] = index.parameters.emplace(name, param);
      if (!inserted && (it->second.shape != param.shape || it->second.tp_degree != param.tp_degree ||
                        it->second.padded_rows != param.padded_rows))
        return Status::Internal(fmt::format("{}: {} is stored in two layouts by two ranks", tmp, name));
    }
    for (const auto& [key, entry] : f.entries()) {
      ShardPiece piece;
      ShardTensor what = ShardTensor::kValues;
      if (!ParseShardTensorName(key, &piece.param, &piece.tp_index, &piece.begin, &what))
        return Status::Internal(fmt::format("{}: {} is not a piece's tensor", f.path(), key));
      if (what != ShardTensor::kValues) continue;
      int64_t count = 1;
      for (int64_t d : entry.shape) count *= d;
      piece.count = count;
      piece.file = file;
      index.pieces.push_back(std::move(piece));
    }
  }
  const std::string index_path = (fs::path(tmp) / kShardIndexFile).string();
  MOTLEY_RETURN_IF_ERROR(ValidateShardIndex(index, index_path));
  int64_t elements = 0;
  for (const auto& [name, p] : index.parameters) {  // the model's elements, padding aside
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    elements += n;
  }
  if (elements != TotalParams(spec))
    return Status::Internal(fmt::format("{}: the ranks wrote {} parameters, the model has {}", tmp, elements,
                                        TotalParams(spec)));
  uint32_t crc = 0;
  MOTLEY_RETURN_IF_ERROR(AtomicWriteFile(index_path, ShardIndexJson(index), &crc));
  out.files[kShardIndexFile] = {static_cast<int64_t>(fs::file_size(index_path)), crc};
  MOTLEY_RETURN_IF_ERROR(AtomicWriteFile((fs::path(tmp) / "config.json").string(), HfConfigJson(spec), &crc));
  out.files["config.json"] = {static_cast<int64_t>(fs::file_size(fs::path(tmp) / "config.json")), crc};
  MOTLEY_RETURN_IF_ERROR(AtomicWriteFile((fs::path(tmp) / kStateFile).string(), TrainerStateJson(out)));
  MOTLEY_RETURN_IF_ERROR(FsyncDirectory(tmp));
  const std::string name = CheckpointFolderName(state.step);
  const std::string dir = (fs::path(run_dir) / name).string();
  MOTLEY_RETURN_IF_ERROR(MoveIntoPlace(tmp, dir));
  MOTLEY_RETURN_IF_ERROR(PointLatestAndPrune(run_dir, name, keep));
  return dir;
}

bool IsShardedCheckpoint(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / kShardIndexFile, ec);
}

Result<std::string> ResolveCheckpointDir(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    return Status::NotFound(fmt::format("{}: no such checkpoint directory", path));
  const fs::path latest = fs::path(path) / "latest";
  if (fs::exists(latest)) {
    MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(latest.string()));
    MOTLEY_ASSIGN_OR_RETURN(std::string name, ParseLatest(text, latest.string()));
    const fs::path dir = fs::path(path) / name;
    if (!fs::is_directory(dir))
      return Status::NotFound(fmt::format("{}: names {}, which is missing", latest.string(), dir.string()));
    return dir.string();
  }
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
    MOTLEY_ASSIGN_OR_RETURN(torch::Tensor t, reader.Load(model.spec(), p.key(), ShardTensor::kValues,
                                                         p.value().scalar_type()));
    if (slice.tp > 1 && IsSplitParameter(p.key()) && t.sizes() == LlamaParameterShape(model.spec(), p.key()))
      t = SliceParameter(model.spec(), p.key(), t, slice.index, slice.tp);
    if (t.sizes() != p.value().sizes())
      return Status::InvalidArgument(fmt::format("{}: {} has shape {} but the model (config.json) needs {}", dir,
                                                 p.key(), fmt::join(t.sizes().vec(), "x"),
                                                 fmt::join(p.value().sizes().vec(), "x")));
    p.value().copy_(t);
  }
  if (!missing.empty())
    return Status::InvalidArgument(fmt::format("{}: missing {} weight(s), first {}: the weights do not match "
                                               "config.json",
                                               dir, missing.size(), missing.front()));
  if (only.empty()) {
    const auto named = model.named_parameters();
    for (const auto& [name, param] : reader.index().parameters)
      if (!named.contains(name))
        return Status::InvalidArgument(fmt::format("{}: holds {}, which the model does not have: the weights do not "
                                                   "match config.json",
                                                   dir, name));
  }
  return Status::Ok();
}

}  // namespace

Result<std::function<Status(const std::string&, int64_t, torch::Tensor)>> FolderShardSource(
    const std::string& dir, LlamaModelImpl& model) {
  if (IsShardedCheckpoint(dir))
    return Status::InvalidArgument(fmt::format("{}: a sharded checkpoint; export it first (motley checkpoint export)", dir));
  MOTLEY_ASSIGN_OR_RETURN(auto files, WeightFiles(dir));
  std::vector<std::string> missing, unexpected;
  const auto named = model.named_parameters();
  for (const auto& p : named)
    if (!files.count(p.key())) missing.push_back(p.key());
  for (const auto& [name, file] : files)
    if (!named.contains(name) && !name.ends_with("rotary_emb.inv_freq")) unexpected.push_back(name);
  if (!missing.empty())
    return Status::InvalidArgument(fmt::format("{}: missing {} weight(s), first {}: the weights do not match "
                                               "config.json",
                                               dir, missing.size(), missing.front()));
  if (!unexpected.empty())
    return Status::InvalidArgument(fmt::format("{}: {} weight(s) the model does not have, first {}: the weights do not "
                                               "match config.json",
                                               dir, unexpected.size(), unexpected.front()));
  const bool tied = model.spec().tie_embeddings;
  auto open = std::make_shared<std::map<std::string, SafetensorsFile>>();
  return std::function<Status(const std::string&, int64_t, torch::Tensor)>(
      [files = std::move(files), open, tied](const std::string& param, int64_t begin, torch::Tensor dest) -> Status {
    const std::string name = tied && param == "lm_head.weight" ? "model.embed_tokens.weight" : param;
    auto it = files.find(name);
    if (it == files.end()) return Status::NotFound(fmt::format("no file holds {}", name));
    if (!open->count(it->second)) {
      MOTLEY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(it->second));
      open->emplace(it->second, std::move(f));
    }
    MOTLEY_ASSIGN_OR_RETURN(torch::Tensor mapped, open->at(it->second).Map(name));
    const torch::Tensor range = mapped.reshape({-1}).narrow(0, begin, dest.numel());
    if (range.is_floating_point() && range.numel() > 0) {
      const double largest = std::max(range.max().item<double>(), -range.min().item<double>());
      if (!std::isfinite(largest) || largest > kLargestPlausibleWeight)
        return Status::InvalidArgument(fmt::format(
            "{}: {} holds {} (largest magnitude {:g}): no trained model has such weights, so the file is taken for "
            "corrupted; download or export it again",
            it->second, name, std::isfinite(largest) ? "an implausibly large value" : "NaN or infinite values",
            largest));
    }
    torch::NoGradGuard no_grad;
    dest.copy_(range);
    return Status::Ok();
  });
}

Status LoadModelWeights(const std::string& dir, LlamaModelImpl& model, const std::set<std::string>& only,
                        WeightSlice slice) {
  const bool checksummed = fs::exists(fs::path(dir) / kStateFile);
  if (checksummed) {
    MOTLEY_ASSIGN_OR_RETURN(TrainerStateFile state, ReadStateFile(dir));
    MOTLEY_RETURN_IF_ERROR(VerifyFiles(dir, state));
    if (IsShardedCheckpoint(dir)) return LoadShardedWeights(dir, state, model, only, slice);
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
      return Status::InvalidArgument(fmt::format("{}: the index names this file for {} but it lacks it", it->second,
                                                 p.key()));
    const std::vector<int64_t>& shape = f.entries().at(p.key()).shape;
    const bool sliced = slice.tp > 1 && IsSplitParameter(p.key());
    const std::vector<int64_t> want = sliced ? LlamaParameterShape(model.spec(), p.key()) : p.value().sizes().vec();
    if (shape != want)
      return Status::InvalidArgument(fmt::format("{}: {} has shape {} but the model (config.json) needs {}",
                                                 it->second, p.key(), fmt::join(shape, "x"), fmt::join(want, "x")));
    if (sliced) {
      // This rank's slice, from the file's pages that hold it.
      MOTLEY_ASSIGN_OR_RETURN(torch::Tensor mapped, f.Map(p.key()));
      p.value().copy_(SliceParameter(model.spec(), p.key(), mapped, slice.index, slice.tp));
    } else {
      // Straight into the parameter (nothing beside it when the file holds its dtype).
      MOTLEY_RETURN_IF_ERROR(f.LoadInto(p.key(), p.value()));
    }
    const torch::Tensor& t = p.value();
    // A Hugging Face folder has no checksums: a weight no trained model holds (not finite, or of a
    // magnitude beyond fp16's range many times over) is taken for corruption rather than evaluated.
    if (!checksummed && t.is_floating_point() && t.numel() > 0) {
      const double largest = std::max(t.max().item<double>(), -t.min().item<double>());
      if (!std::isfinite(largest) || largest > kLargestPlausibleWeight)
        return Status::InvalidArgument(fmt::format(
            "{}: {} holds {} (largest magnitude {:g}): no trained model has such weights, so the file is taken "
            "for corrupted; download or export it again",
            it->second, p.key(), std::isfinite(largest) ? "an implausibly large value" : "NaN or infinite values",
            largest));
    }
  }
  if (!missing.empty())
    return Status::InvalidArgument(fmt::format("{}: missing {} weight(s), first {}: the weights do not match "
                                               "config.json",
                                               dir, missing.size(), missing.front()));
  std::vector<std::string> unexpected;
  for (const auto& [name, file] : files)
    if (!used.count(name) && !name.ends_with("rotary_emb.inv_freq")) unexpected.push_back(name);
  if (!unexpected.empty())
    return Status::InvalidArgument(fmt::format("{}: {} weight(s) the model does not have, first {}: the weights do not "
                                               "match config.json",
                                               dir, unexpected.size(), unexpected.front()));
  return Status::Ok();
}

Result<TrainerState> LoadTrainingState(const std::string& dir, std::vector<ParamShard>& shards) {
  if (!fs::exists(fs::path(dir) / kStateFile))
    return Status::NotFound(fmt::format("{}: no {}; resuming needs a motley checkpoint (a Hugging Face directory "
                                        "only holds weights)",
                                        dir, kStateFile));
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
        return Status::InvalidArgument(fmt::format("{}: the moments of {} have another shape than the parameter",
                                                   dir, shard.name));
      shard.exp_avg = shard.exp_avg.to(shard.param.device());
      shard.exp_avg_sq = shard.exp_avg_sq.to(shard.param.device());
    }
    return s;
  }
  MOTLEY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open((fs::path(dir) / "optimizer.safetensors").string()));
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
      return Status::InvalidArgument(fmt::format("{}: the moments of {} have another shape than the parameter",
                                                 f.path(), shard.name));
  }
  return s;
}

Result<TrainerStateFile> VerifyCheckpoint(const std::string& dir) {
  if (!fs::exists(fs::path(dir) / kStateFile))
    return Status::NotFound(fmt::format("{}: no {}; not a motley checkpoint", dir, kStateFile));
  MOTLEY_ASSIGN_OR_RETURN(TrainerStateFile state, ReadStateFile(dir));
  for (const auto& [name, record] : state.files) MOTLEY_RETURN_IF_ERROR(VerifyFile(dir, name, record));
  if (IsShardedCheckpoint(dir)) MOTLEY_RETURN_IF_ERROR(ShardedReader::Open(dir, state).status());
  return state;
}

Status ExportCheckpoint(const std::string& dir, const std::string& out) {
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec spec, LoadCheckpointModelSpec(dir));
  MOTLEY_ASSIGN_OR_RETURN(TrainerStateFile state, ReadStateFile(dir));
  LlamaModel model(spec, 0);
  // In the master dtype the checkpoint holds (an fp64 run's stays fp64).
  if (const std::optional<Precision> p = PrecisionFromName(state.state.precision)) model->set_precision(*p);
  MOTLEY_RETURN_IF_ERROR(LoadModelWeights(dir, *model));
  std::vector<ParamShard> shards = WholeParameterShards(*model);
  MOTLEY_ASSIGN_OR_RETURN(TrainerState loaded, LoadTrainingState(dir, shards));
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::exists(fs::path(out) / kStateFile, ec) && !fs::is_empty(out, ec))
    return Status::InvalidArgument(fmt::format("{}: exists and is not a checkpoint; export into a new folder", out));
  return SaveCheckpoint(out, *model, shards, loaded);
}

}  // namespace motley
