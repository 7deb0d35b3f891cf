// motley train JOB [--steps N] [--resume DIR] [--device auto|cpu|cuda] [--metrics FILE]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "api/job_input.h"
#include "cli/args.h"
#include "cli/command.h"
#include "cli/progress_line.h"
#include "core/job_parse.h"
#include "core/rendezvous.h"
#include "core/units.h"
#include "plan/plan_io.h"
#include "runtime/train/planned_islands.h"
#include "runtime/train/planned_run.h"
#include "runtime/train/trainer.h"
#include "supervise/island_supervisor.h"
#include "supervise/job_supervisor.h"

namespace motley::cli {
namespace {

std::string Count(double v) {
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

// Prints the run: a header, a live progress line, validation and checkpoint lines.
class ConsoleObserver : public TrainObserver {
 public:
  void OnStart(const TrainStart& s) override {
    fmt::print("training {} parameters on {} in {} — steps {}..{} of {}, {} tokens a step\n",
               Count(s.parameters), s.device, s.precision, s.first_step + 1, s.total_steps, s.total_steps,
               s.tokens_per_step);
    fmt::print("  data: {}  validation: {}\n  metrics: {}\n", s.train_data,
               s.validation_data.empty() ? "none" : s.validation_data, s.metrics_path);
    if (!s.schedule_hash.empty())
      fmt::print("  schedule: {} (as `motley simulate` lowers this plan)\n", s.schedule_hash);
    if (!s.outer_round_hash.empty())
      fmt::print("  outer round: {} (as `motley simulate --island-plan` lowers it)\n", s.outer_round_hash);
    std::fflush(stdout);
  }
  void OnStep(const StepMetrics& m) override {
    elapsed_s_ += m.step_time_s;
    ++steps_;
    const double eta = elapsed_s_ / steps_ * static_cast<double>(m.total_steps - m.step);
    const std::string flextp = m.flextp ? fmt::format(" | pruned {:.1f}% | moved {:.0f} units",
                                                      100 * m.pruned_fraction, m.migrated_units)
                                        : "";
    line_.Update(
        fmt::format("step {}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {} tok/s{} | ETA {}{}", m.step,
                    m.total_steps, m.loss, m.lr, m.grad_norm, Count(m.tokens_per_s), flextp,
                    FormatDuration(eta), m.skipped ? " | fp16 overflow: step skipped" : ""),
        m.step == m.total_steps);
  }
  void OnValidation(int64_t step, double loss) override {
    line_.Print(
        fmt::format("step {}: validation loss {:.4f} (perplexity {:.1f})", step, loss, std::exp(loss)));
  }
  void OnCheckpoint(const std::string& dir) override { line_.Print(fmt::format("checkpoint: {}", dir)); }
  void OnStraggler(int64_t step, int rank, const std::string& device, double slowdown,
                   bool straggling) override {
    line_.Print(straggling
                    ? fmt::format("step {}: straggler: rank {} ({}) computes {:.1f}x as long as in its first "
                                  "steps ([straggler_detection])",
                                  step, rank, device, slowdown)
                    : fmt::format("step {}: rank {} ({}) has recovered ({:.1f}x its first steps)", step, rank,
                                  device, slowdown));
  }
  void OnRebalance(int64_t step, const std::string& message) override {
    line_.Print(fmt::format("step {}: rebalance: {}", step, message));
  }
  void Finish() { line_.Finish(); }

 private:
  ProgressLine line_{10.0};
  double elapsed_s_ = 0;
  int64_t steps_ = 0;
};

void PrintSummary(const TrainSummary& s) {
  fmt::print("done: {} steps in {}, loss {:.4f} -> {:.4f}", s.steps_run, FormatDuration(s.wall_s),
             s.first_loss, s.last_loss);
  if (s.first_validation_loss)
    fmt::print(", validation loss {:.4f} -> {:.4f} (perplexity {:.1f} -> {:.1f})", *s.first_validation_loss,
               *s.last_validation_loss, std::exp(*s.first_validation_loss),
               std::exp(*s.last_validation_loss));
  fmt::print("\n  {} tokens/s, {:.3f} model TFLOP/s ({:.3f} with recomputation)\n", Count(s.tokens_per_s),
             s.model_tflops_per_s, s.hardware_tflops_per_s);
  if (s.step_s > 0) {
    fmt::print("  step {:.0f} ms", s.step_s * 1e3);
    if (s.predicted_step_s > 0)
      fmt::print(" (predicted {:.0f} ms, {:+.0f}%)", s.predicted_step_s * 1e3,
                 100 * (s.predicted_step_s / s.step_s - 1));
    if (s.hfu > 0) fmt::print(", HFU {:.1f}%", 100 * s.hfu);
    if (s.hfu > 0 && s.predicted_hfu > 0) fmt::print(" (predicted {:.1f}%)", 100 * s.predicted_hfu);
    fmt::print("\n");
  }
  if (!s.ranks.empty()) {
    fmt::print(
        "  per rank, mean of a step:   compute (predicted)      comm      copy      idle    sent   peak "
        "memory "
        "(predicted)\n");
    auto of = [](const std::vector<double>& v, int rank) {
      return static_cast<size_t>(rank) < v.size() ? v[rank] : 0.0;
    };
    for (const auto& r : s.ranks) {
      const double predicted = of(s.predicted_compute_s, r.rank),
                   memory = of(s.predicted_peak_memory_bytes, r.rank);
      fmt::print(
          "    rank {:<3}                {:>8.1f}ms {:>11} {:>7.1f}ms {:>7.1f}ms {:>7.1f}ms {:>7} {:>12} "
          "{}\n",
          r.rank, r.compute_s * 1e3, predicted > 0 ? fmt::format("({:.1f}ms)", predicted * 1e3) : "",
          r.comm_s * 1e3, r.copy_s * 1e3, r.idle_s * 1e3, FormatBytes(r.bytes_sent),
          FormatBytes(r.peak_memory_bytes), memory > 0 ? fmt::format("({})", FormatBytes(memory)) : "");
    }
  }
  double late_s = 0, late_compute_s = 0;
  for (const auto& r : s.ranks)
    if (r.late_s > late_s) late_s = r.late_s, late_compute_s = r.compute_s;
  if (late_s > 0.02 * late_compute_s)
    fmt::print(
        "  emulation: this host was too busy to keep every emulated device's speed — up to {:.1f} ms a step "
        "({:.0f}% of that rank's compute) ran past it; fewer ranks per core or larger speed factors keep "
        "the emulation faithful\n",
        late_s * 1e3, 100 * late_s / late_compute_s);
  if (!s.trace_path.empty()) fmt::print("  trace: {} (chrome://tracing or ui.perfetto.dev)\n", s.trace_path);
  if (!s.checkpoint_dir.empty()) fmt::print("  checkpoint: {}\n", s.checkpoint_dir);
}

int RunTrainWithPlan(const JobSpec& job, const TrainOptions& options, bool lead) {
  ConsoleObserver observer;
  Result<TrainSummary> s = options.planned.island_plans.empty()
                               ? TrainWithPlan(job, options, &observer)
                               : TrainIslandsWithPlans(job, options, &observer);
  observer.Finish();
  if (!s.ok()) {
    fmt::print(stderr, "motley train: {}\n", s.status().message());
    return s.status().code() == StatusCode::kPeerFailed ? kExitPeerFailed : kExitFailure;
  }
  if (lead || s->led) PrintSummary(*s);
  return kExitOk;
}

// The options tests and the supervising `motley train` give a rank, not users (hidden from --help):
// where a failing rank reports, fault injection, CPU copy threads.
void AddHiddenOptions(CLI::App& app, TrainOptions& options) {
  app.add_option("--failure-reports", options.planned.failure_report_dir,
                 "a rank that fails writes what failed here (for the supervising `motley train`)")
      ->group("");
  app.add_option("--die-rank", options.faults.die_rank, "fault injection (tests): this rank kills itself ...")
      ->group("");
  app.add_option("--die-at-step", options.faults.die_at_step, "... halfway through this step")->group("");
  app.add_flag("--die-in-checkpoint", options.faults.die_in_checkpoint,
               "... or in the checkpoint after it, its part written")
      ->group("");
  app.add_option("--perturb-rank", options.faults.perturb_rank,
                 "fault injection (tests): this rank's loss ...")
      ->group("");
  app.add_option("--perturb-loss", options.faults.perturb_loss_factor, "... is multiplied by this factor ...")
      ->group("");
  app.add_option("--perturb-microbatch", options.faults.perturb_microbatch,
                 "... for this global microbatch only")
      ->group("");
  app.add_option("--overflow-rank", options.faults.overflow_rank,
                 "fault injection (tests): with loss scaling, this rank's "
                 "gradients overflow ...")
      ->group("");
  app.add_option("--overflow-step", options.faults.overflow_step, "... in this step (from 1)")->group("");
  app.add_option("--diverge-rank", options.faults.diverge_rank,
                 "fault injection (tests): this rank's loss is NaN ...")
      ->group("");
  app.add_option("--diverge-at-step", options.faults.diverge_at_step, "... in this step (from 1)")->group("");
  app.add_option("--islands-present", options.planned.islands_present,
                 "elastic islands: the islands launched (island numbers, in order; default all)")
      ->delimiter(',')
      ->group("");
  app.add_option("--stop-at-step", options.planned.stop_at_step,
                 "elastic islands: stop with a checkpoint at this round's end (a lost island joins then)")
      ->group("");
  app.add_flag("--islands-live", options.planned.islands_live,
               "elastic islands: a lost island is left out and the others go on without stopping")
      ->group("");
  app.add_flag("--cpu-copy-threads", options.planned.cpu_copy_threads,
               "tests: offload copies on CPU asynchronous on worker threads, as on a GPU")
      ->group("");
}

// What the supervising `motley train` on a cluster (or of islands) does besides launching the ranks.
void AddSupervisorOptions(CLI::App& app, TrainOptions& options) {
  app.add_flag(
      "--even-if-predicted-oom", options.supervisor.even_if_predicted_oom,
      "with --plan: start the plan even when the simulator predicts it runs out of memory (a device that "
      "does run out is then planned again, more frugally)");
  app.add_option(
         "--max-restarts", options.supervisor.max_restarts,
         "on a cluster: when a rank dies, plan again without its node and resume from the newest "
         "checkpoint, up to this many times (default 0: the run fails); islands: the island of a rank "
         "that dies is left out and the others go on (from the newest checkpoint where the first island "
         "is lost)")
      ->check(AtLeast(0));
  app.add_option("--island-rejoin-steps", options.supervisor.island_rejoin_steps,
                 "islands with --max-restarts: a lost island joins again from the latest outer state after "
                 "this many steps, at a round's end (default: one round, inner_steps)")
      ->check(AtLeast(1));
  app.add_flag("--hosts", options.supervisor.across_hosts,
               "on a cluster whose nodes name their host: start each launch's ranks on the hosts its plan's "
               "devices sit on, one motley agent a host, through --remote");
  app.add_option(
         "--remote", options.supervisor.remote,
         "with --hosts: how a host's agent starts (these words, {host} replaced, then one shell line)")
      ->capture_default_str();
  app.add_option(
         "--baseline-steps", options.supervisor.baseline_steps,
         "on a cluster: first train the even split for this many steps and report the measured speed-up")
      ->check(AtLeast(0));
}

// The job trained in this process (one device, or --single-process).
int RunTrainHere(const JobSpec& job, const TrainOptions& options) {
  ConsoleObserver observer;
  Result<TrainSummary> s = Train(job, options, &observer);
  observer.Finish();
  if (!s.ok()) {
    fmt::print(stderr, "motley train: {}\n", s.status().message());
    return kExitFailure;
  }
  PrintSummary(*s);
  return kExitOk;
}

// What this process cannot run, said once: a launched rank without a plan, or islands that would
// launch ranks (they run in one process, or as ranks launched by a launcher, one plan an island).
bool CanRunHere(const JobSpec& job, const std::string& job_path, const Rendezvous& rv,
                const TrainOptions& options, bool single_process) {
  const bool planned = !options.planned.plan_path.empty(), islands = !options.planned.island_plans.empty();
  if (rv.world_size > 1 && !planned && !islands) {
    fmt::print(stderr,
               "motley train: started as rank {} of {} ({}) but no --plan was given; every rank executes its "
               "part of a plan — add --plan PLAN.toml (motley plan writes one)\n",
               rv.rank, rv.world_size, rv.source);
    return false;
  }
  if (islands && (planned || job.islands.count <= 1)) {
    fmt::print(stderr,
               "motley train: --island-plan is for a job with [islands] count > 1 (one plan an island, "
               "instead of --plan); {} has count = {}{}\n",
               job_path, job.islands.count, planned ? " and --plan was given too" : "");
    return false;
  }
  if (job.islands.count <= 1 || islands ||
      (!planned && !islands && (job.cluster.num_devices() <= 1 || single_process)))
    return true;
  fmt::print(stderr,
             "motley train: {}: [islands] count = {}: islands train in one process, one after another (a "
             "job on one device, or motley train --single-process), or as ranks with one plan an island: "
             "motley train JOB --island-plan P0 --island-plan P1 ...\n",
             job_path, job.islands.count);
  return false;
}

}  // namespace

int RunTrain(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  CLI::App app("Train a job's model on its data in this process (CUDA when present, else CPU).",
               "motley train");
  std::string job_path;
  TrainOptions options;
  app.add_option("job", job_path, "a job file, or the name of a built-in job (default)")->required();
  app.add_option("--steps", options.steps, "the run's total length in steps (default: the job's)")
      ->check(AtLeast(1));
  app.add_option("--resume", options.resume,
                 "continue from a checkpoint directory (or a run directory's latest)");
  std::string init_from;
  app.add_option(
      "--init-from", init_from,
      "start from a Hugging Face model folder (config.json, safetensors, tokenizer.json): its config is the "
      "model, its weights the start (the job's [model] init_from, replaced)");
  app.add_option("--device", options.device, "auto, cpu or cuda")->capture_default_str();
  app.add_option("--metrics", options.metrics_path,
                 "the JSON-lines metrics file (default: <checkpoint dir>/metrics.jsonl)");
  app.add_option("--microbatch", options.microbatch_sequences,
                 "sequences per forward/backward (default: the whole batch)");
  app.add_option(
      "--threads", options.threads,
      "torch's CPU threads (default 1: OpenBLAS threads the matmuls itself, OPENBLAS_NUM_THREADS)");
  app.add_option("--plan", options.planned.plan_path,
                 "execute this plan across the launched processes (motley launch --nproc N -- motley train "
                 "JOB --plan P)");
  app.add_option("--island-plan", options.planned.island_plans,
                 "a job with [islands]: an island's plan, once for each island in order (launched ranks: "
                 "the islands' ranks one island after another; with --single-process the islands train in "
                 "this process, each on its plan's batch)");
  bool single_process = false;
  app.add_flag("--single-process", single_process,
               "train in this process even when the job's cluster has several devices");
  app.add_option("--profile", options.planned.profile_path,
                 "with --plan: predict the step from this profile and report both");
  AddSupervisorOptions(app, options);
  app.add_option("--trace", options.planned.trace_path,
                 "with --plan: write a Chrome trace of one step of the real run");
  app.add_option("--trace-step", options.planned.trace_step, "with --trace: the step to record (from 1)")
      ->capture_default_str();
  app.add_flag("!--no-checkpoint", options.checkpoint_at_end, "do not write a checkpoint at the end");
  app.add_flag(
      "--overwrite", options.overwrite,
      "start over in a checkpoint folder that holds another run's checkpoints (they and its metrics are "
      "removed); without it such a run is refused unless it resumes (--resume)");
  app.add_flag("!--no-validation", options.validate, "skip validation");
  app.add_flag(
      "--metrics-append", options.metrics_append,
      "add this run's lines to an existing metrics file (a new run refuses one that holds another run's)");
  AddHiddenOptions(app, options);
  if (auto rc = ParseArgs(app, args)) return *rc;

  Result<JobSpec> job = LoadJobArgument(job_path);
  if (!job.ok()) {
    fmt::print(stderr, "{}\n", job.status().message());
    return kExitFailure;
  }
  if (!init_from.empty()) {
    const std::string dir = fs::absolute(init_from).lexically_normal().string();
    Status s = ApplyInitFrom(&*job, dir);
    if (s.ok() && job->training.seq_len > job->model.max_seq_len)
      s =
          Status::InvalidArgument(fmt::format("{}: [training] seq_len ({}) exceeds {}/config.json's "
                                              "max_position_embeddings ({}); lower seq_len",
                                              job->file, job->training.seq_len, dir, job->model.max_seq_len));
    if (!s.ok()) {
      fmt::print(stderr, "motley train: --init-from {}: {}\n", init_from, s.message());
      return kExitFailure;
    }
  }
  Result<Rendezvous> rv = RendezvousFromEnv();
  if (!rv.ok()) {
    fmt::print(stderr, "motley train: {}\n", rv.status().message());
    return kExitFailure;
  }
  if (!job->training.precision_reason.empty() && rv->rank == 0)
    fmt::print("precision = \"auto\": {}\n", job->training.precision_reason);
  if (!job->init_from.empty() && rv->rank == 0 && options.resume.empty())
    fmt::print("starting from {} ({:.2f}M parameters, tokenizer {})\n", job->init_from,
               static_cast<double>(TotalParams(job->model)) / 1e6, job->data.tokenizer);
  std::fflush(stdout);  // before any error on stderr
  if (!CanRunHere(*job, job_path, *rv, options, single_process)) return kExitFailure;
  // A plan of several devices without a launcher: launch its ranks, and plan more frugally if one
  // runs out of memory (supervise/job_supervisor.h).
  if (!options.planned.plan_path.empty() && rv->world_size == 1 && !single_process) {
    Result<Plan> plan = LoadPlanFile(options.planned.plan_path);
    if (plan.ok() && plan->num_devices() > 1) return SuperviseJob(job_path, *job, options, args);
  }
  // Islands with a plan each: their ranks (started here without a launcher), or with --single-process
  // the islands in this process, each on its plan's share of the batch.
  const bool island_ranks = !options.planned.island_plans.empty() && !single_process;
  if (island_ranks && rv->world_size == 1) return SuperviseIslands(*job, options, args);
  if (!options.planned.plan_path.empty() || island_ranks)
    return RunTrainWithPlan(*job, options, rv->rank == 0);
  if (job->cluster.num_devices() > 1 && !single_process) return SuperviseJob(job_path, *job, options, args);
  return RunTrainHere(*job, options);
}

}  // namespace motley::cli
