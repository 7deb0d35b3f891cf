// What a run's metrics file (`motley train --metrics`, JSON lines) says about its steps.
#pragma once

#include <ios>
#include <string>
#include <vector>

#include "core/status.h"

namespace motley::cli {

/// Each rank's median compute time per step (`ranks[].compute_s`) over the steps from
/// `from_step` on, reading from byte `from_byte` (a file several runs appended to). Errors name
/// the file and say what to do.
Result<std::vector<double>> MedianRankCompute(const std::string& path, int from_step, std::streamoff from_byte = 0);

}  // namespace motley::cli
