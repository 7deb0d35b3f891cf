#include "api/describe.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "api/table_printer.h"
#include "core/units.h"

namespace motley {
namespace {

// Min and max bandwidth and latency of each kind of link in the cluster. Devices of one node share
// their links, so it is enough to look at one device per node.
struct LinkRange {
  double min_bw = std::numeric_limits<double>::infinity(), max_bw = 0;
  double min_lat = std::numeric_limits<double>::infinity(), max_lat = 0;
  int64_t count = 0;  // node pairs (or nodes, for intra-node links)
  void Add(const Link& l) {
    min_bw = std::min(min_bw, l.bandwidth_bytes_per_s);
    max_bw = std::max(max_bw, l.bandwidth_bytes_per_s);
    min_lat = std::min(min_lat, l.latency_s);
    max_lat = std::max(max_lat, l.latency_s);
    ++count;
  }
};

std::map<LinkKind, LinkRange> LinkRanges(const Cluster& c) {
  std::map<LinkKind, LinkRange> ranges;
  std::vector<int> first_device;  // per node
  int d = 0;
  for (const auto& n : c.nodes) {
    if (n.num_devices > 1) ranges[LinkKind::kIntraNode].Add(c.LinkBetween(d, d + 1));
    first_device.push_back(d);
    d += n.num_devices;
  }
  // Pairs of nodes; a cluster of thousands of nodes is sampled along a stride to stay fast.
  const size_t n = first_device.size();
  const size_t stride = n > 512 ? n / 512 : 1;
  for (size_t i = 0; i < n; i += stride)
    for (size_t j = i + 1; j < n; ++j) {
      Link l = c.LinkBetween(first_device[i], first_device[j]);
      ranges[l.kind].Add(l);
    }
  return ranges;
}

}  // namespace

nlohmann::json DescribeModelJson(const ModelSpec& m, int64_t seq_len, Precision p) {
  const int64_t params = TotalParams(m);
  const StateBytesPerParam state = StateBytes(p);
  return {
      {"name", m.name},
      {"hidden_size", m.hidden_size},
      {"num_layers", m.num_layers},
      {"num_heads", m.num_heads},
      {"num_kv_heads", m.num_kv_heads},
      {"ffn_size", m.ffn_size},
      {"vocab_size", m.vocab_size},
      {"max_seq_len", m.max_seq_len},
      {"rope_theta", m.rope_theta},
      {"rope_scaling", RopeScalingTypeName(m.rope_scaling.type)},
      {"norm_eps", m.norm_eps},
      {"tie_embeddings", m.tie_embeddings},
      {"parameters", params},
      {"parameters_per_layer", ParamsPerLayer(m)},
      {"embedding_parameters", EmbeddingParams(m)},
      {"head_parameters", HeadParams(m)},
      {"seq_len", seq_len},
      {"flops_per_token",
       {{"forward", ForwardFlopsPerToken(m, seq_len)},
        {"backward", BackwardFlopsPerToken(m, seq_len)},
        {"train", TrainFlopsPerToken(m, seq_len, false)},
        {"train_with_recompute", TrainFlopsPerToken(m, seq_len, true)}}},
      {"memory",
       {{"precision", PrecisionName(p)},
        {"parameter_bytes", params * state.params},
        {"gradient_bytes", params * state.grads},
        {"optimizer_bytes", params * state.optimizer},
        {"state_bytes", params * state.total()},
        {"boundary_activation_bytes_per_token", BoundaryActivationBytesPerToken(m, p)},
        {"layer_activation_bytes_per_token", LayerActivationBytesPerToken(m, seq_len, p, false)}}},
  };
}

std::string DescribeModelText(const ModelSpec& m, int64_t seq_len, Precision p) {
  const int64_t params = TotalParams(m);
  const StateBytesPerParam state = StateBytes(p);
  std::string out;
  out += fmt::format("model {}: {} parameters ({} per layer x {} layers, embedding {}, head {})\n", m.name,
                     FormatCount(params), FormatCount(ParamsPerLayer(m)), m.num_layers,
                     FormatCount(EmbeddingParams(m)), FormatCount(HeadParams(m)));
  out += fmt::format("  shape: hidden {}, heads {} (kv {}), ffn {}, vocab {}, max seq {}{}\n", m.hidden_size,
                     m.num_heads, m.num_kv_heads, m.ffn_size, m.vocab_size, m.max_seq_len,
                     m.tie_embeddings ? ", tied embeddings" : "");
  out += fmt::format("  FLOPs per token at seq {}: forward {:.3g}, train {:.3g} ({:.3g} with recompute)\n",
                     seq_len, ForwardFlopsPerToken(m, seq_len), TrainFlopsPerToken(m, seq_len, false),
                     TrainFlopsPerToken(m, seq_len, true));
  out += fmt::format("  training state in {}: parameters {}, gradients {}, optimizer {}; total {}\n",
                     PrecisionName(p), FormatBytes(params * state.params), FormatBytes(params * state.grads),
                     FormatBytes(params * state.optimizer), FormatBytes(params * state.total()));
  out += fmt::format("  activations per token: {} at a layer boundary, {} inside a layer (seq {})\n",
                     FormatBytes(BoundaryActivationBytesPerToken(m, p)),
                     FormatBytes(LayerActivationBytesPerToken(m, seq_len, p, false)), seq_len);
  return out;
}

nlohmann::json DescribeClusterJson(const Cluster& c) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : c.nodes) {
    nlohmann::json node = {{"name", n.name},
                           {"device_type", n.device_type},
                           {"num_devices", n.num_devices},
                           {"interconnect", InterconnectName(n.interconnect)},
                           {"intra_bandwidth_bytes_per_s", n.intra_bandwidth_bytes_per_s},
                           {"nic_bandwidth_bytes_per_s", n.nic_bandwidth_bytes_per_s},
                           {"region", n.region}};
    if (!n.host.empty()) node["host"] = n.host;
    if (!n.emulation.empty()) {
      nlohmann::json emu = nlohmann::json::array();
      for (const auto& e : n.emulation) {
        emu.push_back(
            {{"speed_factor", e.speed_factor},
             {"memory_bytes", e.memory_bytes ? nlohmann::json(*e.memory_bytes) : nullptr},
             {"link_bandwidth_bytes_per_s",
              e.link_bandwidth_bytes_per_s ? nlohmann::json(*e.link_bandwidth_bytes_per_s) : nullptr}});
      }
      node["emulation"] = emu;
    }
    nodes.push_back(node);
  }
  std::map<std::string, int> type_counts;
  for (const auto& n : c.nodes) type_counts[n.device_type] += n.num_devices;
  nlohmann::json types = nlohmann::json::array();
  for (const auto& [type, count] : type_counts) {
    const GpuSpec* s = c.catalog.Find(type);
    types.push_back({{"type", type},
                     {"count", count},
                     {"memory_bytes", s->memory_bytes},
                     {"reserve_bytes", s->reserve_bytes},
                     {"peak_fp16_flops", s->peak_fp16_flops}});
  }
  nlohmann::json links = nlohmann::json::array();
  for (const auto& [kind, r] : LinkRanges(c)) {
    links.push_back({{"kind", LinkKindName(kind)},
                     {"min_bandwidth_bytes_per_s", r.min_bw},
                     {"max_bandwidth_bytes_per_s", r.max_bw},
                     {"min_latency_s", r.min_lat},
                     {"max_latency_s", r.max_lat}});
  }
  return {{"name", c.name},
          {"num_devices", c.num_devices()},
          {"num_nodes", c.nodes.size()},
          {"regions", c.regions},
          {"emulated", c.emulated()},
          {"total_peak_fp16_flops", c.total_peak_fp16_flops()},
          {"total_peak_fp16_tflops", c.total_peak_fp16_flops() / 1e12},
          {"total_memory_bytes", c.total_memory_bytes()},
          {"device_types", types},
          {"links", links},
          {"nodes", nodes}};
}

std::string DescribeClusterText(const Cluster& c) {
  std::string out =
      fmt::format("cluster {}: {} devices on {} nodes in {} region(s) ({}); {} fp16 peak, {} memory{}\n",
                  c.name.empty() ? "(unnamed)" : c.name, c.num_devices(), c.nodes.size(), c.regions.size(),
                  fmt::format("{}", fmt::join(c.regions, ", ")), FormatFlops(c.total_peak_fp16_flops()),
                  FormatBytes(c.total_memory_bytes()), c.emulated() ? "; emulated devices" : "");
  TablePrinter nodes(
      {"node", "devices", "type", "interconnect", "intra bw", "nic bw", "region", "emulation"});
  nodes.AlignRight({1, 4, 5});
  const size_t shown = std::min<size_t>(c.nodes.size(), 40);
  for (size_t i = 0; i < shown; ++i) {
    const NodeSpec& n = c.nodes[i];
    std::string emu = "-";
    if (!n.emulation.empty()) {
      std::vector<std::string> parts;
      for (const auto& e : n.emulation) {
        std::string p =
            e.speed_factor == 1.0 ? std::string("full speed") : fmt::format("{:g}x slower", e.speed_factor);
        if (e.memory_bytes) p += ", " + FormatBytes(*e.memory_bytes);
        if (e.link_bandwidth_bytes_per_s) p += ", link " + FormatBandwidth(*e.link_bandwidth_bytes_per_s);
        parts.push_back(p);
      }
      emu = fmt::format("{}", fmt::join(parts, " | "));
    }
    nodes.AddRow({n.name, std::to_string(n.num_devices), n.device_type,
                  std::string(InterconnectName(n.interconnect)),
                  FormatBandwidth(n.intra_bandwidth_bytes_per_s),
                  n.nic_bandwidth_bytes_per_s > 0 ? FormatBandwidth(n.nic_bandwidth_bytes_per_s) : "-",
                  n.region, emu});
  }
  out += nodes.ToString();
  if (shown < c.nodes.size()) out += fmt::format("... and {} more nodes\n", c.nodes.size() - shown);
  out += "links:\n";
  for (const auto& [kind, r] : LinkRanges(c)) {
    out += fmt::format("  {:<13} {} .. {}, latency {} .. {}\n", LinkKindName(kind), FormatBandwidth(r.min_bw),
                       FormatBandwidth(r.max_bw), FormatDuration(r.min_lat), FormatDuration(r.max_lat));
  }
  return out;
}

nlohmann::json DescribeJobJson(const JobSpec& job) {
  const TrainingConfig& t = job.training;
  const TensorParallelConfig& tp = job.tensor_parallel;
  return {{"file", job.file},
          {"model_ref", job.model_ref},
          {"cluster_ref", job.cluster_ref},
          {"model", DescribeModelJson(job.model, t.seq_len, t.precision)},
          {"cluster", DescribeClusterJson(job.cluster)},
          {"training",
           {{"steps", t.steps},
            {"seq_len", t.seq_len},
            {"global_batch_sequences", t.global_batch_sequences},
            {"global_batch_tokens", t.global_batch_tokens()},
            {"precision", PrecisionName(t.precision)},
            {"activation_checkpointing", t.activation_checkpointing},
            {"seed", t.seed}}},
          {"data",
           {{"train", job.data.train},
            {"validation", job.data.validation},
            {"tokenizer", job.data.tokenizer},
            {"validation_interval_steps", job.data.validation_interval_steps},
            {"validation_sequences", job.data.validation_sequences}}},
          {"optimizer",
           {{"lr", job.optimizer.lr},
            {"beta1", job.optimizer.beta1},
            {"beta2", job.optimizer.beta2},
            {"eps", job.optimizer.eps},
            {"weight_decay", job.optimizer.weight_decay},
            {"grad_clip_norm", job.optimizer.grad_clip_norm}}},
          {"lr_schedule",
           {{"warmup_steps", job.lr_schedule.warmup_steps},
            {"decay", job.lr_schedule.decay},
            {"min_lr_ratio", job.lr_schedule.min_lr_ratio}}},
          {"checkpoint",
           {{"dir", job.checkpoint.dir},
            {"interval_steps", job.checkpoint.interval_steps},
            {"keep", job.checkpoint.keep},
            {"format", job.checkpoint.format}}},
          {"plan", {{"strategy", job.plan.strategy}, {"profile", job.plan.profile}}},
          {"tensor_parallel",
           {{"mode", tp.mode},
            {"migration", tp.migration},
            {"lend_attention", tp.lend_attention},
            {"straggler_threshold", tp.straggler_threshold},
            {"semi_reference", tp.semi_reference},
            {"semi_solver", tp.semi_solver},
            {"max_prune_ratio", tp.max_prune_ratio},
            {"resize_attention", tp.resize_attention}}},
          {"emulated_stragglers", job.stragglers.size()}};
}

}  // namespace motley
