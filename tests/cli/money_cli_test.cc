// Money in `motley plan` (issue #51): plans priced on a priced cluster, what to rent chosen from an
// offers file by each objective, the search against every allocation, and the flags' errors.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"

namespace {

using namespace motley_test;

struct Point {
  double tokens_per_s, usd_per_hour;
};

std::vector<Point> Front(const nlohmann::json& j) {
  std::vector<Point> out;
  for (const auto& f : j["front"])
    out.push_back({f["money"]["tokens_per_s"].get<double>(), f["money"]["usd_per_hour"].get<double>()});
  return out;
}

nlohmann::json PlanJson(const std::string& args) {
  CliRun r = Motley("plan " + args + " --json", true);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return r.exit_code == 0 ? nlohmann::json::parse(r.output) : nlohmann::json::object();
}

const char* kOffers =
    "--offers small-mix --model llama-100m --seq-len 512 --global-batch-tokens 262144 --objective cost";

// On a short offer list the search finds what planning every allocation finds: for time, for cost,
// within every budget and above every pace the whole front offers, its choice is within 1%.
TEST(Money, TheSearchOverOffersChoosesWithinOnePercentOfPlanningEveryAllocation) {
  const nlohmann::json every = PlanJson(std::string(kOffers) + " --offer-evaluations 0");
  const nlohmann::json found = PlanJson(kOffers);
  ASSERT_TRUE(every.contains("front") && found.contains("front"));
  EXPECT_EQ(every["allocations_planned"].get<int>(), 3 * 5 * 3 - 1);
  EXPECT_LT(found["allocations_planned"].get<int>(), every["allocations_planned"].get<int>());
  // The search explores with a quick planning and plans its front again in full (at most 8); every
  // allocation is planned in full at once.
  EXPECT_GT(found["allocations_refined"].get<int>(), 0);
  EXPECT_LE(found["allocations_refined"].get<int>(), 8);
  EXPECT_EQ(every["allocations_refined"].get<int>(), 0);
  const std::vector<Point> exact = Front(every), ours = Front(found);
  ASSERT_GE(exact.size(), 3u);
  // Each objective's best on a front: time (fastest), cost (cheapest a token), and each constraint.
  auto best = [](const std::vector<Point>& front, int objective, double limit) {
    double score = std::numeric_limits<double>::infinity();
    for (const Point& p : front) {
      if (objective == 2 && p.usd_per_hour > limit) continue;
      if (objective == 3 && p.tokens_per_s < limit) continue;
      const double s =
          objective == 1 || objective == 3 ? p.usd_per_hour / p.tokens_per_s : 1 / p.tokens_per_s;
      score = std::min(score, s);
    }
    return score;
  };
  for (const Point& p : exact)
    for (int objective = 0; objective < 4; ++objective) {
      const double limit = objective == 2 ? p.usd_per_hour : p.tokens_per_s;
      EXPECT_LE(best(ours, objective, limit), best(exact, objective, limit) * 1.01)
          << "objective " << objective << " at " << limit;
    }
  // The chosen plan is the front's cheapest a token, and says why beside the fastest.
  EXPECT_NE(found["why_chosen"].get<std::string>().find("the fastest"), std::string::npos);
  double cheapest = std::numeric_limits<double>::infinity();
  for (const Point& p : ours) cheapest = std::min(cheapest, p.usd_per_hour / p.tokens_per_s);
  EXPECT_NEAR(found["money"]["usd_per_hour"].get<double>() / found["money"]["tokens_per_s"].get<double>(),
              cheapest, cheapest * 1e-9);
}

// A larger budget never gives a slower plan; a later deadline never a dearer one.
TEST(Money, ObjectivesAreMonotoneInTheirBudgetAndDeadline) {
  const std::string base = "--offers small-mix --model llama-100m --seq-len 512 --global-batch-tokens 262144";
  double last_tps = 0;
  for (double budget : {10.0, 20.0, 40.0, 80.0}) {
    const nlohmann::json j =
        PlanJson(base + " --objective time-within-budget --budget-per-hour " + std::to_string(budget));
    const double tps = j["money"]["tokens_per_s"].get<double>(),
                 usd = j["money"]["usd_per_hour"].get<double>();
    EXPECT_LE(usd, budget);
    EXPECT_GE(tps, last_tps) << budget;
    last_tps = tps;
  }
  double last_cost = std::numeric_limits<double>::infinity();
  for (const char* deadline : {"20min", "1h", "3h", "10h"}) {  // 2e9 tokens: a later deadline, a lower pace
    const nlohmann::json j =
        PlanJson(base + " --objective cost-within-deadline --tokens 2e9 --deadline " + deadline);
    const double cost = j["money"]["usd_per_million_tokens"].get<double>();
    EXPECT_LE(cost, last_cost * (1 + 1e-12)) << deadline;
    EXPECT_LE(j["money"]["job_s"].get<double>(),
              std::stod(deadline) * (std::string(deadline).find("min") != std::string::npos ? 60 : 3600) *
                  (1 + 1e-9));
    last_cost = cost;
  }
}

TEST(Money, APricedClusterPricesEveryPlanAndCanChooseWhichNodesToTake) {
  TempDir dir;
  const std::string cluster = dir.Write("priced.toml", R"(
name = "priced"
[[nodes]]
name = "a100"
device = "a100-40gb"
count = 8
nic_bandwidth = "400Gbps"
[[nodes]]
name = "t4"
device = "t4"
count = 8
replicas = 2
nic_bandwidth = "100Gbps"
[[prices]]
device = "a100-40gb"
price = "1.84 USD/h"
[[prices]]
device = "t4"
price = "0.98 USD/h"
)");
  const std::string args =
      "--cluster " + cluster + " --model llama-100m --seq-len 512 --global-batch-tokens 262144";
  CliRun r = Motley("plan " + args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("a million tokens"), std::string::npos) << r.output;
  nlohmann::json j = PlanJson(args + " --compare");
  ASSERT_TRUE(j.contains("money"));
  for (const auto& c : j["candidates"])
    if (c["fits_memory"].get<bool>()) {
      EXPECT_TRUE(c.contains("money")) << c["strategy"];
    }
  // Its devices at their prices.
  double usd = 0;
  for (const auto& g : j["groups"])
    for (const auto& d : g["devices"]) usd += d.get<int>() < 8 ? 1.84 : 0.98;
  EXPECT_NEAR(j["money"]["usd_per_hour"].get<double>(), usd, 1e-9);
  // --objective cost chooses among the cluster's classes of nodes.
  j = PlanJson(args + " --objective cost");
  ASSERT_TRUE(j.contains("front"));
  EXPECT_NE(j["why_chosen"].get<std::string>().find("(cost)"), std::string::npos);
}

// A plan chosen from offers is written with the cluster file of what it rents beside it, its devices
// numbered as that file's: it validates, and simulating it predicts the step the planner chose it by
// (a ZeRO plan on one offer, and a pipeline over two, whose microbatch routing is renumbered too).
TEST(Money, APlanChosenFromOffersIsWrittenWithTheClusterItRents) {
  TempDir dir;
  const std::string base =
      "plan --offers small-mix --model llama-100m --seq-len 512 --global-batch-tokens 262144 ";
  auto step = [](const std::string& output, const std::string& before) {
    const size_t at = output.find(before);
    if (at == std::string::npos) return std::string("(none)");
    const size_t begin = at + before.size();
    return output.substr(begin, output.find(" ms", begin) - begin);
  };
  int n = 0;
  for (const std::string objective :
       {"--objective cost", "--objective time-within-budget --budget-per-hour 53"}) {
    const std::string plan = (dir.path() / fmt::format("p{}.toml", n++)).string();
    CliRun r = Motley(base + objective + " -o " + plan);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string rented = plan.substr(0, plan.size() - 5) + ".cluster.toml";
    EXPECT_NE(r.output.find("what it rents: " + rented), std::string::npos) << r.output;
    CliRun v = Motley("validate " + rented + " " + plan);
    EXPECT_EQ(v.exit_code, 0) << v.output;
    CliRun sim = Motley("simulate --plan " + plan);
    ASSERT_EQ(sim.exit_code, 0) << sim.output;
    EXPECT_EQ(step(sim.output, "step "), step(r.output, "predicted step ")) << r.output << "\n" << sim.output;
    EXPECT_NE(sim.output.find("small-mix (rented)"), std::string::npos) << sim.output;
  }
}

// Spot capacity, priced honestly: a row with a spot price is offered on demand and as spot, a plan
// on spot devices is judged by its expected speed under their interruptions (the checkpoint
// interval's half and the restart lost each time), and says what the same devices cost on demand.
TEST(Money, SpotIsChosenByItsExpectedSpeedUnderInterruptions) {
  TempDir dir;
  auto offers = [&](double interruptions_per_hour) {
    return dir.Write(fmt::format("spot-{}.toml", interruptions_per_hour),
                     fmt::format(R"(
name = "spot-mix"
[[offers]]
name = "a100"
device = "a100-40gb"
count = 8
interconnect = "nvswitch"
nic_bandwidth = "400Gbps"
region = "east"
nodes = 2
price = "1.84 USD/h"
spot_price = "0.90 USD/h"
spot_interruptions_per_hour = {}
source = "test figures"
[[offers]]
name = "t4"
device = "t4"
count = 8
interconnect = "pcie"
nic_bandwidth = "100Gbps"
region = "east"
nodes = 4
price = "0.98 USD/h"
source = "test figures"
)",
                                 interruptions_per_hour));
  };
  const std::string args =
      " --model llama-100m --seq-len 512 --global-batch-tokens 262144 --objective cost --checkpoint-interval "
      "1h "
      "--restart-time 30min";
  // Rarely interrupted: half the price wins.
  nlohmann::json j = PlanJson("--offers " + offers(0.01) + args);
  ASSERT_TRUE(j.contains("money"));
  const nlohmann::json& m = j["money"];
  ASSERT_GT(m["spot_devices"].get<int>(), 0) << j["why_chosen"];
  // Each interruption loses half an hour of work and half an hour of restart.
  const double rate = 0.01 * m["spot_devices"].get<int>();
  EXPECT_NEAR(m["interruptions_per_hour"].get<double>(), rate, 1e-12);
  EXPECT_NEAR(m["availability"].get<double>(), 1 / (1 + rate * 1.0), 1e-12);
  EXPECT_NEAR(m["tokens_per_s"].get<double>(),
              m["nominal_tokens_per_s"].get<double>() * m["availability"].get<double>(), 1e-6);
  EXPECT_GT(m["on_demand_usd_per_hour"].get<double>(), m["usd_per_hour"].get<double>());
  CliRun r = Motley("plan --offers " + offers(0.01) + args);
  EXPECT_NE(r.output.find("the same devices on demand"), std::string::npos) << r.output;
  // Interrupted every few minutes: spot trains too little of the time to be worth its price.
  j = PlanJson("--offers " + offers(30) + args);
  ASSERT_TRUE(j.contains("money"));
  EXPECT_EQ(j["money"]["spot_devices"].get<int>(), 0) << j["why_chosen"];
  // A plan on spot nodes is written with them marked spot, and simulates.
  const std::string plan = (dir.path() / "spot-plan.toml").string();
  r = Motley("plan --offers " + offers(0.01) + args + " -o " + plan);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  CliRun cat = Shell("cat " + (dir.path() / "spot-plan.cluster.toml").string());
  EXPECT_NE(cat.output.find("spot = true"), std::string::npos) << cat.output;
  EXPECT_EQ(Motley("simulate --plan " + plan).exit_code, 0);
}

TEST(Money, FlagsThatDoNotFitSayWhichAndWhy) {
  const std::string base = "plan --model llama-100m --seq-len 512 --global-batch-tokens 262144 ";
  CliRun r = Motley(base + "--cluster local-emulated --objective cost");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("needs prices"), std::string::npos) << r.output;
  r = Motley(base + "--offers small-mix --budget-per-hour 20");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--objective time-within-budget"), std::string::npos) << r.output;
  r = Motley(base + "--offers small-mix --objective cost-within-deadline --deadline 3h");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("add --tokens"), std::string::npos) << r.output;
  r = Motley(base + "--offers small-mix --objective time-within-budget");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("needs a budget"), std::string::npos) << r.output;
  r = Motley(base + "--offers small-mix --cluster local-emulated");
  EXPECT_NE(r.exit_code, 0);
  r = Motley(base + "--offers small-mix --objective time-within-budget --budget-per-hour 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("nothing offered meets"), std::string::npos) << r.output;
  r = Motley(base + "--offers small-mix --objective cost-within-deadline --tokens 1e9 --deadline 3x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--deadline"), std::string::npos) << r.output;
  r = Motley(base + "--offers small-mix --compare");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("drop --compare"), std::string::npos) << r.output;
  r = Motley(base + "--offers small-mix --restart-time soon");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--restart-time"), std::string::npos) << r.output;
}

}  // namespace
