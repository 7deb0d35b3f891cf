// How fast the cluster model answers "bandwidth between device a and b" - planners ask it for
// every pair of devices. Compares a flat cluster (no overrides) with one carrying measured
// overrides for every pair of nodes, on a 1,024-device cluster of 4 regions.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "core/cluster_parse.h"

namespace motley {
namespace {

Cluster MakeCluster(bool with_overrides) {
  std::string text = "[network]\ninter_region_bandwidth = \"5Gbps\"\n";
  const char* types[] = {"a100-80gb", "v100-16gb", "t4", "a10g", "l4", "h100-sxm"};
  const int num_nodes = 128;
  for (int n = 0; n < num_nodes; ++n) {
    text += fmt::format(
        "[[nodes]]\nname = \"n{}\"\ndevice = \"{}\"\ncount = 8\nnic_bandwidth = \"100Gbps\"\n"
        "region = \"r{}\"\n",
        n, types[n % 6], n % 4);
  }
  if (with_overrides) {
    for (int a = 0; a < num_nodes; ++a)
      for (int b = a + 1; b < num_nodes; b += 7)
        text += fmt::format("[[links]]\nbetween = [\"n{}\", \"n{}\"]\nbandwidth = \"{}Gbps\"\n", a, b,
                            10 + (a + b) % 50);
  }
  return ParseClusterToml(text, "bench").value();
}

void AllPairs(benchmark::State& state, bool with_overrides) {
  Cluster c = MakeCluster(with_overrides);
  for (auto _ : state) {
    double sum = 0;
    for (int a = 0; a < c.num_devices(); ++a)
      for (int b = 0; b < c.num_devices(); ++b) sum += c.LinkBetween(a, b).latency_s;
    benchmark::DoNotOptimize(sum);
  }
  state.counters["pairs_per_s"] = benchmark::Counter(static_cast<double>(c.num_devices()) * c.num_devices(),
                                                     benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LinkBetween_Derived(benchmark::State& state) { AllPairs(state, false); }
void BM_LinkBetween_WithOverrides(benchmark::State& state) { AllPairs(state, true); }
BENCHMARK(BM_LinkBetween_Derived)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LinkBetween_WithOverrides)->Unit(benchmark::kMillisecond);

void BM_ParseCluster(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(MakeCluster(false).num_devices());
}
BENCHMARK(BM_ParseCluster)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace motley

BENCHMARK_MAIN();
