// Executor::StepRun's transfers and collectives: point-to-point sends (over an emulated link, after
// the ones before them) and receives, and collectives started when their op runs and finished when
// an op depends on them — so communication overlaps compute as on the schedule's comm stream.
#include "runtime/executor/executor_step.h"

#include <csignal>

#include <fmt/format.h>

#include "runtime/device/cuda_device.h"

namespace motley {
using namespace step_run;

Status Executor::StepRun::BeforeOp(int i) {
  if (in_.faults.die_mid_step && i == static_cast<int>(prog_.ops.size()) / 2) ::raise(SIGKILL);
  if (device_timed_) op_start_event_[i] = RecordTimingEvent(ex_.copies_->device());
  ex_.copies_->Pump();  // the next pieces of the parameter copies in flight
  MOTLEY_RETURN_IF_ERROR(CollectDeliveredSends());
  return StartArrivedGathers();
}

Status Executor::StepRun::CollectDeliveredSends() {
  for (auto it = sends_.begin(); it != sends_.end();) {
    if (!it->first.Done()) {
      ++it;
      continue;
    }
    MOTLEY_RETURN_IF_ERROR(it->first.Wait());  // done: reports a failure, does not wait
    it = sends_.erase(it);
  }
  for (auto it = emulated_sends_.begin(); it != emulated_sends_.end();) {
    if (it->wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      ++it;
      continue;
    }
    MOTLEY_RETURN_IF_ERROR(it->get());
    it = emulated_sends_.erase(it);
  }
  return Status::Ok();
}

bool Executor::StepRun::Done(int i) {
  auto it = in_flight_.find(i);
  return it != in_flight_.end() && !it->second.deferred && it->second.transfer.Done() &&
         Since(start_) >= it->second.ready_s;
}

Status Executor::StepRun::Send(const Op& op) {
  MOTLEY_CHECK_EQ(op.reads.size(), 1u);
  auto it = activations_.find(op.reads[0]);
  if (it == activations_.end())
    return Status::Internal(
        fmt::format("rank {}: no {} to send to rank {}", ex_.rank_, BufferName(op.reads[0]), op.peer));
  torch::Tensor t = it->second.contiguous();
  if (!op.frees.empty()) activations_.erase(it);  // the last send of it
  report_.bytes_sent += static_cast<double>(t.nbytes());
  const double delay =
      ex_.emulation_.TransferSeconds(static_cast<double>(t.nbytes()), ex_.schedule_.programs[op.peer].device);
  Communicator* comm = ex_.comm_;
  const int peer = op.peer;
  const int64_t tag = op.tag;
  if (delay <= 0 && !link_free_.valid()) {
    MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, comm->Send(t, peer, tag));
    sends_.push_back({std::move(p), t});
    return Status::Ok();
  }
  // An emulated link: the transfer occupies it for its duration, after the ones before it went
  // onto it; it completes once the peer has posted its receive (as on the simulator's link), and
  // the sent tensor goes then, as the schedule frees it. (Waiting for each transfer's receive
  // before the next could go out let a send to a peer that posts its receive late hold back one
  // to a peer that needed it first: a deadlock in 1F1B with microbatches routed over devices.)
  auto posted = std::make_shared<std::promise<void>>();
  std::shared_future<void> previous = link_free_;
  link_free_ = posted->get_future().share();
  emulated_sends_.push_back(std::async(std::launch::async, [=]() mutable -> Status {
                              if (previous.valid()) previous.wait();
                              SleepSeconds(delay);
                              Result<PendingTransfer> p = Status::Internal("the send did not start");
                              try {
                                p = comm->Send(t, peer, tag);
                              } catch (...) {
                                posted->set_value();
                                throw;
                              }
                              posted->set_value();
                              if (!p.ok()) return p.status();
                              const Status sent = p->Wait();
                              t = torch::Tensor();
                              return sent;
                            }).share());
  return Status::Ok();
}

Status Executor::StepRun::Recv(const Op& op) {
  const auto& spec = ex_.model_->spec();
  torch::Tensor buffer = torch::empty({Sequences(op.microbatch), ex_.schedule_.seq_len, spec.hidden_size},
                                      torch::TensorOptions().dtype(ActDtype()).device(ex_.config_.device));
  MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, ex_.comm_->Recv(buffer, op.peer, op.tag));
  MOTLEY_CHECK_EQ(op.writes.size(), 1u);
  recvs_[op.writes[0]] = {std::move(p), buffer};
  return Status::Ok();
}

Status Executor::StepRun::FinishSends() {
  const auto t = Clock::now();
  for (auto& [transfer, tensor] : sends_) MOTLEY_RETURN_IF_ERROR(transfer.Wait());
  sends_.clear();
  for (std::shared_future<Status>& sent : emulated_sends_) MOTLEY_RETURN_IF_ERROR(sent.get());
  emulated_sends_.clear();
  link_free_ = {};
  report_.comm_s += Since(t);
  return Status::Ok();
}

Status Executor::StepRun::Collective(size_t i, const Op& op) {
  torch::NoGradGuard no_grad;
  CommGroup* g = ex_.collective_group_.at(op.collective);
  MOTLEY_CHECK(g != nullptr);
  const int v = op.ministage;
  MinistageState& state = State(v);
  InFlight f;
  f.start = Clock::now();
  f.start_s = Since(start_);
  f.ministage = v;
  int passes = 1;
  if (op.kind == OpKind::kAllGather) {
    // On a GPU, a group of one's gather (a copy on the compute stream) whose shard is still
    // being prefetched starts once the copy is done (or when its result is needed): started
    // now, it would hold the compute stream behind the copy. A group's gather starts in program
    // order, since its members' collectives match in the order they are issued (NCCL).
    f.deferred = ex_.copies_->asynchronous() && g->size() == 1 && !state.ShardArrived();
    if (!f.deferred) MOTLEY_RETURN_IF_ERROR(StartGather(static_cast<int>(i), f));
    in_flight_[static_cast<int>(i)] = std::move(f);
    return Status::Ok();
  } else if (op.kind == OpKind::kReduceScatter) {
    torch::Tensor full = state.GradFlat();
    // A group of one has nothing to reduce: the full gradients are its shard's (no copy). The
    // first reduction after an update writes into the (zeroed) shard itself: no second buffer.
    torch::Tensor out = g->size() == 1 ? full : state.TakeZeroGradShard();
    if (!out.defined()) out = torch::empty({state.shard_numel()}, full.options());
    MOTLEY_ASSIGN_OR_RETURN(f.transfer,
                            ex_.comm_->StartReduceScatterSum(*g, full, out, state.shard_counts()));
    f.bytes = static_cast<double>(full.nbytes());
    const bool release = Has(op.frees, BufferKind::kGrads);  // ZeRO >= 2: only the shard stays
    f.then = [&state, out, full, release]() mutable {
      if (release) {
        state.ReleaseGradFlat();
        state.AddToGradShard(out);  // may keep `out` (a group of one's: the full gradients) as the shard
      } else {
        state.GradShard();          // allocated (zeros) before: `out` is added, never adopted
        state.AddToGradShard(out);  // (nothing to add when it is the shard itself)
        full.zero_();
      }
    };
  } else {
    torch::Tensor& full = state.GradFlat();
    MOTLEY_ASSIGN_OR_RETURN(f.transfer, ex_.comm_->StartAllReduceSum(*g, full));
    f.bytes = static_cast<double>(full.nbytes());
    passes = 2;
  }
  const double n = g->size();
  report_.bytes_sent += passes * (n - 1) / n * f.bytes;
  std::vector<int> devices;
  for (int r : g->ranks) devices.push_back(ex_.schedule_.programs[r].device);
  // Uneven pieces: paced by the largest, as the simulator times it.
  f.needed_s = ex_.emulation_.CollectiveSeconds(
      f.bytes * ex_.schedule_.collectives[op.collective].uneven_factor, devices,
      passes == 2 ? CollectiveKind::kAllReduce : CollectiveKind::kReduceScatter);
  QueueOnEmulatedLink(f);
  in_flight_[static_cast<int>(i)] = std::move(f);
  return Status::Ok();
}

Status Executor::StepRun::SumTiedCopies(size_t i, const Op& op) {
  torch::NoGradGuard no_grad;
  const int head = static_cast<int>(ex_.schedule_.ministages.size()) - 1;
  torch::Tensor embedding, copy;
  if (ex_.ministages_.count(0)) embedding = State(0).GradFlatOf("model.embed_tokens.weight");
  if (ex_.ministages_.count(head)) copy = State(head).GradFlatOf("lm_head.weight");
  MOTLEY_CHECK(embedding.defined() || copy.defined());
  torch::Tensor sum = embedding.defined() ? embedding : copy;
  if (embedding.defined() && copy.defined()) {
    embedding.add_(copy);
    copy.copy_(embedding);
  }
  CommGroup* g = ex_.collective_group_.at(op.collective);
  if (g == nullptr || g->size() == 1) return Status::Ok();
  InFlight f;
  f.start = Clock::now();
  f.start_s = Since(start_);
  f.ministage = op.ministage;
  MOTLEY_ASSIGN_OR_RETURN(f.transfer, ex_.comm_->StartAllReduceSum(*g, sum));
  f.bytes = static_cast<double>(sum.nbytes());
  const bool keeps = ex_.program().dp_index == 0;
  f.then = [sum, keeps]() mutable {
    if (!keeps) sum.zero_();
  };
  const double n = g->size();
  report_.bytes_sent += 2 * (n - 1) / n * f.bytes;
  std::vector<int> devices;
  for (int r : g->ranks) devices.push_back(ex_.schedule_.programs[r].device);
  f.needed_s = ex_.emulation_.CollectiveSeconds(f.bytes, devices, CollectiveKind::kAllReduce);
  QueueOnEmulatedLink(f);
  in_flight_[static_cast<int>(i)] = std::move(f);
  return Status::Ok();
}

Status Executor::StepRun::StartGather(int i, InFlight& f) {
  torch::NoGradGuard no_grad;
  const Op& op = prog_.ops[i];
  CommGroup* g = ex_.collective_group_.at(op.collective);
  MinistageState& state = State(f.ministage);
  f.deferred = false;
  f.start = Clock::now();
  state.WaitReady(false);
  torch::Tensor& flat = state.AllocateFlat();
  torch::Tensor& shard = state.shard();
  MOTLEY_CHECK(shard.defined());
  MOTLEY_ASSIGN_OR_RETURN(f.transfer, ex_.comm_->StartAllGather(*g, shard, flat, state.shard_counts()));
  f.bytes = static_cast<double>(flat.nbytes());
  const double n = g->size();
  report_.bytes_sent += (n - 1) / n * f.bytes;
  std::vector<int> devices;
  for (int r : g->ranks) devices.push_back(ex_.schedule_.programs[r].device);
  f.needed_s = ex_.emulation_.CollectiveSeconds(
      f.bytes * ex_.schedule_.collectives[op.collective].uneven_factor, devices, CollectiveKind::kAllGather);
  QueueOnEmulatedLink(f);
  return Status::Ok();
}

Status Executor::StepRun::StartArrivedGathers() {
  for (auto& [i, f] : in_flight_)
    if (f.deferred && State(f.ministage).ShardArrived()) MOTLEY_RETURN_IF_ERROR(StartGather(i, f));
  return Status::Ok();
}

Status Executor::StepRun::Complete(int i) {
  auto it = in_flight_.find(i);
  if (it == in_flight_.end()) return Status::Ok();
  if (it->second.deferred) MOTLEY_RETURN_IF_ERROR(StartGather(i, it->second));
  InFlight f = std::move(it->second);
  in_flight_.erase(it);
  const auto t = Clock::now();
  MOTLEY_RETURN_IF_ERROR(f.transfer.Wait());
  SleepSeconds(f.ready_s - Since(start_));  // an emulated link is slower than this machine's
  {
    torch::NoGradGuard no_grad;
    if (f.then) f.then();
  }
  report_.comm_s += Since(t);
  if (ex_.config_.record_trace) Trace(i, f.start_s);
  return Status::Ok();
}

}  // namespace motley
