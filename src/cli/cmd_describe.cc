// motley describe --cluster FILE | --model NAME|FILE [--seq-len S] [--precision P] [--json]
#include <fmt/format.h>
#include <cstdint>

#include "api/describe.h"
#include "cli/args.h"
#include "cli/command.h"
#include "core/cluster_parse.h"
#include "core/model_parse.h"

namespace motley::cli {

int RunDescribe(const std::vector<std::string>& args) {
  CLI::App app(
      "Derived figures of a cluster (devices, peak TFLOPs, memory, links) "
      "or a model (parameters, FLOPs per token, memory per component).",
      "motley describe");
  std::string cluster_ref, model_ref, precision_name = "bf16";
  int64_t seq_len = 0;
  bool json = false;
  app.add_option("--cluster", cluster_ref,
                 "a cluster file, or a built-in cluster name (local-emulated, zorse-a, ...)");
  app.add_option("--model", model_ref,
                 "a preset (llama-7b, ...), a model .toml, or a Hugging Face config.json");
  app.add_option("--seq-len", seq_len, "sequence length for FLOPs and activations (default: the model's max)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--precision", precision_name, "fp32, bf16, fp16 or fp64 (default bf16)")
      ->check(CLI::IsMember(PrecisionNames()));
  app.add_flag("--json", json, "print JSON");
  if (auto rc = ParseArgs(app, args)) return *rc;
  if (cluster_ref.empty() && model_ref.empty()) {
    fmt::print(stderr, "motley describe: give --cluster FILE or --model NAME|FILE (or both)\n");
    return kExitUsage;
  }

  nlohmann::json out = nlohmann::json::object();
  std::string text;
  if (!model_ref.empty()) {
    Result<ModelSpec> m = LoadModel(model_ref);
    if (!m.ok()) {
      fmt::print(stderr, "{}\n", m.status().message());
      return kExitFailure;
    }
    const Precision p = *PrecisionFromName(precision_name);
    int64_t s = seq_len > 0 ? seq_len : m->max_seq_len;
    if (json) {
      out = DescribeModelJson(*m, s, p);
    } else {
      text += DescribeModelText(*m, s, p);
    }
  }
  if (!cluster_ref.empty()) {
    Result<Cluster> c = LoadCluster(cluster_ref);
    if (!c.ok()) {
      fmt::print(stderr, "{}\n", c.status().message());
      return kExitFailure;
    }
    if (json) {
      // With both, the model's figures stay at the top level and the cluster goes under "cluster".
      if (model_ref.empty()) {
        out = DescribeClusterJson(*c);
      } else {
        out["cluster"] = DescribeClusterJson(*c);
      }
    } else {
      text += (text.empty() ? "" : "\n") + DescribeClusterText(*c);
    }
  }
  fmt::print("{}", json ? out.dump(2) + "\n" : text);
  return kExitOk;
}

}  // namespace motley::cli
