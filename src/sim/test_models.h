// Models shared by the simulator's tests.
#pragma once

#include "core/model.h"

namespace motley::test {

/// A model whose head is negligible next to its layers (vocabulary of 1): hidden 256, 4 heads,
/// ffn 1024, sequences up to 512.
inline ModelSpec LayerHeavyModel(int layers) {
  ModelSpec m;
  m.name = "layer-heavy";
  m.hidden_size = 256;
  m.num_layers = layers;
  m.num_heads = 4;
  m.num_kv_heads = 4;
  m.ffn_size = 1024;
  m.vocab_size = 1;
  m.max_seq_len = 512;
  return m;
}

}  // namespace motley::test
