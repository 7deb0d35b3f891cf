// How long the Zorse planner's search takes (issue goals: < 2 s for cluster C's 128 GPUs, < 30 s
// for 1,024 GPUs of 6 types in 4 regions): phase 1 (SPLIT over the node graph) and phase 2 (every
// grouping x microbatch size x ministage count through the latency and memory models), without
// the simulator's re-ranking, which `motley plan` adds for its best few candidates. Llama-65B,
// 1M-token batch of 512-token sequences, roofline compute.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "core/cluster_parse.h"
#include "plan/zorse_planner.h"
#include "sim/cost_model.h"

namespace motley {
namespace {

Cluster Synthetic1024() {
  const char* types[] = {"h100-sxm", "a100-80gb", "a100-40gb", "v100-32gb", "a10g", "t4"};
  std::string text = "[network]\ninter_region_bandwidth = \"10Gbps\"\n";
  for (int n = 0; n < 128; ++n) {
    text += fmt::format(
        "[[nodes]]\nname = \"n{}\"\ndevice = \"{}\"\ncount = 8\nnic_bandwidth = \"{}Gbps\"\nregion = "
        "\"r{}\"\n",
        n, types[n % 6], 25 * (1 + n % 4), n % 4);
  }
  return ParseClusterToml(text, "synthetic-1024").value();
}

void Search(benchmark::State& state, const Cluster& cluster) {
  ModelSpec model = *FindModelPreset("llama-65b");
  CostModel costs(cluster, model, nullptr, 512, Precision::kFp16, true);
  ZorseRequest req;
  req.global_batch_sequences = 2048;
  req.seq_len = 512;
  req.precision = Precision::kFp16;
  req.candidates_to_evaluate = 0;
  size_t considered = 0;
  for (auto _ : state) {
    ZorsePlan p = PlanZorse(cluster, model, costs, req, nullptr).value();
    considered = p.plan.groups.size();
  }
  state.counters["devices"] = cluster.num_devices();
  state.counters["groups_chosen"] = static_cast<double>(considered);
}

void BM_ZorseSearch_ClusterC(benchmark::State& state) { Search(state, LoadCluster("zorse-c").value()); }
void BM_ZorseSearch_1024Gpus(benchmark::State& state) { Search(state, Synthetic1024()); }
BENCHMARK(BM_ZorseSearch_ClusterC)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_ZorseSearch_1024Gpus)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace motley

BENCHMARK_MAIN();
