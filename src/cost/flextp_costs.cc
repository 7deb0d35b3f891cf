#include "cost/flextp_costs.h"

#include <algorithm>

namespace motley {

FlexTpCosts FlexTpCostsFor(const ModelSpec& spec, int tp, int64_t seq_len, const Cluster& cluster, int a,
                           int b, int64_t layers, int64_t gradient_returns) {
  const double h = static_cast<double>(spec.hidden_size), f = static_cast<double>(spec.ffn_size),
               kv = static_cast<double>(spec.kv_dim()), s = static_cast<double>(seq_len);
  // Per token and layer (multiply-adds x 2): the MLP's three matrices; the attention's four, and
  // the scores and their weighted sum. The rest of a rank's work (norms, embedding, head, the
  // optimizer) is put at a tenth.
  const double mlp = 6 * h * f, attention = 2 * (2 * h * h + 2 * h * kv) + 4 * s * h;
  FlexTpCosts c;
  c.units = spec.ffn_size / tp;
  c.heads = spec.num_heads / tp;
  c.heads_per_group = spec.num_heads / spec.num_kv_heads;
  c.mlp_fraction = 0.9 * mlp / (mlp + attention);
  c.attention_fraction = 0.9 * attention / (mlp + attention);
  c.attention_prunable = 2 * (2 * h * h + 2 * h * kv) / attention;  // the projections' part
  c.kv_fraction = 2 * 2 * h * kv / attention;                       // the key and value projections' part
  c.scores_fraction = 4 * s * h / attention;
  const double bandwidth = cluster.LinkBetween(a, b).bandwidth_bytes_per_s;
  const double per_step = 2.0 * static_cast<double>(layers);  // out and back
  const double unit_bytes = 3 * h * 4;  // a gate row, an up row and a down column in fp32
  // A query head: its q rows and o columns, and its group's k and v rows (FlexTpTeam moves a head
  // with its group's key and value: the receiver computes them).
  const double head_bytes = 4 * static_cast<double>(spec.head_dim()) * h * 4;
  c.layer_passes = 2 * layers;
  c.exchanges = layers + gradient_returns;
  if (bandwidth > 0 && a != b) {
    c.migrate_s_per_unit = unit_bytes * per_step / bandwidth;
    c.migrate_s_per_head = head_bytes * per_step / bandwidth;
  }
  return c;
}

LineFit FitLine(const std::vector<std::pair<double, double>>& samples) {
  LineFit f;
  if (samples.empty()) return f;
  const double n = static_cast<double>(samples.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : samples) sx += x, sy += y, sxx += x * x, sxy += x * y;
  const double var = sxx - sx * sx / n;
  if (samples.size() >= 2 && var > 1e-12 * std::max(1.0, sxx)) {
    f.slope = (sxy - sx * sy / n) / var;
    f.fixed = (sy - f.slope * sx) / n;
  }
  if (samples.size() < 2 || var <= 1e-12 * std::max(1.0, sxx) || f.fixed < 0) {
    f.fixed = 0;  // a line through the origin
    f.slope = sxx > 0 ? sxy / sxx : 0;
  }
  if (f.slope < 0) {  // no trend: the mean, flat
    f.slope = 0;
    f.fixed = sy / n;
  }
  f.fixed = std::max(0.0, f.fixed);
  f.slope = std::max(0.0, f.slope);
  return f;
}

FlexTpCosts WithPretest(FlexTpCosts costs, const SemiPretest& pretest) {
  if (!pretest.resize.empty()) {
    const LineFit f = FitLine(pretest.resize);
    costs.resize_fixed = f.fixed;
    costs.resize_per_ratio = f.slope;
  }
  if (pretest.borrowed_cost > 0) costs.borrowed_cost = pretest.borrowed_cost;
  if (!pretest.migrate.empty()) {
    const LineFit f = FitLine(pretest.migrate);
    const double passes = static_cast<double>(std::max<int64_t>(1, costs.layer_passes));
    const double exchanges = costs.exchanges > 0 ? static_cast<double>(costs.exchanges) : passes;
    costs.migrate_s_fixed = f.fixed * exchanges;
    costs.migrate_s_per_unit = f.slope * passes;
  }
  return costs;
}

bool UsesBroadcastReduce(const TensorParallelConfig& config, bool gpu) {
  return config.migration == "broadcast-reduce" || (config.migration == "auto" && gpu);
}

FlexTpCosts ForTeamConfig(FlexTpCosts costs, const TensorParallelConfig& config, bool gpu) {
  costs.broadcast_reduce = UsesBroadcastReduce(config, gpu);
  costs.kv_from_owner = !costs.broadcast_reduce;
  if (!config.resize_attention) costs.attention_prunable = 0;
  return costs;
}

}  // namespace motley
