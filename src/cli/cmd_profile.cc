// motley profile --cluster C --model M --seq-len S [--precision P] [-o profile.json] [--no-cache] [--links]
#include <cstdint>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/table_printer.h"
#include "core/cluster_parse.h"
#include "core/file_io.h"
#include "core/model_parse.h"
#include "core/units.h"
#include "cli/link_measurement.h"
#include "profile/cluster_profiler.h"
#include "runtime/link_probe.h"
#include "runtime/rendezvous.h"

namespace motley::cli {
namespace {

void PrintLinks(const Cluster& cluster, const std::vector<ProfileLink>& links) {
  std::map<std::string, int> node;
  for (size_t n = 0; n < cluster.nodes.size(); ++n) node[cluster.nodes[n].name] = static_cast<int>(n);
  TablePrinter t({"link", "measured bandwidth", "latency", "cluster file says"});
  t.AlignRight({1, 2, 3});
  for (const ProfileLink& l : links) {
    // A device of each node (two of the node for its own link) for the cluster file's figure.
    int a = -1, b = -1;
    for (const Device& d : cluster.devices) {
      if (d.node == node.at(l.a) && a < 0) {
        a = d.id;
      } else if (d.node == node.at(l.b) && b < 0) {
        b = d.id;
      }
    }
    const Link nominal = cluster.LinkBetween(a, b);
    t.AddRow({l.a == l.b ? l.a + " (within)" : l.a + " <-> " + l.b, FormatBandwidth(l.bandwidth_bytes_per_s),
              fmt::format("{:.0f} us", l.latency_s * 1e6),
              fmt::format("{}, {:.0f} us", FormatBandwidth(nominal.bandwidth_bytes_per_s), nominal.latency_s * 1e6)});
  }
  fmt::print("{}", t.ToString());
}

// Under a launcher, one rank per device: measures the links (every rank), returns them.
Result<std::vector<ProfileLink>> MeasureUnderLauncher(const Cluster& cluster, const Rendezvous& rv) {
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Connect(rv));
  LinkProbeConfig config;
  if (rv.rank == 0) config.progress = [](const std::string& s) { fmt::print("  measuring {}\n", s); std::fflush(stdout); };
  return MeasureLinks(*comm, cluster, config);
}

}  // namespace

int RunProfile(const std::vector<std::string>& args) {
  CLI::App app("Measure each device type of a cluster for a model: layer and head times at several microbatch "
               "sizes, and the largest microbatch that fits. The planner and simulator read the result (--profile).",
               "motley profile");
  std::string cluster_ref, model_ref, out_path, precision_name = "bf16";
  int64_t seq_len = 0;
  ClusterProfileOptions options;
  bool no_cache = false, links = false, links_only = false;
  app.add_option("--cluster", cluster_ref, "a cluster file or built-in cluster name")->required();
  app.add_option("--model", model_ref, "a preset, model .toml or Hugging Face config.json (required)");
  app.add_option("--seq-len", seq_len, "tokens per sequence (required)")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_flag("--links", links,
               "also measure the links (ping-pong per distinct pair of node configurations): under a launcher with one "
               "rank per device, or by itself on an emulated local cluster");
  app.add_flag("--links-only", links_only, "measure the links only (under a launcher)")->group("");
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
  if (!cluster.ok()) {
    fmt::print(stderr, "{}\n", cluster.status().message());
    return kExitFailure;
  }
  if (!links_only && (model_ref.empty() || seq_len == 0)) {
    fmt::print(stderr, "motley profile: --model and --seq-len are required (or --links-only)\n");
    return kExitFailure;
  }
  // The links first: under a launcher every rank takes part, and only rank 0 goes on.
  std::vector<ProfileLink> measured_links;
  if (links || links_only) {
    Result<Rendezvous> rv = RendezvousFromEnv();
    Result<std::vector<ProfileLink>> l = std::vector<ProfileLink>();
    if (rv.ok() && rv->world_size > 1) {
      l = MeasureUnderLauncher(*cluster, *rv);
      if (l.ok() && rv->rank != 0) return kExitOk;
    } else if (cluster->num_devices() < 2) {
      l = std::vector<ProfileLink>();
    } else if (cluster->emulated()) {
      fmt::print("measuring the links of {}: one local rank per device\n", cluster->name);
      const std::string ref = std::filesystem::exists(cluster_ref) ? std::filesystem::absolute(cluster_ref).string()
                                                                   : cluster_ref;
      l = MeasureLinksLocally(ref, cluster->num_devices(),
                              (std::filesystem::temp_directory_path() / fmt::format("motley-links-{}", ::getpid()))
                                  .string());
    } else {
      l = Status::InvalidArgument(fmt::format(
          "--links on {}, a cluster of real devices: run motley profile under your launcher with one rank per device "
          "({} ranks: torchrun --no-python, srun or mpirun ... motley profile --cluster {} ... --links)",
          cluster->name, cluster->num_devices(), cluster_ref));
    }
    if (!l.ok()) {
      fmt::print(stderr, "motley profile: {}\n", l.status().message());
      return kExitFailure;
    }
    measured_links = *l;
    if (!links_only) PrintLinks(*cluster, measured_links);
  }
  if (links_only) {
    Profile only;
    only.links = measured_links;
    if (!out_path.empty()) {
      if (Status s = AtomicWriteFile(out_path, ProfileToJson(only).dump(1) + "\n"); !s.ok()) {
        fmt::print(stderr, "motley profile: {}\n", s.message());
        return kExitFailure;
      }
    }
    return kExitOk;
  }
  Result<ModelSpec> model = LoadModel(model_ref);
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
  profile->links = measured_links;
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
