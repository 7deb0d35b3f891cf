// libFuzzer entry point for motley's readers (see fuzz/README.md). With MOTLEY_FUZZ_READER set to a
// reader's number, every input goes to that reader whole; otherwise the first byte picks it.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "config_parsers_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int pinned = [] {
    const char* r = std::getenv("MOTLEY_FUZZ_READER");
    return r == nullptr ? -1 : std::atoi(r);
  }();
  if (pinned >= 0) {
    motley::FuzzReader(pinned, std::string_view(reinterpret_cast<const char*>(data), size));
  } else {
    motley::FuzzConfigParsers(data, size);
  }
  return 0;
}
