// Writing checkpoints (checkpoint.h): a whole checkpoint, a run folder's step checkpoints with
// `latest` and pruning, the sharded form each rank writes its pieces of, and the run folder's lock.
#include "runtime/train/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/checkpoint_format.h"
#include "core/file_io.h"
#include "core/json_read.h"
#include "core/model_parse.h"
#include "core/shard_index.h"
#include "runtime/train/safetensors.h"

namespace motley {
namespace fs = std::filesystem;

Result<std::unique_ptr<RunDirLock>> RunDirLock::Acquire(const std::string& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec)
    return Status::IoError(
        fmt::format("{}: cannot create the checkpoint directory: {}", run_dir, ec.message()));
  const std::string path = (fs::path(run_dir) / ".lock").string();
  // Never through a link: a planted one would have the lock's note written over what it names.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0 && errno == ELOOP)
    return Status::InvalidArgument(
        fmt::format("{}: is a symbolic link, not motley's lock file; remove it", path));
  if (fd < 0) return Status::IoError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(
        fmt::format("{}: is not a regular file, not motley's lock file; remove it", path));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char holder[256] = {};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "another process";
    while (!who.empty() && std::isspace(static_cast<unsigned char>(who.back()))) who.pop_back();
    return Status::InvalidArgument(
        fmt::format("{}: another run is writing its checkpoints and metrics here ({}); wait for it to end, "
                    "or give this run "
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
    return Status::InvalidArgument(
        fmt::format("{}: holds another run's checkpoints (latest: {}); continue that run with --resume {}, "
                    "start over here with "
                    "--overwrite (its checkpoints and metrics are removed), or give this run another folder "
                    "([checkpoint] dir)",
                    run_dir, step.size() > 64 ? step.substr(0, 64) + "..." : step, run_dir));
  }
  if (!clean) return Status::Ok();
  for (const auto& entry : fs::directory_iterator(run_dir, ec))
    if (entry.is_directory() && entry.path().filename().string().starts_with("step-"))
      fs::remove_all(entry.path(), ec);
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
      return Status::IoError(
          fmt::format("{}: cannot swap {} into place: {}", dir, tmp, std::strerror(errno)));
    fs::remove_all(tmp, ec);
  } else {
    fs::rename(tmp, dir, ec);
    if (ec)
      return Status::IoError(fmt::format("{}: cannot rename {} into place: {}", dir, tmp, ec.message()));
  }
  const fs::path parent = fs::path(dir).parent_path();
  return FsyncDirectory(parent.empty() ? "." : parent.string());
}

// What interrupted saves left in a run folder (step-*.tmp).
void RemoveInterruptedSaves(const std::string& run_dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (entry.is_directory() && file.starts_with("step-") && file.ends_with(".tmp"))
      fs::remove_all(entry.path(), ec);
  }
}

// `latest` names the new checkpoint `name`; of the older ones, the newest `keep` stay.
Status PointLatestAndPrune(const std::string& run_dir, const std::string& name, int64_t keep) {
  MOTLEY_RETURN_IF_ERROR(AtomicWriteFile((fs::path(run_dir) / "latest").string(), name + "\n"));
  std::error_code ec;
  // Checkpoint folders by their step as a number (a folder of another name is not motley's to prune).
  std::vector<std::pair<int64_t, std::string>> steps;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string folder = entry.path().filename().string();
    if (const std::optional<int64_t> step = CheckpointFolderStep(folder); step && entry.is_directory())
      steps.emplace_back(*step, folder);
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; keep > 0 && i + static_cast<size_t>(keep) < steps.size(); ++i)
    if (steps[i].second != name) fs::remove_all(fs::path(run_dir) / steps[i].second, ec);
  return Status::Ok();
}

}  // namespace

Status SaveCheckpoint(const std::string& dir, LlamaModelImpl& model, const std::vector<ParamShard>& shards,
                      const TrainerState& state, const std::vector<CheckpointExtraFile>& extra) {
  const std::string tmp = dir + ".tmp";
  std::error_code ec;
  // Never removed: what is there was not made by this run (a run folder's interrupted saves are
  // cleared before, RemoveInterruptedSaves).
  if (fs::exists(fs::symlink_status(tmp, ec)))
    return Status::InvalidArgument(
        fmt::format("{}: exists and this command did not create it (a leftover of an interrupted export, or "
                    "someone else's); "
                    "remove it, or write the checkpoint elsewhere",
                    tmp));
  if (!fs::create_directory(tmp, ec) || ec)
    return Status::IoError(
        fmt::format("{}: cannot create: {}", tmp, ec ? ec.message() : "it appeared meanwhile"));
  TrainerStateFile out;
  out.state = state;
  auto record = [&](const std::string& name, uint32_t crc) {
    out.files[name] = {static_cast<int64_t>(fs::file_size(fs::path(tmp) / name)), crc};
  };
  uint32_t crc = 0;
  MOTLEY_RETURN_IF_ERROR(
      AtomicWriteFile((fs::path(tmp) / "config.json").string(), HfConfigJson(model.spec()), &crc));
  record("config.json", crc);

  std::vector<NamedTensor> weights;
  // In the master dtype: fp32, or fp64 for an fp64 run.
  for (const auto& p : model.named_parameters())
    weights.push_back(
        {p.key(), p.value().scalar_type() == torch::kFloat64 ? p.value() : p.value().to(torch::kFloat32)});
  MOTLEY_RETURN_IF_ERROR(
      WriteSafetensors((fs::path(tmp) / "model.safetensors").string(), weights, {{"format", "pt"}}, &crc));
  record("model.safetensors", crc);

  std::vector<NamedTensor> moments;
  for (const auto& s : shards) {
    if (!s.exp_avg.defined()) continue;
    moments.push_back({s.name + ".exp_avg", s.exp_avg});
    moments.push_back({s.name + ".exp_avg_sq", s.exp_avg_sq});
  }
  MOTLEY_RETURN_IF_ERROR(
      WriteSafetensors((fs::path(tmp) / "optimizer.safetensors").string(), moments, {}, &crc));
  record("optimizer.safetensors", crc);
  for (const CheckpointExtraFile& file : extra) {
    MOTLEY_RETURN_IF_ERROR(
        WriteSafetensors((fs::path(tmp) / file.name).string(), file.tensors, file.metadata, &crc));
    record(file.name, crc);
  }

  MOTLEY_RETURN_IF_ERROR(
      AtomicWriteFile((fs::path(tmp) / kTrainerStateFile).string(), TrainerStateJson(out)));
  return MoveIntoPlace(tmp, dir);
}

Result<std::string> SaveRunCheckpoint(const std::string& run_dir, int64_t keep, LlamaModelImpl& model,
                                      const std::vector<ParamShard>& shards, const TrainerState& state,
                                      const std::vector<CheckpointExtraFile>& extra) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec)
    return Status::IoError(
        fmt::format("{}: cannot create the checkpoint directory: {}", run_dir, ec.message()));
  const std::string name = CheckpointFolderName(state.step);
  const std::string dir = (fs::path(run_dir) / name).string();
  RemoveInterruptedSaves(run_dir);
  MOTLEY_RETURN_IF_ERROR(SaveCheckpoint(dir, model, shards, state, extra));
  MOTLEY_RETURN_IF_ERROR(PointLatestAndPrune(run_dir, name, keep));
  return dir;
}

Result<std::string> BeginShardedCheckpoint(const std::string& run_dir, int64_t step) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec)
    return Status::IoError(
        fmt::format("{}: cannot create the checkpoint directory: {}", run_dir, ec.message()));
  RemoveInterruptedSaves(run_dir);
  const std::string tmp = (fs::path(run_dir) / (CheckpointFolderName(step) + ".tmp")).string();
  fs::create_directories(tmp, ec);
  if (ec) return Status::IoError(fmt::format("{}: cannot create: {}", tmp, ec.message()));
  return tmp;
}

Result<CheckpointFileRecord> WriteRankShards(const std::string& tmp, int rank,
                                             const std::vector<StatePiece>& pieces) {
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
    if (p.outer_momentum.defined())
      tensors.push_back(
          {ShardTensorName(p.param, p.tp_index, p.begin, ShardTensor::kOuterMomentum), p.outer_momentum});
  }
  const std::string path = (fs::path(tmp) / RankShardFileName(rank)).string();
  MOTLEY_RETURN_IF_ERROR(WriteSafetensors(path, tensors, {{"parameters", params.dump()}}, &record.crc32));
  std::error_code ec;
  record.bytes = static_cast<int64_t>(fs::file_size(path, ec));
  if (ec) return Status::IoError(fmt::format("{}: written but unreadable: {}", path, ec.message()));
  return record;
}

Result<std::string> FinishShardedCheckpoint(const std::string& run_dir, int64_t keep, const std::string& tmp,
                                            const ModelSpec& spec,
                                            const std::vector<CheckpointFileRecord>& rank_files,
                                            const TrainerState& state,
                                            const std::vector<CheckpointExtraFile>& extra) {
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
    return Status::Internal(
        fmt::format("{}: the ranks wrote {} parameters, the model has {}", tmp, elements, TotalParams(spec)));
  uint32_t crc = 0;
  MOTLEY_RETURN_IF_ERROR(AtomicWriteFile(index_path, ShardIndexJson(index), &crc));
  out.files[kShardIndexFile] = {static_cast<int64_t>(fs::file_size(index_path)), crc};
  MOTLEY_RETURN_IF_ERROR(AtomicWriteFile((fs::path(tmp) / "config.json").string(), HfConfigJson(spec), &crc));
  out.files["config.json"] = {static_cast<int64_t>(fs::file_size(fs::path(tmp) / "config.json")), crc};
  for (const CheckpointExtraFile& file : extra) {
    const fs::path path = fs::path(tmp) / file.name;
    MOTLEY_RETURN_IF_ERROR(WriteSafetensors(path.string(), file.tensors, file.metadata, &crc));
    out.files[file.name] = {static_cast<int64_t>(fs::file_size(path)), crc};
  }
  MOTLEY_RETURN_IF_ERROR(
      AtomicWriteFile((fs::path(tmp) / kTrainerStateFile).string(), TrainerStateJson(out)));
  MOTLEY_RETURN_IF_ERROR(FsyncDirectory(tmp));
  const std::string name = CheckpointFolderName(state.step);
  const std::string dir = (fs::path(run_dir) / name).string();
  MOTLEY_RETURN_IF_ERROR(MoveIntoPlace(tmp, dir));
  MOTLEY_RETURN_IF_ERROR(PointLatestAndPrune(run_dir, name, keep));
  return dir;
}

}  // namespace motley
