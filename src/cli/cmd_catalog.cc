// motley catalog [--cluster FILE] [--json]: the GPU table.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/table_printer.h"
#include "cli/args.h"
#include "cli/command.h"
#include "core/cluster_parse.h"
#include "core/units.h"

namespace motley::cli {

int RunCatalog(const std::vector<std::string>& args) {
  CLI::App app("List the GPU types motley knows, with public spec figures.", "motley catalog");
  bool json = false;
  std::string cluster_file;
  app.add_flag("--json", json, "print JSON");
  app.add_option("--cluster", cluster_file, "include the device types this cluster file adds or overrides");
  if (auto rc = ParseArgs(app, args)) return *rc;

  GpuCatalog catalog = GpuCatalog::Builtin();
  if (!cluster_file.empty()) {
    Result<Cluster> c = LoadCluster(cluster_file);
    if (!c.ok()) {
      fmt::print(stderr, "{}\n", c.status().message());
      return kExitFailure;
    }
    catalog = c->catalog;
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& s : catalog.specs()) {
      out.push_back({{"name", s.name},
                     {"display_name", s.display_name},
                     {"aliases", s.aliases},
                     {"memory_bytes", s.memory_bytes},
                     {"memory_bandwidth_bytes_per_s", s.memory_bandwidth_bytes_per_s},
                     {"peak_fp16_flops", s.peak_fp16_flops},
                     {"peak_fp32_flops", s.peak_fp32_flops},
                     {"peak_fp64_flops", s.peak_fp64_flops},
                     {"supports_bf16", s.supports_bf16},
                     {"host_link_bytes_per_s", s.host_link_bytes_per_s},
                     {"nvlink_bytes_per_s", s.nvlink_bytes_per_s},
                     {"source", s.source},
                     {"reserve_bytes", s.reserve_bytes},
                     {"reserve_source", s.reserve_source}});
    }
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  TablePrinter table({"type", "memory", "reserve", "fp16/bf16", "fp32", "fp64", "mem bw", "host link",
                      "nvlink", "bf16", "name"});
  table.AlignRight({1, 2, 3, 4, 5, 6, 7, 8});
  for (const auto& s : catalog.specs()) {
    table.AddRow({s.name, FormatBytes(s.memory_bytes),
                  s.reserve_bytes > 0 ? FormatBytes(s.reserve_bytes) : "-", FormatFlops(s.peak_fp16_flops),
                  FormatFlops(s.peak_fp32_flops), FormatFlops(s.peak_fp64_flops),
                  FormatBandwidth(s.memory_bandwidth_bytes_per_s), FormatBandwidth(s.host_link_bytes_per_s),
                  s.nvlink_bytes_per_s > 0 ? FormatBandwidth(s.nvlink_bytes_per_s) : "-",
                  s.supports_bf16 ? "yes" : "no", s.display_name});
  }
  fmt::print("{}", table.ToString());
  fmt::print(
      "\nfp16/bf16: dense tensor-core peak. Bandwidths per direction. reserve: what CUDA's context, NCCL's "
      "buffers and "
      "the allocator's fragmentation keep (plans use the rest; [device_types.X] reserve overrides it). "
      "Sources: "
      "motley catalog --json.\n");
  return kExitOk;
}

}  // namespace motley::cli
