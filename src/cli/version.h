// motley's version, and the libtorch it was built with (when it was).
#pragma once

#include <string>

namespace motley::cli {

std::string Version();      // "0.1.0"
std::string VersionLine();  // "motley 0.1.0 (libtorch 1.13.0, CPU)"

}  // namespace motley::cli
