// One fuzz input through motley's readers. The first byte picks the reader (mod 9: cluster, model,
// job, Hugging Face config.json, plan TOML, plan JSON, profile JSON, Zorse's latencies JSON, a data
// directory's data.json); the rest is the file's text. Shared by the libFuzzer
// target and the regression test that replays fuzz/regressions/ in every build.
#pragma once

#include <cstddef>
#include <cstdint>

namespace motley {

void FuzzConfigParsers(const uint8_t* data, size_t size);

}  // namespace motley
