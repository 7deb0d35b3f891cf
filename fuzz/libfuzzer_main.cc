// libFuzzer entry point for motley's config parsers (see fuzz/README.md).
#include <cstdint>

#include "config_parsers_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  motley::FuzzConfigParsers(data, size);
  return 0;
}
