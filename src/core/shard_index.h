// The index of a sharded checkpoint (#25): which rank file holds which elements of which
// parameter, read and written without torch (so it is fuzzed and checked like every other reader).
//
// A distributed run's checkpoint holds, beside config.json and trainer_state.json, one
// `rank-NNNNN.safetensors` per rank that owns state, written by that rank at once (no gather), and
// `shards.json`:
//
//   {"format": "motley-shards-1",
//    "parameters": {"layers.0.mlp.up_proj.weight": {"shape": [64, 32], "tp_degree": 2}, ...},
//    "pieces": [{"file": "rank-00001.safetensors", "param": "layers.0.mlp.up_proj.weight",
//                "tp_index": 1, "begin": 0, "count": 1024}, ...]}
//
// A parameter a tensor-parallel team splits is stored as its team's slices (`tp_degree` of them,
// each the slice that tensor-parallel index holds); every slice — or the whole parameter when
// tp_degree is 1 — is tiled by pieces: [begin, begin + count) of its elements in row-major order,
// each element in exactly one piece. A piece's three tensors in its file are named by
// ShardTensorName: the values (the master copy, fp32 or fp64) and AdamW's two moments — and in a run
// of islands' checkpoint (#52) a fourth, the outer momentum of the piece's elements.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace motley {

inline constexpr const char* kShardIndexFile = "shards.json";

struct ShardedParameter {
  std::vector<int64_t> shape;  // the whole parameter's
  int tp_degree = 1;           // slices it is stored as (a tensor-parallel team's split)
  /// A vocabulary a team padded (PaddedVocabSize): the slices' rows together, beyond shape[0]; the
  /// padded rows are zero and dropped when the slices are joined. 0: not padded.
  int64_t padded_rows = 0;
};

struct ShardPiece {
  std::string file;  // within the checkpoint folder
  std::string param;
  int tp_index = 0;   // which slice (0 when tp_degree is 1)
  int64_t begin = 0;  // the first element within the slice
  int64_t count = 0;
};

struct ShardIndex {
  std::map<std::string, ShardedParameter> parameters;
  std::vector<ShardPiece> pieces;
};

/// What a piece's tensor holds.
enum class ShardTensor { kValues, kExpAvg, kExpAvgSq, kOuterMomentum };

/// The name of a piece's tensor in its rank file:
/// "<param>#<tp_index>#<begin>#<values|exp_avg|exp_avg_sq|outer_momentum>".
std::string ShardTensorName(std::string_view param, int tp_index, int64_t begin, ShardTensor what);

/// The inverse of ShardTensorName; false for a name it does not write.
bool ParseShardTensorName(std::string_view name, std::string* param, int* tp_index, int64_t* begin,
                          ShardTensor* what);

/// The rank file's name: "rank-00003.safetensors".
std::string RankShardFileName(int rank);

/// The elements of one slice of a parameter stored as `tp_degree` slices: a split parameter's
/// slices are equal (the split divides the sliced dimension; tensor_parallel.h checks that).
int64_t SliceElements(const ShardedParameter& p);

/// Checks that the pieces tile every slice of every parameter exactly once (and name only
/// parameters the index lists). `path` names the index in messages.
Status ValidateShardIndex(const ShardIndex& index, const std::string& path);

/// Reads shards.json (`path` for messages) and validates it.
Result<ShardIndex> ParseShardIndex(std::string_view text, const std::string& path);
std::string ShardIndexJson(const ShardIndex& index);

}  // namespace motley
