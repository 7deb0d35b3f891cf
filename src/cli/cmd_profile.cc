// motley profile --cluster C --model M --seq-len S [--precision P] [-o profile.json] [--no-cache] [--links]
//
// By itself: every device type measured here, one after another (on CPU-only machines each type is
// this CPU; the emulation's speed factors are the cost model's), and with --links on an emulated
// cluster, the links measured by local ranks it launches. Under a launcher with one rank per
// device (torchrun --no-python, srun, mpirun, motley launch): each type is measured by the rank of
// its first device, all types at once, and the links by ping-pong between representative ranks;
// rank 0 collects and writes.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "api/table_printer.h"
#include "cli/args.h"
#include "cli/command.h"
#include "core/cluster_parse.h"
#include "core/file_io.h"
#include "core/model_parse.h"
#include "core/rendezvous.h"
#include "core/units.h"
#include "plan/memory_model.h"
#include "profile/cluster_profiler.h"
#include "profile/link_probe.h"
#include "runtime/device/cuda_device.h"
#include "runtime/device/rank_device.h"
#include "supervise/link_measurement.h"

namespace motley::cli {
namespace {

namespace fs = std::filesystem;

void PrintEntries(const Profile& profile) {
  if (profile.entries.empty()) return;
  TablePrinter t(
      {"device type", "microbatch", "layer fwd", "layer bwd", "head fwd", "head bwd", "one layer fits"});
  t.AlignRight({1, 2, 3, 4, 5, 6});
  for (const auto& e : profile.entries)
    for (size_t i = 0; i < e.points.size(); ++i)
      t.AddRow({i == 0 ? e.device_type : "", fmt::format("{:.0f}", e.points[i].microbatch),
                fmt::format("{:.2f} ms", e.points[i].forward_ms),
                fmt::format("{:.2f} ms", e.points[i].backward_ms),
                i < e.head_points.size() ? fmt::format("{:.2f} ms", e.head_points[i].forward_ms) : "-",
                i < e.head_points.size() ? fmt::format("{:.2f} ms", e.head_points[i].backward_ms) : "-",
                i == 0 ? std::to_string(e.max_microbatch) : ""});
  fmt::print("{}", t.ToString());
}

// The measured limits beside the memory model's, for data parallelism over the whole cluster.
void PrintLimits(const Profile& profile, const ModelSpec& model, int64_t seq_len, Precision precision,
                 bool gloo_reduce_scatter) {
  if (std::none_of(profile.entries.begin(), profile.entries.end(),
                   [](const ProfileEntry& e) { return e.limits; }))
    return;
  TablePrinter t(
      {"device type", "memory", "devices", "ZeRO stage", "largest microbatch", "memory model says"});
  t.AlignRight({1, 2, 3, 4, 5});
  for (const auto& e : profile.entries) {
    if (!e.limits) continue;
    const MeasuredLimits& l = *e.limits;
    for (int z = 0; z < 4; ++z) {
      const DataParallelMemoryInput in =
          PerLayerDataParallel(model, precision, z, l.dp_degree, seq_len, true, gloo_reduce_scatter);
      t.AddRow(
          {z == 0 ? e.device_type : "", z == 0 ? FormatBytes(static_cast<double>(l.capacity_bytes)) : "",
           z == 0 ? std::to_string(l.dp_degree) : "", fmt::format("{}", z),
           std::to_string(l.max_microbatch_by_zero[z]),
           std::to_string(DataParallelMaxMicrobatch(in, static_cast<double>(l.capacity_bytes), 1 << 20))});
    }
  }
  fmt::print(
      "the whole model in data parallelism, checkpointed (measured without holding it: "
      "profile/memory_probe.h)\n{}",
      t.ToString());
}

void PrintLinks(const Cluster& cluster, const std::vector<ProfileLink>& links) {
  if (links.empty()) return;
  std::map<std::string, int> node;
  for (size_t n = 0; n < cluster.nodes.size(); ++n) node[cluster.nodes[n].name] = static_cast<int>(n);
  TablePrinter t({"link", "measured bandwidth", "latency", "collective overhead", "cluster file says"});
  t.AlignRight({1, 2, 3, 4});
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
              fmt::format("{:.0f} us a call", l.collective_overhead_s * 1e6),
              fmt::format("{}, {:.0f} us", FormatBandwidth(nominal.bandwidth_bytes_per_s),
                          nominal.latency_s * 1e6)});
  }
  fmt::print("{}", t.ToString());
}

// Every rank's text, on every rank (an all-gather of the lengths, then of the padded bytes).
Result<std::vector<std::string>> AllGatherText(Communicator& comm, const std::string& mine) {
  const int w = comm.world_size();
  torch::Tensor lengths = torch::empty({w}, torch::kInt64);
  MOTLEY_RETURN_IF_ERROR(
      comm.AllGather(comm.world(), torch::tensor({static_cast<int64_t>(mine.size())}), lengths));
  const int64_t longest = std::max<int64_t>(1, lengths.max().item<int64_t>());
  torch::Tensor padded = torch::zeros({longest}, torch::kUInt8);
  std::memcpy(padded.data_ptr(), mine.data(), mine.size());
  torch::Tensor all = torch::empty({w * longest}, torch::kUInt8);
  MOTLEY_RETURN_IF_ERROR(comm.AllGather(comm.world(), padded, all));
  std::vector<std::string> out;
  for (int r = 0; r < w; ++r)
    out.emplace_back(reinterpret_cast<const char*>(all.data_ptr<uint8_t>()) + r * longest,
                     static_cast<size_t>(lengths[r].item<int64_t>()));
  return out;
}

struct Request {
  Cluster cluster;
  std::string cluster_ref;
  std::optional<ModelSpec> model;  // unset: links only
  int64_t seq_len = 0;
  Precision precision = Precision::kBf16;
  ClusterProfileOptions options;
  bool links = false;
};

// Under a launcher: this rank's part; the whole profile on rank 0 (empty elsewhere).
Result<Profile> ProfileLaunched(Request& req, const Rendezvous& rv) {
  if (rv.world_size != req.cluster.num_devices())
    return Status::InvalidArgument(
        fmt::format("under a launcher, motley profile needs one rank per device of {} ({} devices), but {} "
                    "ranks were started",
                    req.cluster.name, req.cluster.num_devices(), rv.world_size));
  // Each rank on its own GPU when every rank of the host has one (as training runs), else the CPU.
  MOTLEY_ASSIGN_OR_RETURN(torch::Device device, RankDevice("auto", rv));
  SetCurrentDevice(device);
  CommConfig cc;
  cc.timeout_s = 3600;  // ranks wait for the slowest type's measurement; a dead rank still shows in seconds
  cc.gpu = device.is_cuda();
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Connect(rv, cc));
  Profile profile;
  if (req.links) {
    LinkProbeConfig lc;
    lc.device = device;
    if (rv.rank == 0)
      lc.progress = [](const std::string& s) {
        fmt::print("  measuring {}\n", s);
        std::fflush(stdout);
      };
    MOTLEY_ASSIGN_OR_RETURN(profile.links, MeasureLinks(*comm, req.cluster, lc));
  }
  if (!req.model) return profile;
  // The types this rank measures (those whose first device it is), all ranks at once.
  req.options.only_types.clear();
  for (const auto& [type, device] : DeviceTypesByFirstDevice(req.cluster))
    if (device == rv.rank) req.options.only_types.push_back(type);
  Profile mine;
  if (!req.options.only_types.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(mine,
                            ProfileCluster(req.cluster, *req.model, req.seq_len, req.precision, req.options));
  }
  MOTLEY_ASSIGN_OR_RETURN(std::vector<std::string> parts, AllGatherText(*comm, ProfileToJson(mine).dump()));
  if (rv.rank != 0) return Profile();
  for (size_t r = 0; r < parts.size(); ++r) {
    MOTLEY_ASSIGN_OR_RETURN(Profile p, ParseProfileJson(parts[r], fmt::format("rank {}'s profile", r)));
    for (auto& e : p.entries) profile.entries.push_back(std::move(e));
  }
  return profile;
}

// By itself: the types one after another here; links by launched local ranks (emulated clusters).
Result<Profile> ProfileHere(const Request& req) {
  Profile profile;
  if (req.links && req.cluster.num_devices() > 1) {
    if (!req.cluster.emulated())
      return Status::InvalidArgument(
          fmt::format("--links on {}, a cluster of real devices: run motley profile under your launcher with "
                      "one rank per "
                      "device ({} ranks: torchrun --no-python, srun or mpirun ... motley profile --cluster "
                      "{} ... --links)",
                      req.cluster.name, req.cluster.num_devices(), req.cluster_ref));
    fmt::print("measuring the links of {}: one local rank per device\n", req.cluster.name);
    const std::string ref =
        fs::exists(req.cluster_ref) ? fs::absolute(req.cluster_ref).string() : req.cluster_ref;
    // The ranks' result goes through a scratch folder, removed afterwards whatever happened.
    const fs::path scratch = fs::temp_directory_path() / fmt::format("motley-links-{}", ::getpid());
    Result<std::vector<ProfileLink>> links = MeasureLinks(ref, req.cluster.num_devices(), scratch.string());
    std::error_code ec;
    fs::remove_all(scratch, ec);
    if (!links.ok()) return links.status();
    profile.links = std::move(*links);
  }
  if (req.model) {
    MOTLEY_ASSIGN_OR_RETURN(Profile p,
                            ProfileCluster(req.cluster, *req.model, req.seq_len, req.precision, req.options));
    profile.entries = std::move(p.entries);
  }
  return profile;
}

}  // namespace

int RunProfile(const std::vector<std::string>& args) {
  CLI::App app(
      "Measure each device type of a cluster for a model: layer and head times at several microbatch "
      "sizes, and the largest microbatch that fits; with --links, the links too. The planner and simulator "
      "read the result (--profile).",
      "motley profile");
  std::string model_ref, out_path, precision_name = "bf16";
  Request req;
  bool no_cache = false, links_only = false;
  app.add_option("--cluster", req.cluster_ref, "a cluster file or built-in cluster name")->required();
  app.add_option("--model", model_ref, "a preset, model .toml or Hugging Face config.json (required)");
  app.add_option("--seq-len", req.seq_len, "tokens per sequence (required)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_flag("--links", req.links,
               "also measure the links (ping-pong per distinct pair of node configurations): under a "
               "launcher with one "
               "rank per device, or by itself on an emulated local cluster");
  app.add_flag("--links-only", links_only, "measure the links only")->group("");
  app.add_option("--precision", precision_name, "fp32, bf16, fp16 or fp64")
      ->check(CLI::IsMember(PrecisionNames()))
      ->capture_default_str();
  app.add_option("--max-microbatch", req.options.layers.max_microbatch_cap, "stop the fit search here")
      ->capture_default_str();
  app.add_option("--repeats", req.options.layers.repeats, "timed runs per size (the median counts)")
      ->capture_default_str();
  app.add_flag("--no-cache", no_cache, "measure again even when the cache has it");
  app.add_option("-o,--output", out_path, "write the profile (JSON)");
  if (auto rc = ParseArgs(app, args)) return *rc;
  auto fail = [](const Status& s) {
    fmt::print(stderr, "motley profile: {}\n", s.message());
    return kExitFailure;
  };
  req.options.use_cache = !no_cache;
  req.options.progress = [](const std::string& s) {
    fmt::print("  {}\n", s);
    std::fflush(stdout);
  };
  req.links = req.links || links_only;

  Result<Cluster> cluster = LoadCluster(req.cluster_ref);
  if (!cluster.ok()) {
    fmt::print(stderr, "{}\n", cluster.status().message());
    return kExitFailure;
  }
  req.cluster = *cluster;
  if (!links_only) {
    if (model_ref.empty() || req.seq_len == 0)
      return fail(Status::InvalidArgument("--model and --seq-len are required (they say what to measure)"));
    Result<ModelSpec> model = LoadModel(model_ref);
    if (!model.ok()) {
      fmt::print(stderr, "{}\n", model.status().message());
      return kExitFailure;
    }
    req.model = *model;
    req.precision = *PrecisionFromName(precision_name);
  }
  Result<Rendezvous> rv = RendezvousFromEnv();
  if (!rv.ok()) return fail(rv.status());
  const bool launched = rv->world_size > 1;
  if (req.model && (!launched || rv->rank == 0))
    fmt::print("profiling {} on {} (seq {}, {}); cache: {}\n", req.model->name, req.cluster.name, req.seq_len,
               precision_name, ProfileCacheDir());
  Result<Profile> profile = launched ? ProfileLaunched(req, *rv) : ProfileHere(req);
  if (!profile.ok()) return fail(profile.status());
  if (launched && rv->rank != 0) return kExitOk;
  if (!links_only) {
    PrintEntries(*profile);
    if (req.model) PrintLimits(*profile, *req.model, req.seq_len, req.precision, req.cluster.emulated());
    PrintLinks(req.cluster, profile->links);
  }
  if (!out_path.empty()) {
    if (Status s = AtomicWriteFile(out_path, ProfileToJson(*profile).dump(1) + "\n"); !s.ok()) return fail(s);
    if (!links_only) fmt::print("written to {}\n", out_path);
  }
  return kExitOk;
}

}  // namespace motley::cli
