#include "plan/plan_io.h"

#include <cstdint>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/json_read.h"
#include "core/toml_reader.h"

namespace motley {
namespace {

const std::vector<std::string> kSchedules = {"gpipe", "1f1b", "interleaved"};

PipelineSchedule ScheduleFromName(const std::string& s) {
  return s == "1f1b"          ? PipelineSchedule::k1F1B
         : s == "interleaved" ? PipelineSchedule::kInterleaved
                              : PipelineSchedule::kGPipe;
}

// Reads an array of numbers (integers or floats) within [min, max].
std::optional<std::vector<double>> NumberArray(TomlTable& t, std::string_view key, double min, double max,
                                               Need need) {
  const toml::array* values = t.Array(key, need);
  if (values == nullptr) return std::nullopt;
  std::vector<double> out;
  for (const toml::node& n : *values) {
    const std::optional<double> v = n.is_integer()
                                        ? std::optional<double>(static_cast<double>(*n.value<int64_t>()))
                                    : n.is_floating_point() ? n.value<double>()
                                                            : std::nullopt;
    if (!v || !(*v >= min && *v <= max)) {
      t.Error(key, fmt::format("expected an array of numbers between {:g} and {:g}", min, max));
      return std::nullopt;
    }
    out.push_back(*v);
  }
  return out;
}

GroupPlan ReadGroup(TomlTable& t) {
  GroupPlan g;
  constexpr int64_t kBig = int64_t{1} << 40;
  if (const toml::array* ranges = t.Array("ministages", Need::kRequired)) {
    for (const toml::node& r : *ranges) {
      const toml::array* pair = r.as_array();
      if (pair == nullptr || pair->size() != 2 || !(*pair)[0].is_integer() || !(*pair)[1].is_integer() ||
          std::abs(*(*pair)[0].value<int64_t>()) > (1 << 20) ||
          std::abs(*(*pair)[1].value<int64_t>()) > (1 << 20)) {
        t.Error("ministages", "expected layer ranges [begin, end), e.g. ministages = [[0, 4], [4, 8]]");
        g.ministages.clear();
        break;
      }
      g.ministages.push_back(
          {static_cast<int>(*(*pair)[0].value<int64_t>()), static_cast<int>(*(*pair)[1].value<int64_t>())});
    }
  }
  if (auto v = t.Int("tp_degree", 1, 1 << 12)) g.tp_degree = static_cast<int>(*v);
  auto devices = t.IntArray("devices", 0, 1 << 20, Need::kRequired);
  auto sizes = t.IntArray("microbatch_size", 1, kBig, Need::kRequired);
  auto counts = t.IntArray("num_microbatches", 0, kBig, Need::kRequired);
  auto lasts = t.IntArray("last_microbatch_size", 0, kBig, Need::kOptional);
  if (auto routing = t.IntArray("routing", 0, 1 << 20, Need::kOptional))
    g.routing.assign(routing->begin(), routing->end());
  auto shares = NumberArray(t, "state_shares", 0, 1, Need::kOptional);
  t.Finish();
  if (!devices || !sizes || !counts) return g;
  auto check_len = [&](std::string_view key, size_t n) {
    if (n == devices->size()) return true;
    t.Error(key, fmt::format("has {} entries but devices has {}; give one per device", n, devices->size()));
    return false;
  };
  if (!check_len("microbatch_size", sizes->size()) || !check_len("num_microbatches", counts->size()) ||
      (lasts && !check_len("last_microbatch_size", lasts->size())) ||
      (shares && !check_len("state_shares", shares->size())))
    return g;
  if (shares) g.state_shares = *shares;
  for (size_t i = 0; i < devices->size(); ++i) {
    g.devices.push_back(
        DevicePlan{static_cast<int>((*devices)[i]), (*sizes)[i], (*counts)[i], lasts ? (*lasts)[i] : 0});
  }
  return g;
}

Result<Plan> ReadPlan(const toml::table& table, const std::string& file) {
  Diagnostics diag;
  TomlTable root(table, "", file, &diag);
  Plan p;
  if (auto v = root.String("strategy")) p.strategy = *v;
  if (auto v = root.String("model")) p.model = *v;
  if (auto v = root.String("cluster")) p.cluster = *v;
  if (auto v = root.Int("seq_len", 1, 1 << 24, Need::kRequired)) p.seq_len = *v;
  if (auto v = root.Choice("precision", PrecisionNames())) p.precision = *PrecisionFromName(*v);
  if (auto v = root.Choice("schedule", kSchedules)) p.schedule = ScheduleFromName(*v);
  if (auto v = root.Int("zero_stage", 0, 3)) p.zero_stage = static_cast<int>(*v);
  if (auto v = root.Bool("activation_checkpointing")) p.activation_checkpointing = *v;
  if (auto v = root.Bool("offload_params")) p.offload_params = *v;
  if (auto v = root.Bool("offload_activations")) p.offload_activations = *v;
  if (auto v = root.Bool("gradient_clipping")) p.gradient_clipping = *v;
  if (auto v = root.Bool("loss_scaling")) p.loss_scaling = *v;
  if (auto v = root.Choice("flextp_mode", {"off", "migrate", "resize", "semi"})) p.flextp_mode = *v;
  for (auto& g : root.TableArray("groups", Need::kRequired)) p.groups.push_back(ReadGroup(g));
  root.Finish();
  MOTLEY_RETURN_IF_ERROR(diag.ToStatus());
  return p;
}

// JSON plans go through the same strict reader as TOML ones: convert, then read.
std::unique_ptr<toml::node> JsonToToml(const nlohmann::json& j) {
  if (j.is_object()) {
    auto t = std::make_unique<toml::table>();
    for (const auto& [k, v] : j.items())
      if (!v.is_null()) t->insert(k, std::move(*JsonToToml(v)));
    return t;
  }
  if (j.is_array()) {
    auto a = std::make_unique<toml::array>();
    for (const auto& v : j) a->push_back(std::move(*JsonToToml(v)));
    return a;
  }
  if (j.is_boolean()) return std::make_unique<toml::value<bool>>(j.get<bool>());
  // An integer beyond int64 (nlohmann would wrap 2^64 - 1 to -1) stays a number the reader refuses.
  if (j.is_number_integer() && JsonInt64(j)) return std::make_unique<toml::value<int64_t>>(*JsonInt64(j));
  if (j.is_number()) return std::make_unique<toml::value<double>>(j.get<double>());
  if (j.is_string()) return std::make_unique<toml::value<std::string>>(j.get<std::string>());
  return std::make_unique<toml::value<std::string>>("");
}

// A group's per-device figures as columns, as both file formats write them.
struct DeviceColumns {
  std::vector<int> devices;
  std::vector<int64_t> sizes, counts, lasts;
  bool any_last = false;  // last_microbatch_size is written only when some device has one
  explicit DeviceColumns(const GroupPlan& g) {
    for (const auto& d : g.devices) {
      devices.push_back(d.device);
      sizes.push_back(d.microbatch_size);
      counts.push_back(d.num_microbatches);
      lasts.push_back(d.last_microbatch_size);
      any_last = any_last || d.last_microbatch_size > 0;
    }
  }
};

}  // namespace

Result<Plan> ParsePlanToml(std::string_view text, const std::string& file) {
  Diagnostics diag;
  auto table = ParseTomlText(text, file, &diag);
  if (!table) return diag.ToStatus();
  return ReadPlan(*table, file);
}

// The key path of the first integer beyond int64 in `j` ("" if none): no plan figure is that large,
// and converted it would read as a float (or, by nlohmann, as a negative number).
std::string IntegerBeyondInt64(const nlohmann::json& j, const std::string& path) {
  if (j.is_number_unsigned() && !JsonInt64(j)) return path.empty() ? "(the plan)" : path;
  if (j.is_object())
    for (const auto& [k, v] : j.items())
      if (std::string found = IntegerBeyondInt64(v, path.empty() ? k : path + "." + k); !found.empty())
        return found;
  if (j.is_array())
    for (size_t i = 0; i < j.size(); ++i)
      if (std::string found = IntegerBeyondInt64(j[i], fmt::format("{}[{}]", path, i)); !found.empty())
        return found;
  return "";
}

Result<Plan> ParsePlanJson(std::string_view text, const std::string& file) {
  MOTLEY_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, file));
  if (!j.is_object()) return Status::InvalidArgument(fmt::format("{}: error: a plan is a JSON object", file));
  if (const std::string key = IntegerBeyondInt64(j, ""); !key.empty())
    return Status::InvalidArgument(fmt::format(
        "{}: error: {}: a number beyond 2^63 - 1 is out of range for every plan figure", file, key));
  auto node = JsonToToml(j);
  return ReadPlan(*node->as_table(), file);
}

Result<Plan> LoadPlanFile(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return path.ends_with(".json") ? ParsePlanJson(text, path) : ParsePlanToml(text, path);
}

std::string PlanToToml(const Plan& p) {
  std::string out = fmt::format(
      "# motley plan: {} groups over {} devices, {} sequences of {} tokens per step\n"
      "strategy = \"{}\"\n{}{}seq_len = {}\nprecision = \"{}\"\nschedule = \"{}\"\nzero_stage = {}\n"
      "activation_checkpointing = {}\noffload_params = {}\noffload_activations = {}\ngradient_clipping = "
      "{}\n",
      p.groups.size(), p.num_devices(), p.global_batch_sequences(), p.seq_len, p.strategy,
      p.model.empty() ? "" : fmt::format("model = \"{}\"\n", p.model),
      p.cluster.empty() ? "" : fmt::format("cluster = \"{}\"\n", p.cluster), p.seq_len,
      PrecisionName(p.precision), PipelineScheduleName(p.schedule), p.zero_stage, p.activation_checkpointing,
      p.offload_params, p.offload_activations, p.gradient_clipping);
  if (p.loss_scaling) out += "loss_scaling = true\n";
  if (!p.flextp_mode.empty()) out += fmt::format("flextp_mode = \"{}\"\n", p.flextp_mode);
  for (const auto& g : p.groups) {
    const DeviceColumns c(g);
    std::vector<std::string> ranges;
    for (const auto& r : g.ministages) ranges.push_back(fmt::format("[{}, {}]", r.begin, r.end));
    out += fmt::format(
        "\n[[groups]]\nministages = [{}]\ntp_degree = {}\ndevices = [{}]\n"
        "microbatch_size = [{}]\nnum_microbatches = [{}]\n",
        fmt::join(ranges, ", "), g.tp_degree, fmt::join(c.devices, ", "), fmt::join(c.sizes, ", "),
        fmt::join(c.counts, ", "));
    if (c.any_last) out += fmt::format("last_microbatch_size = [{}]\n", fmt::join(c.lasts, ", "));
    if (!g.routing.empty()) out += fmt::format("routing = [{}]\n", fmt::join(g.routing, ", "));
    if (!g.state_shares.empty()) out += fmt::format("state_shares = [{}]\n", fmt::join(g.state_shares, ", "));
  }
  return out;
}

nlohmann::json PlanToJson(const Plan& p) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : p.groups) {
    const DeviceColumns c(g);
    nlohmann::json ranges = nlohmann::json::array();
    for (const auto& r : g.ministages) ranges.push_back({r.begin, r.end});
    nlohmann::json gj = {{"ministages", ranges},
                         {"tp_degree", g.tp_degree},
                         {"devices", c.devices},
                         {"microbatch_size", c.sizes},
                         {"num_microbatches", c.counts}};
    if (c.any_last) gj["last_microbatch_size"] = c.lasts;
    if (!g.routing.empty()) gj["routing"] = g.routing;
    if (!g.state_shares.empty()) gj["state_shares"] = g.state_shares;
    groups.push_back(gj);
  }
  nlohmann::json out = {{"strategy", p.strategy},
                        {"seq_len", p.seq_len},
                        {"precision", PrecisionName(p.precision)},
                        {"schedule", PipelineScheduleName(p.schedule)},
                        {"zero_stage", p.zero_stage},
                        {"activation_checkpointing", p.activation_checkpointing},
                        {"offload_params", p.offload_params},
                        {"offload_activations", p.offload_activations},
                        {"gradient_clipping", p.gradient_clipping},
                        {"groups", groups}};
  if (!p.model.empty()) out["model"] = p.model;
  if (!p.cluster.empty()) out["cluster"] = p.cluster;
  if (!p.flextp_mode.empty()) out["flextp_mode"] = p.flextp_mode;
  if (p.loss_scaling) out["loss_scaling"] = true;
  return out;
}

}  // namespace motley
