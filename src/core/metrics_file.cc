#include "core/metrics_file.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/json_read.h"
#include "core/toml_reader.h"

namespace motley {
namespace {

constexpr int64_t kMaxStep = int64_t{1} << 53;  // steps are counted exactly in a double too
constexpr int kMaxRank = 1 << 20;

// A line's fields, each checked where it is read; the first error wins.
class LineReader {
 public:
  LineReader(const nlohmann::json& j, const std::string& file, int line) : j_(j), file_(file), line_(line) {}

  Status Error(std::string_view field, std::string_view what) const {
    return Status::InvalidArgument(
        fmt::format("{}:{}: \"{}\" {}; give the file `motley train --metrics` wrote "
                    "(or remove the line)",
                    file_, line_, field, what));
  }

  // A number or null (a non-finite figure, as the run writes it): NaN for null.
  Result<std::optional<double>> Number(const nlohmann::json& in, std::string_view key,
                                       std::string_view name) const {
    auto it = in.find(key);
    if (it == in.end()) return std::optional<double>();
    if (it->is_null()) return std::optional<double>(std::numeric_limits<double>::quiet_NaN());
    if (!it->is_number())
      return Error(name, fmt::format("must be a number, not {}", it->dump().substr(0, 40)));
    return std::optional<double>(it->get<double>());
  }

  Result<std::optional<int64_t>> Integer(const nlohmann::json& in, std::string_view key, int64_t min,
                                         int64_t max, std::string_view name) const {
    auto it = in.find(key);
    if (it == in.end()) return std::optional<int64_t>();
    const std::optional<int64_t> v = JsonInt64(*it);
    if (!v || *v < min || *v > max)
      return Error(
          name, fmt::format("must be an integer from {} to {}, not {}", min, max, it->dump().substr(0, 40)));
    return v;
  }

  Result<std::string> String(std::string_view key) const {
    auto it = j_.find(key);
    if (it == j_.end()) return std::string();
    if (!it->is_string())
      return Error(key, fmt::format("must be a string, not {}", it->dump().substr(0, 40)));
    return it->get<std::string>();
  }

  Result<MetricsLine> Read() const {
    MetricsLine m;
    m.line = line_;
    MOTLEY_ASSIGN_OR_RETURN(m.event, String("event"));
    MOTLEY_ASSIGN_OR_RETURN(m.schedule_hash, String("schedule_hash"));
    MOTLEY_ASSIGN_OR_RETURN(m.step, Integer(j_, "step", -1, kMaxStep, "step"));
    MOTLEY_ASSIGN_OR_RETURN(std::optional<int64_t> first,
                            Integer(j_, "first_step", 0, kMaxStep, "first_step"));
    if (!m.step) m.step = first;  // a start says where its steps begin
    MOTLEY_ASSIGN_OR_RETURN(m.loss, Number(j_, "loss", "loss"));
    MOTLEY_ASSIGN_OR_RETURN(m.val_loss, Number(j_, "val_loss", "val_loss"));
    MOTLEY_ASSIGN_OR_RETURN(m.step_time_s, Number(j_, "step_time_s", "step_time_s"));
    MOTLEY_ASSIGN_OR_RETURN(m.tokens_per_s, Number(j_, "tokens_per_s", "tokens_per_s"));
    MOTLEY_ASSIGN_OR_RETURN(m.time_unix_s, Number(j_, "time_unix_s", "time_unix_s"));
    if (m.time_unix_s && !(*m.time_unix_s >= 0 && std::isfinite(*m.time_unix_s)))
      return Error("time_unix_s", "must be a finite number of seconds since 1970");
    for (const auto& [key, into] : std::initializer_list<std::pair<const char*, double*>>{
             {"migrated_units", &m.migrated_units}, {"pruned_fraction", &m.pruned_fraction}}) {
      MOTLEY_ASSIGN_OR_RETURN(std::optional<double> v, Number(j_, key, key));
      if (v && !(*v >= 0 && std::isfinite(*v))) return Error(key, "must be a finite number >= 0");
      *into = v.value_or(0);
    }
    if (auto it = j_.find("stragglers"); it != j_.end()) {
      if (!it->is_array()) return Error("stragglers", "must be a list");
      m.stragglers = *it;
    }
    // "ranks": a step's per-rank figures (a start event writes the rank count there instead).
    if (auto it = j_.find("ranks"); it != j_.end() && !it->is_number_integer()) {
      if (!it->is_array())
        return Error("ranks", "must be a list of the ranks' figures (or a start's rank count)");
      for (size_t i = 0; i < it->size(); ++i) {
        const nlohmann::json& r = (*it)[i];
        const std::string name = fmt::format("ranks[{}]", i);
        if (!r.is_object()) return Error(name, "must be an object");
        MetricsRank rank;
        MOTLEY_ASSIGN_OR_RETURN(std::optional<int64_t> id,
                                Integer(r, "rank", 0, kMaxRank - 1, name + ".rank"));
        if (!id) return Error(name + ".rank", "is missing");
        rank.rank = static_cast<int>(*id);
        MOTLEY_ASSIGN_OR_RETURN(rank.compute_s, Number(r, "compute_s", name + ".compute_s"));
        MOTLEY_ASSIGN_OR_RETURN(rank.comm_s, Number(r, "comm_s", name + ".comm_s"));
        MOTLEY_ASSIGN_OR_RETURN(std::optional<double> peak,
                                Number(r, "peak_memory_bytes", name + ".peak_memory_bytes"));
        if (peak && std::isfinite(*peak)) rank.peak_memory_bytes = *peak;
        m.ranks.push_back(rank);
      }
    }
    m.fields = j_;
    return m;
  }

 private:
  const nlohmann::json& j_;
  const std::string& file_;
  int line_;
};

}  // namespace

double NowUnixS() {
  const auto since = std::chrono::system_clock::now().time_since_epoch();
  return static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(since).count()) * 1e-6;
}

Result<MeasuredRestarts> MeasureRestarts(const std::vector<MetricsLine>& lines, const std::string& file) {
  MeasuredRestarts out;
  double restarts_s = 0;
  std::vector<double> gaps;                 // between checkpoints, within each stretch of the run
  std::optional<double> last_checkpoint_s;  // in the stretch at hand
  const MetricsLine* last_step = nullptr;   // the last step written before the line at hand
  const MetricsLine* restart = nullptr;     // a restart whose resumed first step is still to come
  for (const MetricsLine& l : lines) {
    const bool step = l.event.empty() && l.loss.has_value();
    if (l.event == "checkpoint" && l.time_unix_s) {
      if (last_checkpoint_s) gaps.push_back(*l.time_unix_s - *last_checkpoint_s);
      last_checkpoint_s = l.time_unix_s;
    }
    if (l.event == "restart") {
      if (!l.time_unix_s || last_step == nullptr || !last_step->time_unix_s)
        return Status::InvalidArgument(fmt::format(
            "{}:{}: the restart's time cannot be measured: the lines carry no \"time_unix_s\" (a run of an "
            "older motley) or no step came before it; run it again with this motley, or give --restart-time "
            "a duration",
            file, l.line));
      restart = &l;
      last_checkpoint_s.reset();
    }
    if (step && restart != nullptr && l.time_unix_s) {
      const double began_s = *l.time_unix_s - l.step_time_s.value_or(0);
      restarts_s += std::max(0.0, began_s - *last_step->time_unix_s);
      ++out.restarts;
      restart = nullptr;
    }
    if (step && restart == nullptr) last_step = &l;
  }
  if (out.restarts == 0)
    return Status::InvalidArgument(fmt::format(
        "{}: the run never restarted and trained on (no \"restart\" event followed by a step): run it with "
        "--max-restarts and lose a node, or give --restart-time a duration (e.g. 10min)",
        file));
  out.restart_s = restarts_s / out.restarts;
  if (!gaps.empty()) {
    std::sort(gaps.begin(), gaps.end());
    out.checkpoint_interval_s = gaps[gaps.size() / 2];
  }
  return out;
}

Result<std::vector<MetricsLine>> ParseMetricsJsonl(std::string_view text, const std::string& file,
                                                   int first_line) {
  std::vector<MetricsLine> out;
  int line_no = first_line - 1;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    const bool last = end == std::string_view::npos;
    if (last) end = text.size();
    ++line_no;
    const std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    Result<nlohmann::json> j = ParseJson(line, file);
    if (!j.ok() || !j->is_object()) {
      if (last) break;  // a last line cut short by a run still writing
      return Status::InvalidArgument(fmt::format(
          "{}:{}: not a JSON object (a metrics file has one a line, as `motley train --metrics` writes "
          "it); remove the line",
          file, line_no));
    }
    MOTLEY_ASSIGN_OR_RETURN(MetricsLine m, LineReader(*j, file, line_no).Read());
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<MetricsLine>> ReadMetricsFile(const std::string& path, std::streamoff from_byte) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));  // a regular file, within the cap
  const size_t from =
      std::min<size_t>(text.size(), static_cast<size_t>(std::max<std::streamoff>(0, from_byte)));
  const int first_line =
      1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(from), '\n'));
  return ParseMetricsJsonl(std::string_view(text).substr(from), path, first_line);
}

}  // namespace motley
