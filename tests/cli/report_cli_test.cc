// `motley report`: one self-contained page on a plan or a run's folder, and what a run's folder
// may hold (its metrics and trace, read at the edge).
#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "core/file_io.h"
#include "core/units.h"

namespace {

using namespace motley_test;

// #27: `motley report` writes one self-contained page — every section, no script, nothing fetched —
// and bad input is one clear error (the browser's view of the pages: tests/browser).
TEST(Cli, ReportWritesOneSelfContainedPageAndRefusesWhatIsNotARun) {
  TempDir dir;
  const std::string page = dir.Join("plan.html");
  CliRun r = Motley("report --plan " + std::string(MOTLEY_SOURCE_DIR) +
                    "/examples/plans/local-zorse.toml -o " + page);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "report: " + page);
  const std::string html = motley::ReadFileToString(page).value();
  for (const char* id : {"id=\"summary\"", "id=\"cluster\"", "id=\"timeline-simulated\"",
                         "id=\"memory-chart\"", "id=\"compare-chart\"", "this plan (", "deepspeed-even"})
    EXPECT_CONTAINS(html, id);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // only SVG's namespace
  EXPECT_EQ(html.find("https://"), std::string::npos);
  // The simulated step on the page is the simulator's.
  CliRun sim = Motley(
      "simulate --plan " + std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/local-zorse.toml --json", true);
  const double step = nlohmann::json::parse(sim.output)["step_time_s"].get<double>();
  EXPECT_CONTAINS(html, "Simulated: " + motley::FormatDuration(step) + " a step.");

  CliRun none = Motley("report");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_CONTAINS(none.output,
                  "give --plan FILE, --island-plan FILE for each island, --job FILE|default or --run DIR");
  CliRun empty = Motley("report --run " + dir.Join("nothing"));
  EXPECT_NE(empty.exit_code, 0);
  EXPECT_CONTAINS(empty.output, "no plan.toml: give the folder a `motley train` run wrote");
  // A run folder whose metrics are not a run's: the file and the line.
  std::filesystem::create_directories(dir.Join("run"));
  std::filesystem::copy_file(std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/local-zorse.toml",
                             dir.Join("run/plan.toml"));
  dir.Write("run/metrics.jsonl", "{\"step\":1,\"loss\":5.0}\nnot json\n{\"step\":2,\"loss\":4.0}\n");
  CliRun bad = Motley("report --run " + dir.Join("run") + " --no-compare");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_CONTAINS(bad.output, dir.Join("run/metrics.jsonl") + ":2: not a JSON object");
  dir.Write("run/metrics.jsonl",
            "{\"step\":1,\"loss\":5.0,\"step_time_s\":1.0}\n{\"step\":2,\"loss\":4.0,\"step_time_s\":1.0}\n{"
            "\"step\":3,\"lo");
  CliRun cut = Motley("report --run " + dir.Join("run") + " --no-compare");
  EXPECT_EQ(cut.exit_code, 0) << cut.output;  // a last line still being written is left out
  const std::string run_page = motley::ReadFileToString(dir.Join("run/report.html")).value();
  EXPECT_CONTAINS(run_page, "id=\"loss-chart\"");
  EXPECT_CONTAINS(run_page, "No trace of the run");
}

// #48: a run restarted on another plan is reported by the steps of the plan the page is about (the
// others are left out, and said so), a restart is listed after the step it followed (not at -1),
// and a metrics or trace file with a field of the wrong type is one message naming line and field.
TEST(Cli, ReportMeasuresOnlyThePlansOwnStepsAndRefusesMistypedFields) {
  TempDir dir;
  const std::string plan = std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/local-zorse.toml";
  CliRun sim = Motley("simulate --plan " + plan + " --json", true);
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  const std::string hash = nlohmann::json::parse(sim.output)["schedule_hash"].get<std::string>();
  std::filesystem::create_directories(dir.Join("run"));
  std::filesystem::copy_file(plan, dir.Join("run/plan.toml"));
  std::string metrics =
      "{\"event\":\"start\",\"first_step\":0,\"ranks\":2,\"schedule_hash\":\"0123456789abcdef\"}\n";
  for (int step = 1; step <= 3; ++step)
    metrics += fmt::format(
        "{{\"step\":{},\"loss\":5.0,\"step_time_s\":9.0,\"ranks\":[{{\"rank\":0,"
        "\"peak_memory_bytes\":1e15}}]}}\n",
        step);
  metrics += "{\"event\":\"restart\",\"failed_rank\":1}\n";
  metrics += "{\"event\":\"start\",\"first_step\":3,\"ranks\":4,\"schedule_hash\":\"" + hash + "\"}\n";
  for (int step = 4; step <= 6; ++step)
    metrics += fmt::format("{{\"step\":{},\"loss\":null,\"step_time_s\":2.0}}\n", step);
  dir.Write("run/metrics.jsonl", metrics);
  CliRun r = Motley("report --run " + dir.Join("run") + " --no-compare");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string page = motley::ReadFileToString(dir.Join("run/report.html")).value();
  EXPECT_CONTAINS(page, "median step " + motley::FormatDuration(2.0));
  EXPECT_CONTAINS(page, "(3 of its 5 steps; 2 ran another plan before a restart or rebalance, left out)");
  EXPECT_CONTAINS(page, "<td class=\"num\">after 3</td><td>restart</td>");
  EXPECT_CONTAINS(page, "<td class=\"num\">3</td><td>start</td>");
  EXPECT_EQ(page.find(">-1<"), std::string::npos);
  EXPECT_EQ(page.find(": measured peak"), std::string::npos);  // rank 0 of the other plan is another device

  dir.Write("run/metrics.jsonl", "{\"step\":1,\"loss\":5.0}\n{\"step\":\"seven\",\"loss\":4.0}\n");
  CliRun step = Motley("report --run " + dir.Join("run") + " --no-compare");
  EXPECT_NE(step.exit_code, 0);
  EXPECT_CONTAINS(step.output, dir.Join("run/metrics.jsonl") + ":2: \"step\" must be an integer");
  dir.Write("run/metrics.jsonl", "{\"step\":1,\"ranks\":[{\"rank\":0,\"peak_memory_bytes\":\"big\"}]}\n");
  CliRun rank = Motley("report --run " + dir.Join("run") + " --no-compare");
  EXPECT_CONTAINS(rank.output, ":1: \"ranks[0].peak_memory_bytes\" must be a number");
  dir.Write("run/metrics.jsonl", "{\"step\":1,\"loss\":5.0}\n");
  dir.Write("run/trace.json", "{\"traceEvents\":[{\"ph\":\"M\"},{\"ph\":\"X\",\"pid\":\"zero\",\"ts\":1}]}");
  CliRun trace = Motley("report --run " + dir.Join("run") + " --no-compare");
  EXPECT_NE(trace.exit_code, 0);
  EXPECT_CONTAINS(trace.output, "trace.json: error: event 1: \"pid\" is missing or of the wrong type");
  EXPECT_CONTAINS(trace.output,
                  "remove " + dir.Join("run/trace.json") + " to report the run without its trace");
  for (const CliRun* failed : {&step, &rank, &trace})
    EXPECT_EQ(failed->output.find("json.exception"), std::string::npos);
}

// #51: with --offers the page charts what could be rented for the plan's model and batch — every
// allocation the search planned, its front and its choice, as `motley plan --offers --json` lists
// them — and marks the page's own plan: a plan chosen that way sits on its chosen point.
TEST(Cli, ReportChartsWhatCouldBeRentedAndMarksTheFrontAndThePlan) {
  TempDir dir;
  const std::string query = "--offers small-mix --objective cost";
  const std::string plan = dir.Join("p.toml"), page = dir.Join("rent.html");
  CliRun made =
      Motley("plan --model llama-100m --seq-len 512 --global-batch-tokens 262144 " + query + " -o " + plan);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  CliRun listed =
      Motley("plan --model llama-100m --seq-len 512 --global-batch-tokens 262144 " + query + " --json", true);
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  const nlohmann::json j = nlohmann::json::parse(listed.output);
  CliRun r = Motley("report --plan " + plan + " " + query + " --no-compare -o " + page);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = motley::ReadFileToString(page).value();
  EXPECT_CONTAINS(html, "id=\"rent-chart\"");
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = html.find(what); at != std::string::npos; at = html.find(what, at + 1)) ++n;
    return n;
  };
  const size_t front = j["front"].size(), planned = j["planned"].size();
  ASSERT_GE(front, 3u);
  EXPECT_EQ(count("<circle class=\"chosen\""), 1u);
  EXPECT_EQ(count("<circle class=\"front\"") + 1, front);
  EXPECT_EQ(count("<circle class=\"candidate\"") + front, planned);
  EXPECT_EQ(count("<circle class=\"this-plan\""), 1u);
  // The page's plan is the chosen one: the same point.
  auto centre = [&](const std::string& kind) {
    const size_t at = html.find("<circle class=\"" + kind + "\"");
    const size_t cx = html.find("cx=", at), r_at = html.find(" r=", at);
    return html.substr(cx, r_at - cx);
  };
  EXPECT_EQ(centre("this-plan"), centre("chosen"));
  for (const auto& f : j["front"]) EXPECT_CONTAINS(html, f["rent"].get<std::string>());
}

}  // namespace
