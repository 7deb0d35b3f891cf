// motley comm check [--size-mb S] [--iterations N] [--device auto|cpu|cuda]: run under a launcher (motley
// launch, torchrun
// --no-python, srun, mpirun); every rank checks collectives and transfers for correct values and
// measures all-reduce bandwidth.
#include <signal.h>
#include <cstdint>

#include <chrono>

#include <fmt/format.h>

#include "cli/args.h"
#include "cli/command.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/cuda_device.h"
#include "runtime/device/rank_device.h"

namespace motley::cli {
namespace {

Status Check(bool ok, const std::string& what) {
  return ok ? Status::Ok() : Status::Internal(fmt::format("{} gave wrong values", what));
}

Status CheckCollectives(Communicator& c, const torch::TensorOptions& on) {
  const int r = c.rank(), w = c.world_size();
  torch::Tensor sum = torch::full({8}, r + 1.0f, on);
  MOTLEY_RETURN_IF_ERROR(c.AllReduceSum(c.world(), sum));
  MOTLEY_RETURN_IF_ERROR(Check(torch::equal(sum.cpu(), torch::full({8}, w * (w + 1) / 2.0f)), "all-reduce"));
  torch::Tensor gathered = torch::empty({2 * w}, on);
  MOTLEY_RETURN_IF_ERROR(c.AllGather(c.world(), torch::full({2}, static_cast<float>(r), on), gathered));
  MOTLEY_RETURN_IF_ERROR(Check(
      torch::equal(gathered.cpu(), torch::arange(w, torch::kFloat32).repeat_interleave(2)), "all-gather"));
  torch::Tensor in = torch::arange(2 * w, on) + r, out = torch::empty({2}, on);
  MOTLEY_RETURN_IF_ERROR(c.ReduceScatterSum(c.world(), in, out));
  const float base = w * (w - 1) / 2.0f;
  MOTLEY_RETURN_IF_ERROR(
      Check(torch::equal(out.cpu(), torch::tensor({w * 2.0f * r + base, w * (2.0f * r + 1) + base})),
            "reduce-scatter"));
  if (w == 1) return Status::Ok();  // no peer for the ring
  torch::Tensor mine = torch::full({16}, static_cast<float>(r), on), got = torch::empty({16}, on);
  MOTLEY_ASSIGN_OR_RETURN(PendingTransfer send, c.Send(mine, (r + 1) % w, 1));
  MOTLEY_ASSIGN_OR_RETURN(PendingTransfer recv, c.Recv(got, (r + w - 1) % w, 1));
  MOTLEY_RETURN_IF_ERROR(send.Wait());
  MOTLEY_RETURN_IF_ERROR(recv.Wait());
  return Check(torch::equal(got.cpu(), torch::full({16}, static_cast<float>((r + w - 1) % w))),
               "send/recv ring");
}

}  // namespace

int RunComm(const std::vector<std::string>& args) {
  CLI::App app("Check that the ranks of a launch can talk: collectives with known values, then bandwidth.",
               "motley comm");
  app.require_subcommand(1);
  CLI::App* check =
      app.add_subcommand("check", "verify collectives and transfers, measure all-reduce bandwidth");
  double size_mb = 4, timeout_s = 120, die_after_s = 0;
  int iterations = 5, die_rank = -1;
  std::string device_name = "auto", fault = "kill";
  check
      ->add_option("--device", device_name,
                   "auto (each rank its GPU when every rank of the host has one: NCCL), cpu (Gloo) or cuda")
      ->capture_default_str();
  // (What cannot measure is refused: no all-reduce timed, an empty payload, a fault that cannot fire.)
  check->add_option("--size-mb", size_mb, "all-reduce payload for the bandwidth test")
      ->check(Between(0.001, 16384))
      ->capture_default_str();
  check->add_option("--iterations", iterations, "timed all-reduces")
      ->check(Between(1, 1e9))
      ->capture_default_str();
  check->add_option("--timeout", timeout_s, "seconds one operation may take")
      ->check(Between(1, 86400))
      ->capture_default_str();
  check->add_option("--die-rank", die_rank, "fault injection: this rank kills itself (SIGKILL) ...")
      ->check(AtLeast(0));
  check->add_option("--die-after", die_after_s, "... this many seconds into the bandwidth test")
      ->check(AtLeast(0));
  check
      ->add_option("--fault", fault,
                   "... by: kill (SIGKILL), stop (SIGSTOP: it hangs) or error (exits 1 with a message)")
      ->check(CLI::IsMember({"kill", "stop", "error"}))
      ->capture_default_str();
  if (auto rc = ParseArgs(app, args)) return *rc;

  auto fail = [](const Status& s) {
    fmt::print(stderr, "motley comm: {}\n", s.message());
    return kExitFailure;
  };
  Result<Rendezvous> rv = RendezvousFromEnv();
  if (!rv.ok()) return fail(rv.status());
  Result<torch::Device> device = RankDevice(device_name, *rv);
  if (!device.ok()) return fail(device.status());
  SetCurrentDevice(*device);
  CommConfig config;
  config.timeout_s = timeout_s;
  config.gpu = device->is_cuda();
  Result<std::unique_ptr<Communicator>> comm = Communicator::Connect(*rv, config);
  if (!comm.ok()) return fail(comm.status());
  Communicator& c = **comm;
  // From here a failure is reported to the other ranks first, so that they stop at once naming
  // this rank and its error (a rank that merely exits would look finished to them).
  auto fail_here = [&](const Status& s) {
    if (c.AnotherRankFailedFirst()) {  // a consequence of another rank's failure, which the message names
      fail(s);
      return kExitPeerFailed;
    }
    c.ReportFailure(s.message());
    return fail(s);
  };
  if (die_rank >= c.world_size())  // every rank says so: the fault asked for could never fire
    return fail(Status::InvalidArgument(
        fmt::format("--die-rank {}: no such rank — this launch has {} (0..{}); the fault would never fire",
                    die_rank, c.world_size(), c.world_size() - 1)));
  const auto on = torch::TensorOptions().dtype(torch::kFloat32).device(*device);
  if (Status s = CheckCollectives(c, on); !s.ok()) return fail_here(s);

  torch::Tensor payload = torch::ones({static_cast<int64_t>(size_mb * 1e6 / 4)}, on);
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  for (int i = 0; i < iterations; ++i) {
    if (c.rank() == die_rank &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= die_after_s) {
      if (fault == "error")
        return fail_here(Status::Internal(fmt::format("fault injection: rank {} fails", c.rank())));
      ::raise(fault == "stop" ? SIGSTOP : SIGKILL);
    }
    if (Status s = c.AllReduceSum(c.world(), payload); !s.ok()) return fail_here(s);
    if (device->is_cuda()) SynchronizeDevice(*device);  // NCCL's wait holds only the stream
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  if (c.rank() == die_rank)  // the test ended before the fault's time came
    return fail_here(
        Status::InvalidArgument(fmt::format("--die-after {}: the bandwidth test took {:.3f} s, so the fault "
                                            "never fired — give a shorter --die-after or "
                                            "more --iterations",
                                            die_after_s, elapsed)));
  const int w = c.world_size();
  const double bus_gbps = iterations > 0 && elapsed > 0
                              ? 2.0 * (w - 1) / w * payload.numel() * 4 * iterations * 8 / elapsed / 1e9
                              : 0.0;
  fmt::print(
      "rank {}/{} ({}, {}): collectives ok; all-reduce of {:.1f} MB x {}: {:.1f} ms each, {:.2f} Gbit/s "
      "bus\n",
      c.rank(), w, rv->source, device->is_cuda() ? "NCCL on " + device->str() : std::string("Gloo on CPU"),
      size_mb, iterations, iterations > 0 ? 1e3 * elapsed / iterations : 0.0, bus_gbps);
  if (w == 1)
    fmt::print(
        "one rank: nothing crossed a link. To check the ranks of a run, start this under a launcher "
        "(motley launch --nproc N -- motley comm check, torchrun --no-python, srun or mpirun)\n");
  return kExitOk;
}

}  // namespace motley::cli
