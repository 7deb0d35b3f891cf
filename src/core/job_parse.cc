#include "core/job_parse.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/cluster_parse.h"
#include "core/model_parse.h"
#include "core/suggest.h"
#include "core/toml_reader.h"

namespace motley {
namespace {

constexpr int64_t kMaxSteps = int64_t{1} << 40;

void ParseTraining(TomlTable& t, TrainingConfig* c) {
  if (auto v = t.Int("steps", 1, kMaxSteps)) c->steps = *v;
  if (auto v = t.Int("seq_len", 1, 1 << 24)) c->seq_len = *v;
  auto tokens = t.Int("global_batch_tokens", 1, int64_t{1} << 40);
  auto sequences = t.Int("global_batch_sequences", 1, int64_t{1} << 32);
  if (tokens && sequences) {
    t.Error("global_batch_sequences",
            "give the global batch once: global_batch_tokens or global_batch_sequences, not both");
  } else if (tokens) {
    if (*tokens % c->seq_len != 0) {
      t.Error("global_batch_tokens",
              fmt::format("global_batch_tokens ({}) is not a multiple of seq_len ({}): {} / {} = {:.2f} "
                          "sequences; use {} or {}",
                          *tokens, c->seq_len, *tokens, c->seq_len, static_cast<double>(*tokens) / c->seq_len,
                          std::max<int64_t>(1, *tokens / c->seq_len) * c->seq_len,
                          (*tokens / c->seq_len + 1) * c->seq_len));
    } else {
      c->global_batch_sequences = *tokens / c->seq_len;
    }
  } else if (sequences) {
    c->global_batch_sequences = *sequences;
  } else if (!t.diagnostics()->has_errors()) {
    t.ErrorHere(
        "missing the global batch: add global_batch_tokens = N (a multiple of seq_len) or "
        "global_batch_sequences = N");
  }
  std::vector<std::string> precisions = PrecisionNames();
  precisions.push_back("auto");
  if (auto v = t.Choice("precision", precisions)) {
    if (*v == "auto")
      c->precision_reason = "auto";  // resolved once the cluster is read
    else
      c->precision = *PrecisionFromName(*v);
  }
  if (auto v = t.Bool("activation_checkpointing")) c->activation_checkpointing = *v;
  c->loss_scaling = c->precision == Precision::kFp16;
  if (auto v = t.Bool("loss_scaling")) {
    if (!*v && c->precision == Precision::kFp16)
      t.Error("loss_scaling",
              "fp16 needs loss scaling (small gradients underflow without it); keep it on or use "
              "precision = \"bf16\" or \"fp32\"");
    c->loss_scaling = *v || c->precision == Precision::kFp16;
  }
  if (auto v = t.Int("seed", 0, INT64_MAX)) c->seed = static_cast<uint64_t>(*v);
  t.Finish();
}

void ParseData(TomlTable& t, DataConfig* c) {
  if (auto v = t.String("train")) c->train = *v;
  if (auto v = t.String("validation")) c->validation = *v;
  if (auto v = t.String("tokenizer")) c->tokenizer = *v;
  if (auto v = t.Int("validation_interval_steps", 0, kMaxSteps)) c->validation_interval_steps = *v;
  if (auto v = t.Int("validation_sequences", 1, int64_t{1} << 32)) c->validation_sequences = *v;
  t.Finish();
}

void ParseOptimizer(TomlTable& t, OptimizerConfig* c) {
  if (auto v = t.Number("lr", 0.0, 10.0, Need::kOptional, true)) c->lr = *v;
  if (auto v = t.Number("beta1", 0.0, 0.999999)) c->beta1 = *v;
  if (auto v = t.Number("beta2", 0.0, 0.999999)) c->beta2 = *v;
  if (auto v = t.Number("eps", 0.0, 1.0, Need::kOptional, true)) c->eps = *v;
  if (auto v = t.Number("weight_decay", 0.0, 10.0)) c->weight_decay = *v;
  if (auto v = t.Number("grad_clip_norm", 0.0, 1e12)) c->grad_clip_norm = *v;
  t.Finish();
}

void ParseLrSchedule(TomlTable& t, LrScheduleConfig* c) {
  if (auto v = t.Int("warmup_steps", 0, kMaxSteps)) c->warmup_steps = *v;
  if (auto v = t.Choice("decay", {"cosine", "linear", "constant"})) c->decay = *v;
  if (auto v = t.Number("min_lr_ratio", 0.0, 1.0)) c->min_lr_ratio = *v;
  t.Finish();
}

void ParseCheckpoint(TomlTable& t, CheckpointConfig* c) {
  if (auto v = t.String("dir")) c->dir = *v;
  if (auto v = t.Int("interval_steps", 0, kMaxSteps)) c->interval_steps = *v;
  if (auto v = t.Int("keep", 1, 1000)) c->keep = *v;
  if (auto v = t.Choice("format", {"sharded", "consolidated"})) c->format = *v;
  t.Finish();
}

void ParsePlan(TomlTable& t, PlanConfig* c) {
  if (auto v = t.Choice("strategy", StrategyNames())) c->strategy = *v;
  if (auto v = t.String("profile")) c->profile = *v;
  t.Finish();
}

void ParseTensorParallel(TomlTable& t, TensorParallelConfig* c) {
  if (auto v = t.Choice("mode", {"off", "migrate", "resize", "semi"})) c->mode = *v;
  if (auto v = t.Choice("migration", {"auto", "broadcast-reduce", "point-to-point"})) c->migration = *v;
  if (auto v = t.Choice("lend_attention", {"heads", "projections"})) c->lend_attention = *v;
  if (auto v = t.Number("straggler_threshold", 0.0, 10.0)) c->straggler_threshold = *v;
  if (auto v = t.Choice("semi_reference", {"average", "fastest"})) c->semi_reference = *v;
  if (auto v = t.Choice("semi_solver", {"cost-model", "search"})) c->semi_solver = *v;
  if (auto v = t.Number("recheck_change", 0.0, 10.0)) c->recheck_change = *v;
  if (auto v = t.Int("decision_window_steps", 1, 100)) c->decision_window_steps = *v;
  if (auto v = t.Number("max_prune_ratio", 0.0, 0.95)) c->max_prune_ratio = *v;
  if (auto v = t.Number("layer_decay", 0.0, 1.0, Need::kOptional, true)) c->layer_decay = *v;
  if (auto v = t.Int("stats_interval_steps", 1, kMaxSteps)) c->stats_interval_steps = *v;
  if (auto v = t.Bool("resize_attention")) c->resize_attention = *v;
  t.Finish();
}

void ParseStragglerDetection(TomlTable& t, StragglerDetectionConfig* c) {
  if (auto v = t.Number("threshold", 0.01, 100.0)) c->threshold = *v;
  if (auto v = t.Int("baseline_steps", 1, 1000)) c->baseline_steps = *v;
  if (auto v = t.Int("persist_steps", 1, 1000)) c->persist_steps = *v;
  if (auto v = t.Bool("rebalance")) c->rebalance = *v;
  if (auto v = t.Number("rebalance_min_gain", 0.0, 0.9)) c->rebalance_min_gain = *v;
  t.Finish();
}

void ParseDivergence(TomlTable& t, DivergenceConfig* c) {
  if (auto v = t.Choice("action", {"stop", "rollback"})) c->action = *v;
  if (auto v = t.Number("lr_factor", 0.0, 1.0, Need::kOptional, true)) c->lr_factor = *v;
  if (auto v = t.Bool("skip_data")) c->skip_data = *v;
  if (auto v = t.Int("max_rollbacks", 1, 1000)) c->max_rollbacks = *v;
  t.Finish();
}

void ParseIslands(TomlTable& t, IslandsConfig* c) {
  if (auto v = t.Int("count", 1, 1024)) c->count = *v;
  if (auto v = t.Int("inner_steps", 1, kMaxSteps)) c->inner_steps = *v;
  if (auto v = t.IntArray("inner_steps_per_island", 1, kMaxSteps)) {
    c->inner_steps_each = *v;
    if (!t.Has("inner_steps") && !v->empty()) c->inner_steps = v->front();
  }
  if (auto v = t.Int("overlap_steps", 0, kMaxSteps)) c->overlap_steps = *v;
  if (auto v = t.Int("fragments", 1, 1024)) c->fragments = *v;
  if (auto v = t.Number("outer_lr", 0.0, 10.0, Need::kOptional, true)) c->outer.lr = *v;
  if (auto v = t.Number("outer_momentum", 0.0, 0.999)) c->outer.momentum = *v;
  if (auto v = t.Bool("nesterov")) c->outer.nesterov = *v;
  if (auto v = t.Choice("compression", {"none", "fp16", "int8", "int4"})) c->outer.compression = *v;
  t.Finish();
}

// Islands take equal shares of the global batch, and are alike only at outer steps: validation and
// checkpoints happen there.
void CheckIslands(TomlTable& t, const JobSpec& job) {
  const IslandsConfig& c = job.islands;
  if (job.training.global_batch_sequences % c.count != 0)
    t.Error("count", fmt::format("{} islands cannot share a global batch of {} sequences equally "
                                 "(training.global_batch_sequences): make the batch a multiple of count",
                                 c.count, job.training.global_batch_sequences));
  if (!c.inner_steps_each.empty()) {
    const std::vector<int64_t>& each = c.inner_steps_each;
    if (static_cast<int64_t>(each.size()) != c.count)
      t.Error("inner_steps_per_island",
              fmt::format("has {} entries but count = {}: give one for each island", each.size(), c.count));
    else if (each.front() != c.inner_steps || *std::max_element(each.begin(), each.end()) != each.front())
      t.Error(
          "inner_steps_per_island",
          fmt::format("island 0 keeps the run's clock: its inner steps ({}) must be inner_steps ({}) and the "
                      "most of any island's; list the island that takes the most inner steps first",
                      each.front(), c.inner_steps));
  }
  if (c.overlap_steps >= c.inner_steps)
    t.Error("overlap_steps",
            fmt::format("{} must be less than inner_steps ({}): a round's outer step lands before the next "
                        "round is sent; lower it",
                        c.overlap_steps, c.inner_steps));
  if (c.inner_steps % c.fragments != 0)
    t.Error("fragments", fmt::format("{} does not divide inner_steps ({}): each fragment synchronises "
                                     "inner_steps / fragments steps after the one before; make it a divisor",
                                     c.fragments, c.inner_steps));
  else if (c.fragments > 1 && c.overlap_steps >= c.inner_steps / c.fragments)
    t.Error("overlap_steps",
            fmt::format("{} must be less than inner_steps / fragments ({}): a fragment's outer step lands "
                        "before the next fragment is sent; lower it",
                        c.overlap_steps, c.inner_steps / c.fragments));
  if (job.model.num_layers > 0 && c.fragments > job.model.num_layers + 2)
    t.Error("fragments", fmt::format("{} fragments of a model of {} parts (the embedding, {} layers, the "
                                     "head): give at most {}",
                                     c.fragments, job.model.num_layers + 2, job.model.num_layers,
                                     job.model.num_layers + 2));
  for (const auto& [what, steps] :
       {std::pair<const char*, int64_t>{"data.validation_interval_steps", job.data.validation_interval_steps},
        {"checkpoint.interval_steps", job.checkpoint.interval_steps}})
    if (steps > 0 && steps % c.inner_steps != 0)
      t.Error("inner_steps",
              fmt::format("{} ({}) is not a multiple of inner_steps ({}): the islands hold one model only at "
                          "outer steps; make it a multiple",
                          what, steps, c.inner_steps));
}

void ParseEmulation(TomlTable& t, std::vector<EmulatedStraggler>* out) {
  for (auto& s : t.TableArray("stragglers", Need::kOptional, /*allow_single=*/true)) {
    EmulatedStraggler e;
    if (auto v = s.Int("rank", 0, 1 << 20, Need::kRequired)) e.rank = static_cast<int>(*v);
    if (auto v = s.Number("slowdown", 1.0, 1000.0, Need::kRequired)) e.slowdown = *v;
    if (auto v = s.Choice("slows", {"compute", "matmul"})) e.slows = *v;
    if (auto v = s.Int("from_step", 1, kMaxSteps)) e.from_step = *v;
    if (auto v = s.Int("to_step", 0, kMaxSteps)) e.to_step = *v;
    if (e.to_step != 0 && e.to_step < e.from_step)
      s.Error("to_step",
              fmt::format("to_step ({}) comes before from_step ({}); give a later step, or 0 for the end",
                          e.to_step, e.from_step));
    // Two entries slowing one rank in the same steps would multiply: one entry a rank and window.
    auto last = [](const EmulatedStraggler& x) { return x.to_step == 0 ? kMaxSteps : x.to_step; };
    for (size_t i = 0; i < out->size(); ++i) {
      const EmulatedStraggler& o = (*out)[i];
      if (o.rank == e.rank && e.from_step <= last(o) && o.from_step <= last(e))
        s.Error(
            "rank",
            fmt::format("rank {} is already slowed in steps {}..{} by stragglers entry {}; give one entry "
                        "a rank for each window of steps (from_step/to_step), windows that do not overlap",
                        e.rank, std::max(e.from_step, o.from_step), std::min(last(e), last(o)), i + 1));
    }
    s.Finish();
    out->push_back(e);
  }
  t.Finish();
}

// A path written in the job file is relative to the job file's folder.
std::string RelativeTo(const std::string& job_file, const std::string& ref) {
  std::filesystem::path p(ref);
  if (p.is_absolute()) return ref;
  std::filesystem::path base = std::filesystem::path(job_file).parent_path();
  return (base / p).lexically_normal().string();
}

bool LooksLikePath(const std::string& ref) {
  return ref.find('/') != std::string::npos || ref.ends_with(".toml") || ref.ends_with(".json");
}

}  // namespace

std::string ModelMathDifference(const ModelSpec& a, const ModelSpec& b) {
  std::vector<std::string> d;
  auto add = [&](const char* name, const auto& x, const auto& y) {
    if (x != y) d.push_back(fmt::format("{} {} vs {}", name, x, y));
  };
  add("hidden_size", a.hidden_size, b.hidden_size);
  add("num_layers", a.num_layers, b.num_layers);
  add("num_heads", a.num_heads, b.num_heads);
  add("num_kv_heads", a.num_kv_heads, b.num_kv_heads);
  add("ffn_size", a.ffn_size, b.ffn_size);
  add("vocab_size", a.vocab_size, b.vocab_size);
  add("rope_theta", a.rope_theta, b.rope_theta);
  add("norm_eps", a.norm_eps, b.norm_eps);
  add("tie_embeddings", a.tie_embeddings, b.tie_embeddings);
  if (!(a.rope_scaling == b.rope_scaling))
    d.push_back(fmt::format("rope_scaling {} vs {}", RopeScalingTypeName(a.rope_scaling.type),
                            RopeScalingTypeName(b.rope_scaling.type)));
  return fmt::format("{}", fmt::join(d, ", "));
}

Status ApplyInitFrom(JobSpec* job, const std::string& dir, const std::optional<std::string>& shape) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / "config.json", ec))
    return Status::NotFound(
        fmt::format("{}: not a Hugging Face model folder (no config.json); give the folder that "
                    "holds config.json and the safetensors",
                    dir));
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec from, LoadModel(dir));
  // A shape the job gives too must be the folder's (the job's `shape`, or a `model` it names).
  std::optional<ModelSpec> given;
  std::string given_name;
  if (shape) {
    MOTLEY_ASSIGN_OR_RETURN(given, LoadModel(*shape));
    given_name = *shape;
  } else if (job->model.hidden_size > 0) {
    given = job->model;
    given_name = job->model_ref.empty() ? job->model.name : job->model_ref;
  }
  if (given) {
    const std::string diff = ModelMathDifference(*given, from);
    if (!diff.empty())
      return Status::InvalidArgument(
          fmt::format("the job's model {} and {}/config.json disagree ({}); the run starts from the folder's "
                      "weights, so its "
                      "config.json is the model: drop the job's shape or start from a folder of that shape",
                      given_name, dir, diff));
  }
  job->model_ref = dir;
  job->init_from = dir;
  job->model = from;
  // The folder's tokenizer is the run's, unless the job names another.
  if (job->data.tokenizer == "byte" &&
      std::filesystem::is_regular_file(std::filesystem::path(dir) / "tokenizer.json", ec))
    job->data.tokenizer =
        std::filesystem::absolute(dir, ec).lexically_normal().string();  // not relative to the job
  return Status::Ok();
}

const std::vector<std::string>& StrategyNames() {
  static const std::vector<std::string> names = {"auto",      "zorse",   "poplar",         "torchtitan-het",
                                                 "hexiscale", "cephalo", "deepspeed-even", "fastest-only"};
  return names;
}

namespace {

// [training] against the model and cluster it runs on: the sequence length within the model's,
// bf16 only where every device computes in it.
void CheckTrainingFits(TomlTable& t, const JobSpec& job, bool have_model, bool have_cluster) {
  const TrainingConfig& tr = job.training;
  if (have_model && tr.seq_len > job.model.max_seq_len) {
    t.Error("seq_len", fmt::format("seq_len ({}) exceeds the model's max_seq_len ({}) for '{}'; "
                                   "lower seq_len or raise max_seq_len in the model file",
                                   tr.seq_len, job.model.max_seq_len, job.model.name));
  }
  if (have_cluster && tr.precision == Precision::kBf16 && !job.cluster.emulated()) {
    std::vector<std::string> without;
    for (const auto& n : job.cluster.nodes) {
      const GpuSpec* s = job.cluster.catalog.Find(n.device_type);
      if (s && !s->supports_bf16 && std::find(without.begin(), without.end(), s->name) == without.end())
        without.push_back(s->name);
    }
    if (!without.empty()) {
      t.Error("precision", fmt::format("precision = \"bf16\" but {} cannot compute in bf16; use "
                                       "precision = \"fp16\" (with loss scaling) or \"fp32\"",
                                       JoinNames(without)));
    }
  }
}

}  // namespace

Result<JobSpec> ParseJobToml(std::string_view text, const std::string& file, const JobParseOptions& options) {
  Diagnostics diag;
  auto table = ParseTomlText(text, file, &diag);
  if (!table) return diag.ToStatus();
  TomlTable root(*table, "", file, &diag);

  JobSpec job;
  job.file = file;
  // `model = "preset or file"`, or a [model] table: init_from = "HF folder" (its config.json is the
  // model) and, optionally, shape = "preset or file" that must agree with it.
  std::optional<std::string> model_ref, init_from, shape;
  std::optional<TomlTable> model_table;
  if (const toml::node* n = table->get("model"); n != nullptr && n->is_table()) {
    model_table = root.Table("model");
    init_from = model_table->String("init_from", Need::kRequired);
    shape = model_table->String("shape");
    model_table->Finish();
  } else {
    model_ref = root.String("model", Need::kRequired);
  }
  auto cluster_ref = root.String("cluster", Need::kRequired);
  if (auto t = root.Table("training", Need::kRequired)) ParseTraining(*t, &job.training);
  if (auto t = root.Table("data")) ParseData(*t, &job.data);
  if (auto t = root.Table("optimizer")) ParseOptimizer(*t, &job.optimizer);
  std::optional<TomlTable> lr_schedule = root.Table("lr_schedule");
  if (lr_schedule) ParseLrSchedule(*lr_schedule, &job.lr_schedule);
  if (auto t = root.Table("checkpoint")) ParseCheckpoint(*t, &job.checkpoint);
  if (auto t = root.Table("plan")) ParsePlan(*t, &job.plan);
  if (auto t = root.Table("tensor_parallel")) ParseTensorParallel(*t, &job.tensor_parallel);
  if (auto t = root.Table("straggler_detection")) ParseStragglerDetection(*t, &job.straggler_detection);
  if (auto t = root.Table("divergence")) ParseDivergence(*t, &job.divergence);
  std::optional<TomlTable> islands = root.Table("islands");
  if (islands) ParseIslands(*islands, &job.islands);
  if (auto t = root.Table("emulation")) ParseEmulation(*t, &job.stragglers);
  root.Finish();

  // The model and cluster the job names; their own errors carry their own file names.
  std::string nested_errors;
  bool have_model = false, have_cluster = false;
  if (init_from && options.resolve_files) {
    const std::optional<std::string> shape_ref =
        shape ? std::optional<std::string>(FindModelPreset(*shape) ? *shape : RelativeTo(file, *shape))
              : std::nullopt;
    if (Status s = ApplyInitFrom(&job, RelativeTo(file, *init_from), shape_ref); !s.ok()) {
      model_table->Error("init_from", s.message());
    } else {
      job.model_ref = *init_from;  // as written
      have_model = true;
    }
  }
  if (model_ref) {
    job.model_ref = *model_ref;
    bool is_path = LooksLikePath(*model_ref) && !FindModelPreset(*model_ref);
    if (!is_path || options.resolve_files) {
      Result<ModelSpec> m = LoadModel(is_path ? RelativeTo(file, *model_ref) : *model_ref);
      if (m.ok()) {
        job.model = *m;
        have_model = true;
      } else if (m.status().code() == StatusCode::kNotFound) {
        root.Error("model", m.status().message());
      } else {
        nested_errors += "\n" + m.status().message();
      }
    }
  }
  if (cluster_ref) {
    job.cluster_ref = *cluster_ref;
    bool is_path = LooksLikePath(*cluster_ref);
    if (!is_path || options.resolve_files) {
      Result<Cluster> c = LoadCluster(is_path ? RelativeTo(file, *cluster_ref) : *cluster_ref);
      if (c.ok()) {
        job.cluster = *c;
        have_cluster = true;
      } else if (c.status().code() == StatusCode::kNotFound) {
        root.Error("cluster", c.status().message());
      } else {
        nested_errors += "\n" + c.status().message();
      }
    }
  }

  // Checks across components.
  if (job.training.precision_reason == "auto") {
    if (have_cluster) {
      job.training.precision = job.cluster.TrainingPrecision(&job.training.precision_reason);
      job.training.loss_scaling = job.training.loss_scaling || job.training.precision == Precision::kFp16;
    } else {
      job.training.precision_reason.clear();
    }
  }
  if (auto t = root.Table("training")) CheckTrainingFits(*t, job, have_model, have_cluster);
  // (lr_schedule read once, above: it may be missing, or not a table — an error said there.)
  if (!lr_schedule || !lr_schedule->Has("warmup_steps")) {
    // The default warm-up never outlasts a short run: at most a tenth of it.
    job.lr_schedule.warmup_steps = std::min(job.lr_schedule.warmup_steps, job.training.steps / 10);
  }
  if (auto& t = lr_schedule; t && job.lr_schedule.warmup_steps > job.training.steps) {
    t->Error("warmup_steps", fmt::format("warmup_steps ({}) is longer than the run (training.steps = {}); "
                                         "lower it",
                                         job.lr_schedule.warmup_steps, job.training.steps));
  }
  if (islands && job.islands.count > 1) CheckIslands(*islands, job);
  Status status = diag.ToStatus();
  if (!nested_errors.empty()) {
    std::string all = status.ok() ? nested_errors.substr(1) : status.message() + nested_errors;
    return Status::InvalidArgument(all);
  }
  MOTLEY_RETURN_IF_ERROR(status);
  return job;
}

Result<JobSpec> LoadJobFile(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseJobToml(text, path);
}

}  // namespace motley
