// One island's replica of the model in a run of islands trained in one process (islands_trainer.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model/llama_model.h"
#include "runtime/optim/adamw.h"

namespace motley::trainer_parts {

struct Replica {
  LlamaModel model;
  std::vector<ParamShard> shards;
  int64_t first_sequence = 0, sequences = 0;
  int64_t steps = 0, total_steps = 0;  // its own (IslandsConfig::OwnSteps): taken, and in the run
  // Sequences trained on since each fragment's last outer step (IslandsConfig::fragments; one entry
  // without): the weight of its pseudo-gradient in that fragment's round.
  std::vector<int64_t> sequences_since;
};

}  // namespace motley::trainer_parts
