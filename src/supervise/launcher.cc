#include "supervise/launcher.h"
#include "core/exit_codes.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/net.h"

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

std::string Describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

bool Failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

// The words of a remote-start template, split at spaces, with {host} and {index} replaced.
std::vector<std::string> RemoteWords(const std::string& remote, const LaunchHost& host, int index) {
  std::vector<std::string> words;
  size_t begin = 0;
  while (begin < remote.size()) {
    const size_t end = std::min(remote.find(' ', begin), remote.size());
    if (end > begin) {
      std::string w = remote.substr(begin, end - begin);
      for (const auto& [key, value] :
           {std::pair<std::string, std::string>{"{host}", host.name}, {"{index}", std::to_string(index)}})
        for (size_t at; (at = w.find(key)) != std::string::npos;) w.replace(at, key.size(), value);
      words.push_back(std::move(w));
    }
    begin = end + 1;
  }
  return words;
}

}  // namespace

std::string ShellQuote(const std::string& s) {
  if (!s.empty() &&
      s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./=:,+@%") ==
          std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Result<std::vector<LaunchHost>> ParseLaunchHosts(const std::string& text) {
  std::vector<LaunchHost> hosts;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string part = text.substr(begin, end - begin);
    begin = end + 1;
    LaunchHost h;
    const size_t colon = part.rfind(':');
    h.name = colon == std::string::npos ? part : part.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string n = part.substr(colon + 1);
      if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos ||
          std::stoi(n) < 1 || std::stoi(n) > 1024)
        return Status::InvalidArgument(fmt::format(
            "--hosts: \"{}\": the ranks on a host are a number from 1 to 1024 after the colon, as in node1:4",
            part));
      h.nproc = std::stoi(n);
    }
    if (h.name.empty() || h.name.find_first_of(" \t'\"$`\\;&|<>(){}") != std::string::npos)
      return Status::InvalidArgument(fmt::format(
          "--hosts: \"{}\": give each host as NAME or NAME:RANKS, separated by commas (e.g. node1:4,node2:4)",
          part));
    hosts.push_back(h);
  }
  return hosts;
}

std::vector<std::string> RemoteRankArgv(const LaunchOptions& o, int host_index,
                                        const std::vector<std::string>& env, const std::string& working_dir) {
  std::vector<std::string> argv = RemoteWords(o.remote, o.hosts[host_index], host_index);
  std::string line = "cd " + ShellQuote(working_dir) + " && exec env";
  for (const std::string& e : env) line += " " + ShellQuote(e);
  for (const std::string& a : o.command) line += " " + ShellQuote(a);
  argv.push_back(line);
  return argv;
}

namespace {

// Each rank's host and local rank: one host (this machine) without hosts.
struct RankLayout {
  std::vector<int> host_of, local_of;
  std::vector<int> per_host;  // ranks per host
};

RankLayout LayoutRanks(LaunchOptions& o, const LaunchOptions& given) {
  RankLayout l;
  if (o.hosts.empty()) {
    l.per_host = {o.nproc};
  } else {
    for (const LaunchHost& h : o.hosts) l.per_host.push_back(h.nproc);
    o.nproc = 0;
    for (int n : l.per_host) o.nproc += n;
    if (given.master_addr == LaunchOptions().master_addr) o.master_addr = o.hosts[0].name;
  }
  for (size_t h = 0; h < l.per_host.size(); ++h)
    for (int r = 0; r < l.per_host[h]; ++r) {
      l.host_of.push_back(static_cast<int>(h));
      l.local_of.push_back(r);
    }
  return l;
}

// In the forked child: rank r's environment (torchrun's variables), its output into `out_fd`, and
// the command — on another host through the remote-start command, the environment in its line.
[[noreturn]] void ExecRank(const LaunchOptions& o, const RankLayout& l, int r, int port,
                           const std::string& working_dir, int out_fd, pid_t launcher) {
  // A rank outlives no launcher: when it dies (kill -9 included), the kernel sends the rank
  // SIGTERM; a launcher already gone before this line means the rank never starts.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != launcher) ::_exit(1);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(out_fd, STDERR_FILENO);
  ::close(out_fd);
  ::setenv("RANK", std::to_string(r).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(l.local_of[r]).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(l.per_host[l.host_of[r]]).c_str(), 1);
  ::setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  // Like torchrun: ranks sharing a machine get one math-library thread each unless told
  // otherwise, or N ranks x all-cores threads fight over the cores.
  if (l.per_host[l.host_of[r]] > 1) {
    ::setenv("OMP_NUM_THREADS", "1", 0);
    ::setenv("OPENBLAS_NUM_THREADS", "1", 0);
  }
  std::vector<std::string> words = o.command;
  if (!o.hosts.empty()) {
    // On another host the environment travels in the command line (ssh does not pass it): the
    // rendezvous, and the math libraries' and motley's own settings.
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view v(*e);
      for (const char* name : {"RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=",
                               "MASTER_PORT=", "OMP_", "OPENBLAS_", "MOTLEY_"})
        if (v.starts_with(name)) {
          env.emplace_back(v);
          break;
        }
    }
    words = RemoteRankArgv(o, l.host_of[r], env, working_dir);
  }
  std::vector<char*> argv;
  for (const auto& a : words) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  fmt::print(stderr, "motley launch: cannot run {}: {}\n", words[0], std::strerror(errno));
  std::fflush(stderr);
  ::_exit(127);
}

// Every rank's output, line by line, prefixed with its rank; waits up to 100 ms for some. Returns
// whether any rank's output is still open.
bool PumpOutput(std::vector<Rank>& ranks) {
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
      PrintLines(who[i], rk.pending, false);
    } else if (n == 0 || (n < 0 && errno != EINTR)) {
      PrintLines(who[i], rk.pending, true);
      ::close(rk.out_fd);
      rk.out_fd = -1;
    }
  }
  if (fds.empty()) ::usleep(50'000);
  return !fds.empty();
}

// The rank to blame: one killed by a signal the launcher did not send (a rank that died: the
// others' errors follow from it, whatever they exit with — under load a survivor may give up
// before it can tell a peer died), else the first to fail of its own accord, not one that stopped
// because another failed (exit code kExitPeerFailed) — such a rank may exit first.
int BlameRank(const std::vector<Rank>& ranks, const std::vector<int>& failed_order, int first_failure) {
  auto killed = [&](int r) { return WIFSIGNALED(*ranks[r].status) && !ranks[r].stopped_by_us; };
  const auto died = std::find_if(failed_order.begin(), failed_order.end(), killed);
  if (died != failed_order.end()) return *died;
  for (int r : failed_order) {
    const int st = *ranks[r].status;
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == kExitPeerFailed)) return r;
  }
  return first_failure;
}

}  // namespace

int Launch(const LaunchOptions& options) {
  LaunchOptions o = options;
  const RankLayout layout = LayoutRanks(o, options);
  if (o.failed_rank != nullptr) *o.failed_rank = -1;
  const int port = o.master_port > 0 ? o.master_port : FreeTcpPort();
  std::error_code cwd_error;
  const std::string working_dir = std::filesystem::current_path(cwd_error).string();
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
      ::close(fds[0]);
      ExecRank(o, layout, r, port, working_dir, fds[1], launcher);
    }
    ::close(fds[1]);
    ranks[r].pid = pid;
    ranks[r].out_fd = fds[0];
  }
  std::string where;
  if (!o.hosts.empty()) {
    std::vector<std::string> hosts;
    for (const LaunchHost& h : o.hosts) hosts.push_back(fmt::format("{}:{}", h.name, h.nproc));
    where = fmt::format(" on {} hosts ({}) through '{}'", o.hosts.size(), fmt::join(hosts, ","), o.remote);
  }
  fmt::print(stderr, "motley launch: {} ranks of '{}'{} (rendezvous {}:{})\n", o.nproc, o.command[0], where,
             o.master_addr, port);

  std::optional<Clock::time_point> failed_at, terminated_at;
  int first_failure = -1;
  std::vector<int> failed_order;  // ranks in the order they failed
  auto signal_all = [&](int sig) {
    for (const Rank& rk : ranks)
      if (!rk.status) ::kill(rk.pid, sig);
  };
  for (;;) {
    const bool output_open = PumpOutput(ranks);
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
          fmt::print(stderr,
                     "motley launch: rank {} {}; waiting up to {:.0f} s for the other ranks to stop\n", r,
                     Describe(status), o.stop_grace_s);
        } else if (Failed(status)) {
          fmt::print(stderr, "motley launch: rank {} {}\n", r, Describe(status));
        }
      } else {
        all_done = false;
      }
    }
    if (all_done && std::all_of(ranks.begin(), ranks.end(), [](const Rank& rk) { return rk.out_fd < 0; }))
      break;
    if (all_done && !output_open) break;
    // Stopping.
    if (g_interrupted && !terminated_at) {
      fmt::print(stderr, "motley launch: interrupted; stopping every rank\n");
      signal_all(SIGTERM);
      terminated_at = Clock::now();
      if (first_failure < 0) first_failure = o.nproc;  // the run failed, though no rank did
    }
    const auto now = Clock::now();
    if (failed_at && !terminated_at &&
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
  const int blame = BlameRank(ranks, failed_order, first_failure);
  if (blame < o.nproc)
    fmt::print(stderr, "motley launch: failed: rank {} {}\n", blame, Describe(*ranks[blame].status));
  // An interrupted run blames no rank (nothing to restart without).
  if (o.failed_rank != nullptr) *o.failed_rank = blame < o.nproc && !g_interrupted ? blame : -1;
  return 1;
}

}  // namespace motley
