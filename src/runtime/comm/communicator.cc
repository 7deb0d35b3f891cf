#include "runtime/comm/communicator.h"

#include <cstdlib>

#include "core/net.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <numeric>

#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

// Debian's libtorch comes with Gloo's headers (libgloo-dev); PyTorch's wheels do not.
#if __has_include(<gloo/algorithm.h>)
#define MOTLEY_HAVE_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#else
#define MOTLEY_HAVE_GLOO 0
#endif

#include "core/check.h"
#include "core/exit_codes.h"
#include "core/message_tags.h"
#include "runtime/comm/failure_reports.h"

namespace motley {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds Ms(double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); }

c10::intrusive_ptr<c10d::Store> ConnectStore(const Rendezvous& rv, bool server, double timeout_s) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(rv.master_port);
  o.isServer = server;
  o.numWorkers = rv.world_size;
  o.waitWorkers = false;
  o.timeout = Ms(timeout_s);
  return c10::make_intrusive<c10d::TCPStore>(rv.master_addr, o);
}

c10::intrusive_ptr<CommBackend> MakeGloo(const c10::intrusive_ptr<c10d::Store>& store,
                                         const std::string& prefix, int rank, int size, const Rendezvous& rv,
                                         double timeout_s) {
#if !MOTLEY_HAVE_GLOO
  (void)store, (void)prefix, (void)rank, (void)size, (void)rv, (void)timeout_s;
  return {};
#else
  auto opts = c10d::ProcessGroupGloo::Options::create();
  // Loopback for single-host runs. Across hosts: GLOO_SOCKET_IFNAME's interface when set (as in
  // PyTorch), else the address this host reaches the rendezvous from — the one its peers can reach
  // (a hostname may resolve to loopback, as on many cloud images).
  const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
  const std::string toward = LocalAddressToward(rv.master_addr);
  opts->devices.push_back(rv.master_addr == "127.0.0.1" || rv.master_addr == "localhost"
                              ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                          : interface != nullptr && *interface != '\0'
                              ? c10d::ProcessGroupGloo::createDeviceForInterface(interface)
                          : !toward.empty() ? c10d::ProcessGroupGloo::createDeviceForHostname(toward)
                                            : c10d::ProcessGroupGloo::createDefaultDevice());
  opts->timeout = Ms(timeout_s);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>(prefix, store),
                                                     rank, size, opts);
#endif
}

std::string HeartbeatKey(int rank) { return fmt::format("motley/heartbeat/{}", rank); }
std::string DoneKey(int rank) { return fmt::format("motley/done/{}", rank); }

// The first failure reported by a rank `skip` does not take (tolerated: a lost island's), as "rank R
// failed first: its error" ("" if none yet); each skipped one's rank and error go to `skipped`.
std::string ReportedFailure(c10d::Store& store, const std::function<bool(int)>& skip = {},
                            const std::function<void(int, const std::string&)>& skipped = {}) {
  const int64_t n = store.add(FailuresKey(), 0);
  for (int64_t i = 1; i <= n; ++i) {
    if (!store.check({FailureKey(i)})) return "";
    const std::vector<uint8_t> v = store.get(FailureKey(i));
    std::string text(v.begin(), v.end());
    int rank = -1;
    if (std::sscanf(text.c_str(), "rank %d failed first", &rank) == 1 && skip && skip(rank)) {
      if (skipped) skipped(rank, text.substr(std::min(text.size(), text.find(": ") + 2)));
      continue;
    }
    return text;
  }
  return "";
}

}  // namespace

PendingTransfer::PendingTransfer(c10::intrusive_ptr<c10d::Work> work, std::string what, Communicator* comm,
                                 std::function<void()> then)
    : what_(std::move(what)), comm_(comm), then_(std::move(then)) {
  works_.push_back(std::move(work));
}

PendingTransfer::PendingTransfer(std::vector<c10::intrusive_ptr<c10d::Work>> works, std::string what,
                                 Communicator* comm, std::function<void()> then)
    : works_(std::move(works)), what_(std::move(what)), comm_(comm), then_(std::move(then)) {}

bool PendingTransfer::Done() const {
  for (const auto& w : works_)
    if (!w->isCompleted()) return false;
  return true;
}

Status PendingTransfer::Wait() {
  if (works_.empty()) return Status::Ok();  // done already, or nothing to wait for
  try {
    for (const auto& w : works_) w->wait();
    works_.clear();
    if (then_) then_();
    return Status::Ok();
  } catch (const std::exception& e) {
    works_.clear();
    return comm_->Failed(what_, e);
  }
}

Result<std::unique_ptr<Communicator>> Communicator::Connect(const Rendezvous& rv, const CommConfig& config) {
  std::unique_ptr<Communicator> c(new Communicator());
  c->rv_ = rv;
  c->config_ = config;
  try {
    c->store_ = ConnectStore(rv, rv.hosts_store, config.connect_timeout_s);
    // Wait until every rank has arrived, so that a missing one is reported by name.
    c->store_->add(fmt::format("motley/arrived/{}", rv.rank), 1);
    const auto deadline = Clock::now() + Ms(config.connect_timeout_s);
    for (int r = 0; r < rv.world_size; ++r) {
      while (c->store_->add(fmt::format("motley/arrived/{}", r), 0) == 0) {
        if (Clock::now() > deadline)
          return Status::IoError(fmt::format(
              "rank {}: rank {} did not join the rendezvous at {}:{} within {:.0f} s; "
              "check that all {} ranks were started with the same MASTER_ADDR/PORT",
              rv.rank, r, rv.master_addr, rv.master_port, config.connect_timeout_s, rv.world_size));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    c->world_ = std::make_unique<CommGroup>();
    for (int r = 0; r < rv.world_size; ++r) c->world_->ranks.push_back(r);
    c->world_->index = rv.rank;
    c->world_->name = "world";
    if (Status s = c->MakeProcessGroups(*c->world_, "motley/group/world"); !s.ok()) return s;
    if (config.heartbeat_timeout_s > 0 && rv.world_size > 1) {
      c->watch_store_ = ConnectStore(rv, false, config.connect_timeout_s);
      c->watchdog_ = std::thread([p = c.get()] { p->Watch(); });
    }
  } catch (const std::exception& e) {
    return Status::IoError(fmt::format(
        "rank {}: cannot connect to the rendezvous at {}:{}: {}{}", rv.rank, rv.master_addr, rv.master_port,
        std::string(e.what()).substr(0, 300),
        rv.source == std::string("torchrun / motley launch")
            ? ""
            : fmt::format(
                  "; under {} the store runs on the rank with local rank 0 on MASTER_ADDR's host: set "
                  "MASTER_ADDR to an address of a host the ranks run on",
                  rv.source)));
  }
  return c;
}

Result<std::unique_ptr<Communicator>> Communicator::Within(const std::vector<int>& ranks,
                                                           const std::string& name) {
  std::unique_ptr<Communicator> c(new Communicator());
  c->outer_ = this;
  c->config_ = config_;
  c->config_.heartbeat_timeout_s = 0;  // this world's watchdog watches every rank already
  c->rv_ = rv_;
  c->rv_.world_size = static_cast<int>(ranks.size());
  c->rv_.hosts_store = false;
  c->rv_.rank = -1;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == rank()) c->rv_.rank = static_cast<int>(i);
  MOTLEY_CHECK_MSG(c->rv_.rank >= 0, fmt::format("rank {} is not a member of {}", rank(), name));
  c->store_ = c10::make_intrusive<c10d::PrefixStore>("motley/within/" + name, store_);
  c->world_ = std::make_unique<CommGroup>();
  c->world_->ranks.resize(ranks.size());
  std::iota(c->world_->ranks.begin(), c->world_->ranks.end(), 0);
  c->world_->index = c->rv_.rank;
  c->world_->name = name;
  MOTLEY_RETURN_IF_ERROR(c->MakeProcessGroups(*c->world_, "motley/group/world"));
  return c;
}

Communicator::~Communicator() {
  if (outer_ != nullptr) return;  // the outer world's store and watchdog
  try {
    if (store_) {
      store_->add(DoneKey(rv_.rank), 1);
      // The rank hosting the store stays until every live rank has finished, so that the others'
      // watchdogs do not take its exit for a crash. A rank whose heartbeat stood still for three
      // intervals is dead or hung: not waited for.
      const auto patience = Ms(3 * config_.heartbeat_interval_s + 0.5);
      for (int r = 0; rv_.hosts_store && r < rv_.world_size;) {
        int64_t beat = store_->add(HeartbeatKey(r), 0);
        auto since = Clock::now();
        while (store_->add(DoneKey(r), 0) == 0) {
          const int64_t now_beat = store_->add(HeartbeatKey(r), 0);
          if (now_beat != beat) {
            beat = now_beat;
            since = Clock::now();
          } else if (Clock::now() - since > patience) {
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        ++r;
      }
    }
  } catch (const std::exception&) {
  }
  stop_ = true;
  if (watchdog_.joinable()) watchdog_.join();
}

void Communicator::Watch() {
  std::map<int, std::pair<int64_t, Clock::time_point>> seen;  // rank -> (last beat, when it changed)
  const auto start = Clock::now();
  for (int r = 0; r < rv_.world_size; ++r) seen[r] = {-1, start};
  while (!stop_) {
    try {
      watch_store_->add(HeartbeatKey(rv_.rank), 1);
      // Another rank's report: this rank's own may land between the check of reported_ and the
      // read (its main thread reporting now), and is this rank's to end by itself.
      if (const std::string failed = reported_ ? ""
                                               : ReportedFailure(
                                                     *watch_store_, [this](int r) { return Tolerated(r); },
                                                     [this](int r, const std::string& why) { Lose(r, why); });
          !failed.empty() && !failed.starts_with(fmt::format("rank {} failed first", rv_.rank))) {
        fmt::print(stderr, "motley: rank {}: {}; exiting\n", rv_.rank, failed);
        std::fflush(stderr);
        // The rank hosting the store keeps it a little longer, so that the others read the report
        // too (gone with it, they would blame the store, and the launcher the wrong rank).
        if (rv_.hosts_store) std::this_thread::sleep_for(Ms(2 * config_.heartbeat_interval_s + 0.5));
        std::_Exit(kExitPeerFailed);  // the launcher blames the rank that failed
      }
      for (int r = 0; r < rv_.world_size; ++r) {
        if (r == rv_.rank || watch_store_->add(DoneKey(r), 0) > 0) continue;
        const int64_t beat = watch_store_->add(HeartbeatKey(r), 0);
        auto& [last, when] = seen[r];
        if (beat != last) {
          last = beat;
          when = Clock::now();
        } else if (std::chrono::duration<double>(Clock::now() - when).count() > config_.heartbeat_timeout_s) {
          if (Tolerated(r)) {
            Lose(r, fmt::format("no heartbeat for {:.0f} s", config_.heartbeat_timeout_s));
            continue;
          }
          fmt::print(
              stderr,
              "motley: rank {}: rank {} stopped responding (no heartbeat for {:.0f} s: it crashed, was "
              "killed or hangs); exiting\n",
              rv_.rank, r, config_.heartbeat_timeout_s);
          std::fflush(stderr);
          std::_Exit(kExitPeerFailed);
        }
      }
    } catch (const std::exception& e) {
      if (stop_) return;
      fmt::print(stderr,
                 "motley: rank {}: {} (the rendezvous store at {}:{}) is unreachable: it crashed or was "
                 "killed; exiting\n",
                 rv_.rank, rv_.store_by_launcher ? "the supervising motley train" : "the launcher's rank 0",
                 rv_.master_addr, rv_.master_port);
      std::fflush(stderr);
      std::_Exit(kExitPeerFailed);
    }
    for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(Ms(config_.heartbeat_interval_s / 10));
  }
}

void Communicator::ReportFailure(const std::string& why) {
  if (outer_ != nullptr) return outer_->ReportFailure(why);
  if (!store_ || rv_.world_size == 1) return;
  try {
    // The error without its own "rank R: " (the report names the rank).
    std::string error = why.substr(0, 2000);
    if (const std::string own = fmt::format("rank {}: ", rv_.rank); error.rfind(own, 0) == 0)
      error = error.substr(own.size());
    const std::string text = FailureText(rv_.rank, error);
    reported_ = true;  // this rank's watchdog leaves it to end by itself
    const int64_t n = store_->add(FailuresKey(), 1);
    store_->set(FailureKey(n), std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const std::exception&) {
  }
}

bool Communicator::AnotherRankFailedFirst() {
  if (outer_ != nullptr) return outer_->AnotherRankFailedFirst();
  if (!store_ || rv_.world_size == 1) return false;
  try {
    const std::string failed = ReportedFailure(*store_, [this](int r) { return Tolerated(r); });
    return !failed.empty() && !failed.starts_with(fmt::format("rank {} failed first", rv_.rank));
  } catch (const std::exception&) {
    return false;
  }
}

std::string Communicator::DiagnoseFailure() {
  if (outer_ != nullptr) return outer_->DiagnoseFailure();
  if (!store_ || rv_.world_size == 1) return "no other rank";
  try {
    if (std::string failed = ReportedFailure(*store_); !failed.empty()) return failed;
    std::map<int, int64_t> before;
    for (int r = 0; r < rv_.world_size; ++r) before[r] = store_->add(HeartbeatKey(r), 0);
    std::this_thread::sleep_for(
        Ms(std::min(config_.heartbeat_timeout_s, 3 * config_.heartbeat_interval_s + 0.5)));
    std::vector<int> stopped;
    for (int r = 0; r < rv_.world_size; ++r)
      if (r != rv_.rank && store_->add(DoneKey(r), 0) == 0 && store_->add(HeartbeatKey(r), 0) == before[r])
        stopped.push_back(r);
    if (stopped.empty()) return "every rank still beats: a network problem or a mismatched schedule";
    return fmt::format("rank(s) {} stopped responding", fmt::join(stopped, ", "));
  } catch (const std::exception&) {
    return "the launcher's rank 0 (the rendezvous store) is unreachable";
  }
}

bool Communicator::Tolerated(int rank) {
  std::lock_guard lock(watch_mutex_);
  return tolerated_.count(rank) > 0;
}

void Communicator::Lose(int rank, const std::string& why) {
  std::lock_guard lock(watch_mutex_);
  if (!lost_.insert(rank).second) return;
  fmt::print(stderr, "motley: rank {}: rank {} is lost ({}); going on without its island\n", rv_.rank, rank,
             why);
  std::fflush(stderr);
}

void Communicator::Tolerate(const std::vector<int>& ranks) {
  if (outer_ != nullptr) return outer_->Tolerate(ranks);
  std::lock_guard lock(watch_mutex_);
  tolerated_.insert(ranks.begin(), ranks.end());
}

Result<std::vector<int>> Communicator::ArrivedOrLost(const std::vector<int>& ranks, const std::string& key) {
  const auto deadline = Clock::now() + Ms(config_.timeout_s);
  std::vector<int> waiting = ranks, lost;
  try {
    while (!waiting.empty()) {
      std::vector<int> still;
      for (const int r : waiting) {
        if (store_->check({fmt::format("motley/value/{}/{}", key, r)})) continue;
        std::lock_guard lock(watch_mutex_);
        (lost_.count(r) > 0 ? lost : still).push_back(r);
      }
      waiting = std::move(still);
      if (waiting.empty()) break;
      if (Clock::now() > deadline)
        return Status::IoError(
            fmt::format("rank {}: rank(s) {} neither reached {} nor were lost within {:.0f} s", rank(),
                        fmt::join(waiting, ", "), key, config_.timeout_s));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } catch (const std::exception& e) {
    return Status::IoError(fmt::format("rank {}: waiting for the ranks at {}: {} ({})", rank(), key,
                                       std::string(e.what()).substr(0, 200), DiagnoseFailure()));
  }
  std::sort(lost.begin(), lost.end());
  return lost;
}

Status Communicator::SetValue(const std::string& key, const std::string& value) {
  try {
    store_->set("motley/value/" + key, std::vector<uint8_t>(value.begin(), value.end()));
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::IoError(fmt::format("rank {}: cannot write {} to the rendezvous store: {}", rank(), key,
                                       std::string(e.what()).substr(0, 200)));
  }
}

void Communicator::DeleteValue(const std::string& key) {
  try {
    store_->deleteKey("motley/value/" + key);
  } catch (const std::exception&) {
  }
}

Result<std::string> Communicator::WaitValue(const std::string& key) {
  try {
    store_->wait({"motley/value/" + key}, Ms(config_.timeout_s));
    const std::vector<uint8_t> v = store_->get("motley/value/" + key);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    return Status::IoError(fmt::format("rank {}: no {} in the rendezvous store within {:.0f} s: {} ({})",
                                       rank(), key, config_.timeout_s, std::string(e.what()).substr(0, 200),
                                       DiagnoseFailure()));
  }
}

Result<std::optional<std::string>> Communicator::ValueIfSet(const std::string& key) {
  try {
    if (!store_->check({"motley/value/" + key})) return std::optional<std::string>();
    const std::vector<uint8_t> v = store_->get("motley/value/" + key);
    return std::optional<std::string>(std::string(v.begin(), v.end()));
  } catch (const std::exception& e) {
    return Status::IoError(fmt::format("rank {}: cannot read {} from the rendezvous store: {}", rank(), key,
                                       std::string(e.what()).substr(0, 200)));
  }
}

Result<std::string> Communicator::SetValueOnce(const std::string& key, const std::string& value) {
  try {
    const std::vector<uint8_t> there =
        store_->compareSet("motley/value/" + key, {}, std::vector<uint8_t>(value.begin(), value.end()));
    return std::string(there.begin(), there.end());
  } catch (const std::exception& e) {
    return Status::IoError(fmt::format("rank {}: cannot write {} to the rendezvous store: {}", rank(), key,
                                       std::string(e.what()).substr(0, 200)));
  }
}

bool Communicator::Lost(int rank) {
  if (outer_ != nullptr) return outer_->Lost(rank);
  std::lock_guard lock(watch_mutex_);
  return lost_.count(rank) > 0;
}

Result<CommGroup*> Communicator::NewGroup(std::vector<int> ranks) {
  auto g = std::make_unique<CommGroup>();
  g->name = fmt::format("g{}[{}]", groups_.size(), fmt::join(ranks, ","));
  g->ranks = std::move(ranks);
  for (int i = 0; i < g->size(); ++i) {
    if (g->ranks[i] < 0 || g->ranks[i] >= world_size())
      return Status::InvalidArgument(
          fmt::format("group {}: rank {} outside the world of {}", g->name, g->ranks[i], world_size()));
    if (g->ranks[i] == rank()) g->index = i;
  }
  if (g->index >= 0) MOTLEY_RETURN_IF_ERROR(MakeProcessGroups(*g, "motley/group/" + g->name));
  groups_.push_back(std::move(g));
  return groups_.back().get();
}

Status Communicator::MakeProcessGroups(CommGroup& g, const std::string& prefix) {
  try {
    g.pg = MakeGloo(store_, prefix, g.index, g.size(), rv_, config_.timeout_s);
  } catch (const std::exception& e) {
    return Status::IoError(fmt::format("rank {}: cannot build group {}: {} ({})", rank(), g.name,
                                       std::string(e.what()).substr(0, 200), DiagnoseFailure()));
  }
  if (!g.pg && !config_.gpu && g.size() > 1)
    return Status::InvalidArgument(fmt::format(
        "rank {}: this build of motley has no Gloo (it was built against PyTorch's wheel, which ships no "
        "Gloo "
        "headers), so CPU ranks cannot communicate; run CPU and emulated clusters with the CPU build "
        "(scripts/setup.sh), or give each rank a GPU (--device cuda)",
        rank()));
  if (config_.gpu) {
    gpu_ = torch::Device(c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getDevice());
    auto nccl = MakeNcclBackend(c10::make_intrusive<c10d::PrefixStore>(prefix + "/nccl", store_), g.index,
                                g.size(), config_.timeout_s);
    if (!nccl.ok()) return nccl.status();
    g.gpu_pg = *nccl;
  }
  return Status::Ok();
}

Result<CommBackend*> Communicator::For(CommGroup& g, const torch::Tensor& t) {
  if (!t.is_cuda()) {
    if (!g.pg)
      return Status::Internal(
          fmt::format("rank {}: a CPU tensor for group {}, which has no Gloo process group", rank(), g.name));
    return g.pg.get();
  }
  if (!g.gpu_pg)
    return Status::Internal(
        fmt::format("rank {}: a CUDA tensor for group {}, which has no NCCL process group "
                    "(the communicator was connected without CommConfig::gpu)",
                    rank(), g.name));
  return g.gpu_pg.get();
}

torch::Tensor Communicator::Stage(CommGroup& g, const torch::Tensor& t, bool result,
                                  std::function<void()>* back) {
  if (t.is_cuda() || g.pg || !g.gpu_pg) return t;
  torch::Tensor on_gpu = t.to(gpu_);
  if (result) {
    torch::Tensor host = t;
    auto previous = std::move(*back);
    *back = [host, on_gpu, previous]() mutable {
      host.copy_(on_gpu);  // waits for the GPU
      if (previous) previous();
    };
  }
  return on_gpu;
}

Status Communicator::Run(const std::string& what,
                         const std::function<c10::intrusive_ptr<c10d::Work>()>& start) {
  try {
    start()->wait();
    return Status::Ok();
  } catch (const std::exception& e) {
    return Failed(what, e);
  }
}

Status Communicator::Failed(const std::string& what, const std::exception& e) {
  return Status::IoError(fmt::format("rank {}: {} failed: {} ({})", rank(), what,
                                     std::string(e.what()).substr(0, 200), DiagnoseFailure()));
}

Result<Communicator::Route> Communicator::RouteFor(const torch::Tensor& t, int peer, bool sending) {
  if (peer < 0 || peer >= world_size() || peer == rank())
    return Status::Internal(
        fmt::format("rank {}: a transfer with rank {} (world of {})", rank(), peer, world_size()));
  if (!t.is_cuda()) {
    MOTLEY_ASSIGN_OR_RETURN(CommBackend * pg, For(*world_, t));
    return Route{pg, peer, 0};  // one tag: matched in order, as on NCCL
  }
  const int from = sending ? rank() : peer, to = sending ? peer : rank();
  std::lock_guard<std::mutex> lock(links_mutex_);
  auto it = links_.find({from, to});
  if (it == links_.end()) {
    auto nccl = MakeNcclBackend(
        c10::make_intrusive<c10d::PrefixStore>(fmt::format("motley/link/{}-{}/nccl", from, to), store_),
        sending ? 0 : 1, 2, config_.timeout_s);
    if (!nccl.ok()) return nccl.status();
    it = links_.emplace(std::make_pair(from, to), *nccl).first;
  }
  return Route{it->second.get(), sending ? 1 : 0, 0};
}

Result<PendingTransfer> Communicator::Send(const torch::Tensor& t, int peer, int64_t tag) {
  MOTLEY_CHECK(t.is_contiguous());
  std::vector<torch::Tensor> v = {Stage(*world_, t, false, nullptr)};
  const std::string what =
      fmt::format("send of {} elements to rank {} ({})", t.numel(), peer, DescribeTag(tag));
  MOTLEY_ASSIGN_OR_RETURN(Route route, RouteFor(v[0], peer, true));
  try {
    return PendingTransfer(route.pg->send(v, route.peer, route.tag), what, this);
  } catch (const std::exception& e) {
    return Status::IoError(
        fmt::format("rank {}: {} failed: {}", rank(), what, std::string(e.what()).substr(0, 200)));
  }
}

Result<PendingTransfer> Communicator::Recv(torch::Tensor& t, int peer, int64_t tag) {
  MOTLEY_CHECK(t.is_contiguous());
  std::function<void()> back;
  std::vector<torch::Tensor> v = {Stage(*world_, t, true, &back)};
  const std::string what =
      fmt::format("receive of {} elements from rank {} ({})", t.numel(), peer, DescribeTag(tag));
  MOTLEY_ASSIGN_OR_RETURN(Route route, RouteFor(v[0], peer, false));
  try {
    return PendingTransfer(route.pg->recv(v, route.peer, route.tag), what, this, back);
  } catch (const std::exception& e) {
    return Status::IoError(
        fmt::format("rank {}: {} failed: {}", rank(), what, std::string(e.what()).substr(0, 200)));
  }
}

}  // namespace motley
