#include "supervise/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/net.h"
#include "supervise/rank_exits.h"

namespace motley {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_interrupted = 0;
void OnSignal(int sig) { g_interrupted = sig; }

struct Rank {
  pid_t pid = -1;
  int out_fd = -1;             // read end of the rank's stdout+stderr
  std::string pending;         // a partial line
  std::optional<int> status;   // waitpid status once it exited
  bool stopped_by_us = false;  // it exited after the launcher began stopping the ranks
};

void PrintLines(int rank, std::string& pending, bool flush_all) {
  size_t start = 0;
  for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
    fmt::print("[rank {}] {}\n", rank, std::string_view(pending).substr(start, nl - start));
  pending.erase(0, start);
  if (flush_all && !pending.empty()) {
    fmt::print("[rank {}] {}\n", rank, pending);
    pending.clear();
  }
  std::fflush(stdout);
}

}  // namespace

namespace {

// In the forked child: rank r's environment (torchrun's variables), its output into `out_fd`, and
// the command.
[[noreturn]] void ExecRank(const LaunchOptions& o, int r, int port, int out_fd, pid_t launcher) {
  // A rank outlives no launcher: when it dies (kill -9 included), the kernel sends the rank
  // SIGTERM; a launcher already gone before this line means the rank never starts.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != launcher) ::_exit(1);
  ::setpgid(0, 0);  // its own process group: stopping the rank stops what it started too
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(out_fd, STDERR_FILENO);
  ::close(out_fd);
  if (o.stop_on_stdin) {  // the agent's stdin is the launcher's line to it, not the ranks'
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
  }
  ::setenv("RANK", std::to_string(o.rank_offset + r).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);  // one host's ranks: this one's, or an agent's
  ::setenv("WORLD_SIZE", std::to_string(o.world_size > 0 ? o.world_size : o.nproc).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
  ::setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  // Like torchrun: ranks sharing a machine get one math-library thread each unless told
  // otherwise, or N ranks x all-cores threads fight over the cores.
  if (o.nproc > 1) {
    ::setenv("OMP_NUM_THREADS", "1", 0);
    ::setenv("OPENBLAS_NUM_THREADS", "1", 0);
  }
  std::vector<char*> argv;
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  fmt::print(stderr, "motley launch: cannot run {}: {}\n", o.command[0], std::strerror(errno));
  std::fflush(stderr);
  ::_exit(127);
}

// Every rank's output, line by line, prefixed with its rank (`first_rank` + its index); waits up to
// 100 ms for some. Returns whether any rank's output is still open.
bool PumpOutput(std::vector<Rank>& ranks, int first_rank) {
  std::vector<pollfd> fds;
  std::vector<int> who;
  for (size_t r = 0; r < ranks.size(); ++r)
    if (ranks[r].out_fd >= 0) {
      fds.push_back({ranks[r].out_fd, POLLIN, 0});
      who.push_back(static_cast<int>(r));
    }
  if (!fds.empty()) ::poll(fds.data(), fds.size(), 100);
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    Rank& rk = ranks[who[i]];
    char buf[4096];
    const ssize_t n = ::read(rk.out_fd, buf, sizeof buf);
    if (n > 0) {
      rk.pending.append(buf, static_cast<size_t>(n));
      PrintLines(first_rank + who[i], rk.pending, false);
    } else if (n == 0 || (n < 0 && errno != EINTR)) {
      PrintLines(first_rank + who[i], rk.pending, true);
      ::close(rk.out_fd);
      rk.out_fd = -1;
    }
  }
  if (fds.empty()) ::usleep(50'000);
  return !fds.empty();
}

// An agent's line from its launcher: whether it says to stop the ranks ("stop", or stdin closed:
// the launcher is gone). Never waits.
bool LauncherSaysStop(std::string& pending) {
  pollfd in{STDIN_FILENO, POLLIN, 0};
  if (::poll(&in, 1, 0) <= 0 || !(in.revents & (POLLIN | POLLHUP | POLLERR))) return false;
  char buf[256];
  const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
  if (n <= 0) return n == 0 || errno != EINTR;
  pending.append(buf, static_cast<size_t>(n));
  return pending.find("stop") != std::string::npos;
}

// Live islands: whether failed rank `r` falls with its island only (LaunchOptions::falls_with), whose
// ranks still running are stopped; `fell` marks them.
bool FallsAlone(const LaunchOptions& o, int port, int r, const std::vector<Rank>& ranks,
                std::vector<bool>& fell) {
  if (!o.falls_with) return false;
  const std::vector<int> with = o.falls_with(r);
  if (std::find(with.begin(), with.end(), r) == with.end()) return false;
  const std::string how = DescribeExit(*ranks[static_cast<size_t>(r)].status);
  fmt::print(stderr, "motley launch: rank {} {}; ranks {} stop, the others go on\n", r, how,
             fmt::join(with, ", "));
  std::vector<int> fallen_now;
  for (const int k : with) {
    if (k < 0 || k >= o.nproc || fell[static_cast<size_t>(k)]) continue;
    fell[static_cast<size_t>(k)] = true;
    fallen_now.push_back(k);
    if (o.fallen != nullptr) o.fallen->push_back(k);
    const Rank& rk = ranks[static_cast<size_t>(k)];
    if (!rk.status && ::kill(-rk.pid, SIGKILL) != 0) ::kill(rk.pid, SIGKILL);
  }
  if (o.on_fallen && !fallen_now.empty())
    o.on_fallen(o.master_addr, port, fallen_now, fmt::format("its launcher saw rank {} end: it {}", r, how));
  return true;
}

}  // namespace

int Launch(const LaunchOptions& options) {
  if (!options.hosts.empty()) return LaunchOnHosts(options);
  LaunchOptions o = options;
  if (o.master_addr.empty()) o.master_addr = "127.0.0.1";
  if (o.failed_rank != nullptr) *o.failed_rank = -1;
  const int port = o.master_port > 0 ? o.master_port : FreeTcpPort();
  std::vector<Rank> ranks(static_cast<size_t>(o.nproc));
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  if (o.agent) {
    ::sigaction(SIGHUP, &sa, nullptr);
    ::signal(SIGPIPE, SIG_IGN);  // a launcher gone: its line closes, and the agent stops its ranks
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t launcher = ::getpid();
  for (int r = 0; r < o.nproc; ++r) {
    int fds[2];
    if (::pipe(fds) != 0) {
      fmt::print(stderr, "motley launch: pipe failed: {}\n", std::strerror(errno));
      return 1;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      ExecRank(o, r, port, fds[1], launcher);
    }
    ::close(fds[1]);
    ranks[r].pid = pid;
    ranks[r].out_fd = fds[0];
  }
  if (!o.agent)
    fmt::print(stderr, "motley launch: {} ranks of '{}' (rendezvous {}:{})\n", o.nproc, o.command[0],
               o.master_addr, port);

  std::vector<bool> fell(static_cast<size_t>(o.nproc), false);  // live islands: LaunchOptions::falls_with
  std::optional<Clock::time_point> failed_at, terminated_at;
  int first_failure = -1;
  std::vector<int> failed_order;  // ranks in the order they failed
  std::string from_launcher;      // an agent's input
  auto signal_all = [&](int sig) {
    for (const Rank& rk : ranks)
      if (!rk.status && ::kill(-rk.pid, sig) != 0) ::kill(rk.pid, sig);
  };
  std::optional<Clock::time_point> all_ended_at;  // then their output gets 2 s to close
  for (;;) {
    const bool output_open = PumpOutput(ranks, o.rank_offset);
    // Exits.
    bool all_done = true;
    for (int r = 0; r < o.nproc; ++r) {
      Rank& rk = ranks[r];
      if (rk.status) continue;
      int status = 0;
      if (::waitpid(rk.pid, &status, WNOHANG) != rk.pid) {
        all_done = false;
        continue;
      }
      rk.status = status;
      rk.stopped_by_us = terminated_at.has_value();
      if (o.agent) {
        fmt::print("{}\n", AgentReportLine(o.rank_offset + r, status));
        std::fflush(stdout);
      }
      if (!ExitFailed(status) || fell[static_cast<size_t>(r)]) continue;
      if (first_failure < 0 && !terminated_at && FallsAlone(o, port, r, ranks, fell)) continue;
      failed_order.push_back(r);
      if (first_failure < 0) {
        first_failure = r;
        failed_at = Clock::now();
        if (!o.agent)
          fmt::print(stderr,
                     "motley launch: rank {} {}; waiting up to {:.0f} s for the other ranks to stop\n", r,
                     DescribeExit(status), o.stop_grace_s);
      } else if (!o.agent) {
        fmt::print(stderr, "motley launch: rank {} {}\n", r, DescribeExit(status));
      }
    }
    if (all_done && std::all_of(ranks.begin(), ranks.end(), [](const Rank& rk) { return rk.out_fd < 0; }))
      break;
    if (all_done && !output_open) break;
    if (all_done && !all_ended_at) all_ended_at = Clock::now();
    if (all_ended_at && Clock::now() - *all_ended_at > std::chrono::seconds(2))
      break;  // held by their children
    // Stopping: interrupted, told to by the launcher (an agent), or the others' grace is over.
    if ((g_interrupted || (o.stop_on_stdin && LauncherSaysStop(from_launcher))) && !terminated_at) {
      if (!o.agent) fmt::print(stderr, "motley launch: interrupted; stopping every rank\n");
      signal_all(SIGTERM);
      terminated_at = Clock::now();
      if (first_failure < 0) first_failure = o.nproc;  // the run failed, though no rank did
    }
    const auto now = Clock::now();
    // An agent leaves the others' grace to the launcher, which sees every host's ranks.
    if (failed_at && !terminated_at && !o.agent &&
        std::chrono::duration<double>(now - *failed_at).count() > o.stop_grace_s) {
      fmt::print(stderr, "motley launch: stopping the ranks still running after rank {} failed\n",
                 first_failure);
      signal_all(SIGTERM);
      terminated_at = now;
    }
    if (terminated_at && std::chrono::duration<double>(now - *terminated_at).count() > o.kill_grace_s)
      signal_all(SIGKILL);
  }
  if (first_failure < 0) return 0;
  if (o.agent) return 1;
  std::vector<std::optional<int>> status;
  std::vector<bool> stopped;
  for (const Rank& rk : ranks) {
    status.push_back(rk.status);
    stopped.push_back(rk.stopped_by_us);
  }
  const int blame = BlameRank(status, stopped, failed_order, first_failure);
  if (blame < o.nproc)
    fmt::print(stderr, "motley launch: failed: rank {} {}\n", blame, DescribeExit(*ranks[blame].status));
  // An interrupted run blames no rank (nothing to restart without).
  if (o.failed_rank != nullptr) *o.failed_rank = blame < o.nproc && !g_interrupted ? blame : -1;
  return 1;
}

}  // namespace motley
