// What a run's metrics file (`motley train --metrics`, JSON lines) says about its steps.
#pragma once

#include <ios>
#include <string>
#include <vector>

#include "core/status.h"

namespace motley {

/// Each rank's median compute time per step (`ranks[].compute_s`) over the steps from
/// `from_step` on, reading from byte `from_byte` (a file several runs appended to). Errors name
/// the file and say what to do.
Result<std::vector<double>> MedianRankCompute(const std::string& path, int from_step,
                                              std::streamoff from_byte = 0);
/// The same over several runs of one plan (their steps pooled): a machine whose speed drifts
/// between runs is calibrated on its typical speed, not on one run's. With `schedule_hash` (a
/// plan's ScheduleHash), only the steps that ran that schedule count, and metrics of runs of
/// another plan are refused naming both schedules (files that name none are taken as they are).
Result<std::vector<double>> MedianRankCompute(const std::vector<std::string>& paths, int from_step,
                                              const std::string& schedule_hash = "");
/// Each rank's median communication time per step (`ranks[].comm_s`: its collectives, transfers
/// and the waits inside them), pooled over several runs of one plan.
Result<std::vector<double>> MedianRankComm(const std::vector<std::string>& paths, int from_step,
                                           const std::string& schedule_hash = "");
/// Either of the two by the per-rank field's name.
Result<std::vector<double>> MedianRankTimes(const std::vector<std::string>& paths, const char* field,
                                            int from_step, const std::string& schedule_hash = "");

}  // namespace motley
