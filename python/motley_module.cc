// The `motley` Python module: the torch-free half of motley — cluster, model, job and plan files,
// the planner and the simulator — for scripts and notebooks. Each function answers what the
// matching command prints with --json, as a dict (the same fields: the same code makes them,
// api/plan_query.h, api/simulate_query.h, api/describe.h). Bad input raises motley.MotleyError with
// the command line's message (the file, line, key and fix).
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "api/describe.h"
#include "api/interruption_figures.h"
#include "api/island_candidate.h"
#include "api/job_input.h"
#include "api/plan_inputs.h"
#include "api/plan_query.h"
#include "api/simulate_query.h"
#include "core/cluster_parse.h"
#include "core/model_parse.h"
#include "core/units.h"
#include "plan/plan_io.h"

namespace py = pybind11;

namespace motley::python {
namespace {

// JSON crosses by text: Python's json module makes the dict, with Python's own types.
py::object ToPython(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

// Raised to Python as motley.MotleyError (a ValueError).
struct MotleyException : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `o` as JSON text for a reader, through the checks every file gets: what JSON cannot hold (NaN,
// infinity, a key that is not a string, an object that is not a dict, list or scalar) and a dict
// nested past any reader's depth are a MotleyError naming `argument`, not Python's own exception.
std::string JsonTextFromPython(const py::object& o, const std::string& argument) {
  std::string text;
  try {
    text = py::module_::import("json").attr("dumps")(o, py::arg("allow_nan") = false).cast<std::string>();
  } catch (py::error_already_set& e) {
    const std::string why =
        e.matches(PyExc_RecursionError) ? std::string("nested too deeply") : std::string(py::str(e.value()));
    throw MotleyException(argument + ": not a plan as plan() or load_plan() gives it: " + why.substr(0, 200) +
                          "; pass the dict under \"plan\" of plan(), or a plan file's path");
  }
  return text;
}

template <typename T>
T ValueOrRaise(Result<T> r) {
  if (!r.ok()) throw MotleyException(r.status().message());
  return std::move(r).value();
}

void OkOrRaise(const Status& s) {
  if (!s.ok()) throw MotleyException(s.message());
}

py::object Describe(const std::optional<std::string>& cluster, const std::optional<std::string>& model,
                    std::optional<int64_t> seq_len, const std::string& precision) {
  if (!cluster && !model) throw MotleyException("describe: give cluster=... or model=... (or both)");
  if (seq_len && (*seq_len < 1 || *seq_len > kMaxPlanSeqLen))  // as motley describe --seq-len
    throw MotleyException("describe: seq_len " + std::to_string(*seq_len) + ": must be between 1 and " +
                          std::to_string(kMaxPlanSeqLen));
  const std::optional<Precision> p = PrecisionFromName(precision);
  if (!p) throw MotleyException("precision \"" + precision + "\": use fp32, bf16, fp16 or fp64");
  nlohmann::json out = nlohmann::json::object();
  if (model) {
    const ModelSpec m = ValueOrRaise(LoadModel(*model));
    out = DescribeModelJson(m, seq_len.value_or(m.max_seq_len), *p);
  }
  if (cluster) {
    nlohmann::json c = DescribeClusterJson(ValueOrRaise(LoadCluster(*cluster)));
    if (model)
      out["cluster"] = c;
    else
      out = c;
  }
  return ToPython(out);
}

// What plan() takes beyond the command's devices and model: money (api/offer_plan.h).
struct MoneyArgs {
  std::optional<std::string> offers, objective, deadline;
  double budget_per_hour = 0, max_cost_per_token = 0, min_tokens_per_s = 0, tokens = 0;
  int offer_evaluations = 150;
  std::optional<std::string> checkpoint_interval, restart_time;  // spot devices' interruptions
};

void ApplyMoney(const MoneyArgs& m, PlanQuery* q) {
  q->offers = m.offers.value_or("");
  q->objective = m.objective.value_or("");
  q->budget_usd_per_hour = m.budget_per_hour;
  q->max_usd_per_million_tokens = m.max_cost_per_token * 1e6;
  q->min_tokens_per_s = m.min_tokens_per_s;
  q->train_tokens = m.tokens;
  q->offer_evaluations = m.offer_evaluations;
  if (m.deadline) q->deadline_s = ValueOrRaise(ParseDuration(*m.deadline));
  if (m.checkpoint_interval)
    OkOrRaise(SetInterruptionFigure("checkpoint_interval", *m.checkpoint_interval,
                                    InterruptionFigure::kCheckpointInterval, &q->interruptions));
  if (m.restart_time)
    OkOrRaise(SetInterruptionFigure("restart_time", *m.restart_time, InterruptionFigure::kRestart,
                                    &q->interruptions));
}

py::object PlanFor(const std::optional<std::string>& cluster, const std::string& model, int64_t seq_len,
                   int64_t global_batch_tokens, const std::string& strategy, const std::string& precision,
                   const std::optional<std::string>& profile, bool compare, bool gradient_clipping,
                   const std::string& flextp_mode, const std::optional<std::string>& straggler, bool timing,
                   const MoneyArgs& money, const std::string& islands) {
  PlanQuery q;
  q.cluster = cluster.value_or("");
  ApplyMoney(money, &q);
  q.model = model;
  q.seq_len = seq_len;
  q.global_batch_tokens = global_batch_tokens;
  q.strategy = strategy;
  q.precision = precision;
  q.profile = profile.value_or("");
  q.compare = compare;
  q.gradient_clipping = gradient_clipping;
  q.flextp_mode = flextp_mode;
  q.straggler = straggler.value_or("");
  PlanAnswer a;
  nlohmann::json j;
  {
    py::gil_scoped_release release;  // planning takes seconds on large clusters and uses threads
    a = ValueOrRaise(AnswerPlanQuery(q));
    j = PlanAnswerJson(a, timing);
    std::string none;
    AddIslandsJson(ValueOrRaise(ConsiderIslands(islands, a, &none)), none, &j);
  }
  return ToPython(j);
}

py::object SimulatePlan(const py::object& plan, const std::optional<std::string>& cluster,
                        const std::optional<std::string>& model, const std::optional<std::string>& profile,
                        const std::vector<std::string>& stragglers,
                        const std::optional<std::string>& flextp_mode) {
  SimulateQuery q;
  if (py::isinstance<py::str>(plan) || py::hasattr(plan, "__fspath__")) {
    q.plan_path = py::str(py::module_::import("os").attr("fspath")(plan)).cast<std::string>();
  } else {
    // A dict as plan() returns under "plan", or as load_plan() gives.
    q.plan = ValueOrRaise(ParsePlanJson(JsonTextFromPython(plan, "plan"), "plan"));
  }
  q.cluster = cluster.value_or("");
  q.model = model.value_or("");
  q.profile = profile.value_or("");
  q.stragglers = stragglers;
  q.flextp_mode = flextp_mode.value_or("");
  SimulateAnswer a;
  {
    py::gil_scoped_release release;
    a = ValueOrRaise(AnswerSimulateQuery(q));
  }
  return ToPython(SimulateAnswerJson(a));
}

py::object LoadPlan(const std::string& path) {
  const PlanInputs in = ValueOrRaise(LoadPlanInputs(path, "", ""));
  return ToPython(PlanToJson(in.plan));
}

}  // namespace
}  // namespace motley::python

PYBIND11_MODULE(motley, m) {
  using namespace motley::python;
  m.doc() = "motley: plan and simulate LLM training on heterogeneous GPU clusters (the torch-free half).";
  m.attr("__version__") = MOTLEY_VERSION;
  py::register_exception<MotleyException>(m, "MotleyError", PyExc_ValueError);

  m.def(
      "load_cluster",
      [](const std::string& ref) {
        return ToPython(motley::DescribeClusterJson(ValueOrRaise(motley::LoadCluster(ref))));
      },
      py::arg("cluster"),
      "A cluster file or built-in name (local-emulated, zorse-a, ...): its devices, nodes, links and derived "
      "figures "
      "(`motley describe --cluster C --json`).");
  m.def(
      "load_model",
      [](const std::string& ref, std::optional<int64_t> seq_len, const std::string& precision) {
        return Describe(std::nullopt, ref, seq_len, precision);
      },
      py::arg("model"), py::arg("seq_len") = py::none(), py::arg("precision") = "bf16",
      "A model preset, model .toml or Hugging Face config.json: its shape and derived figures "
      "(`motley describe --model M --json`).");
  m.def(
      "load_job",
      [](const std::string& ref) {
        return ToPython(motley::DescribeJobJson(ValueOrRaise(motley::LoadJobArgument(ref))));
      },
      py::arg("job"), "A job file or built-in job name (default): its settings with defaults filled in.");
  m.def("load_plan", &LoadPlan, py::arg("path"),
        "A plan file (.toml or .json), checked against the cluster and model it names: the plan as a dict, "
        "which "
        "simulate() takes.");
  m.def("describe", &Describe, py::kw_only(), py::arg("cluster") = py::none(), py::arg("model") = py::none(),
        py::arg("seq_len") = py::none(), py::arg("precision") = "bf16", "`motley describe ... --json`.");
  m.def(
      "plan",
      [](const std::optional<std::string>& cluster, const std::string& model, int64_t seq_len,
         int64_t global_batch_tokens, const std::string& strategy, const std::string& precision,
         const std::optional<std::string>& profile, bool compare, bool gradient_clipping,
         const std::string& flextp_mode, const std::optional<std::string>& straggler, bool timing,
         const std::optional<std::string>& offers, const std::optional<std::string>& objective,
         double budget_per_hour, double max_cost_per_token, const std::optional<std::string>& deadline,
         double min_tokens_per_s, double tokens, int offer_evaluations,
         const std::optional<std::string>& checkpoint_interval,
         const std::optional<std::string>& restart_time, const std::string& islands) {
        return PlanFor(cluster, model, seq_len, global_batch_tokens, strategy, precision, profile, compare,
                       gradient_clipping, flextp_mode, straggler, timing,
                       {offers, objective, deadline, budget_per_hour, max_cost_per_token, min_tokens_per_s,
                        tokens, offer_evaluations, checkpoint_interval, restart_time},
                       islands);
      },
      py::arg("cluster"), py::arg("model"), py::kw_only(), py::arg("seq_len"), py::arg("global_batch_tokens"),
      py::arg("strategy") = "auto", py::arg("precision") = "bf16", py::arg("profile") = py::none(),
      py::arg("compare") = false, py::arg("gradient_clipping") = true, py::arg("flextp_mode") = "auto",
      py::arg("straggler") = py::none(), py::arg("timing") = false, py::arg("offers") = py::none(),
      py::arg("objective") = py::none(), py::arg("budget_per_hour") = 0.0,
      py::arg("max_cost_per_token") = 0.0, py::arg("deadline") = py::none(),
      py::arg("min_tokens_per_s") = 0.0, py::arg("tokens") = 0.0, py::arg("offer_evaluations") = 150,
      py::arg("checkpoint_interval") = py::none(), py::arg("restart_time") = py::none(),
      py::arg("islands") = "auto",
      "`motley plan ... --json`: the chosen plan's figures, the plan itself under \"plan\" (pass it to "
      "simulate()), every strategy's under \"candidates\" with compare=True, and \"error\" when none fits. "
      "cluster=None with offers=\"FILE\" chooses what to rent (objective, budget_per_hour, "
      "max_cost_per_token, deadline=\"72h\" with tokens, min_tokens_per_s): \"money\", \"front\" and "
      "\"why_chosen\" then say its price, the front of price and speed, and why; spot devices are judged by "
      "their expected speed (checkpoint_interval=\"30min\", restart_time=\"10min\": what an interruption "
      "loses; either may name a run's folder or metrics file to measure it from). Over several regions, "
      "\"islands\" (islands=\"auto\", \"off\" or a count) are the islands judged beside the synchronous "
      "plan: "
      "their speed, the estimated tokens they need more, and whether they are chosen and why.");
  m.def("simulate", &SimulatePlan, py::arg("plan"), py::kw_only(), py::arg("cluster") = py::none(),
        py::arg("model") = py::none(), py::arg("profile") = py::none(),
        py::arg("stragglers") = std::vector<std::string>{}, py::arg("flextp_mode") = py::none(),
        "`motley simulate --plan P --json`: one step of a plan (a file path, or a dict from plan() or "
        "load_plan()); "
        "stragglers as [\"DEVICE=FACTOR\", ...].");
}
