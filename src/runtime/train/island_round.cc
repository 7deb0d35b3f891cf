#include "runtime/train/island_round.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/islands/island_exchange.h"

namespace motley {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Waits until a collective that began at `start` has taken as long as the emulated links would
// (cluster emulation; nothing otherwise).
void HoldForEmulatedLink(const DeviceEmulation& emulation, const Schedule& round, const Op& op,
                         Clock::time_point start) {
  if (!emulation.enabled()) return;
  const Collective& c = round.collectives[static_cast<size_t>(op.collective)];
  std::vector<int> devices;
  for (int32_t r : c.ranks) devices.push_back(round.programs[static_cast<size_t>(r)].device);
  const OpKind kind = TrafficKind(c);
  const double needed_s = emulation.CollectiveSeconds(
      c.bytes * c.uneven_factor, devices,
      kind == OpKind::kAllGather ? CollectiveKind::kAllGather : CollectiveKind::kAllReduce);
  const double spent_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (needed_s > spent_s) std::this_thread::sleep_for(std::chrono::duration<double>(needed_s - spent_s));
}

// A rank's pieces in a round, by the island's own ministage: its index among the outer optimizer's
// pieces, and its average as it arrives (islands of unlike shapes: fragment by fragment).
struct RoundPieceState {
  std::map<int, size_t> index;
  std::map<int, torch::Tensor> delta, average;
};

// `values` one after another into `ranges` ([begin, begin + count) each) of `target`.
void CopyIntoRanges(const std::vector<std::pair<int64_t, int64_t>>& ranges, const torch::Tensor& values,
                    torch::Tensor& target) {
  int64_t at = 0;
  for (const auto& [begin, count] : ranges) {
    target.narrow(0, begin, count).copy_(values.narrow(0, at, count));
    at += count;
  }
}

// Islands of unlike shapes: the exchange of one fragment (`ops`: its ops on this rank), each of this
// rank's pieces then taking its values of the islands' average.
Result<OuterExchange> ExchangeFragment(IslandPlace& place, const Schedule& round,
                                       const std::vector<const Op*>& ops, RoundPieceState& pieces,
                                       Executor& executor, const DeviceEmulation& emulation, double tokens,
                                       const std::string& compression) {
  const std::vector<std::string> names = executor.FragmentNames(*ops[0]);
  const int v = ops[0]->ministage - place.first_ministage;
  const auto delta = pieces.delta.find(v);
  if (delta == pieces.delta.end())
    return Status::Internal(
        fmt::format("rank {}: the outer round exchanges a fragment of ministage {}, whose piece "
                    "it does not step",
                    place.outer->rank(), v));
  std::map<std::string, torch::Tensor> mine =
      executor.OuterPieceAsWhole(v, SpreadRoundPiece(round, v, delta->second, executor), names);
  std::vector<torch::Tensor> values;
  for (const std::string& name : names) values.push_back(mine.at(name));
  std::vector<FragmentStep> steps;
  for (const Op* op : ops)
    steps.push_back({op->kind == OpKind::kOuterReduce, place.GroupOf(round, op->collective)});
  auto start = Clock::now();
  MOTLEY_ASSIGN_OR_RETURN(OuterExchange done,
                          AverageFragment(*place.outer, steps, values, tokens, compression, [&](size_t k) {
                            HoldForEmulatedLink(emulation, round, *ops[k], start);
                            start = Clock::now();
                          }));
  for (size_t k = 0; k < names.size(); ++k) mine[names[k]] = values[k];
  for (auto& [u, average] : pieces.average) executor.OuterPieceFill(u, mine, average);
  return done;
}

// A round on this rank: its pieces, what it does with them, and the ops run so far.
struct RoundRun {
  RoundRun(IslandPlace& place_, const Schedule& round_, OuterOptimizer& outer_, Executor& executor_,
           const DeviceEmulation& emulation_, double tokens_)
      : place(place_),
        round(round_),
        outer(outer_),
        executor(executor_),
        emulation(emulation_),
        tokens(tokens_) {}
  IslandPlace& place;
  const Schedule& round;
  OuterOptimizer& outer;
  Executor& executor;
  const DeviceEmulation& emulation;
  double tokens;
  RoundPieceState pieces;
  std::vector<torch::Tensor> attached;  // the outer optimizer's pieces (RoundPieces)
  std::vector<torch::Tensor> launched;  // an overlapped round's: each piece's value when sent
  RoundReport report;
  const Program& program() const { return round.programs[static_cast<size_t>(place.outer->rank())]; }
};

// Attaches this rank's pieces where they are now; with `take_deltas`, takes every piece's
// pseudo-gradient at once (an overlapped round's, sent before the island trains on; else a piece's is
// taken when its exchange comes, as islands of unlike shapes take theirs at once too).
Status StartRun(RoundRun& run, bool take_deltas) {
  MOTLEY_ASSIGN_OR_RETURN(
      run.attached, RoundPieces(run.round, run.place.outer->rank(), run.place.first_ministage, run.executor));
  if (take_deltas)
    for (const torch::Tensor& piece : run.attached) run.launched.push_back(piece.detach().clone());
  run.outer.Attach(run.attached);
  for (const Op& op : run.program().ops)
    if (op.kind == OpKind::kOuterStep) {
      const int v = op.ministage - run.place.first_ministage;
      const size_t k = run.pieces.index.size();
      run.pieces.index[v] = k;
      if (run.place.whole_fragments || take_deltas) run.pieces.delta[v] = run.outer.PseudoGradient(k);
      if (run.place.whole_fragments) {  // in the piece's layout: each of the fragment's parts fills its own
        MOTLEY_ASSIGN_OR_RETURN(const torch::Tensor piece, run.executor.OuterPiece(v));
        run.pieces.average[v] = torch::zeros_like(piece);
      }
    }
  return Status::Ok();
}

// Whether `op` is part of a round's exchange (an overlapped round's program has them first).
bool IsExchange(const Op& op) { return op.kind == OpKind::kOuterReduce || op.kind == OpKind::kAllReduce; }

// Runs this rank's ops [begin, end) of the round.
Status RunOps(RoundRun& run, size_t begin, size_t end) {
  IslandPlace& place = run.place;
  const std::vector<Op>& ops = run.program().ops;
  const std::string& compression = run.outer.config().compression;
  for (size_t k = begin; k < end;) {
    const Op& op = ops[k];
    const int v = op.ministage - place.first_ministage;
    CommGroup* group = op.collective >= 0 ? place.GroupOf(run.round, op.collective) : nullptr;
    const auto start = Clock::now();
    OuterExchange done;
    if (op.kind == OpKind::kOuterStep) {
      const size_t i = run.pieces.index.at(v);
      const torch::Tensor& average = run.pieces.average.at(v);
      run.outer.StepPiece(
          i, place.whole_fragments ? TakeRoundPiece(run.round, v, average, run.executor) : average,
          run.launched.empty() ? torch::Tensor() : run.launched[i]);
      MOTLEY_RETURN_IF_ERROR(PutRoundPiece(run.round, v, run.attached.at(i), run.executor));
      run.pieces.delta.erase(v);
      run.pieces.average.erase(v);
    } else if (op.kind == OpKind::kAllGather) {
      MOTLEY_RETURN_IF_ERROR(run.executor.GatherOuterPieces(v, *place.outer, *group));
      HoldForEmulatedLink(run.emulation, run.round, op, start);
    } else if (op.kind == OpKind::kOuterReduce && !place.whole_fragments) {
      const auto taken = run.pieces.delta.find(v);
      std::vector<torch::Tensor> average = {
          taken != run.pieces.delta.end() ? taken->second : run.outer.PseudoGradient(run.pieces.index.at(v))};
      MOTLEY_ASSIGN_OR_RETURN(done,
                              AverageAcrossIslands(*place.outer, *group, average, run.tokens, compression));
      run.pieces.average[v] = average.at(0);
      HoldForEmulatedLink(run.emulation, run.round, op, start);
    } else if (IsExchange(op) && place.whole_fragments) {
      std::vector<const Op*> fragment;  // the fragment's ops: those of its layers in a row
      for (; k < end && IsExchange(ops[k]) && ops[k].layer_begin == op.layer_begin &&
             ops[k].embedding == op.embedding && ops[k].head == op.head;
           ++k)
        fragment.push_back(&ops[k]);
      MOTLEY_ASSIGN_OR_RETURN(done, ExchangeFragment(place, run.round, fragment, run.pieces, run.executor,
                                                     run.emulation, run.tokens, compression));
      --k;
    } else {
      return Status::Internal(
          fmt::format("rank {}: an outer round holds a {} op", place.outer->rank(), OpKindName(op.kind)));
    }
    run.report.bytes_sent += done.bytes_sent;
    run.report.compression_error = std::max(run.report.compression_error, done.compression_error);
    ++k;
  }
  return Status::Ok();
}

}  // namespace

// This rank's pieces of the round: one an outer step of its program, in order (the outer optimizer's),
// by the island's own ministage.
Result<std::vector<torch::Tensor>> RoundPieces(const Schedule& round, int rank, int first_ministage,
                                               Executor& executor) {
  std::vector<torch::Tensor> pieces;
  for (const Op& op : round.programs.at(static_cast<size_t>(rank)).ops)
    if (op.kind == OpKind::kOuterStep) {
      const int v = op.ministage - first_ministage;
      MOTLEY_ASSIGN_OR_RETURN(torch::Tensor piece, executor.OuterPiece(v));
      pieces.push_back(round.outer_fragments > 1 ? TakeRoundPiece(round, v, piece, executor) : piece);
    }
  return pieces;
}

torch::Tensor TakeRoundPiece(const Schedule& round, int v, const torch::Tensor& whole, Executor& executor) {
  if (round.outer_fragments <= 1) return whole;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (const auto& [begin, count] :
       executor.OuterFragmentRanges(v, round.outer_fragment, round.outer_fragments))
    parts.push_back(whole.narrow(0, begin, count));
  return parts.empty() ? whole.narrow(0, 0, 0).clone() : torch::cat(parts);
}

torch::Tensor SpreadRoundPiece(const Schedule& round, int v, const torch::Tensor& values,
                               Executor& executor) {
  if (round.outer_fragments <= 1) return values;
  torch::NoGradGuard no_grad;
  torch::Tensor whole = torch::zeros({executor.OuterRange(v).second}, values.options());
  CopyIntoRanges(executor.OuterFragmentRanges(v, round.outer_fragment, round.outer_fragments), values, whole);
  return whole;
}

Status PutRoundPiece(const Schedule& round, int v, const torch::Tensor& values, Executor& executor) {
  if (round.outer_fragments <= 1) return Status::Ok();  // the piece is a view
  torch::NoGradGuard no_grad;
  MOTLEY_ASSIGN_OR_RETURN(torch::Tensor piece, executor.OuterPiece(v));
  CopyIntoRanges(executor.OuterFragmentRanges(v, round.outer_fragment, round.outer_fragments), values, piece);
  return Status::Ok();
}

Result<RoundReport> OuterRound(IslandPlace& place, const Schedule& round, OuterOptimizer& outer,
                               Executor& executor, const DeviceEmulation& emulation, double tokens) {
  const auto start = Clock::now();
  RoundRun run{place, round, outer, executor, emulation, tokens};
  MOTLEY_RETURN_IF_ERROR(StartRun(run, /*take_deltas=*/false));
  MOTLEY_RETURN_IF_ERROR(RunOps(run, 0, run.program().ops.size()));
  outer.FinishStep();
  run.report.seconds = SecondsSince(start);
  return run.report;
}

class RoundInFlight {
 public:
  explicit RoundInFlight(RoundRun run) : run_(std::move(run)) {}
  ~RoundInFlight() {
    if (thread_.joinable()) thread_.join();
  }
  RoundRun run_;
  size_t exchange_end_ = 0;  // the program's exchange: ops [0, exchange_end_)
  Clock::time_point sent_at_;
  double exchange_s_ = 0;
  Status status_;
  std::thread thread_;
};

void RoundInFlightDeleter::operator()(RoundInFlight* flight) const { delete flight; }

Result<RoundInFlightPtr> SendRound(IslandPlace& place, const Schedule& round, OuterOptimizer& outer,
                                   Executor& executor, const DeviceEmulation& emulation, double tokens) {
  const auto start = Clock::now();
  RoundInFlightPtr flight(new RoundInFlight(RoundRun{place, round, outer, executor, emulation, tokens}));
  RoundRun& run = flight->run_;
  MOTLEY_RETURN_IF_ERROR(StartRun(run, /*take_deltas=*/true));
  const std::vector<Op>& ops = run.program().ops;
  flight->exchange_end_ = static_cast<size_t>(
      std::find_if(ops.begin(), ops.end(), [](const Op& op) { return !IsExchange(op); }) - ops.begin());
  if (std::any_of(ops.begin() + static_cast<std::ptrdiff_t>(flight->exchange_end_), ops.end(), IsExchange))
    return Status::Internal(fmt::format(
        "rank {}: the round overlaps inner steps, but its program does not send every piece first",
        place.outer->rank()));
  run.report.seconds = SecondsSince(start);
  flight->sent_at_ = Clock::now();
  RoundInFlight* f = flight.get();
  f->thread_ = std::thread([f] {
    torch::NoGradGuard no_grad;  // (grad mode is the thread's own)
    f->status_ = RunOps(f->run_, 0, f->exchange_end_);
    f->exchange_s_ = SecondsSince(f->sent_at_);
  });
  return flight;
}

Result<RoundReport> LandRound(RoundInFlightPtr flight, OuterOptimizer& outer, Executor& executor) {
  const auto start = Clock::now();
  flight->thread_.join();
  MOTLEY_RETURN_IF_ERROR(flight->status_);
  RoundRun& run = flight->run_;
  MOTLEY_ASSIGN_OR_RETURN(
      run.attached, RoundPieces(run.round, run.place.outer->rank(), run.place.first_ministage, executor));
  outer.Attach(run.attached);  // where the pieces are now
  MOTLEY_RETURN_IF_ERROR(RunOps(run, flight->exchange_end_, run.program().ops.size()));
  outer.FinishStep();
  run.report.seconds += SecondsSince(start);
  run.report.exchange_s = flight->exchange_s_;
  return run.report;
}

}  // namespace motley
