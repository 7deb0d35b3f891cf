#include "sim/profile.h"

#include <charconv>
#include "core/json_read.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "core/gpu_catalog.h"
#include "core/toml_reader.h"
#include "core/units.h"

namespace motley {
namespace {

// Linear interpolation through the points; beyond the last point the fit or the last segment.
double Interpolate(const std::vector<ProfilePoint>& points, const std::optional<LinearFit>& fit, double x,
                   double ProfilePoint::*field) {
  if (points.empty()) return fit ? fit->at(x) : 0;
  if (points.size() == 1 && !fit) return points[0].*field * x / points[0].microbatch;  // proportional
  if (x <= points.front().microbatch) {
    if (points.size() == 1) return fit->at(x);
    const auto& a = points[0];
    const auto& b = points[1];
    return a.*field + (b.*field - a.*field) * (x - a.microbatch) / (b.microbatch - a.microbatch);
  }
  if (x >= points.back().microbatch) {
    if (fit) return std::max(fit->at(x), points.back().*field);
    const auto& a = points[points.size() - 2];
    const auto& b = points.back();
    return b.*field + (b.*field - a.*field) * (x - b.microbatch) / (b.microbatch - a.microbatch);
  }
  auto it = std::lower_bound(points.begin(), points.end(), x,
                             [](const ProfilePoint& p, double v) { return p.microbatch < v; });
  const auto& b = *it;
  const auto& a = *(it - 1);
  return a.*field + (b.*field - a.*field) * (x - a.microbatch) / (b.microbatch - a.microbatch);
}

// A profile's precision name; the Zorse files' dtypes ("float16", ...) too. Unknown: bf16.
Precision ProfilePrecision(const std::string& s) { return PrecisionFromName(s).value_or(Precision::kBf16); }

// Measurements in one precision stand for another of the same family (the 16-bit formats share
// the tensor cores; fp32 and fp64 each stand alone).
bool SameFamily(Precision a, Precision b) { return a == b || (IsMixed(a) && IsMixed(b)); }

}  // namespace

double ProfileEntry::ForwardS(double microbatch) const {
  return Interpolate(points, forward_fit, microbatch, &ProfilePoint::forward_ms) * 1e-3;
}

double ProfileEntry::BackwardS(double microbatch) const {
  return Interpolate(points, backward_fit, microbatch, &ProfilePoint::backward_ms) * 1e-3;
}

std::optional<double> ProfileEntry::HeadForwardS(double microbatch) const {
  if (head_points.empty()) return std::nullopt;
  return Interpolate(head_points, std::nullopt, microbatch, &ProfilePoint::forward_ms) * 1e-3;
}

std::optional<double> ProfileEntry::TpForwardS(int tp, double microbatch) const {
  auto it = tp_points.find(tp);
  if (it == tp_points.end() || it->second.empty()) return std::nullopt;
  return Interpolate(it->second, std::nullopt, microbatch, &ProfilePoint::forward_ms) * 1e-3;
}

std::optional<double> ProfileEntry::TpBackwardS(int tp, double microbatch) const {
  auto it = tp_points.find(tp);
  if (it == tp_points.end() || it->second.empty()) return std::nullopt;
  return Interpolate(it->second, std::nullopt, microbatch, &ProfilePoint::backward_ms) * 1e-3;
}

std::optional<double> ProfileEntry::HeadBackwardS(double microbatch) const {
  if (head_points.empty()) return std::nullopt;
  return Interpolate(head_points, std::nullopt, microbatch, &ProfilePoint::backward_ms) * 1e-3;
}

const ProfileEntry* Profile::Find(std::string_view device_type, const ModelSpec& model, int64_t seq_len,
                                  Precision precision) const {
  const ProfileEntry* fallback = nullptr;
  for (const auto& e : entries) {
    if (e.device_type != device_type || e.hidden_size != model.hidden_size || e.seq_len != seq_len) continue;
    if (e.precision == precision) return &e;
    if (SameFamily(e.precision, precision)) fallback = &e;
  }
  return fallback;
}

namespace {

using BadProfile = std::function<Status(const std::string&)>;  // one error naming the file

// An entry's measured memory limits (memory_probe.h).
Status ParseLimits(const nlohmann::json& l, const std::string& where, const BadProfile& bad,
                   MeasuredLimits* out) {
  // Integers read as integers: nlohmann would cast a float beyond int64 (1e63) without a check
  // (found by the fuzzer: undefined behaviour).
  auto whole = [&](const nlohmann::json& v, int64_t max) -> std::optional<int64_t> {
    const std::optional<int64_t> i = JsonInt64(v);
    return i && *i >= 0 && *i <= max ? i : std::nullopt;
  };
  const auto& by_zero = l.at("max_microbatch_by_zero");
  const std::optional<int64_t> dp = whole(l.at("dp_degree"), 1 << 20),
                               layers = whole(l.at("num_layers"), 1 << 20),
                               capacity = whole(l.at("capacity_bytes"), int64_t{1} << 50);
  if (!dp || *dp < 1 || !layers || !capacity || !by_zero.is_array() || by_zero.size() != 4 ||
      !std::all_of(by_zero.begin(), by_zero.end(),
                   [&](const nlohmann::json& v) { return whole(v, 1 << 24); }))
    return bad(
        fmt::format("{}: \"limits\" needs whole numbers: dp_degree >= 1, num_layers, capacity_bytes and "
                    "max_microbatch_by_zero with 4 values (ZeRO-0 to 3)",
                    where));
  out->dp_degree = static_cast<int>(*dp);
  out->num_layers = *layers;
  out->total_params = l.at("total_params").get<double>();
  out->capacity_bytes = *capacity;
  for (size_t z = 0; z < 4; ++z) out->max_microbatch_by_zero[z] = *whole(by_zero[z], 1 << 24);
  return Status::Ok();
}

// An entry's measured times: the layer's and the head's points, and a tensor-parallel rank's layer
// per degree, each sorted by microbatch.
Status ParsePoints(const nlohmann::json& e, const BadProfile& bad, ProfileEntry& entry) {
  for (const char* key : {"points", "head_points"}) {
    std::vector<ProfilePoint>& list = std::string(key) == "points" ? entry.points : entry.head_points;
    for (const auto& pt : e.value(key, nlohmann::json::array())) {
      ProfilePoint point{pt.at("microbatch").get<double>(), pt.at("forward_ms").get<double>(),
                         pt.at("backward_ms").get<double>()};
      if (!(point.microbatch > 0) || !(point.forward_ms > 0) || !(point.backward_ms > 0))
        return bad(fmt::format("entry for {}: {} need microbatch, forward_ms and backward_ms > 0",
                               entry.device_type, key));
      list.push_back(point);
    }
    std::sort(list.begin(), list.end(),
              [](const ProfilePoint& a, const ProfilePoint& b) { return a.microbatch < b.microbatch; });
  }
  if (e.contains("tp_points")) {
    for (const auto& [degree, list] : e.at("tp_points").items()) {
      int tp = 0;
      const auto [end, error] = std::from_chars(degree.data(), degree.data() + degree.size(), tp);
      if (error != std::errc() || end != degree.data() + degree.size() || tp < 2 || tp > 1024)
        return bad(
            fmt::format("entry for {}: tp_points key \"{}\" must be a tensor-parallel degree (2, 4, ...)",
                        entry.device_type, degree.substr(0, 40)));
      for (const auto& pt : list) {
        ProfilePoint point{pt.at("microbatch").get<double>(), pt.at("forward_ms").get<double>(),
                           pt.at("backward_ms").get<double>()};
        if (!(point.microbatch > 0) || !(point.forward_ms > 0) || !(point.backward_ms > 0))
          return bad(fmt::format("entry for {}: tp_points need microbatch, forward_ms and backward_ms > 0",
                                 entry.device_type));
        entry.tp_points[tp].push_back(point);
      }
      std::sort(entry.tp_points[tp].begin(), entry.tp_points[tp].end(),
                [](const ProfilePoint& a, const ProfilePoint& b) { return a.microbatch < b.microbatch; });
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Profile> ParseProfileJson(std::string_view text, const std::string& file) {
  MOTLEY_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, file));
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(
        fmt::format("{}: error: {}; see the format in src/sim/profile.h", file, what));
  };
  // (Found by the fuzzer: a "format" that is not a string threw from nlohmann's value().)
  if (!j.is_object() || !j.contains("format") || j["format"] != "motley-profile-1")
    return bad("not a motley profile (expected \"format\": \"motley-profile-1\")");
  Profile p;
  std::string where = "\"entries\"";  // what is being read, for a message about a field of the wrong type
  try {
    if (!j.value("entries", nlohmann::json::array()).is_array()) return bad("\"entries\" must be a list");
    for (const auto& e : j.value("entries", nlohmann::json::array())) {
      where = fmt::format("entry {}", p.entries.size());
      ProfileEntry entry;
      entry.device_type = e.at("device_type").get<std::string>();
      where = fmt::format("entry {} ({})", p.entries.size(), entry.device_type.substr(0, 60));
      entry.model = e.value("model", "");
      for (const auto& [key, into] : std::initializer_list<std::pair<const char*, int64_t*>>{
               {"hidden_size", &entry.hidden_size}, {"seq_len", &entry.seq_len}}) {
        const std::optional<int64_t> v = JsonInt64(e.at(key));
        if (!v || *v < 1 || *v > (int64_t{1} << 24))
          return bad(fmt::format("{}: \"{}\" must be an integer from 1 to 2^24, not {}", where, key,
                                 e.at(key).dump().substr(0, 40)));
        *into = *v;
      }
      entry.precision = ProfilePrecision(e.value("precision", "bf16"));
      entry.backward_includes_recompute = e.value("backward_includes_recompute", true);
      if (e.contains("max_microbatch")) {
        const std::optional<int64_t> m = JsonInt64(e.at("max_microbatch"));
        if (!m || *m < 0 || *m > (int64_t{1} << 24))
          return bad(fmt::format("{}: \"max_microbatch\" must be a whole number from 0 to 2^24", where));
        entry.max_microbatch = *m;
      }
      entry.optimizer_ms_per_mparam = e.value("optimizer_ms_per_mparam", 0.0);
      for (const auto& pt : e.value("resize_overhead", nlohmann::json::array())) {
        const double ratio = pt.at(0).get<double>(), fraction = pt.at(1).get<double>();
        if (!(ratio > 0 && ratio < 1) || !(fraction >= 0))
          return bad(
              fmt::format("entry for {}: resize_overhead needs [ratio, fraction] pairs with 0 < ratio < 1 "
                          "and fraction >= 0",
                          entry.device_type));
        entry.resize_overhead.push_back({ratio, fraction});
      }
      entry.borrowed_cost = e.value("borrowed_cost", 0.0);
      if (!(entry.borrowed_cost == 0 || (entry.borrowed_cost > 0 && entry.borrowed_cost <= 100)))
        return bad(fmt::format(
            "entry for {}: borrowed_cost is a borrowed unit's time against an own unit's, above 0 "
            "and at most 100 (or leave it out), not {}",
            entry.device_type, entry.borrowed_cost));
      if (e.contains("limits")) {
        MeasuredLimits limits;
        MOTLEY_RETURN_IF_ERROR(ParseLimits(e.at("limits"), where, bad, &limits));
        entry.limits = limits;
      }
      MOTLEY_RETURN_IF_ERROR(ParsePoints(e, bad, entry));
      if (e.contains("fit")) {
        const auto& f = e.at("fit");
        entry.forward_fit =
            LinearFit{f.at("forward").at(0).get<double>(), f.at("forward").at(1).get<double>()};
        entry.backward_fit =
            LinearFit{f.at("backward").at(0).get<double>(), f.at("backward").at(1).get<double>()};
      }
      if (e.contains("reserve")) {
        const nlohmann::json& r = e.at("reserve");
        MeasuredReserve m{r.at("context_bytes").get<double>(), r.at("communication_bytes").get<double>(),
                          r.at("fragmentation_bytes").get<double>()};
        for (double v : {m.context_bytes, m.communication_bytes, m.fragmentation_bytes})
          if (!std::isfinite(v) || v < 0)
            return bad(fmt::format("entry for {}: reserve figures must be bytes >= 0, got {}",
                                   entry.device_type, r.dump()));
        entry.reserve = m;
      }
      if (entry.points.empty() && !entry.forward_fit)
        return bad(fmt::format("entry for {} has neither points nor a fit", entry.device_type));
      p.entries.push_back(std::move(entry));
    }
    for (const auto& l : j.value("links", nlohmann::json::array())) {
      where = fmt::format("link {}", p.links.size());
      ProfileLink link;
      link.a = l.at("between").at(0).get<std::string>();
      link.b = l.at("between").at(1).get<std::string>();
      link.bandwidth_bytes_per_s = l.at("bandwidth_bytes_per_s").get<double>();
      link.latency_s = l.value("latency_s", 0.0);
      link.collective_overhead_s = l.value("collective_overhead_s", 0.0);
      link.library = l.value("library", std::string());
      if (!link.library.empty() && link.library != "gloo" && link.library != "nccl")
        return bad(fmt::format("link {}: library is \"gloo\" or \"nccl\", not \"{}\"", p.links.size(),
                               link.library));
      p.links.push_back(std::move(link));
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(fmt::format("{}: a field is missing or of the wrong type ({})", where, JsonErrorText(e)));
  }
  return p;
}

Status ApplyMeasuredReserves(const Profile& profile, const std::string& file, Cluster* cluster) {
  std::map<std::string, MeasuredReserve> largest;
  for (const ProfileEntry& e : profile.entries)
    if (e.reserve &&
        (!largest.count(e.device_type) || e.reserve->total_bytes() > largest[e.device_type].total_bytes()))
      largest[e.device_type] = *e.reserve;
  for (const auto& [type, m] : largest) {
    const GpuSpec* spec = cluster->catalog.Find(type);
    if (spec == nullptr || spec->reserve_source.starts_with("cluster file")) continue;
    if (m.total_bytes() >= spec->memory_bytes)
      return Status::InvalidArgument(
          fmt::format("{}: the reserve measured on {} ({}) is not less than its memory ({}): profile that "
                      "GPU again with nothing "
                      "else running on it",
                      file, type, FormatBytes(m.total_bytes()), FormatBytes(spec->memory_bytes)));
    GpuSpec measured = *spec;
    measured.reserve_bytes = m.total_bytes();
    measured.reserve_source = fmt::format(
        "measured by motley profile ({}: context {}, communication {}, "
        "fragmentation {})",
        file, FormatBytes(m.context_bytes), FormatBytes(m.communication_bytes),
        FormatBytes(m.fragmentation_bytes));
    cluster->catalog.Upsert(std::move(measured));
  }
  return Status::Ok();
}

Result<Profile> LoadProfileFile(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseProfileJson(text, path);
}

nlohmann::json ProfileToJson(const Profile& profile) {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : profile.entries) {
    nlohmann::json points = nlohmann::json::array();
    for (const auto& pt : e.points)
      points.push_back(
          {{"microbatch", pt.microbatch}, {"forward_ms", pt.forward_ms}, {"backward_ms", pt.backward_ms}});
    nlohmann::json entry = {{"device_type", e.device_type},
                            {"model", e.model},
                            {"hidden_size", e.hidden_size},
                            {"seq_len", e.seq_len},
                            {"precision", PrecisionName(e.precision)},
                            {"backward_includes_recompute", e.backward_includes_recompute},
                            {"points", points},
                            {"max_microbatch", e.max_microbatch}};
    if (e.optimizer_ms_per_mparam > 0) entry["optimizer_ms_per_mparam"] = e.optimizer_ms_per_mparam;
    if (!e.resize_overhead.empty()) {
      nlohmann::json points = nlohmann::json::array();
      for (const auto& [ratio, fraction] : e.resize_overhead) points.push_back({ratio, fraction});
      entry["resize_overhead"] = points;
    }
    if (e.borrowed_cost > 0) entry["borrowed_cost"] = e.borrowed_cost;
    if (e.reserve)
      entry["reserve"] = {{"context_bytes", e.reserve->context_bytes},
                          {"communication_bytes", e.reserve->communication_bytes},
                          {"fragmentation_bytes", e.reserve->fragmentation_bytes}};
    if (e.limits)
      entry["limits"] = {{"dp_degree", e.limits->dp_degree},
                         {"num_layers", e.limits->num_layers},
                         {"total_params", e.limits->total_params},
                         {"capacity_bytes", e.limits->capacity_bytes},
                         {"max_microbatch_by_zero", e.limits->max_microbatch_by_zero}};
    if (!e.head_points.empty()) {
      nlohmann::json head = nlohmann::json::array();
      for (const auto& pt : e.head_points)
        head.push_back(
            {{"microbatch", pt.microbatch}, {"forward_ms", pt.forward_ms}, {"backward_ms", pt.backward_ms}});
      entry["head_points"] = head;
    }
    if (!e.tp_points.empty()) {
      nlohmann::json tp = nlohmann::json::object();
      for (const auto& [degree, list] : e.tp_points) {
        nlohmann::json pts = nlohmann::json::array();
        for (const auto& pt : list)
          pts.push_back({{"microbatch", pt.microbatch},
                         {"forward_ms", pt.forward_ms},
                         {"backward_ms", pt.backward_ms}});
        tp[std::to_string(degree)] = pts;
      }
      entry["tp_points"] = tp;
    }
    if (e.forward_fit && e.backward_fit)
      entry["fit"] = {{"forward", {e.forward_fit->slope_ms, e.forward_fit->intercept_ms}},
                      {"backward", {e.backward_fit->slope_ms, e.backward_fit->intercept_ms}}};
    entries.push_back(entry);
  }
  nlohmann::json links = nlohmann::json::array();
  for (const auto& l : profile.links)
    links.push_back({{"between", {l.a, l.b}},
                     {"bandwidth_bytes_per_s", l.bandwidth_bytes_per_s},
                     {"latency_s", l.latency_s},
                     {"collective_overhead_s", l.collective_overhead_s}});
  for (size_t i = 0; i < profile.links.size(); ++i)
    if (!profile.links[i].library.empty()) links[i]["library"] = profile.links[i].library;
  return {{"format", "motley-profile-1"}, {"entries", entries}, {"links", links}};
}

Result<Profile> ImportZorseMeasured(std::string_view latencies_json, const std::string& file) {
  MOTLEY_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(latencies_json, file));
  const std::map<std::string, std::string> models = {{"deepspeedllama_7b", "llama-7b"},
                                                     {"deepspeedllama_13b", "llama-13b"},
                                                     {"deepspeedllama_33b", "llama-33b"},
                                                     {"deepspeedllama_65b", "llama-65b"}};
  Profile p;
  try {
    for (const auto& [source_name, preset] : models) {
      if (!j.contains(source_name)) continue;
      const ModelSpec* model = FindModelPreset(preset);
      for (const auto& [gpu, by_seq] : j.at(source_name).items()) {
        const GpuSpec* spec = GpuCatalog::Builtin().Find(gpu);
        if (spec == nullptr) continue;  // a GPU motley's catalog does not know (e.g. w6800)
        for (const auto& [seq, by_dtype] : by_seq.items()) {
          for (const auto& [dtype, data] : by_dtype.items()) {
            ProfileEntry e;
            e.device_type = spec->name;
            e.model = preset;
            e.hidden_size = model->hidden_size;
            const auto [end, error] = std::from_chars(seq.data(), seq.data() + seq.size(), e.seq_len);
            if (error != std::errc() || end != seq.data() + seq.size() || e.seq_len < 1)
              return Status::InvalidArgument(fmt::format("{}: {}.{}: \"{}\" is not a sequence length", file,
                                                         source_name, gpu, seq.substr(0, 40)));
            e.precision = ProfilePrecision(dtype);
            e.backward_includes_recompute = true;
            e.forward_fit = LinearFit{data.at(0).at(0).get<double>(), data.at(0).at(1).get<double>()};
            e.backward_fit = LinearFit{data.at(1).at(0).get<double>(), data.at(1).at(1).get<double>()};
            if (data.size() >= 4) {
              const auto& fwd = data.at(2);
              const auto& bwd = data.at(3);
              for (size_t b = 0; b < fwd.size() && b < bwd.size(); ++b)
                e.points.push_back(
                    {static_cast<double>(b + 1), fwd.at(b).get<double>(), bwd.at(b).get<double>()});
              // max_microbatch stays unknown: the points stop where they stopped measuring, not at OOM.
            }
            p.entries.push_back(std::move(e));
          }
        }
      }
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(fmt::format("{}: error: unexpected layout: {}", file, e.what()));
  }
  if (p.entries.empty())
    return Status::InvalidArgument(fmt::format("{}: error: no Llama measurements found", file));
  return p;
}

}  // namespace motley
