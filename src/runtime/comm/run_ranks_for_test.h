// Tests only: runs a body on several ranks of one process, one thread each, over Gloo on loopback.
#pragma once

#include <functional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/net.h"
#include "core/rendezvous.h"
#include "runtime/comm/communicator.h"

namespace motley {

inline void RunRanks(int world, const std::function<void(Communicator&)>& body, double timeout_s = 30) {
  const int port = FreeTcpPort();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([=] {
      Rendezvous rv;
      rv.rank = r;
      rv.launcher_rank = r;
      rv.hosts_store = r == 0;
      rv.world_size = world;
      rv.master_port = port;
      CommConfig config;
      config.timeout_s = timeout_s;
      config.heartbeat_timeout_s = 0;  // no watchdog: it would end the test process
      auto comm = Communicator::Connect(rv, config);
      ASSERT_TRUE(comm.ok()) << comm.status().message();
      body(**comm);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace motley
