#include "runtime/train/planned_islands.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/checkpoint_format.h"
#include "core/rendezvous.h"
#include "plan/outer_round.h"
#include "plan/plan_io.h"
#include "runtime/device/rank_device.h"
#include "runtime/emulation/device_emulation.h"
#include "runtime/islands/island_exchange.h"
#include "runtime/islands/outer_optimizer.h"
#include "runtime/train/island_membership.h"
#include "runtime/train/island_round.h"
#include "runtime/train/planned_run.h"
#include "runtime/train/safetensors.h"

namespace motley {
namespace {

// The islands' plans, which of them are launched, and where each island's ranks and sequences start.
struct IslandLayout {
  std::vector<Plan> plans;   // every island's, in island order
  std::vector<int> present;  // the islands launched, in order (all but a lost one)
  // The outer rounds (plan/outer_round.h) of the present islands' ranks: one a streaming fragment.
  std::vector<Schedule> rounds;
  OuterRoundLayout where;               // each present island's first rank and ministage in the rounds
  std::vector<int64_t> first_sequence;  // each island's, in each step's global batch
  int world_size() const { return static_cast<int>(rounds.at(0).programs.size()); }
  // The position among the present islands of the island that round rank `rank` belongs to.
  int PositionOf(int rank) const {
    return static_cast<int>(std::upper_bound(where.first_rank.begin(), where.first_rank.end(), rank) -
                            where.first_rank.begin()) -
           1;
  }
  int RanksOf(int position) const {
    return (static_cast<size_t>(position) + 1 < where.first_rank.size()
                ? where.first_rank[static_cast<size_t>(position) + 1]
                : world_size()) -
           where.first_rank[static_cast<size_t>(position)];
  }
};

// `options`' present islands (every one when none is named), checked against the job's.
Result<std::vector<int>> PresentIslands(const JobSpec& job, const TrainOptions& options,
                                        int64_t clock_steps) {
  std::vector<int> present = options.planned.islands_present;
  if (present.empty()) {
    present.resize(static_cast<size_t>(job.islands.count));
    std::iota(present.begin(), present.end(), 0);
  }
  for (size_t k = 0; k < present.size(); ++k)
    if (present[k] < 0 || present[k] >= job.islands.count || (k > 0 && present[k] <= present[k - 1]))
      return Status::InvalidArgument(
          fmt::format("--islands-present: {} is not an island of {} (0..{}, each once, in order)", present[k],
                      job.file, job.islands.count - 1));
  // The first island present keeps the run's clock (its steps number the checkpoints).
  if (job.islands.InnerSteps(present[0]) != job.islands.inner_steps)
    return Status::InvalidArgument(fmt::format(
        "{}: island {} leads the islands present but takes {} inner steps a round to the clock's {}: islands "
        "of their own inner steps go on only while island 0 is present",
        job.file, present[0], job.islands.InnerSteps(present[0]), job.islands.inner_steps));
  const int64_t stop = options.planned.stop_at_step;
  if (stop < 0 || (stop > 0 && stop < clock_steps && stop % job.islands.inner_steps != 0))
    return Status::InvalidArgument(
        fmt::format("--stop-at-step {}: not the end of an outer round (a multiple of "
                    "inner_steps = {}) or of the run",
                    stop, job.islands.inner_steps));
  return present;
}

// The islands `present` (every one when empty: `options`' own) laid out: their plans and outer rounds.
Result<IslandLayout> LayOutIslands(const JobSpec& job, const TrainOptions& options,
                                   const std::vector<int>& present = {}) {
  const std::vector<std::string>& paths = options.planned.island_plans;
  if (static_cast<int64_t>(paths.size()) != job.islands.count)
    return Status::InvalidArgument(fmt::format(
        "{}: [islands] count = {} but {} island plan{} given (--island-plan, one for each island in order)",
        job.file, job.islands.count, paths.size(), paths.size() == 1 ? " was" : "s were"));
  IslandLayout out;
  const int64_t clock_steps = options.steps > 0 ? options.steps : job.training.steps;
  if (present.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(out.present, PresentIslands(job, options, clock_steps));
  } else {
    out.present = present;
  }
  int64_t sequences = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    MOTLEY_ASSIGN_OR_RETURN(Plan plan, LoadPlanFile(paths[i]));
    out.first_sequence.push_back(sequences);
    sequences += plan.global_batch_sequences();
    out.plans.push_back(std::move(plan));
  }
  for (const int i : out.present)
    if (job.islands.OwnSteps(i, clock_steps) == 0)
      return Status::InvalidArgument(fmt::format(
          "{}: island {} takes {} inner steps to island 0's {}, so none in a run of {} steps: raise "
          "its inner_steps_per_island or the run's steps",
          job.file, i, job.islands.InnerSteps(i), job.islands.inner_steps, clock_steps));
  if (sequences != job.training.global_batch_sequences)
    return Status::InvalidArgument(fmt::format(
        "the island plans' batches add up to {} sequences a step but the job {} has global_batch_sequences = "
        "{}; each island trains on its own share of the batch: make the shares add up",
        sequences, job.file, job.training.global_batch_sequences));
  // The round every rank follows, from the present islands' step schedules (as each island's run
  // lowers its own).
  std::vector<Schedule> steps;
  for (const int i : out.present) {
    Result<Schedule> s = LowerPlanToRun(out.plans[i], job);
    if (!s.ok()) return Status::InvalidArgument(fmt::format("{}: {}", paths[i], s.status().message()));
    steps.push_back(std::move(*s));
  }
  std::vector<const Schedule*> islands;
  for (const Schedule& s : steps) islands.push_back(&s);
  OuterRoundOptions round;
  round.compression = job.islands.outer.compression;
  round.overlap_steps = job.islands.overlap_steps;
  round.fragments = static_cast<int32_t>(job.islands.fragments);
  round.master_bytes = BytesPerElement(MasterPrecision(job.training.precision));
  SetFragmentSizes(job.model, round);
  MOTLEY_ASSIGN_OR_RETURN(out.rounds, LowerOuterRounds(islands, round, &out.where));
  return out;
}

// Each round's collectives' groups in the world of the islands meeting (place.outer): one group a set
// of members, every rank making them in the rounds' order.
Status MakeRoundGroups(IslandPlace& place, const IslandLayout& layout) {
  place.round_groups.clear();
  std::map<std::vector<int32_t>, CommGroup*> made;
  for (const Schedule& round : layout.rounds) {
    place.round_groups.emplace_back();
    for (const Collective& c : round.collectives) {
      auto [it, added] = made.try_emplace(c.ranks, nullptr);
      if (added) {
        MOTLEY_ASSIGN_OR_RETURN(it->second,
                                place.outer->NewGroup(std::vector<int>(c.ranks.begin(), c.ranks.end())));
      }
      place.round_groups.back().push_back(it->second->index >= 0 ? it->second : nullptr);
    }
  }
  return Status::Ok();
}

Result<IslandPlace> JoinIslands(const IslandLayout& layout, const TrainOptions& options) {
  MOTLEY_ASSIGN_OR_RETURN(Rendezvous rv, RendezvousFromEnv());
  if (rv.world_size != layout.world_size()) {
    std::vector<int> ranks;
    for (size_t p = 0; p < layout.present.size(); ++p) ranks.push_back(layout.RanksOf(static_cast<int>(p)));
    return Status::InvalidArgument(fmt::format(
        "rank {}: launched as one of {} ranks, but the {} islands' plans have {} ranks: launch {}", rv.rank,
        rv.world_size, layout.present.size(), fmt::join(ranks, " + "), layout.world_size()));
  }
  MOTLEY_ASSIGN_OR_RETURN(torch::Device device, RankDevice(options.device, rv));
  CommConfig config;
  config.gpu = device.is_cuda();
  IslandPlace place;
  MOTLEY_ASSIGN_OR_RETURN(place.root, Communicator::Connect(rv, config));
  place.outer = place.root.get();
  // The present islands' ranks, one island after another.
  const int position = layout.PositionOf(rv.rank);
  const int first = layout.where.first_rank[static_cast<size_t>(position)];
  place.island = layout.present[static_cast<size_t>(position)];
  place.local_rank = rv.rank - first;
  place.first_ministage = layout.where.first_ministage[static_cast<size_t>(position)];
  place.whole_fragments = layout.where.whole_fragments;
  std::vector<int> own(static_cast<size_t>(layout.RanksOf(position)));
  std::iota(own.begin(), own.end(), first);
  MOTLEY_ASSIGN_OR_RETURN(place.own, place.outer->Within(own, fmt::format("island-{}", place.island)));
  if (!layout.where.whole_fragments)
    for (int local = 0; local < layout.RanksOf(0); ++local) {
      std::vector<int> across;
      for (size_t p = 0; p < layout.present.size(); ++p) across.push_back(layout.where.first_rank[p] + local);
      MOTLEY_ASSIGN_OR_RETURN(CommGroup * g, place.outer->NewGroup(across));
      if (local == place.local_rank) place.across = g;
    }
  if (options.planned.islands_live) {  // the loss of another island's rank is not this rank's end
    std::vector<int> others;
    for (size_t p = 0; p < layout.present.size(); ++p)
      if (static_cast<int>(p) != position)
        for (int k = 0; k < layout.RanksOf(static_cast<int>(p)); ++k)
          others.push_back(layout.where.first_rank[p] + k);
    place.root->Tolerate(others);
  }
  MOTLEY_RETURN_IF_ERROR(MakeRoundGroups(place, layout));
  return place;
}

// Live islands: the islands `present` meet from now on without the others (IslandMembership) — their
// rounds lowered again over them and their groups made in a world of their own ranks.
Status MeetWithout(IslandPlace& place, IslandLayout& layout, const IslandLayout& launched, const JobSpec& job,
                   const TrainOptions& options, const std::vector<int>& present) {
  if (std::find(present.begin(), present.end(), place.island) == present.end())
    return Status::PeerFailed(
        fmt::format("rank {}: island {} was left out of the outer loop (a rank of it was "
                    "lost)",
                    place.root->rank(), place.island));
  MOTLEY_ASSIGN_OR_RETURN(IslandLayout now, LayOutIslands(job, options, present));
  std::vector<int> ranks;  // root's
  for (const int i : present) {
    const size_t p = static_cast<size_t>(std::find(launched.present.begin(), launched.present.end(), i) -
                                         launched.present.begin());
    for (int k = 0; k < launched.RanksOf(static_cast<int>(p)); ++k)
      ranks.push_back(launched.where.first_rank[p] + k);
  }
  MOTLEY_ASSIGN_OR_RETURN(place.meeting,
                          place.root->Within(ranks, fmt::format("meeting-{}", fmt::join(present, "-"))));
  place.outer = place.meeting.get();
  const size_t position =
      static_cast<size_t>(std::find(present.begin(), present.end(), place.island) - present.begin());
  place.first_ministage = now.where.first_ministage[position];
  place.whole_fragments = now.where.whole_fragments;
  layout = std::move(now);
  return MakeRoundGroups(place, layout);
}

// The islands' pieces must match rank to rank: each rank's count and sizes, compared with its
// matching ranks'.
Status CheckPiecesMatch(Communicator& outer, CommGroup& across, const std::vector<torch::Tensor>& pieces) {
  int64_t total = 0;
  for (const torch::Tensor& p : pieces) total += p.numel();
  const torch::Tensor mine =
      torch::tensor({static_cast<double>(pieces.size()), static_cast<double>(total)}, torch::kFloat64);
  torch::Tensor all = torch::empty({2 * across.size()}, torch::kFloat64);
  MOTLEY_RETURN_IF_ERROR(outer.AllGather(across, mine, all));
  if (!torch::equal(all.view({across.size(), 2}), mine.expand({across.size(), 2})))
    return Status::Internal(fmt::format(
        "rank {}: the outer round pairs the islands' rank {} as holding the same part of the model, but "
        "their pieces differ ({} pieces of {} values here)",
        outer.rank(), across.index, pieces.size(), total));
  return Status::Ok();
}

constexpr char kIslandsFile[] =
    "islands.safetensors";  // as one process's islands write it (islands_trainer.cc)

// A checkpoint's outer state (island 0's ranks, together; the file on its lead rank): the outer steps
// taken and every parameter's outer momentum — consolidated, gathered into the file, named as one
// process's islands name it; sharded, nothing gathered: each rank's pieces carry theirs (`owned`, and
// "momentum" = "shards" in the file's metadata). The other islands' inner state is in their own
// checkpoints (CheckpointIslands).
struct OuterCheckpoint {
  CheckpointExtraFile file;
  PlannedRun::OwnedStateFn owned;  // sharded: the rank's pieces with their outer momentum
};
Result<OuterCheckpoint> OuterStateFile(IslandPlace& place, const std::vector<Schedule>& rounds,
                                       const std::vector<OuterOptimizer>& outers, Executor& executor,
                                       bool sharded) {
  OuterCheckpoint out{
      {kIslandsFile, {}, {{"islands", "1"}, {"outer_steps", std::to_string(outers.back().steps())}}},
      nullptr};
  if (std::all_of(outers.begin(), outers.end(), [](const OuterOptimizer& o) { return o.momentum().empty(); }))
    return out;                         // none (no outer momentum, or no round yet)
  std::map<int, torch::Tensor> pieces;  // by ministage: its piece's, every fragment's part in place
  std::map<int, CommGroup*> replicas;   // ZeRO-0: the island's replicas gather their pieces
  for (size_t f = 0; f < rounds.size(); ++f) {
    size_t k = 0;
    for (const Op& op : rounds[f].programs[static_cast<size_t>(place.outer->rank())].ops) {
      const int v = op.ministage - place.first_ministage;
      if (op.kind == OpKind::kOuterStep && k < outers[f].momentum().size()) {
        const torch::Tensor whole = SpreadRoundPiece(rounds[f], v, outers[f].momentum()[k++], executor);
        if (auto [it, added] = pieces.try_emplace(v, whole); !added) it->second = it->second + whole;
      }
      if (op.kind == OpKind::kAllGather) replicas[v] = place.GroupOf(rounds[f], op.collective);
    }
  }
  if (sharded) {
    out.file.metadata["momentum"] = "shards";
    out.owned = [&executor, &place, pieces, replicas] {
      return executor.OwnedStateWithOuter(pieces, *place.outer, replicas);
    };
    return out;
  }
  MOTLEY_ASSIGN_OR_RETURN(const auto whole, executor.GatherOuterState(pieces, *place.outer, replicas));
  for (const auto& [name, momentum] : whole)
    out.file.tensors.push_back({"outer." + name + ".momentum", momentum});
  return out;
}

// A checkpoint of the islands (core/checkpoint_format.h: IslandCheckpointRunDir): every island but
// the first writes its own (its inner state) into its folder, and once all have, the first writes the
// run's, with the outer state — so that a run's `latest` never names a step an island's state is
// missing from. What an island's folder holds for this step from before (an island absent now, or
// the first now, wrote it in a run that went back to an earlier checkpoint) is removed first: resumed
// from this step, such an island takes the run checkpoint's moments, not another run's.
Status CheckpointIslands(PlannedRun& run, IslandPlace& place, const IslandLayout& layout, const JobSpec& job,
                         const std::vector<OuterOptimizer>& outers, bool first) {
  if (!first) MOTLEY_RETURN_IF_ERROR(run.Checkpoint({}));
  MOTLEY_RETURN_IF_ERROR(place.outer->Barrier(place.outer->world()));
  if (!first) return Status::Ok();
  if (place.outer->rank() == 0)
    for (int i = 0; i < job.islands.count; ++i) {
      if (i != layout.present[0] && std::count(layout.present.begin(), layout.present.end(), i) > 0) continue;
      const std::filesystem::path stale =
          std::filesystem::path(IslandCheckpointRunDir(job.checkpoint.dir, i)) /
          CheckpointFolderName(job.islands.OwnSteps(i, run.step()));
      std::error_code ec;
      std::filesystem::remove_all(stale, ec);
      if (ec) return Status::IoError(fmt::format("{}: cannot remove: {}", stale.string(), ec.message()));
    }
  MOTLEY_ASSIGN_OR_RETURN(
      const OuterCheckpoint state,
      OuterStateFile(place, layout.rounds, outers, run.executor(), job.checkpoint.format == "sharded"));
  return run.Checkpoint({state.file}, state.owned);
}

// Resuming: this rank's pieces of the outer momentum in `round` (RoundPieces' `pieces`) from the
// checkpoint's islands file (a synchronous checkpoint has none: no momentum yet), and the outer steps
// taken.
Result<std::pair<std::vector<torch::Tensor>, int64_t>> ResumedOuterState(
    const std::string& resume, const Schedule& round, int rank, int first_ministage, Executor& executor,
    const std::vector<torch::Tensor>& pieces) {
  const Program& program = round.programs.at(static_cast<size_t>(rank));
  MOTLEY_ASSIGN_OR_RETURN(const std::string dir, ResolveCheckpointDir(resume));
  const std::filesystem::path path = std::filesystem::path(dir) / kIslandsFile;
  std::pair<std::vector<torch::Tensor>, int64_t> out{{}, 0};
  if (!std::filesystem::exists(path)) return out;
  MOTLEY_ASSIGN_OR_RETURN(const SafetensorsFile file, SafetensorsFile::Open(path.string()));
  const auto steps = file.metadata().find("outer_steps");
  if (steps == file.metadata().end() ||
      std::from_chars(steps->second.data(), steps->second.data() + steps->second.size(), out.second).ec !=
          std::errc())
    return Status::InvalidArgument(fmt::format("{}: no count of outer steps in its metadata", path.string()));
  const auto momentum = file.metadata().find("momentum");
  const bool in_shards = momentum != file.metadata().end() && momentum->second == "shards";
  if (!in_shards && std::none_of(file.entries().begin(), file.entries().end(),
                                 [](const auto& e) { return e.first.starts_with("outer."); }))
    return out;                                  // no momentum was kept (none configured, or no round yet)
  std::map<std::string, torch::Tensor> sharded;  // a sharded checkpoint's: every one this rank needs, at once
  if (in_shards && !pieces.empty()) {
    std::vector<std::string> names;
    for (const Op& op : program.ops)
      if (op.kind == OpKind::kOuterStep)
        for (const std::string& name : executor.ParameterNames(op.ministage - first_ministage))
          names.push_back(name);
    MOTLEY_ASSIGN_OR_RETURN(sharded, LoadShardedOuterMomentum(dir, names, pieces[0].scalar_type()));
  }
  size_t k = 0;
  for (const Op& op : program.ops) {
    if (op.kind != OpKind::kOuterStep) continue;
    const int v = op.ministage - first_ministage;
    const torch::Tensor& piece = pieces.at(k++);
    std::map<std::string, torch::Tensor> whole;
    for (const std::string& name : executor.ParameterNames(v)) {
      if (in_shards) {
        whole[name] = sharded.at(name);
        continue;
      }
      const std::string key = "outer." + name + ".momentum";
      if (!file.contains(key)) return Status::InvalidArgument(fmt::format("{}: no {}", path.string(), key));
      MOTLEY_ASSIGN_OR_RETURN(whole[name], file.Load(key, piece.scalar_type()));
    }
    MOTLEY_ASSIGN_OR_RETURN(torch::Tensor m, executor.OuterPieceFrom(v, whole));
    out.first.push_back(TakeRoundPiece(round, v, m, executor).to(piece.device()));
  }
  return out;
}

// Live islands: who meets at each meeting, and what this island does when the first island is lost
// and it is the first left: it takes over the run's outputs (checkpoints, metrics, validation).
struct LiveIslands {
  IslandMembership* membership = nullptr;  // null: not live
  std::function<Status()> lead;
};

// This island's run, meeting by meeting of the run's clock (island 0's steps, IslandsConfig): its own
// steps up to the next meeting, then the outer round there — every island takes part in every round, a
// slower one after fewer steps (even none, in a short last round). With streaming fragments fragment k
// meets (k + 1) H / F steps into each round of H; where the islands must hold one model (validation,
// a checkpoint, where this launch stops) every fragment meets at once.
// `flight`: an overlapped round between its sending and its landing (the caller's, so that a failure is
// reported before the exchange in flight is waited for).
// Live islands (`live`): at each meeting the islands meeting, lowered again without those lost
// (`launched`: the layout the launch began with), and where the islands left stop for them to join.
Status TrainIsland(PlannedRun& run, IslandPlace& place, IslandLayout& layout, const IslandLayout& launched,
                   const LiveIslands& live, const JobSpec& job, const TrainOptions& options,
                   int64_t clock_steps, int64_t tokens_per_step, RoundInFlightPtr& flight) {
  const int rank = place.outer->rank();
  std::vector<OuterOptimizer> outers;  // one a streaming fragment
  for (const Schedule& round : layout.rounds) {
    MOTLEY_ASSIGN_OR_RETURN(std::vector<torch::Tensor> pieces,
                            RoundPieces(round, rank, place.first_ministage, run.executor()));
    if (!place.whole_fragments) MOTLEY_RETURN_IF_ERROR(CheckPiecesMatch(*place.outer, *place.across, pieces));
    outers.emplace_back(job.islands.outer, pieces);
    if (!options.resume.empty()) {
      MOTLEY_ASSIGN_OR_RETURN(auto resumed, ResumedOuterState(options.resume, round, rank,
                                                              place.first_ministage, run.executor(), pieces));
      outers.back().Restore(std::move(resumed.first), resumed.second);
    }
  }
  const DeviceEmulation emulation(job.cluster, layout.rounds[0].programs[static_cast<size_t>(rank)].device);
  bool first = place.island == layout.present[0];  // validates and writes checkpoints
  if (first && run.step() == 0) MOTLEY_RETURN_IF_ERROR(run.Validate(0));
  const int64_t h = job.islands.inner_steps, fragments = static_cast<int64_t>(layout.rounds.size());
  // Where this launch ends: the run's end, or the round's at which a lost island joins again.
  int64_t stop =
      options.planned.stop_at_step > 0 ? std::min(clock_steps, options.planned.stop_at_step) : clock_steps;
  const auto meet = [&](int64_t clock) -> Status {
    if (live.membership == nullptr) return Status::Ok();
    MOTLEY_ASSIGN_OR_RETURN(const IslandMeeting m, live.membership->At(clock));
    if (m.stop_at_step > 0) stop = std::min(stop, m.stop_at_step);
    if (m.present == layout.present) return Status::Ok();
    MOTLEY_RETURN_IF_ERROR(MeetWithout(place, layout, launched, job, options, m.present));
    if (!first && place.island == layout.present[0]) {  // the first island was lost: this one leads
      first = true;
      MOTLEY_RETURN_IF_ERROR(live.lead());
    }
    if (!first) return Status::Ok();
    return run.WriteEvent(nlohmann::json{{"event", "islands_left_out"},
                                         {"step", clock},
                                         {"islands", m.left_out},
                                         {"present", m.present},
                                         {"rejoin_step", m.stop_at_step}});
  };
  std::vector<int64_t> since(static_cast<size_t>(fragments), 0);  // own steps since each fragment met
  const auto event = [&](size_t k, int64_t clock, const RoundReport& round) {
    nlohmann::json e = {{"event", "outer_round"},           {"step", clock},
                        {"outer_steps", outers[k].steps()}, {"round_s", round.seconds},
                        {"bytes_sent", round.bytes_sent},   {"compression_error", round.compression_error}};
    if (fragments > 1) e["fragment"] = k;
    return e;
  };
  // An overlapped round (the rounds' outer_overlap_steps) in flight: the own step it lands before.
  int64_t land_at = 0, flight_clock = 0;
  size_t flight_fragment = 0;
  const auto land = [&]() -> Status {
    MOTLEY_ASSIGN_OR_RETURN(const RoundReport round,
                            LandRound(std::move(flight), outers[flight_fragment], run.executor()));
    nlohmann::json e = event(flight_fragment, flight_clock, round);
    e["exchange_s"] = round.exchange_s;
    e["landed_at_step"] = run.step();
    return run.WriteEvent(e);
  };
  const auto take = [&](size_t k, int64_t clock) -> Status {
    MOTLEY_ASSIGN_OR_RETURN(const RoundReport round,
                            OuterRound(place, layout.rounds[k], outers[k], run.executor(), emulation,
                                       static_cast<double>(since[k] * tokens_per_step)));
    since[k] = 0;
    return run.WriteEvent(event(k, clock, round));
  };
  const int64_t overlap = layout.rounds[0].outer_overlap_steps;
  for (int64_t clock = run.resumed_from_step(); clock < stop;) {
    // The next meeting: a fragment's, or where this launch stops (every fragment's).
    int64_t fragment = -1, next = stop;
    for (int64_t k = 0; k < fragments; ++k)
      if (const int64_t at = clock / h * h + (k + 1) * h / fragments; at > clock && at < next) {
        next = at;
        fragment = k;
      }
    clock = next;
    for (; run.step() < job.islands.OwnSteps(place.island, clock);) {
      if (flight && run.step() >= land_at) MOTLEY_RETURN_IF_ERROR(land());
      MOTLEY_RETURN_IF_ERROR(run.Step());
      for (int64_t& n : since) ++n;
    }
    if (flight) MOTLEY_RETURN_IF_ERROR(land());
    MOTLEY_RETURN_IF_ERROR(meet(clock));
    // Where the islands must hold one model — validation, a checkpoint, the end — every fragment meets
    // at once, without overlap.
    const bool validate = ValidationDue(job, clock, clock_steps),
               checkpoint = CheckpointDue(job, clock, clock_steps);
    if (fragment >= 0 && clock < stop && !(clock % h == 0 && (validate || checkpoint))) {
      const size_t k = static_cast<size_t>(fragment);
      if (overlap == 0) {
        MOTLEY_RETURN_IF_ERROR(take(k, clock));
        continue;
      }
      MOTLEY_ASSIGN_OR_RETURN(flight, SendRound(place, layout.rounds[k], outers[k], run.executor(), emulation,
                                                static_cast<double>(since[k] * tokens_per_step)));
      since[k] = 0;
      land_at = job.islands.OwnSteps(place.island, clock + overlap);
      flight_clock = clock;
      flight_fragment = k;
      continue;
    }
    for (size_t k = 0; k < outers.size(); ++k) MOTLEY_RETURN_IF_ERROR(take(k, clock));
    if (first && validate) MOTLEY_RETURN_IF_ERROR(run.Validate(run.step()));
    if (checkpoint) MOTLEY_RETURN_IF_ERROR(CheckpointIslands(run, place, layout, job, outers, first));
  }
  // Stopped for a lost island to join: always a checkpoint (unless one was just written) to resume from.
  const bool write = stop == clock_steps ? options.checkpoint_at_end : !CheckpointDue(job, stop, clock_steps);
  if (write && run.resumed_from_step() < stop)
    MOTLEY_RETURN_IF_ERROR(CheckpointIslands(run, place, layout, job, outers, first));
  return Status::Ok();
}

// A resumed island's own moments (not the first island present's): its checkpoint at the resumed
// step, or "" (the resumed checkpoint's: an island lost then, or one the run did not have).
Result<std::string> IslandMomentsFrom(const JobSpec& job, const TrainOptions& options, int island) {
  if (options.resume.empty()) return std::string();
  MOTLEY_ASSIGN_OR_RETURN(const std::string dir, ResolveCheckpointDir(options.resume));
  MOTLEY_ASSIGN_OR_RETURN(const int64_t clock, CheckpointStep(dir));
  return IslandMomentsCheckpoint(dir, island, job.islands.OwnSteps(island, clock));
}

}  // namespace

Result<TrainSummary> TrainIslandsWithPlans(const JobSpec& job, const TrainOptions& options,
                                           TrainObserver* observer) {
  if (job.training.loss_scaling)
    return Status::InvalidArgument(
        "[islands] with loss scaling (fp16) is not built yet: train in bf16, fp32 or fp64");
  MOTLEY_ASSIGN_OR_RETURN(IslandLayout layout, LayOutIslands(job, options));
  MOTLEY_ASSIGN_OR_RETURN(IslandPlace place, JoinIslands(layout, options));
  const IslandLayout launched = layout;
  // This island's run: its plan on its share of the batch, as a planned run of its own.
  JobSpec island_job = job;
  island_job.training.global_batch_sequences = layout.plans[place.island].global_batch_sequences();
  island_job.islands = {};
  island_job.straggler_detection.rebalance = false;  // a live plan change inside an island: not yet
  TrainOptions island_options = options;
  island_options.planned.plan_path = options.planned.island_plans[place.island];
  island_options.planned.first_sequence = layout.first_sequence[place.island];
  island_options.planned.writes_outputs = place.island == layout.present[0];
  if (place.island != layout.present[0]) {  // its own checkpoints: its inner state (CheckpointIslands)
    island_job.checkpoint.dir = IslandCheckpointRunDir(job.checkpoint.dir, place.island);
    island_options.planned.writes_checkpoints = true;
    // Live, the steps since the last meeting (a round's), for the run's metrics should it take the lead.
    if (options.planned.islands_live)
      island_options.planned.keep_unlogged_steps = job.islands.InnerSteps(place.island) + 1;
  }
  // Its own moments where it wrote them (the first island present too: it may not have been first then).
  MOTLEY_ASSIGN_OR_RETURN(island_options.planned.moments_from, IslandMomentsFrom(job, options, place.island));
  // Faults injected for tests name ranks of the launched world; the island's run knows its own.
  for (int* rank : {&island_options.faults.die_rank, &island_options.faults.perturb_rank,
                    &island_options.faults.diverge_rank})
    *rank = *rank >= 0 && *rank == place.outer->rank() ? place.local_rank : -1;
  island_options.planned.outer_round_hash = SchedulesHash(layout.rounds);
  const int64_t clock_steps = options.steps > 0 ? options.steps : job.training.steps;
  island_options.steps = job.islands.OwnSteps(place.island, clock_steps);
  island_options.planned.resumed_steps = [islands = job.islands, i = place.island](int64_t clock) {
    return islands.OwnSteps(i, clock);
  };
  Result<std::unique_ptr<PlannedRun>> run =
      PlannedRun::Start(island_job, island_options, place.island == layout.present[0] ? observer : nullptr,
                        std::move(place.own));
  if (!run.ok()) return run.status();
  const int64_t tokens_per_step = island_job.training.global_batch_sequences * job.training.seq_len;
  std::unique_ptr<IslandMembership> membership;
  LiveIslands live;
  if (options.planned.islands_live) {
    std::vector<std::vector<int>> ranks(static_cast<size_t>(job.islands.count));
    for (size_t p = 0; p < launched.present.size(); ++p)
      for (int k = 0; k < launched.RanksOf(static_cast<int>(p)); ++k)
        ranks[static_cast<size_t>(launched.present[p])].push_back(launched.where.first_rank[p] + k);
    membership = std::make_unique<IslandMembership>(
        *place.root, std::move(ranks), launched.present, (*run)->resumed_from_step(),
        options.supervisor.island_rejoin_steps, job.islands.inner_steps, clock_steps);
    live.membership = membership.get();
    live.lead = [&] {  // the run's checkpoints and metrics are this island's from now on
      if (place.local_rank == 0)
        fmt::print(
            "island {} leads the islands now (the first island was lost): the run's checkpoints, "
            "metrics and validation are its own\n",
            place.island);
      island_job.checkpoint.dir = job.checkpoint.dir;
      return (*run)->LeadOutputs(observer);
    };
  }
  RoundInFlightPtr flight;  // waited for (at its end of scope) after a failure is reported
  if (Status s = TrainIsland(**run, place, layout, launched, live, job, options, clock_steps, tokens_per_step,
                             flight);
      !s.ok()) {
    if ((*run)->AnotherRankFailedFirst()) return Status::PeerFailed(s.message());
    (*run)->ReportFailure(s.message());
    return s;
  }
  return (*run)->Finish();
}

}  // namespace motley
