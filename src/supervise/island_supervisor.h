// Elastic islands (issue #52 item 5): `motley train JOB --island-plan P0 --island-plan P1 ...` started
// without a launcher starts the islands' ranks here and watches them. When a rank dies (or fails, not
// out of memory and not by divergence), its island is lost: every rank stops, and — at most
// `--max-restarts` times — the islands left go on from the newest checkpoint (its outer state: the
// anchor and outer momentum), each on its own share of every step's batch, the lost island's share not
// trained and its pseudo-gradient out of the rounds. `--island-rejoin-steps` clock steps later (one
// round by default) they stop at a round's end with a checkpoint, and every island resumes from it
// together: the lost one joins again from the latest outer state. The others go on by a restart, not
// live: a restart costs the steps since the checkpoint and the processes' start.
#pragma once

#include <string>
#include <vector>

#include "core/job.h"
#include "runtime/train/trainer.h"

namespace motley {

/// Launches the islands' ranks (the command's `args` passed on to each) and supervises them as above.
/// Returns the process's exit code.
int SuperviseIslands(const JobSpec& job, const TrainOptions& options, const std::vector<std::string>& args);

}  // namespace motley
