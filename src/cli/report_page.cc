#include "cli/report_page.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "cli/report_svg.h"
#include "core/units.h"

namespace motley::cli {
namespace {

using svg::Escape;

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1300px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#666;margin:0 0 12px}table{border-collapse:collapse;margin:6px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f5f5f5}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}.figures td:first-child{color:#555}
svg.chart{display:block;margin:4px 0;font-size:11px}svg .label{font-size:11px;fill:#333}svg .label.strong{font-weight:600}
svg .tick{font-size:10px;fill:#666}svg .axis{stroke:#999}svg .grid{stroke:#eee}svg .idle{fill:#eeeeee}
svg .bar{fill:#9db4cf}svg .bar.chosen{fill:#2f4b7c}svg .value{font-size:11px;fill:#333}
svg .capacity{fill:none;stroke:#999}svg .predicted{fill:#7a9cc6}svg .predicted.over{fill:#d62728}svg .measured{fill:#e15759}
.legend span{margin-right:16px;font-size:12px}.legend i{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}
.legend i.idle-key{background:#eeeeee;border:1px solid #ccc}.node{display:inline-block;border:1px solid #bbb;border-radius:6px;
padding:6px 8px;margin:4px;vertical-align:top;background:#fafafa}.node b{font-size:12px}.region{margin:6px 0 10px}
.region>h3{font-size:13px;margin:4px 0;color:#555}.dev{display:inline-block;width:86px;height:44px;margin:3px;border-radius:4px;
font-size:10px;line-height:13px;padding:2px 4px;box-sizing:border-box;color:#fff;overflow:hidden}.dev.out{background:#bbb;color:#333}
.note{color:#666;font-size:12px}.bad{color:#d62728}
)";

// Group colours for the devices of the cluster picture.
// (None of the timeline's, memory's or comparison's colours, so that a screenshot tells them apart.)
constexpr const char* kGroupColors[] = {"#76b7b2", "#b07aa1", "#edc948", "#9c755f", "#ff9da7",
                                        "#8cd17d", "#499894", "#d37295", "#86bcb6", "#bab0ac"};

std::string Row(const std::string& name, const std::string& value) {
  return fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", Escape(name), Escape(value));
}

std::string DeviceLabel(const Schedule& s, const Cluster& c, int rank) {
  const int d = s.programs[rank].device;
  return fmt::format("rank {} · device {} ({})", rank, d, c.spec(d).name);
}

svg::SpanKind KindOf(const std::string& op_kind) {
  if (op_kind == "forward" || op_kind == "backward" || op_kind == "optimizer_step" || op_kind == "outer_step")
    return svg::SpanKind::kCompute;
  if (op_kind.find("offload") != std::string::npos || op_kind.find("prefetch") != std::string::npos)
    return svg::SpanKind::kCopy;
  return svg::SpanKind::kCommunication;
}

// One row per rank from a trace in the simulator's Chrome format (a run's trace.json is the same);
// times from the trace's first span. `span_s`: the last end.
std::vector<svg::TimelineRow> TraceRows(const std::vector<TraceSpan>& trace, const Schedule& s,
                                        const Cluster& c, double* span_s) {
  std::vector<svg::TimelineRow> rows(s.programs.size());
  for (size_t r = 0; r < rows.size(); ++r) rows[r].label = DeviceLabel(s, c, static_cast<int>(r));
  double first = 1e300;
  for (const TraceSpan& e : trace) first = std::min(first, e.start_us);
  *span_s = 0;
  for (const TraceSpan& e : trace) {
    if (e.rank >= static_cast<int>(rows.size())) continue;
    const double start = (e.start_us - first) * 1e-6;
    const double end = start + e.duration_us * 1e-6;
    rows[e.rank].spans.push_back({start, end, KindOf(e.category), e.name});
    *span_s = std::max(*span_s, end);
  }
  return rows;
}

// Whether each metrics line ran the page's schedule: the start and rebalance events name the
// schedule the steps after them run; lines before any name count (metrics older than the hash).
std::vector<bool> OfThisSchedule(const RunRecord& run) {
  std::vector<bool> out;
  std::string running;
  for (const MetricsLine& m : run.metrics) {
    if (!m.schedule_hash.empty()) running = m.schedule_hash;
    out.push_back(running.empty() || run.schedule_hash.empty() || running == run.schedule_hash);
  }
  return out;
}

std::string SummarySection(const ReportInputs& in) {
  const Plan& p = *in.plan;
  const SimResult& r = *in.sim;
  std::map<std::string, int> types;
  for (const auto& g : p.groups)
    for (const auto& d : g.devices) ++types[in.cluster->spec(d.device).name];
  std::vector<std::string> kinds;
  for (const auto& [t, n] : types) kinds.push_back(fmt::format("{} x{}", t, n));
  std::string out = "<section id=\"summary\"><h2>Summary</h2><table class=\"figures\">\n";
  out += Row("cluster",
             fmt::format("{}: {} devices on {} nodes in {} region(s)", in.cluster->name,
                         in.cluster->num_devices(), in.cluster->nodes.size(), in.cluster->regions.size()));
  out += Row("model", fmt::format("{}: {} parameters, {} layers, hidden {}", in.model->name,
                                  FormatCount(static_cast<double>(TotalParams(*in.model))),
                                  in.model->num_layers, in.model->hidden_size));
  out += Row("plan",
             fmt::format("{}: {} group(s) on {} devices ({}), ZeRO-{}, {} schedule{}{}", p.strategy,
                         p.groups.size(), p.num_devices(), fmt::join(kinds, ", "), p.zero_stage,
                         PipelineScheduleName(p.schedule), p.offload_params ? ", parameters offloaded" : "",
                         p.flextp_mode.empty() ? "" : ", FlexTP " + p.flextp_mode));
  out += Row("batch", fmt::format("{} tokens a step in sequences of {}, {}", in.schedule->global_batch_tokens,
                                  p.seq_len, PrecisionName(p.precision)));
  out += Row("simulated step",
             fmt::format("{} | {:.0f} tokens/s | {} | HFU {:.1f}% | memory {}", FormatDuration(r.step_time_s),
                         r.tokens_per_s, FormatFlops(r.tflops * 1e12), 100 * r.hfu,
                         r.fits_memory ? "fits" : "OUT OF MEMORY"));
  if (in.run != nullptr) {
    std::vector<double> steps;
    std::optional<double> loss, val;
    int64_t last = 0, other_plans = 0;
    const std::vector<bool> ours = OfThisSchedule(*in.run);
    for (size_t i = 0; i < in.run->metrics.size(); ++i) {
      const MetricsLine& m = in.run->metrics[i];
      if (!m.event.empty()) continue;
      if (m.step_time_s && std::isfinite(*m.step_time_s) && m.step.value_or(0) > 1)
        (ours[i] ? steps.push_back(*m.step_time_s) : void(++other_plans));
      if (m.loss) loss = *m.loss, last = std::max(last, m.step.value_or(0));
      if (m.val_loss) val = *m.val_loss;
    }
    std::string measured = "no step of this plan measured";
    if (!steps.empty()) {
      std::nth_element(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2),
                       steps.end());
      const double median = steps[steps.size() / 2];
      measured =
          fmt::format("median step {} ({:.2f}x the simulated), {:.0f} tokens/s", FormatDuration(median),
                      median / r.step_time_s, static_cast<double>(in.schedule->global_batch_tokens) / median);
    }
    if (other_plans > 0)
      measured +=
          fmt::format(" ({} of its {} steps; {} ran another plan before a restart or rebalance, left out)",
                      steps.size(), steps.size() + other_plans, other_plans);
    out += Row("run", fmt::format("{}: {} steps; {}{}{}", in.run->dir, last, measured,
                                  loss ? fmt::format("; last loss {:.4f}", *loss) : "",
                                  val ? fmt::format(", validation {:.4f}", *val) : ""));
  }
  out += "</table></section>\n";
  return out;
}

// Devices by region and node, coloured by group, each with its layers and batch share.
std::string ClusterSection(const ReportInputs& in) {
  const Cluster& c = *in.cluster;
  const Plan& p = *in.plan;
  struct Role {
    int group = -1;
    std::string text;
  };
  std::vector<Role> role(c.num_devices());
  int64_t total = 0;
  for (const auto& g : p.groups) total += g.sequences();
  for (size_t gi = 0; gi < p.groups.size(); ++gi) {
    const GroupPlan& g = p.groups[gi];
    for (size_t i = 0; i < g.devices.size(); ++i) {
      const DevicePlan& d = g.devices[i];
      if (d.device < 0 || d.device >= c.num_devices()) continue;
      role[d.device].group = static_cast<int>(gi);
      role[d.device].text = fmt::format(
          "group {}: layers {}-{} in {} ministage(s){}; {} microbatch(es) of {} = {} sequences ({:.1f}% of "
          "the "
          "group's){}",
          gi, g.ministages.front().begin, g.ministages.back().end - 1, g.ministages.size(),
          g.tp_degree > 1
              ? fmt::format(", tensor parallel x{} (rank {} of its team)", g.tp_degree, i % g.tp_degree)
              : "",
          d.num_microbatches, d.microbatch_size, d.sequences(),
          100.0 * static_cast<double>(d.sequences()) /
              std::max<double>(1, static_cast<double>(g.sequences())),
          g.state_shares.empty() ? "" : fmt::format("; state share {:.1f}%", 100 * g.state_shares[i]));
    }
  }
  (void)total;
  std::string out = "<section id=\"cluster\"><h2>Cluster and plan</h2>\n";
  for (size_t reg = 0; reg < c.regions.size(); ++reg) {
    out += fmt::format("<div class=\"region\"><h3>region {}</h3>\n", Escape(c.regions[reg]));
    for (size_t n = 0; n < c.nodes.size(); ++n) {
      const NodeSpec& node = c.nodes[n];
      if (node.region != c.regions[reg]) continue;
      out += fmt::format("<div class=\"node\"><b>{}</b> <span class=\"note\">{} x{}, {}</span><br>\n",
                         Escape(node.name), Escape(node.device_type), node.num_devices,
                         Escape(std::string(InterconnectName(node.interconnect))));
      for (const Device& d : c.devices) {
        if (d.node != static_cast<int>(n)) continue;
        const Role& r = role[d.id];
        const std::string tip =
            fmt::format("device {} ({}, {}): {}", d.id, c.spec(d.id).name, FormatBytes(c.memory_bytes(d.id)),
                        r.group < 0 ? "left out of the plan" : r.text);
        out += fmt::format("<div class=\"dev{}\" style=\"{}\" title=\"{}\">dev {}<br>{}<br>{}</div>",
                           r.group < 0 ? " out" : "",
                           r.group < 0 ? "" : fmt::format("background:{}", kGroupColors[r.group % 10]),
                           Escape(tip), d.id, r.group < 0 ? "left out" : fmt::format("group {}", r.group),
                           Escape(c.spec(d.id).name.substr(0, 12)));
      }
      out += "</div>\n";
    }
    out += "</div>\n";
  }
  // The groups in pipeline order.
  out +=
      "<table><tr><th>group</th><th>devices</th><th>layers</th><th>ministages</th><th>TP</th>"
      "<th>sequences a step per device (microbatches x size)</th><th>routing: microbatches per "
      "device</th></tr>\n";
  for (size_t gi = 0; gi < p.groups.size(); ++gi) {
    const GroupPlan& g = p.groups[gi];
    std::vector<std::string> devices, shares, ranges;
    for (const auto& d : g.devices) {
      devices.push_back(std::to_string(d.device));
      shares.push_back(
          fmt::format("{}: {} ({}x{})", d.device, d.sequences(), d.num_microbatches, d.microbatch_size));
    }
    for (const auto& m : g.ministages) ranges.push_back(fmt::format("[{},{})", m.begin, m.end));
    std::map<int, int> routed;
    for (int d : g.routing) ++routed[d];
    std::vector<std::string> routing;
    for (const auto& [d, n] : routed) routing.push_back(fmt::format("{}: {}", d, n));
    out += fmt::format(
        "<tr><td><span class=\"legend\"><i "
        "style=\"background:{}\"></i></span>{}</td><td>{}</td><td>{}-{}</td>"
        "<td>{} {}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        kGroupColors[gi % 10], gi, fmt::join(devices, ", "), g.ministages.front().begin,
        g.ministages.back().end - 1, g.ministages.size(), fmt::join(ranges, " "), g.tp_degree,
        fmt::join(shares, "; "), routing.empty() ? "-" : fmt::format("{}", fmt::join(routing, ", ")));
  }
  out += "</table></section>\n";
  return out;
}

std::string TimelineSection(const ReportInputs& in) {
  const Schedule& s = *in.schedule;
  std::vector<svg::TimelineRow> simulated(s.programs.size());
  for (size_t r = 0; r < simulated.size(); ++r)
    simulated[r].label = DeviceLabel(s, *in.cluster, static_cast<int>(r));
  for (const TraceEvent& t : in.sim->trace) {
    const Op& op = s.programs[t.rank].ops[t.op];
    simulated[t.rank].spans.push_back(
        {t.start_s, t.end_s, KindOf(std::string(OpKindName(op.kind))), std::string(OpKindName(op.kind))});
  }
  double measured_s = 0;
  std::vector<svg::TimelineRow> measured;
  if (in.run != nullptr && in.run->trace) measured = TraceRows(*in.run->trace, s, *in.cluster, &measured_s);
  const double axis = std::max(in.sim->step_time_s, measured_s);
  std::string out = "<section id=\"timeline\"><h2>One step, device by device</h2>\n" + svg::TimelineLegend();
  out += fmt::format("<p class=\"sub\">Simulated: {} a step.</p>\n", FormatDuration(in.sim->step_time_s));
  out += svg::Timeline("timeline-simulated", simulated, axis);
  if (in.run != nullptr) {
    if (measured.empty())
      out +=
          "<p class=\"note\">No trace of the run (trace.json in its folder: <code>motley train --plan P "
          "--trace "
          "DIR/trace.json</code>; <code>motley train JOB</code> writes one).</p>\n";
    else {
      out += fmt::format("<p class=\"sub\">Measured: one step of the run, {}.</p>\n",
                         FormatDuration(measured_s));
      out += svg::Timeline("timeline-measured", measured, axis);
    }
  }
  out += "</section>\n";
  return out;
}

std::string MemorySection(const ReportInputs& in) {
  std::vector<double> measured(in.schedule->programs.size(), -1);
  if (in.run != nullptr) {
    const std::vector<bool> ours = OfThisSchedule(*in.run);  // another plan's ranks are other devices
    for (size_t i = 0; i < in.run->metrics.size(); ++i)
      if (ours[i])
        for (const MetricsRank& r : in.run->metrics[i].ranks)
          if (r.rank < static_cast<int>(measured.size()))
            measured[r.rank] = std::max(measured[r.rank], r.peak_memory_bytes);
  }
  std::vector<svg::MemoryRow> rows;
  for (const DeviceSimReport& d : in.sim->devices)
    rows.push_back({DeviceLabel(*in.schedule, *in.cluster, d.rank), d.capacity_bytes, d.peak_memory_bytes,
                    measured[d.rank]});
  std::string out = "<section id=\"memory\"><h2>Peak memory against capacity</h2>\n";
  out +=
      "<div class=\"legend\"><span><i style=\"background:#7a9cc6\"></i>predicted peak</span><span><i "
      "style=\"background:#e15759\"></i>measured peak</span><span><i "
      "class=\"idle-key\"></i>capacity</span></div>";
  out += svg::Memory("memory-chart", rows);
  if (!in.sim->fits_memory) out += fmt::format("<p class=\"bad\">{}</p>\n", Escape(in.sim->oom_message));
  out += "</section>\n";
  return out;
}

std::string RunSection(const RunRecord& run) {
  svg::Series loss{"loss", {}, "#1f77b4", false}, val{"validation loss", {}, "#b6992d", true},
      tokens{"tokens/s", {}, "#59a14f", false};
  std::vector<std::string> events;
  int64_t last_step = -1;  // an event without a step of its own (a restart) happened after this one
  for (const MetricsLine& m : run.metrics) {
    if (m.event.empty() && m.step) last_step = std::max(last_step, *m.step);
    const double step = static_cast<double>(m.step.value_or(last_step));
    auto finite = [](const std::optional<double>& v) { return v && std::isfinite(*v); };
    if (m.event.empty() && finite(m.loss)) loss.points.push_back({step, *m.loss});
    if (finite(m.val_loss)) val.points.push_back({step, *m.val_loss});
    if (m.event.empty() && finite(m.tokens_per_s) && step > 1)
      tokens.points.push_back({step, *m.tokens_per_s});
    const std::string when = m.step           ? std::to_string(*m.step)
                             : last_step >= 0 ? fmt::format("after {}", last_step)
                                              : std::string("-");
    if (!m.event.empty()) {
      nlohmann::json rest = m.fields;
      rest.erase("event");
      rest.erase("step");
      events.push_back(fmt::format("<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>", when,
                                   Escape(m.event), Escape(rest.dump().substr(0, 300))));
    }
    if (!m.stragglers.empty())
      events.push_back(fmt::format("<tr><td class=\"num\">{}</td><td>straggler</td><td>{}</td></tr>", when,
                                   Escape(m.stragglers.dump().substr(0, 300))));
    if (m.migrated_units > 0 || m.pruned_fraction > 0)
      events.push_back(
          fmt::format("<tr><td class=\"num\">{}</td><td>FlexTP</td><td>migrated units {:g}, pruned "
                      "{:.1f}%</td></tr>",
                      when, m.migrated_units, 100 * m.pruned_fraction));
  }
  std::string out = fmt::format("<section id=\"run\"><h2>The run: {}</h2>\n", Escape(run.dir));
  out += "<h3>Loss</h3>" + svg::Lines("loss-chart", {loss, val}, "step", "loss");
  out += "<h3>Throughput</h3>" + svg::Lines("tokens-chart", {tokens}, "step", "tokens/s");
  out += "<h3>Events</h3>";
  if (events.empty())
    out += "<p class=\"note\">No straggler, rebalancing, FlexTP or checkpoint event.</p>\n";
  else {
    const size_t shown = std::min<size_t>(events.size(), 200);
    out += "<table id=\"events\"><tr><th>step</th><th>event</th><th>details</th></tr>\n";
    for (size_t i = 0; i < shown; ++i) out += events[i] + "\n";
    out += "</table>";
    if (shown < events.size()) out += fmt::format("<p class=\"note\">and {} more</p>", events.size() - shown);
  }
  out += "</section>\n";
  return out;
}

std::string CompareSection(const std::vector<CompareRow>& rows) {
  std::vector<svg::Bar> bars;
  for (const CompareRow& r : rows)
    bars.push_back({r.strategy, r.step_s > 0 ? r.tokens_per_s : 0,
                    r.step_s > 0
                        ? fmt::format("{:.0f} tokens/s, step {}", r.tokens_per_s, FormatDuration(r.step_s))
                        : "no plan: " + r.note.substr(0, 90),
                    r.chosen});
  std::string out = "<section id=\"compare\"><h2>Every strategy (motley plan --compare)</h2>\n";
  out += svg::Bars("compare-chart", bars, "simulated tokens/s (longer is faster)");
  out +=
      "<table><tr><th>strategy</th><th>step</th><th>tokens/s</th><th>TP</th><th>FlexTP</th><th>note</th></"
      "tr>\n";
  for (const CompareRow& r : rows)
    out += fmt::format(
        "<tr><td>{}{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td>"
        "<td class=\"note\">{}</td></tr>\n",
        Escape(r.strategy), r.chosen ? " (chosen)" : "", r.step_s > 0 ? FormatDuration(r.step_s) : "-",
        r.step_s > 0 ? fmt::format("{:.0f}", r.tokens_per_s) : "-", Escape(r.tensor_parallel),
        Escape(r.flextp), Escape(r.note));
  out += "</table></section>\n";
  return out;
}

std::string RentSection(const RentView& v) {
  std::vector<svg::Dot> dots;
  for (const RentRow& r : v.rows)
    dots.push_back({r.usd_per_hour, r.tokens_per_s,
                    fmt::format("{}: {} tokens/s at {}/h ({} a million tokens), {}{}", r.rent,
                                FormatCount(r.tokens_per_s), FormatUsd(r.usd_per_hour),
                                FormatUsd(r.usd_per_million_tokens), r.strategy,
                                r.chosen     ? " (chosen)"
                                : r.on_front ? " (on the front)"
                                             : ""),
                    r.chosen     ? svg::Dot::kChosen
                    : r.on_front ? svg::Dot::kFront
                                 : svg::Dot::kCandidate});
  if (v.this_plan)
    dots.push_back({v.this_plan->second, v.this_plan->first,
                    fmt::format("this plan: {} tokens/s at {}/h", FormatCount(v.this_plan->first),
                                FormatUsd(v.this_plan->second)),
                    svg::Dot::kThisPlan});
  std::string out =
      fmt::format("<section id=\"rent\"><h2>What to rent (motley plan --offers {} --objective {})</h2>\n",
                  Escape(v.offers), Escape(v.objective));
  out +=
      "<div class=\"legend\"><span><i style=\"background:#bbbbbb\"></i>an allocation planned</span><span><i "
      "style=\"background:#7a9cc6\"></i>on the front of price and speed</span><span><i "
      "style=\"background:#2f4b7c\"></i>chosen</span>";
  if (v.this_plan) out += "<span><i style=\"border:2px solid #e15759\"></i>this plan</span>";
  out += "</div>";
  out += svg::Scatter("rent-chart", dots,
                      "US dollars an hour (expected, spot devices' interruptions counted)", "tokens/s");
  out += fmt::format("<p>{}</p>\n", Escape(v.why));
  out +=
      "<table><tr><th>rent</th><th>strategy</th><th>tokens/s</th><th>$/h</th><th>$ a million "
      "tokens</th></tr>\n";
  for (const RentRow& r : v.rows)
    if (r.on_front)
      out += fmt::format(
          "<tr><td>{}{}</td><td>{}</td><td class=\"num\">{:.0f}</td><td class=\"num\">{}</td>"
          "<td class=\"num\">{}</td></tr>\n",
          Escape(r.rent), r.chosen ? " (chosen)" : "", Escape(r.strategy), r.tokens_per_s,
          FormatUsd(r.usd_per_hour), FormatUsd(r.usd_per_million_tokens));
  out += fmt::format("</table><p class=\"note\">The front: {} of the {} allocations planned.</p></section>\n",
                     std::count_if(v.rows.begin(), v.rows.end(), [](const RentRow& r) { return r.on_front; }),
                     v.rows.size());
  return out;
}

}  // namespace

std::string ReportHtml(const ReportInputs& in) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  out += fmt::format("<title>motley report: {}</title>\n<style>{}</style></head><body>\n", Escape(in.subject),
                     kStyle);
  out += fmt::format("<h1>motley report</h1><p class=\"sub\">{} — model {} on cluster {}</p>\n",
                     Escape(in.subject), Escape(in.model->name), Escape(in.cluster->name));
  out += SummarySection(in);
  out += ClusterSection(in);
  if (in.islands) out += IslandsSection(*in.islands, *in.cluster);
  out += TimelineSection(in);
  out += MemorySection(in);
  if (in.run != nullptr) out += RunSection(*in.run);
  if (!in.compare.empty()) out += CompareSection(in.compare);
  if (in.rent) out += RentSection(*in.rent);
  out +=
      "<p class=\"note\">Made by motley; every figure above is in <code>motley simulate --json</code>, "
      "<code>motley plan --compare --json</code> and the run's metrics.jsonl.</p>\n</body></html>\n";
  return out;
}

}  // namespace motley::cli
