#include "core/checkpoint_format.h"

#include <cctype>
#include <cstdint>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/json_read.h"

namespace motley {
namespace {

constexpr const char* kFormat = "motley-checkpoint-1";

std::string Hex(uint32_t v) { return fmt::format("{:08x}", v); }

// The state file's own checksum covers its JSON without the "checksum" field.
uint32_t StateChecksum(nlohmann::json j) {
  j.erase("checksum");
  return Crc32(j.dump());
}

Result<uint32_t> ParseHex32(const std::string& s) {
  if (s.size() != 8) return Status::InvalidArgument("not 8 hexadecimal digits");
  uint32_t v = 0;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c)))
      return Status::InvalidArgument("not 8 hexadecimal digits");
    v = v * 16 + static_cast<uint32_t>(
                     std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10);
  }
  return v;
}

}  // namespace

std::string CheckpointFolderName(int64_t step) { return fmt::format("step-{:06d}", step); }

std::string IslandCheckpointRunDir(const std::string& run_dir, int island) {
  return (std::filesystem::path(run_dir) / "islands" / fmt::format("island-{}", island)).string();
}

std::string IslandMomentsCheckpoint(const std::string& checkpoint_dir, int island, int64_t own_steps) {
  std::filesystem::path checkpoint = std::filesystem::path(checkpoint_dir).lexically_normal();
  if (!checkpoint.has_filename()) checkpoint = checkpoint.parent_path();  // "run/step-000004/"
  const std::filesystem::path run_dir = checkpoint.parent_path();
  const std::filesystem::path dir = std::filesystem::path(IslandCheckpointRunDir(run_dir.string(), island)) /
                                    CheckpointFolderName(own_steps);
  std::error_code ec;
  return std::filesystem::is_directory(dir, ec) ? dir.string() : "";
}

std::optional<int64_t> CheckpointFolderStep(std::string_view name) {
  if (!name.starts_with("step-") || name.size() <= 5 || name.size() > 5 + 18) return std::nullopt;
  int64_t step = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

Result<TrainerStateFile> ParseTrainerState(std::string_view text, const std::string& path) {
  const std::string fix = "the checkpoint is corrupted or not motley's; resume from another one";
  Result<nlohmann::json> parsed = ParseJson(text, path);
  if (!parsed.ok()) return Status::InvalidArgument(fmt::format("{}; {}", parsed.status().message(), fix));
  const nlohmann::json& j = *parsed;
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(fmt::format("{}: {}; {}", path, why, fix));
  };
  if (!j.is_object()) return bad("expected a JSON object");
  if (!j.contains("checksum") || !j["checksum"].is_string()) return bad("no \"checksum\" string");
  if (j["checksum"].get<std::string>() != Hex(StateChecksum(j)))
    return bad("checksum mismatch: the file was changed after it was written");
  if (!j.contains("format") || j["format"] != kFormat)
    return bad(fmt::format("\"format\" must be \"{}\"", kFormat));

  TrainerStateFile out;
  TrainerState& s = out.state;
  auto integer = [&](const char* key, int64_t* into, int64_t min, bool required) -> Status {
    if (!j.contains(key)) return required ? bad(fmt::format("no \"{}\"", key)) : Status::Ok();
    const nlohmann::json& v = j[key];
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX) ||
        v.get<int64_t>() < min)
      return bad(fmt::format("\"{}\" must be an integer >= {}, got {}", key, min, v.dump()));
    *into = v.get<int64_t>();
    return Status::Ok();
  };
  auto text_field = [&](const char* key, std::string* into) -> Status {
    if (!j.contains(key)) return Status::Ok();
    if (!j[key].is_string()) return bad(fmt::format("\"{}\" must be a string, got {}", key, j[key].dump()));
    *into = j[key].get<std::string>();
    return Status::Ok();
  };
  MOTLEY_RETURN_IF_ERROR(integer("step", &s.step, 0, true));
  s.updates = s.step;
  MOTLEY_RETURN_IF_ERROR(integer("updates", &s.updates, 0, false));
  MOTLEY_RETURN_IF_ERROR(integer("total_steps", &s.total_steps, 0, false));
  MOTLEY_RETURN_IF_ERROR(integer("tokens_seen", &s.tokens_seen, 0, false));
  MOTLEY_RETURN_IF_ERROR(integer("loss_scale_good_steps", &s.loss_scale_good_steps, 0, false));
  if (s.updates > s.step)
    return bad(fmt::format("\"updates\" ({}) exceeds \"step\" ({})", s.updates, s.step));
  if (j.contains("seed")) {
    if (!j["seed"].is_number_unsigned())
      return bad(fmt::format("\"seed\" must be a non-negative integer, got {}", j["seed"].dump()));
    s.seed = j["seed"].get<uint64_t>();
  }
  if (j.contains("loss_scale")) {
    const nlohmann::json& v = j["loss_scale"];
    if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > std::numeric_limits<double>::max())
      return bad(fmt::format("\"loss_scale\" must be a positive number, got {}", v.dump()));
    s.loss_scale = v.get<double>();
  }
  MOTLEY_RETURN_IF_ERROR(integer("data_skip_steps", &s.data_skip_steps, 0, false));
  MOTLEY_RETURN_IF_ERROR(integer("rollbacks", &s.rollbacks, 0, false));
  if (j.contains("lr_factor")) {
    const nlohmann::json& v = j["lr_factor"];
    if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 1)
      return bad(fmt::format("\"lr_factor\" must be a number in (0, 1], got {}", v.dump()));
    s.lr_factor = v.get<double>();
  }
  MOTLEY_RETURN_IF_ERROR(text_field("precision", &s.precision));
  MOTLEY_RETURN_IF_ERROR(text_field("job_file", &s.job_file));
  MOTLEY_RETURN_IF_ERROR(text_field("plan", &s.plan_toml));

  if (!j.contains("files") || !j["files"].is_object()) return bad("no \"files\" object");
  for (const auto& [name, info] : j["files"].items()) {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      return bad(fmt::format("files: \"{}\" is not a file name within the checkpoint", name));
    if (!info.is_object() || !info.contains("bytes") || !info["bytes"].is_number_integer() ||
        !info.contains("crc32") || !info["crc32"].is_string())
      return bad(
          fmt::format("files.\"{}\" must be {{\"bytes\": <integer>, \"crc32\": \"<8 hex digits>\"}}", name));
    CheckpointFileRecord r;
    if (info["bytes"].is_number_unsigned() ? info["bytes"].get<uint64_t>() > INT64_MAX
                                           : info["bytes"].get<int64_t>() < 0)
      return bad(fmt::format("files.\"{}\".bytes must be a size, got {}", name, info["bytes"].dump()));
    r.bytes = info["bytes"].get<int64_t>();
    Result<uint32_t> crc = ParseHex32(info["crc32"].get<std::string>());
    if (!crc.ok()) return bad(fmt::format("files.\"{}\".crc32: {}", name, crc.status().message()));
    r.crc32 = *crc;
    out.files[name] = r;
  }
  return out;
}

std::string TrainerStateJson(const TrainerStateFile& file) {
  const TrainerState& s = file.state;
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, r] : file.files) files[name] = {{"bytes", r.bytes}, {"crc32", Hex(r.crc32)}};
  nlohmann::json j = {{"format", kFormat},
                      {"step", s.step},
                      {"updates", s.updates},
                      {"total_steps", s.total_steps},
                      {"seed", s.seed},
                      {"tokens_seen", s.tokens_seen},
                      {"loss_scale", s.loss_scale},
                      {"loss_scale_good_steps", s.loss_scale_good_steps},
                      {"precision", s.precision},
                      {"job_file", s.job_file},
                      {"lr_factor", s.lr_factor},
                      {"data_skip_steps", s.data_skip_steps},
                      {"rollbacks", s.rollbacks},
                      {"data_sampler", "counter-based: (seed, step, index) determines every window"},
                      {"files", files}};
  if (!s.plan_toml.empty()) j["plan"] = s.plan_toml;
  j["checksum"] = Hex(StateChecksum(j));
  return j.dump(2) + "\n";
}

Result<std::string> ParseLatest(std::string_view text, const std::string& path) {
  std::string_view name = text;
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.remove_suffix(1);
  bool ok = name.starts_with("step-") && name.size() > 5 && name.size() <= 5 + 19;
  for (size_t i = 5; ok && i < name.size(); ++i) ok = std::isdigit(static_cast<unsigned char>(name[i])) != 0;
  if (!ok) {
    std::string shown(name.substr(0, 40));
    for (char& c : shown)
      if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
    return Status::InvalidArgument(fmt::format(
        "{}: must name the newest checkpoint folder as motley writes it (\"step-\" and digits), but holds "
        "\"{}{}\"; "
        "the run folder is corrupted: write the newest step-NNNNNN folder's name into it, or resume from a "
        "checkpoint folder directly",
        path, shown, name.size() > 40 ? "..." : ""));
  }
  return std::string(name);
}

}  // namespace motley
