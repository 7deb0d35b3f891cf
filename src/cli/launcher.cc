#include "cli/launcher.h"
#include "cli/command.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <algorithm>

#include <fmt/format.h>

#include "core/net.h"

namespace motley::cli {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_interrupted = 0;
void OnSignal(int sig) { g_interrupted = sig; }

struct Rank {
  pid_t pid = -1;
  int out_fd = -1;  // read end of the rank's stdout+stderr
  std::string pending;  // a partial line
  std::optional<int> status;  // waitpid status once it exited
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

std::string Describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

bool Failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

}  // namespace

int Launch(const LaunchOptions& o) {
  if (o.failed_rank != nullptr) *o.failed_rank = -1;
  const int port = o.master_port > 0 ? o.master_port : FreeTcpPort();
  std::vector<Rank> ranks(static_cast<size_t>(o.nproc));
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
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
      // A rank outlives no launcher: when it dies (kill -9 included), the kernel sends the rank
      // SIGTERM; a launcher already gone before this line means the rank never starts.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != launcher) ::_exit(1);
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
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
    ::close(fds[1]);
    ranks[r].pid = pid;
    ranks[r].out_fd = fds[0];
  }
  fmt::print(stderr, "motley launch: {} ranks of '{}' (rendezvous {}:{})\n", o.nproc, o.command[0], o.master_addr,
             port);

  std::optional<Clock::time_point> failed_at, terminated_at;
  int first_failure = -1;
  std::vector<int> failed_order;  // ranks in the order they failed
  auto signal_all = [&](int sig) {
    for (const Rank& rk : ranks)
      if (!rk.status) ::kill(rk.pid, sig);
  };
  for (;;) {
    // Output.
    std::vector<pollfd> fds;
    std::vector<int> who;
    for (int r = 0; r < o.nproc; ++r)
      if (ranks[r].out_fd >= 0) {
        fds.push_back({ranks[r].out_fd, POLLIN, 0});
        who.push_back(r);
      }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 100);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Rank& rk = ranks[who[i]];
      char buf[4096];
      const ssize_t n = ::read(rk.out_fd, buf, sizeof buf);
      if (n > 0) {
        rk.pending.append(buf, static_cast<size_t>(n));
        PrintLines(who[i], rk.pending, false);
      } else if (n == 0 || (n < 0 && errno != EINTR)) {
        PrintLines(who[i], rk.pending, true);
        ::close(rk.out_fd);
        rk.out_fd = -1;
      }
    }
    if (fds.empty()) ::usleep(50'000);
    // Exits.
    bool all_done = true;
    for (int r = 0; r < o.nproc; ++r) {
      Rank& rk = ranks[r];
      if (rk.status) continue;
      int status = 0;
      if (::waitpid(rk.pid, &status, WNOHANG) == rk.pid) {
        rk.status = status;
        rk.stopped_by_us = terminated_at.has_value();
        if (Failed(status)) failed_order.push_back(r);
        if (Failed(status) && first_failure < 0) {
          first_failure = r;
          failed_at = Clock::now();
          fmt::print(stderr, "motley launch: rank {} {}; waiting up to {:.0f} s for the other ranks to stop\n", r,
                     Describe(status), o.stop_grace_s);
        } else if (Failed(status)) {
          fmt::print(stderr, "motley launch: rank {} {}\n", r, Describe(status));
        }
      } else {
        all_done = false;
      }
    }
    if (all_done && std::all_of(ranks.begin(), ranks.end(), [](const Rank& rk) { return rk.out_fd < 0; })) break;
    if (all_done && fds.empty()) break;
    // Stopping.
    if (g_interrupted && !terminated_at) {
      fmt::print(stderr, "motley launch: interrupted; stopping every rank\n");
      signal_all(SIGTERM);
      terminated_at = Clock::now();
      if (first_failure < 0) first_failure = o.nproc;  // the run failed, though no rank did
    }
    const auto now = Clock::now();
    if (failed_at && !terminated_at && std::chrono::duration<double>(now - *failed_at).count() > o.stop_grace_s) {
      fmt::print(stderr, "motley launch: stopping the ranks still running after rank {} failed\n", first_failure);
      signal_all(SIGTERM);
      terminated_at = now;
    }
    if (terminated_at && std::chrono::duration<double>(now - *terminated_at).count() > o.kill_grace_s)
      signal_all(SIGKILL);
  }
  if (first_failure >= 0) {
    // The rank to blame: one killed by a signal the launcher did not send (a rank that died: the
    // others' errors follow from it, whatever they exit with — under load a survivor may give up
    // before it can tell a peer died), else the first to fail of its own accord, not one that
    // stopped because another failed (exit code kExitPeerFailed) — such a rank may exit first.
    int blame = first_failure;
    auto killed = [&](int r) { return WIFSIGNALED(*ranks[r].status) && !ranks[r].stopped_by_us; };
    const auto died = std::find_if(failed_order.begin(), failed_order.end(), killed);
    if (died != failed_order.end()) {
      blame = *died;
    } else {
      for (int r : failed_order) {
        const int st = *ranks[r].status;
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == kExitPeerFailed)) {
          blame = r;
          break;
        }
      }
    }
    if (blame < o.nproc) fmt::print(stderr, "motley launch: failed: rank {} {}\n", blame, Describe(*ranks[blame].status));
    // An interrupted run blames no rank (nothing to restart without).
    if (o.failed_rank != nullptr) *o.failed_rank = blame < o.nproc && !g_interrupted ? blame : -1;
    return 1;
  }
  return 0;
}

}  // namespace motley::cli
