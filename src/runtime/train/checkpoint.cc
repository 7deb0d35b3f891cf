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
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/json_read.h"
#include "core/checkpoint_format.h"
#include "core/model_parse.h"
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

// Verifies the size and CRC-32 of every file the state lists.
Status VerifyFiles(const std::string& dir, const TrainerStateFile& state) {
  for (const auto& [name, record] : state.files) {
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
  }
  return Status::Ok();
}

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

  // Into place: swapped with the checkpoint there in one step (renameat2's RENAME_EXCHANGE), so a
  // crash leaves one whole checkpoint under the name, never none; the old one is then removed.
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

Result<std::string> SaveRunCheckpoint(const std::string& run_dir, int64_t keep, LlamaModelImpl& model,
                                      const std::vector<ParamShard>& shards, const TrainerState& state) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return Status::IoError(fmt::format("{}: cannot create the checkpoint directory: {}", run_dir, ec.message()));
  const std::string name = CheckpointFolderName(state.step);
  const std::string dir = (fs::path(run_dir) / name).string();
  // What an interrupted save left behind.
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (entry.is_directory() && file.starts_with("step-") && file.ends_with(".tmp")) fs::remove_all(entry.path(), ec);
  }
  MOTLEY_RETURN_IF_ERROR(SaveCheckpoint(dir, model, shards, state));
  MOTLEY_RETURN_IF_ERROR(AtomicWriteFile((fs::path(run_dir) / "latest").string(), name + "\n"));
  std::vector<std::string> steps;
  for (const auto& entry : fs::directory_iterator(run_dir, ec))
    if (entry.is_directory() && entry.path().filename().string().starts_with("step-") &&
        !entry.path().filename().string().ends_with(".tmp"))
      steps.push_back(entry.path().filename().string());
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; keep > 0 && i + static_cast<size_t>(keep) < steps.size(); ++i)
    if (steps[i] != name) fs::remove_all(fs::path(run_dir) / steps[i], ec);
  return dir;
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

Status LoadModelWeights(const std::string& dir, LlamaModelImpl& model) {
  const bool checksummed = fs::exists(fs::path(dir) / kStateFile);
  if (checksummed) {
    MOTLEY_ASSIGN_OR_RETURN(TrainerStateFile state, ReadStateFile(dir));
    MOTLEY_RETURN_IF_ERROR(VerifyFiles(dir, state));
  }
  MOTLEY_ASSIGN_OR_RETURN(auto files, WeightFiles(dir));
  std::map<std::string, SafetensorsFile> open;
  std::vector<std::string> missing;
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters()) {
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
    MOTLEY_ASSIGN_OR_RETURN(torch::Tensor t, f.Load(p.key(), p.value().scalar_type()));
    if (t.sizes() != p.value().sizes())
      return Status::InvalidArgument(fmt::format("{}: {} has shape {} but the model (config.json) needs {}",
                                                 it->second, p.key(), fmt::join(t.sizes().vec(), "x"),
                                                 fmt::join(p.value().sizes().vec(), "x")));
    // A Hugging Face folder has no checksums: a weight no trained model holds (not finite, or of a
    // magnitude beyond fp16's range many times over) is taken for corruption rather than evaluated.
    if (!checksummed && t.is_floating_point() && t.numel() > 0) {
      const double largest = t.abs().max().item<double>();
      if (!std::isfinite(largest) || largest > kLargestPlausibleWeight)
        return Status::InvalidArgument(fmt::format(
            "{}: {} holds {} (largest magnitude {:g}): no trained model has such weights, so the file is taken "
            "for corrupted; download or export it again",
            it->second, p.key(), std::isfinite(largest) ? "an implausibly large value" : "NaN or infinite values",
            largest));
    }
    p.value().copy_(t);
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
  MOTLEY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open((fs::path(dir) / "optimizer.safetensors").string()));
  torch::NoGradGuard no_grad;
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

}  // namespace motley
