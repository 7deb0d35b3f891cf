// The launcher's host handling, in-process (#50): --hosts parsed with one message per mistake, and
// the line each host's agent runs, quoted for a shell, and the agent's reports.
#include "supervise/launcher.h"

#include <gtest/gtest.h>

namespace motley::cli {
namespace {

TEST(Launcher, HostsAreNameColonRanks) {
  Result<std::vector<LaunchHost>> h = ParseLaunchHosts("node1:4,10.0.0.2:2,node3");
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_EQ(h->size(), 3u);
  EXPECT_EQ((*h)[0].name, "node1");
  EXPECT_EQ((*h)[0].nproc, 4);
  EXPECT_EQ((*h)[1].name, "10.0.0.2");
  EXPECT_EQ((*h)[2].nproc, 1);
  for (const char* bad : {"node1:0", "node1:x", "node1:", "node1:99999", ":2", "a,,b", "a b:2", "h;rm:1"}) {
    Result<std::vector<LaunchHost>> r = ParseLaunchHosts(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--hosts: "), std::string::npos) << r.status().message();
  }
}

TEST(Launcher, ARemoteRankRunsOneQuotedShellLine) {
  EXPECT_EQ(ShellQuote("plain/path-1.toml"), "plain/path-1.toml");
  EXPECT_EQ(ShellQuote("it's here"), "'it'\\''s here'");
  EXPECT_EQ(ShellQuote(""), "''");
  LaunchOptions o;
  o.hosts = {{"node1", 2}, {"node2", 2}};
  o.remote = "ip netns exec host{index} sh -c";
  o.command = {"/opt/motley", "train", "my job.toml"};
  const std::vector<std::string> argv = RemoteRankArgv(o, 1, {"RANK=2", "MOTLEY_X=a b"}, "/work dir");
  ASSERT_EQ(argv.size(), 7u);
  EXPECT_EQ(argv[3], "host1");
  EXPECT_EQ(argv[5], "-c");
  EXPECT_EQ(argv[6], "cd '/work dir' && exec env RANK=2 'MOTLEY_X=a b' /opt/motley train 'my job.toml'");
  o.remote = "ssh {host}";
  EXPECT_EQ(RemoteRankArgv(o, 0, {}, "/w")[1], "node1");
}

// An agent's report of a rank's end: written and read back; anything else is not one.
TEST(Launcher, AnAgentsReportIsOneLineReadBackExactly) {
  EXPECT_EQ(AgentReportLine(3, 768), "motley-agent: rank 3 status 768");
  const std::optional<AgentReport> r = ParseAgentReport(AgentReportLine(17, 15));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 17);
  EXPECT_EQ(r->status, 15);
  for (const char* other : {"[rank 3] motley-agent: rank 3 status 0", "motley-agent: rank 3 status",
                            "motley-agent: rank -1 status 0", "motley-agent: rank 3 status 0 more",
                            "motley-agent: rank x status 0", "motley-agent: rank 3 state 0"})
    EXPECT_FALSE(ParseAgentReport(other).has_value()) << other;
}

}  // namespace
}  // namespace motley::cli
