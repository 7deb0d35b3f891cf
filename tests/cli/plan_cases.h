// The plans the distributed tests train: every family motley executes (data parallelism at each
// ZeRO stage with uneven batches, Poplar, GPipe / 1F1B / interleaved pipelines with routing,
// tensor-parallel teams, offload), on the equivalence tests' 4-layer model and 6-device cluster
// (training_fixtures.h). Shared by distributed_train_cli_test.cc and elastic_train_cli_test.cc.
#pragma once

#include <string>

#include <gtest/gtest.h>

namespace motley_test {

struct PlanCase {
  const char* name;
  int ranks;
  double clip;  // the job's grad_clip_norm
  bool checkpointing;
  const char* body;  // the plan after its header
};

inline const PlanCase kPlans[] = {
    {"dp2-zero2-uneven", 2, 0, true, R"(schedule = "gpipe"
zero_stage = 2
[[groups]]
ministages = [[0, 4]]
devices = [0, 1]
microbatch_size = [4, 2]
num_microbatches = [2, 2]
)"},
    {"dp3-zero0-last-batch", 3, 1, true, R"(schedule = "gpipe"
zero_stage = 0
[[groups]]
ministages = [[0, 4]]
devices = [0, 1, 2]
microbatch_size = [3, 3, 2]
num_microbatches = [2, 1, 2]
last_microbatch_size = [2, 0, 0]
)"},
    {"dp2-zero1-4-ministages-no-checkpointing", 2, 1, false, R"(schedule = "gpipe"
zero_stage = 1
activation_checkpointing = false
[[groups]]
ministages = [[0, 1], [1, 2], [2, 3], [3, 4]]
devices = [0, 1]
microbatch_size = [4, 2]
num_microbatches = [2, 2]
)"},
    {"dp3-zero3-uneven", 3, 0, true, R"(schedule = "gpipe"
zero_stage = 3
[[groups]]
ministages = [[0, 2], [2, 4]]
devices = [0, 1, 2]
microbatch_size = [2, 4, 2]
num_microbatches = [2, 1, 2]
)"},
    {"poplar-dp5-zero2-accumulation-last-batch", 5, 1, true, R"(zero_stage = 2
[[groups]]
ministages = [[0, 4]]
devices = [0, 1, 2, 3, 4]
microbatch_size = [2, 1, 3, 1, 2]
num_microbatches = [2, 1, 1, 2, 2]
last_microbatch_size = [1, 0, 0, 0, 1]
)"},
    {"poplar-dp4-zero3-per-layer-prefetch", 4, 0, true, R"(zero_stage = 3
[[groups]]
ministages = [[0, 1], [1, 2], [2, 3], [3, 4]]
devices = [0, 1, 2, 3]
microbatch_size = [3, 2, 1, 1]
num_microbatches = [2, 1, 2, 2]
)"},
    {"pipeline2-gpipe", 2, 0, true, R"(schedule = "gpipe"
zero_stage = 2
[[groups]]
ministages = [[0, 2]]
devices = [0]
microbatch_size = [3]
num_microbatches = [4]
[[groups]]
ministages = [[2, 4]]
devices = [1]
microbatch_size = [3]
num_microbatches = [4]
)"},
    {"pipeline3-1f1b-asymmetric", 3, 1, true, R"(schedule = "1f1b"
zero_stage = 2
[[groups]]
ministages = [[0, 1]]
devices = [0]
microbatch_size = [2]
num_microbatches = [6]
[[groups]]
ministages = [[1, 3]]
devices = [1]
microbatch_size = [2]
num_microbatches = [6]
[[groups]]
ministages = [[3, 4]]
devices = [2]
microbatch_size = [2]
num_microbatches = [6]
)"},
    {"pipeline2x2-1f1b-round-robin", 4, 1, true, R"(schedule = "1f1b"
zero_stage = 1
[[groups]]
ministages = [[0, 2]]
devices = [0, 1]
microbatch_size = [2, 2]
num_microbatches = [3, 3]
routing = [0, 1, 0, 1, 0, 1]
[[groups]]
ministages = [[2, 4]]
devices = [2, 3]
microbatch_size = [2, 2]
num_microbatches = [3, 3]
routing = [2, 3, 2, 3, 2, 3]
)"},
    {"interleaved-offload-uneven", 3, 0, true, R"(schedule = "interleaved"
zero_stage = 2
offload_params = true
offload_activations = true
[[groups]]
ministages = [[0, 1], [2, 3]]
devices = [0, 1]
microbatch_size = [3, 3]
num_microbatches = [3, 1]
[[groups]]
ministages = [[1, 2], [3, 4]]
devices = [2]
microbatch_size = [3]
num_microbatches = [4]
)"},
    {"interleaved-zero3-routing-6-ranks", 6, 1, true, R"(schedule = "interleaved"
zero_stage = 3
[[groups]]
ministages = [[0, 1], [2, 3]]
devices = [0, 1]
microbatch_size = [2, 2]
num_microbatches = [4, 2]
[[groups]]
ministages = [[1, 2]]
devices = [2, 3, 4]
microbatch_size = [2, 2, 2]
num_microbatches = [2, 2, 2]
routing = [3, 2, 4, 2, 3, 4]
[[groups]]
ministages = [[3, 4]]
devices = [5]
microbatch_size = [2]
num_microbatches = [6]
)"},
    {"interleaved-4-ranks-1-and-3-offload", 4, 1, true, R"(schedule = "interleaved"
zero_stage = 2
offload_params = true
[[groups]]
ministages = [[0, 1]]
devices = [0]
microbatch_size = [3]
num_microbatches = [4]
[[groups]]
ministages = [[1, 2], [2, 3], [3, 4]]
devices = [1, 2, 3]
microbatch_size = [3, 3, 3]
num_microbatches = [2, 1, 1]
)"},
    {"tp2-zero0", 2, 1, true, R"(schedule = "gpipe"
zero_stage = 0
[[groups]]
ministages = [[0, 2], [2, 4]]
tp_degree = 2
devices = [0, 1]
microbatch_size = [3, 3]
num_microbatches = [4, 4]
)"},
    {"tp2-dp2-zero2-uneven-no-checkpointing", 4, 0, false, R"(schedule = "gpipe"
zero_stage = 2
activation_checkpointing = false
[[groups]]
ministages = [[0, 4]]
tp_degree = 2
devices = [0, 1, 2, 3]
microbatch_size = [4, 4, 2, 2]
num_microbatches = [2, 2, 2, 2]
)"},
    {"pipeline-tp2-then-tp1-offload", 3, 1, true, R"(schedule = "interleaved"
zero_stage = 2
offload_params = true
[[groups]]
ministages = [[0, 1], [2, 3]]
tp_degree = 2
devices = [0, 1]
microbatch_size = [3, 3]
num_microbatches = [4, 4]
[[groups]]
ministages = [[1, 2], [3, 4]]
devices = [2]
microbatch_size = [3]
num_microbatches = [4]
)"},
    {"interleaved-5-ranks-zero1-activation-offload", 5, 0, true, R"(schedule = "interleaved"
zero_stage = 1
offload_activations = true
[[groups]]
ministages = [[0, 2]]
devices = [0, 1, 2]
microbatch_size = [2, 2, 2]
num_microbatches = [2, 2, 2]
[[groups]]
ministages = [[2, 4]]
devices = [3, 4]
microbatch_size = [2, 2]
num_microbatches = [3, 3]
)"},
    // Cephalo (#24): each device's share of the ZeRO state apart from its share of the batch.
    {"cephalo-dp3-zero3-state-shares", 3, 1, true, R"(zero_stage = 3
[[groups]]
ministages = [[0, 1], [1, 2], [2, 3], [3, 4]]
devices = [0, 1, 2]
microbatch_size = [2, 4, 2]
num_microbatches = [2, 1, 2]
state_shares = [0.6, 0.1, 0.3]
)"},
    {"dp3-zero1-state-shares", 3, 0, true, R"(schedule = "gpipe"
zero_stage = 1
[[groups]]
ministages = [[0, 4]]
devices = [0, 1, 2]
microbatch_size = [4, 2, 2]
num_microbatches = [1, 2, 2]
state_shares = [0.15, 0.55, 0.3]
)"},
    {"interleaved-offload-state-shares-tp2", 4, 1, true, R"(schedule = "interleaved"
zero_stage = 2
offload_params = true
[[groups]]
ministages = [[0, 1], [2, 3]]
devices = [0, 1]
microbatch_size = [3, 3]
num_microbatches = [3, 1]
state_shares = [0.8, 0.2]
[[groups]]
ministages = [[1, 2], [3, 4]]
tp_degree = 2
devices = [2, 3]
microbatch_size = [3, 3]
num_microbatches = [4, 4]
)"},
    {"tp2-dp2-zero2-state-shares", 4, 0, true, R"(schedule = "gpipe"
zero_stage = 2
[[groups]]
ministages = [[0, 2], [2, 4]]
tp_degree = 2
devices = [0, 1, 2, 3]
microbatch_size = [4, 4, 2, 2]
num_microbatches = [2, 2, 2, 2]
state_shares = [0.25, 0.25, 0.75, 0.75]
)"},
};

inline const PlanCase& PlanNamed(const std::string& name) {
  for (const PlanCase& p : kPlans)
    if (name == p.name) return p;
  ADD_FAILURE() << "no plan case " << name;
  return kPlans[0];
}

}  // namespace motley_test
