#include <cstdint>

#include "data/data_sampler.h"

#include "core/check.h"

namespace motley {
namespace {

// SplitMix64: a strong, cheap mix of a 64-bit key.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

int64_t SampleWindowStart(uint64_t seed, int64_t step, int64_t index, int64_t num_tokens, int64_t seq_len) {
  MOTLEY_CHECK_GT(num_tokens, seq_len);
  const uint64_t key = Mix(Mix(Mix(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(index));
  return static_cast<int64_t>(key % static_cast<uint64_t>(num_tokens - seq_len));
}

}  // namespace motley
