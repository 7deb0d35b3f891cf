// The report page's islands section (report_page.h, IslandsView): each island's step and inner steps,
// the period drawn island by island — its H steps, its wait for the slowest, the outer round — and the
// round's ops device by device, as `motley simulate --island-plan` times them and `motley train
// --island-plan` runs them.
#include <algorithm>

#include <fmt/format.h>

#include "cli/report_page.h"
#include "cli/report_svg.h"
#include "core/units.h"

namespace motley::cli {

std::string IslandsSection(const IslandsView& v, const Cluster& cluster) {
  const IslandsSimResult& r = *v.result;
  std::string out = "<section id=\"islands\"><h2>Islands: inner steps and the outer round</h2>\n";
  out += fmt::format(
      "<p class=\"sub\">{} islands meet every period of {}: each takes its inner steps, then all take the "
      "outer "
      "round ({}, {} between them{}): {:.0f} tokens/s, {:.1f} bytes between regions a token.{}</p>\n",
      r.islands.size(), FormatDuration(r.period_s), FormatDuration(r.rounds_s), svg::Escape(v.compression),
      (v.round->outer_fragments > 1
           ? fmt::format("; in {} streaming fragments, each at its own step of the period — drawn below: the "
                         "first's",
                         v.round->outer_fragments)
           : std::string()) +
          (v.round->outer_overlap_steps > 0
               ? fmt::format("; it overlaps the next {} inner steps, and they wait {} of it",
                             v.round->outer_overlap_steps, FormatDuration(r.round_exposed_s))
               : std::string()),
      r.tokens_per_s, r.cross_region_bytes_per_token,
      r.fits_memory ? "" : " <span class=\"bad\">" + svg::Escape(r.oom_message) + "</span>");
  out +=
      "<table><tr><th>island</th><th>plan</th><th>devices</th><th>step</th><th>inner steps</th>"
      "<th>its steps a period</th><th>fits</th></tr>\n";
  for (size_t i = 0; i < r.islands.size(); ++i) {
    const double steps_s = static_cast<double>(r.inner_steps[i]) * r.islands[i].step_time_s;
    out += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td>{}</td></tr>\n",
        i, svg::Escape(v.plans[i]), svg::Escape(v.devices[i]), FormatDuration(r.islands[i].step_time_s),
        r.inner_steps[i], FormatDuration(steps_s), r.islands[i].fits_memory ? "yes" : "no");
  }
  out += "</table>\n";
  // The period, island by island: compute while it steps, idle while it waits, the round's communication
  // (an overlapped round's: what the islands wait for).
  std::vector<svg::TimelineRow> period;
  const double round_start = r.period_s - r.round_exposed_s;
  for (size_t i = 0; i < r.islands.size(); ++i) {
    const double steps_s = static_cast<double>(r.inner_steps[i]) * r.islands[i].step_time_s;
    period.push_back({fmt::format("island {} · {} inner steps", i, r.inner_steps[i]),
                      {{0, steps_s, svg::SpanKind::kCompute, "inner_steps"},
                       {round_start, r.period_s, svg::SpanKind::kCommunication, "outer_round"}}});
  }
  out += "<p class=\"sub\">One period, island by island.</p>\n" + svg::TimelineLegend();
  out += svg::Timeline("islands-period", period, r.period_s);
  // The round's ops, device by device.
  std::vector<svg::TimelineRow> round(v.round->programs.size());
  for (size_t rank = 0; rank < round.size(); ++rank) {
    const int d = v.round->programs[rank].device;
    round[rank].label = fmt::format("rank {} · device {} ({})", rank, d, cluster.spec(d).name);
  }
  for (const TraceEvent& t : v.round_sim->trace) {
    const Op& op = v.round->programs[t.rank].ops[t.op];
    const std::string kind(OpKindName(op.kind));
    round[t.rank].spans.push_back(
        {t.start_s, t.end_s,
         op.kind == OpKind::kOuterStep ? svg::SpanKind::kCompute : svg::SpanKind::kCommunication, kind});
  }
  double ops_s = 0;
  for (const TraceEvent& t : v.round_sim->trace) ops_s = std::max(ops_s, t.end_s);
  out += fmt::format(
      "<p class=\"sub\">The outer round, device by device: {}{}. (Island 0's devices are the page's plan "
      "below; the other islands' run the same plan on theirs.)</p>\n",
      FormatDuration(v.round_sim->step_time_s),
      v.round_sim->region_link_bound_s > ops_s
          ? fmt::format(
                " — its ops as drawn end at {}, but its bytes between regions take {} over the one link "
                "between them, which every transfer shares",
                FormatDuration(ops_s), FormatDuration(v.round_sim->region_link_bound_s))
          : "");
  out += svg::Timeline("islands-round", round, std::max(v.round_sim->step_time_s, 1e-12));
  out += "</section>\n";
  return out;
}

}  // namespace motley::cli
