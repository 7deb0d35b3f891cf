#include "supervise/launcher.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/net.h"
#include "supervise/rank_exits.h"

namespace motley {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_interrupted = 0;
void OnSignal(int sig) { g_interrupted = sig; }

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

constexpr std::string_view kReport = "motley-agent: rank ";

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

std::string AgentReportLine(int rank, int status) {
  return fmt::format("{}{} status {}", kReport, rank, status);
}

std::optional<AgentReport> ParseAgentReport(std::string_view line) {
  if (!line.starts_with(kReport)) return std::nullopt;
  line.remove_prefix(kReport.size());
  AgentReport r;
  auto [after_rank, e1] = std::from_chars(line.data(), line.data() + line.size(), r.rank);
  const std::string_view middle = " status ";
  const std::string_view rest(after_rank, static_cast<size_t>(line.data() + line.size() - after_rank));
  if (e1 != std::errc() || r.rank < 0 || !rest.starts_with(middle)) return std::nullopt;
  const char* s = rest.data() + middle.size();
  auto [end, e2] = std::from_chars(s, rest.data() + rest.size(), r.status);
  if (e2 != std::errc() || end != rest.data() + rest.size()) return std::nullopt;
  return r;
}

namespace {

// One host's agent, as the launcher sees it: the remote-start process, its output and its input.
struct HostAgent {
  pid_t pid = -1;
  int out_fd = -1;  // the agent's stdout and stderr: its ranks' lines and its reports
  int in_fd = -1;   // the agent's stdin: "stop"
  std::string pending;
  std::optional<int> status;
  int first_rank = 0;
  int nproc = 0;
};

// The ranks of every host, as the agents report them.
struct HostRanks {
  std::vector<std::optional<int>> status;
  std::vector<bool> stopped_by_us, lost;
  std::vector<int> failed_order;
  int first_failure = -1;
  std::optional<Clock::time_point> failed_at, stop_sent_at;

  void Record(int rank, int st, bool was_lost, double grace_s) {
    if (rank < 0 || rank >= static_cast<int>(status.size()) || status[rank]) return;
    status[rank] = st;
    stopped_by_us[rank] = stop_sent_at.has_value();
    lost[rank] = was_lost;
    if (!ExitFailed(st)) return;
    failed_order.push_back(rank);
    if (first_failure >= 0) {
      if (!was_lost) fmt::print(stderr, "motley launch: rank {} {}\n", rank, DescribeExit(st));
      return;
    }
    first_failure = rank;
    failed_at = Clock::now();
    fmt::print(stderr, "motley launch: rank {} {}; waiting up to {:.0f} s for the other ranks to stop\n",
               rank, was_lost ? "was lost with its host" : DescribeExit(st), grace_s);
  }
};

// The line that starts host `h`'s agent through the remote-start command.
std::vector<std::string> AgentArgv(const LaunchOptions& o, int h, int first_rank, int world, int port,
                                   const std::string& binary, const std::string& working_dir) {
  LaunchOptions a = o;
  a.command = {binary,
               "agent",
               "--stop-on-stdin",
               "--nproc",
               std::to_string(o.hosts[h].nproc),
               "--rank-offset",
               std::to_string(first_rank),
               "--world-size",
               std::to_string(world),
               "--master-addr",
               o.master_addr,
               "--master-port",
               std::to_string(port),
               "--"};
  a.command.insert(a.command.end(), o.command.begin(), o.command.end());
  // On another host the environment travels in the command line (ssh does not pass it): the math
  // libraries' and motley's own settings.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    for (const char* name : {"OMP_", "OPENBLAS_", "MOTLEY_"})
      if (v.starts_with(name)) {
        env.emplace_back(v);
        break;
      }
  }
  return RemoteRankArgv(a, h, env, working_dir);
}

// Starts every host's agent; false (said) when a pipe cannot be made.
bool StartAgents(const LaunchOptions& o, int world, int port, std::vector<HostAgent>& agents) {
  std::error_code ec;
  const std::string working_dir = std::filesystem::current_path(ec).string();
  std::string binary = o.agent_binary;
  if (binary.empty()) binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  const pid_t launcher = ::getpid();
  int first_rank = 0;
  for (size_t h = 0; h < o.hosts.size(); ++h) {
    const std::vector<std::string> words =
        AgentArgv(o, static_cast<int>(h), first_rank, world, port, binary, working_dir);
    int out[2], in[2];
    if (::pipe(out) != 0 || ::pipe(in) != 0) {
      fmt::print(stderr, "motley launch: pipe failed: {}\n", std::strerror(errno));
      return false;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the agent outlives no launcher (nor does it its ranks)
      if (::getppid() != launcher) ::_exit(1);
      ::dup2(in[0], STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(out[1], STDERR_FILENO);
      for (int fd : {in[0], in[1], out[0], out[1]}) ::close(fd);
      std::vector<char*> argv;
      for (const auto& w : words) argv.push_back(const_cast<char*>(w.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      fmt::print(stderr, "motley launch: cannot run {}: {}\n", words[0], std::strerror(errno));
      std::fflush(stderr);
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    HostAgent& a = agents[h];
    a.pid = pid;
    a.out_fd = out[0];
    a.in_fd = in[1];
    a.first_rank = first_rank;
    a.nproc = o.hosts[h].nproc;
    first_rank += a.nproc;
  }
  return true;
}

// The agents' output: ranks' lines as they are, reports recorded, anything else under its host's
// name. Waits up to 100 ms for some; returns whether any output is still open.
bool PumpAgents(const LaunchOptions& o, std::vector<HostAgent>& agents, HostRanks& ranks) {
  std::vector<pollfd> fds;
  std::vector<size_t> who;
  for (size_t h = 0; h < agents.size(); ++h)
    if (agents[h].out_fd >= 0) {
      fds.push_back({agents[h].out_fd, POLLIN, 0});
      who.push_back(h);
    }
  if (fds.empty()) {
    ::usleep(50'000);
    return false;
  }
  ::poll(fds.data(), fds.size(), 100);
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    HostAgent& a = agents[who[i]];
    char buf[4096];
    const ssize_t n = ::read(a.out_fd, buf, sizeof buf);
    const bool closed = n == 0 || (n < 0 && errno != EINTR);
    if (n > 0) a.pending.append(buf, static_cast<size_t>(n));
    if (closed && !a.pending.empty() && a.pending.back() != '\n') a.pending += '\n';
    size_t start = 0;
    for (size_t nl; (nl = a.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      const std::string_view line = std::string_view(a.pending).substr(start, nl - start);
      if (const std::optional<AgentReport> r = ParseAgentReport(line))
        ranks.Record(r->rank, r->status, false, o.stop_grace_s);
      else if (line.starts_with("[rank "))
        fmt::print("{}\n", line);
      else
        fmt::print("[host {}] {}\n", o.hosts[who[i]].name, line);
    }
    a.pending.erase(0, start);
    std::fflush(stdout);
    if (closed) {
      ::close(a.out_fd);
      a.out_fd = -1;
    }
  }
  return true;
}

// An agent that ended: its ranks that never reported were lost with it.
void ReapAgents(const LaunchOptions& o, std::vector<HostAgent>& agents, HostRanks& ranks) {
  for (size_t h = 0; h < agents.size(); ++h) {
    HostAgent& a = agents[h];
    int st = 0;
    if (a.status || ::waitpid(a.pid, &st, WNOHANG) != a.pid) continue;
    a.status = st;
    // Its last lines (reports among them) before judging what is missing: up to 2 s.
    for (const auto until = Clock::now() + std::chrono::seconds(2); a.out_fd >= 0 && Clock::now() < until;)
      PumpAgents(o, agents, ranks);
    std::vector<int> missing;
    for (int r = a.first_rank; r < a.first_rank + a.nproc; ++r)
      if (!ranks.status[r]) missing.push_back(r);
    if (missing.empty()) continue;
    if (!ranks.stop_sent_at)
      fmt::print(stderr, "motley launch: host {} is gone (its agent {}) before rank(s) {} ended\n",
                 o.hosts[h].name, DescribeExit(st), fmt::join(missing, ", "));
    for (int r : missing) ranks.Record(r, SIGKILL, true, o.stop_grace_s);
  }
}

}  // namespace

int LaunchOnHosts(const LaunchOptions& options) {
  LaunchOptions o = options;
  if (o.master_addr.empty()) o.master_addr = o.hosts[0].name;
  if (o.failed_rank != nullptr) *o.failed_rank = -1;
  int world = 0;
  for (const LaunchHost& h : o.hosts) world += h.nproc;
  const int port = o.master_port > 0 ? o.master_port : FreeTcpPort();
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // an agent gone: its line fails, and its ranks are counted lost
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<HostAgent> agents(o.hosts.size());
  if (!StartAgents(o, world, port, agents)) return 1;
  std::vector<std::string> hosts;
  for (const LaunchHost& h : o.hosts) hosts.push_back(fmt::format("{}:{}", h.name, h.nproc));
  fmt::print(stderr,
             "motley launch: {} ranks of '{}' on {} hosts ({}) through '{}', an agent on each (rendezvous "
             "{}:{})\n",
             world, o.command[0], o.hosts.size(), fmt::join(hosts, ","), o.remote, o.master_addr, port);

  HostRanks ranks;
  ranks.status.resize(world);
  ranks.stopped_by_us.assign(world, false);
  ranks.lost.assign(world, false);
  auto tell_agents = [&](const char* why) {
    if (ranks.stop_sent_at) return;
    if (why != nullptr) fmt::print(stderr, "motley launch: {}\n", why);
    for (HostAgent& a : agents)
      if (a.in_fd >= 0 && ::write(a.in_fd, "stop\n", 5) < 0) {
        ::close(a.in_fd);  // its agent is gone
        a.in_fd = -1;
      }
    ranks.stop_sent_at = Clock::now();
  };
  for (;;) {
    const bool output_open = PumpAgents(o, agents, ranks);
    ReapAgents(o, agents, ranks);
    const bool all_done =
        std::all_of(agents.begin(), agents.end(), [](const HostAgent& a) { return a.status; });
    if (all_done && !output_open) break;
    const auto now = Clock::now();
    if (g_interrupted && !ranks.stop_sent_at) {
      tell_agents("interrupted; stopping every rank on every host");
      if (ranks.first_failure < 0) ranks.first_failure = world;  // the run failed, though no rank did
    }
    if (ranks.failed_at && std::chrono::duration<double>(now - *ranks.failed_at).count() > o.stop_grace_s)
      tell_agents(
          fmt::format("stopping the ranks still running after rank {} failed", ranks.first_failure).c_str());
    // Agents that do not end after their ranks' grace: their input closed, then their process ended.
    const double since_stop =
        ranks.stop_sent_at ? std::chrono::duration<double>(now - *ranks.stop_sent_at).count() : 0;
    for (HostAgent& a : agents) {
      if (a.status) continue;
      if (since_stop > 2 * o.kill_grace_s && a.in_fd >= 0) {
        ::close(a.in_fd);
        a.in_fd = -1;
        ::kill(a.pid, SIGTERM);
      }
      if (since_stop > 4 * o.kill_grace_s) ::kill(a.pid, SIGKILL);
    }
  }
  for (HostAgent& a : agents)
    if (a.in_fd >= 0) ::close(a.in_fd);
  if (ranks.first_failure < 0) return 0;
  const int blame = BlameRank(ranks.status, ranks.stopped_by_us, ranks.failed_order, ranks.first_failure);
  if (blame < world) {
    size_t h = 0;
    while (agents[h].first_rank + agents[h].nproc <= blame) ++h;
    fmt::print(stderr, "motley launch: failed: rank {} on host {} {}\n", blame, o.hosts[h].name,
               ranks.lost[blame]
                   ? fmt::format("was lost with its host (its agent {})", DescribeExit(*agents[h].status))
                   : DescribeExit(*ranks.status[blame]));
  }
  if (o.failed_rank != nullptr) *o.failed_rank = blame < world && !g_interrupted ? blame : -1;
  return 1;
}

}  // namespace motley
