// motley profile --cluster C --model M --seq-len S [--precision P] [-o profile.json] [--no-cache]
#include <cstdint>
#include <fstream>

#include <fmt/format.h>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/table_printer.h"
#include "core/cluster_parse.h"
#include "core/file_io.h"
#include "core/model_parse.h"
#include "core/units.h"
#include "profile/cluster_profiler.h"

namespace motley::cli {

int RunProfile(const std::vector<std::string>& args) {
  CLI::App app("Measure each device type of a cluster for a model: layer and head times at several microbatch "
               "sizes, and the largest microbatch that fits. The planner and simulator read the result (--profile).",
               "motley profile");
  std::string cluster_ref, model_ref, out_path, precision_name = "bf16";
  int64_t seq_len = 0;
  ClusterProfileOptions options;
  bool no_cache = false;
  app.add_option("--cluster", cluster_ref, "a cluster file or built-in cluster name")->required();
  app.add_option("--model", model_ref, "a preset, model .toml or Hugging Face config.json")->required();
  app.add_option("--seq-len", seq_len, "tokens per sequence")->required()->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--precision", precision_name, "fp32, bf16 or fp16")->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_option("--max-microbatch", options.layers.max_microbatch_cap, "stop the fit search here")
      ->capture_default_str();
  app.add_option("--repeats", options.layers.repeats, "timed runs per size (the median counts)")->capture_default_str();
  app.add_flag("--no-cache", no_cache, "measure again even when the cache has it");
  app.add_option("-o,--output", out_path, "write the profile (JSON)");
  if (auto rc = ParseArgs(app, args)) return *rc;
  options.use_cache = !no_cache;
  options.progress = [](const std::string& s) { fmt::print("  {}\n", s); std::fflush(stdout); };

  Result<Cluster> cluster = LoadCluster(cluster_ref);
  Result<ModelSpec> model = cluster.ok() ? LoadModel(model_ref) : Result<ModelSpec>(cluster.status());
  if (!model.ok()) {
    fmt::print(stderr, "{}\n", model.status().message());
    return kExitFailure;
  }
  const Precision precision = precision_name == "fp32"   ? Precision::kFp32
                              : precision_name == "fp16" ? Precision::kFp16
                                                         : Precision::kBf16;
  fmt::print("profiling {} on {} (seq {}, {}); cache: {}\n", model->name, cluster->name, seq_len, precision_name,
             ProfileCacheDir());
  Result<Profile> profile = ProfileCluster(*cluster, *model, seq_len, precision, options);
  if (!profile.ok()) {
    fmt::print(stderr, "motley profile: {}\n", profile.status().message());
    return kExitFailure;
  }
  TablePrinter t({"device type", "microbatch", "layer fwd", "layer bwd", "head fwd", "head bwd", "max microbatch"});
  t.AlignRight({1, 2, 3, 4, 5, 6});
  for (const auto& e : profile->entries)
    for (size_t i = 0; i < e.points.size(); ++i)
      t.AddRow({i == 0 ? e.device_type : "", fmt::format("{:.0f}", e.points[i].microbatch),
                fmt::format("{:.2f} ms", e.points[i].forward_ms), fmt::format("{:.2f} ms", e.points[i].backward_ms),
                i < e.head_points.size() ? fmt::format("{:.2f} ms", e.head_points[i].forward_ms) : "-",
                i < e.head_points.size() ? fmt::format("{:.2f} ms", e.head_points[i].backward_ms) : "-",
                i == 0 ? std::to_string(e.max_microbatch) : ""});
  fmt::print("{}", t.ToString());
  if (!out_path.empty()) {
    Status s = AtomicWriteFile(out_path, ProfileToJson(*profile).dump(1) + "\n");
    if (!s.ok()) {
      fmt::print(stderr, "motley profile: {}\n", s.message());
      return kExitFailure;
    }
    fmt::print("written to {}\n", out_path);
  }
  return kExitOk;
}

}  // namespace motley::cli
