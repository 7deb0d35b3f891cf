#include "core/rendezvous.h"

#include <map>
#include <memory>

#include <gtest/gtest.h>

#include "core/net.h"

namespace motley {
namespace {

GetEnv Env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(Rendezvous, ReadsEveryLauncherAndExplainsGaps) {
  Rendezvous none = RendezvousFromEnv(Env({})).value();
  EXPECT_EQ(none.world_size, 1);
  EXPECT_EQ(none.source, "single process");
  Rendezvous torchrun = RendezvousFromEnv(Env({{"RANK", "2"},
                                               {"WORLD_SIZE", "4"},
                                               {"LOCAL_RANK", "0"},
                                               {"MASTER_ADDR", "10.0.0.1"},
                                               {"MASTER_PORT", "1234"}}))
                            .value();
  EXPECT_EQ(torchrun.rank, 2);
  EXPECT_EQ(torchrun.world_size, 4);
  EXPECT_EQ(torchrun.master_addr, "10.0.0.1");
  EXPECT_EQ(torchrun.master_port, 1234);
  Rendezvous slurm = RendezvousFromEnv(Env({{"SLURM_PROCID", "5"},
                                            {"SLURM_NTASKS", "8"},
                                            {"SLURM_LOCALID", "1"},
                                            {"SLURM_NTASKS_PER_NODE", "4(x2)"},
                                            {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.9"}}))
                         .value();
  EXPECT_EQ(slurm.source, "Slurm");
  EXPECT_EQ(slurm.rank, 5);
  EXPECT_EQ(slurm.local_rank, 1);
  EXPECT_EQ(slurm.master_addr, "10.0.0.9");
  Rendezvous mpi = RendezvousFromEnv(Env({{"OMPI_COMM_WORLD_RANK", "1"},
                                          {"OMPI_COMM_WORLD_SIZE", "2"},
                                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                          {"MASTER_ADDR", "h0"}}))
                       .value();
  EXPECT_EQ(mpi.source, "Open MPI");
  EXPECT_EQ(mpi.rank, 1);
  // Who hosts the store (#50): launcher rank 0 under torchrun; under mpirun and srun, which may put
  // rank 0 anywhere, local rank 0 on MASTER_ADDR's host — here, this machine's loopback, rank 0.
  EXPECT_FALSE(torchrun.hosts_store);
  EXPECT_FALSE(mpi.hosts_store);  // h0 is not this host
  Rendezvous here = RendezvousFromEnv(Env({{"OMPI_COMM_WORLD_RANK", "3"},
                                           {"OMPI_COMM_WORLD_SIZE", "4"},
                                           {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                           {"MASTER_ADDR", FindThisHost().hostname}}))
                        .value();
  EXPECT_TRUE(here.hosts_store);  // rank 3, but the first on MASTER_ADDR's host
  here = RendezvousFromEnv(Env({{"OMPI_COMM_WORLD_RANK", "3"},
                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                {"MASTER_ADDR", FindThisHost().hostname}}))
             .value();
  EXPECT_FALSE(here.hosts_store);
  // Open MPI without MASTER_ADDR: the fix is named.
  Result<Rendezvous> no_addr =
      RendezvousFromEnv(Env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
  ASSERT_FALSE(no_addr.ok());
  EXPECT_NE(no_addr.status().message().find("export MASTER_ADDR"), std::string::npos);
  Result<Rendezvous> half = RendezvousFromEnv(Env({{"RANK", "0"}}));
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("RANK is set but WORLD_SIZE is not"), std::string::npos);
  Result<Rendezvous> out_of_range = RendezvousFromEnv(Env({{"RANK", "4"}, {"WORLD_SIZE", "4"}}));
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_NE(out_of_range.status().message().find("RANK=4: expected an integer in [0, 3]"), std::string::npos);
}

}  // namespace
}  // namespace motley
