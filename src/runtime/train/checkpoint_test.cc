#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/model_parse.h"
#include "core/shard_index.h"
#include "runtime/model/tensor_parallel.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/loss_scaler.h"
#include "runtime/train/safetensors.h"

namespace motley {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

ModelSpec Tiny() {
  ModelSpec s = *FindModelPreset("llama-tiny");
  return s;
}

void FlipByte(const fs::path& path, int64_t from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  f.seekp(-from_end, std::ios::end);
  c = static_cast<char>(c ^ 0x10);
  f.write(&c, 1);
}

TEST(Safetensors, RoundTripsEveryDtypeWithTheStandardHeader) {
  fs::path dir = TempDir("motley_st");
  const std::string path = (dir / "t.safetensors").string();
  std::vector<NamedTensor> tensors = {
      {"a.weight", torch::randn({3, 5})},
      {"b", torch::randn({7}).to(torch::kBFloat16)},
      {"c", torch::arange(6, torch::kInt64).reshape({2, 3})},
      {"d", torch::randn({2, 2}).to(torch::kFloat16)},
      {"empty", torch::zeros({0, 4})},
  };
  uint32_t crc = 0;
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}, &crc).ok());
  EXPECT_EQ(crc, FileCrc32(path).value());
  // The header: 8-byte little-endian length, then JSON with dtype/shape/data_offsets, 8-aligned.
  std::string bytes = ReadFileToString(path).value();
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["b"]["dtype"], "BF16");
  EXPECT_EQ(header["a.weight"]["shape"], nlohmann::json({3, 5}));
  EXPECT_EQ(header["a.weight"]["data_offsets"], nlohmann::json({0, 60}));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  SafetensorsFile f = SafetensorsFile::Open(path).value();
  for (const auto& t : tensors) {
    torch::Tensor back = f.Load(t.name, t.tensor.scalar_type()).value();
    EXPECT_TRUE(torch::equal(back, t.tensor)) << t.name;
  }
  // Converted on load.
  EXPECT_TRUE(torch::allclose(f.Load("b", torch::kFloat32).value(), tensors[1].tensor.to(torch::kFloat32)));
  // A shape whose size overflows, or larger than the file: refused before any allocation.
  for (const std::string shape : {"[4611686018427387904, 4]", "[1000000, 1000000]", "3"}) {
    const std::string header =
        R"({"x": {"dtype": "F32", "shape": )" + shape + R"(, "data_offsets": [0, 0]}})";
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    const std::string bad_path = (dir / "overflow.safetensors").string();
    std::ofstream(bad_path, std::ios::binary) << file << header;
    Result<SafetensorsFile> overflow = SafetensorsFile::Open(bad_path);
    ASSERT_FALSE(overflow.ok()) << shape;
    EXPECT_NE(overflow.status().message().find("tensor x: shape"), std::string::npos)
        << overflow.status().message();
  }
  // Truncated: the offsets no longer fit.
  fs::resize_file(path, fs::file_size(path) - 4);
  Result<SafetensorsFile> cut = SafetensorsFile::Open(path);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("truncated?"), std::string::npos) << cut.status().message();
  fs::remove_all(dir);
}

TEST(Checkpoint, SavesAndLoadsWeightsOptimizerAndState) {
  fs::path dir = TempDir("motley_ckpt");
  LlamaModel model(Tiny(), 1);
  std::vector<ParamShard> shards = WholeParameterShards(*model);
  for (auto& s : shards) {
    s.exp_avg = torch::randn_like(s.param);
    s.exp_avg_sq = torch::rand_like(s.param);
  }
  TrainerState state;
  state.step = 7;
  state.updates = 6;
  state.total_steps = 10;
  state.seed = 99;
  state.tokens_seen = 700;
  state.loss_scale = 512;
  state.loss_scale_good_steps = 3;
  state.precision = "fp32";
  state.job_file = "job.toml";
  const std::string run = (dir / "run").string();
  const std::string saved = SaveRunCheckpoint(run, 2, *model, shards, state).value();
  EXPECT_EQ(ResolveCheckpointDir(run).value(), saved);
  EXPECT_TRUE(fs::exists(fs::path(saved) / "config.json"));

  LlamaModel other(LoadCheckpointModelSpec(saved).value(), 2);
  ASSERT_TRUE(LoadModelWeights(saved, *other).ok());
  for (const auto& p : model->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), other->named_parameters()[p.key()])) << p.key();
  std::vector<ParamShard> loaded_shards = WholeParameterShards(*other);
  TrainerState loaded = LoadTrainingState(saved, loaded_shards).value();
  EXPECT_EQ(loaded.step, 7);
  EXPECT_EQ(loaded.updates, 6);
  EXPECT_EQ(loaded.seed, 99u);
  EXPECT_EQ(loaded.loss_scale, 512);
  EXPECT_EQ(loaded.loss_scale_good_steps, 3);
  for (size_t i = 0; i < shards.size(); ++i) {
    EXPECT_TRUE(torch::equal(loaded_shards[i].exp_avg, shards[i].exp_avg));
    EXPECT_TRUE(torch::equal(loaded_shards[i].exp_avg_sq, shards[i].exp_avg_sq));
  }
  // Only the newest `keep` checkpoints stay.
  for (int64_t step : {8, 9}) {
    state.step = step;
    ASSERT_TRUE(SaveRunCheckpoint(run, 2, *model, shards, state).ok());
  }
  EXPECT_FALSE(fs::exists(fs::path(run) / "step-000007"));
  EXPECT_TRUE(fs::exists(fs::path(run) / "step-000008"));
  EXPECT_EQ(ResolveCheckpointDir(run).value(), (fs::path(run) / "step-000009").string());
  // Past step 999,999 the folders are ordered by their steps, not as text (#48): step-1000000 is
  // the newest, step-999998 the oldest; a folder of another name is left alone.
  const fs::path long_run = dir / "long-run";
  for (const char* old : {"step-999998", "step-999999", "step-notes"}) fs::create_directories(long_run / old);
  state.step = 1000000;
  ASSERT_TRUE(SaveRunCheckpoint(long_run.string(), 2, *model, shards, state).ok());
  EXPECT_FALSE(fs::exists(long_run / "step-999998"));
  EXPECT_TRUE(fs::exists(long_run / "step-999999"));
  EXPECT_TRUE(fs::exists(long_run / "step-1000000"));
  EXPECT_TRUE(fs::exists(long_run / "step-notes"));
  EXPECT_EQ(ResolveCheckpointDir(long_run.string()).value(), (long_run / "step-1000000").string());
  // A `latest` that names a missing folder, or none at all, says which folder is the newest.
  fs::remove_all(long_run / "step-1000000");
  Result<std::string> missing = ResolveCheckpointDir(long_run.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("which is missing; the newest checkpoint folder there is " +
                                            (long_run / "step-999999").string()),
            std::string::npos)
      << missing.status().message();
  fs::remove(long_run / "latest");
  Result<std::string> lost = ResolveCheckpointDir(long_run.string());
  ASSERT_FALSE(lost.ok());
  EXPECT_NE(lost.status().message().find("without its latest file; the newest checkpoint folder there is " +
                                         (long_run / "step-999999").string()),
            std::string::npos)
      << lost.status().message();
  fs::remove_all(dir);
}

// A checkpoint written with NaN or infinite weights (what a diverged run wrote before #48) is
// refused by everything that reads its weights — resuming, exporting, evaluating — naming the
// parameter and the way out; the rollbacks' figures in the trainer state survive a round trip.
TEST(Checkpoint, NonFiniteWeightsAreRefusedAndRollbackFiguresRoundTrip) {
  fs::path dir = TempDir("motley_ckpt_nan");
  LlamaModel model(Tiny(), 1);
  std::vector<ParamShard> shards = WholeParameterShards(*model);
  for (auto& s : shards) {
    s.exp_avg = torch::zeros_like(s.param);
    s.exp_avg_sq = torch::zeros_like(s.param);
  }
  TrainerState state;
  state.step = 4;
  state.updates = 4;
  state.total_steps = 10;
  state.seed = 1;
  state.precision = "fp32";
  state.lr_factor = 0.25;
  state.data_skip_steps = 3;
  state.rollbacks = 2;
  const std::string good = SaveRunCheckpoint((dir / "good").string(), 2, *model, shards, state).value();
  std::vector<ParamShard> again = WholeParameterShards(*model);
  const TrainerState loaded = LoadTrainingState(good, again).value();
  EXPECT_EQ(loaded.lr_factor, 0.25);
  EXPECT_EQ(loaded.data_skip_steps, 3);
  EXPECT_EQ(loaded.rollbacks, 2);
  {
    torch::NoGradGuard no_grad;
    model->named_parameters()["model.layers.1.mlp.up_proj.weight"].view(-1)[5] = std::nan("");
  }
  const std::string bad = SaveRunCheckpoint((dir / "bad").string(), 2, *model, shards, state).value();
  LlamaModel other(Tiny(), 2);
  const Status load = LoadModelWeights(bad, *other);
  ASSERT_FALSE(load.ok());
  EXPECT_NE(load.message().find("model.layers.1.mlp.up_proj.weight holds NaN or infinite values"),
            std::string::npos)
      << load.message();
  EXPECT_NE(load.message().find("an earlier one"), std::string::npos) << load.message();
  const Status exported = ExportCheckpoint(bad, (dir / "out").string());
  ASSERT_FALSE(exported.ok());
  EXPECT_NE(exported.message().find("NaN or infinite"), std::string::npos) << exported.message();
  EXPECT_FALSE(fs::exists(dir / "out"));
  EXPECT_TRUE(LoadModelWeights(good, *other).ok());
  // `checkpoint info` loads what it verifies: the NaN one does not load, the good one does.
  EXPECT_TRUE(VerifyCheckpoint(bad).ok());
  EXPECT_FALSE(CheckCheckpointLoads(bad).ok());
  EXPECT_TRUE(CheckCheckpointLoads(good).ok());
  // Nor does one whose config.json (checksummed anew) no longer describes its tensors.
  ModelSpec wider = Tiny();
  wider.ffn_size *= 2;
  const std::string config = HfConfigJson(wider);
  ASSERT_TRUE(AtomicWriteFile((fs::path(good) / "config.json").string(), config).ok());
  TrainerStateFile file =
      ParseTrainerState(ReadFileToString((fs::path(good) / "trainer_state.json").string()).value(),
                        "trainer_state.json")
          .value();
  file.files["config.json"] = {static_cast<int64_t>(config.size()), Crc32(config)};
  ASSERT_TRUE(AtomicWriteFile((fs::path(good) / "trainer_state.json").string(), TrainerStateJson(file)).ok());
  ASSERT_TRUE(VerifyCheckpoint(good).ok()) << "every checksum verifies";
  const Status loads = CheckCheckpointLoads(good);
  ASSERT_FALSE(loads.ok());
  EXPECT_NE(loads.message().find("but the model (config.json) needs"), std::string::npos) << loads.message();
}

// A Hugging Face index names only its own folder's files (#48): one pointing out of it (../,
// absolute) or into a subfolder is refused before anything is read.
TEST(Checkpoint, AnIndexPointingOutOfItsFolderIsRefused) {
  fs::path dir = TempDir("motley_ckpt_index");
  for (const char* file : {"../model-00001.safetensors", "/etc/passwd", "sub/model.safetensors"}) {
    std::ofstream(dir / "model.safetensors.index.json")
        << nlohmann::json{{"weight_map", {{"model.embed_tokens.weight", file}}}}.dump();
    LlamaModel model(Tiny(), 1);
    const Status s = LoadModelWeights(dir.string(), *model);
    ASSERT_FALSE(s.ok()) << file;
    EXPECT_NE(s.message().find(std::string("is \"") + file + "\", not the name of a file in the folder"),
              std::string::npos)
        << s.message();
  }
}

TEST(Checkpoint, ASavedStepIsReplacedWholeAndAnInterruptedSavesLeftoversGo) {
  fs::path dir = TempDir("motley_ckpt_replace");
  LlamaModel model(Tiny(), 1);
  std::vector<ParamShard> shards = WholeParameterShards(*model);
  TrainerState state;
  state.step = 4;
  state.total_steps = 10;
  state.seed = 1;
  state.precision = "fp32";
  const std::string run = (dir / "run").string();
  ASSERT_TRUE(SaveRunCheckpoint(run, 0, *model, shards, state).ok());
  // What a save killed halfway leaves: a .tmp beside the checkpoints.
  fs::create_directories(fs::path(run) / "step-000005.tmp");
  std::ofstream(fs::path(run) / "step-000005.tmp" / "model.safetensors") << "half";
  // The same step saved again (a run resumed from it and stopped at once) with other weights.
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.add_(1.0);
  ASSERT_TRUE(SaveRunCheckpoint(run, 0, *model, shards, state).ok());
  EXPECT_FALSE(fs::exists(fs::path(run) / "step-000005.tmp"));
  EXPECT_FALSE(fs::exists(fs::path(run) / "step-000004.tmp"));
  LlamaModel back(Tiny(), 2);
  ASSERT_TRUE(LoadModelWeights((fs::path(run) / "step-000004").string(), *back).ok());
  for (const auto& p : model->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), back->named_parameters()[p.key()])) << p.key();
  fs::remove_all(dir);
}

TEST(Checkpoint, ARunsFolderIsLockedWhileItWrites) {
  fs::path dir = TempDir("motley_ckpt_lock");
  const std::string run = (dir / "run").string();
  {
    std::unique_ptr<RunDirLock> first = RunDirLock::Acquire(run).value();
    // flock locks belong to open files: a second open, as another process would make, is refused.
    Result<std::unique_ptr<RunDirLock>> second = RunDirLock::Acquire(run);
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.status().message().find("another run is writing its checkpoints and metrics here (pid " +
                                             std::to_string(::getpid())),
              std::string::npos)
        << second.status().message();
  }
  EXPECT_TRUE(RunDirLock::Acquire(run).ok());  // released with its holder
  fs::remove_all(dir);
}

TEST(Checkpoint, CorruptionIsDetectedWithAClearError) {
  fs::path dir = TempDir("motley_ckpt_bad");
  LlamaModel model(Tiny(), 1);
  std::vector<ParamShard> shards = WholeParameterShards(*model);
  const std::string ckpt = (dir / "c").string();
  TrainerState state;
  state.step = 1;
  ASSERT_TRUE(SaveCheckpoint(ckpt, *model, shards, state).ok());
  LlamaModel other(Tiny(), 2);
  // A flipped bit in the weights.
  fs::copy(ckpt, dir / "flipped", fs::copy_options::recursive);
  FlipByte(dir / "flipped" / "model.safetensors", 5);
  Status s = LoadModelWeights((dir / "flipped").string(), *other);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.safetensors: checksum mismatch"), std::string::npos) << s.message();
  // Truncated optimizer state.
  fs::copy(ckpt, dir / "cut", fs::copy_options::recursive);
  fs::resize_file(dir / "cut" / "optimizer.safetensors", 4);
  std::vector<ParamShard> other_shards = WholeParameterShards(*other);
  Result<TrainerState> st = LoadTrainingState((dir / "cut").string(), other_shards);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("4 bytes but the checkpoint recorded"), std::string::npos)
      << st.status().message();
  // An edited trainer state.
  fs::copy(ckpt, dir / "edited", fs::copy_options::recursive);
  {
    std::string text = ReadFileToString((dir / "edited" / "trainer_state.json").string()).value();
    text.replace(text.find("\"step\": 1"), 9, "\"step\": 2");
    std::ofstream((dir / "edited" / "trainer_state.json").string()) << text;
  }
  s = LoadModelWeights((dir / "edited").string(), *other);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("trainer_state.json: checksum mismatch"), std::string::npos) << s.message();
  // The step a checkpoint holds is read through the same check.
  EXPECT_EQ(CheckpointStep(ckpt).value(), 1);
  EXPECT_FALSE(CheckpointStep((dir / "edited").string()).ok());
  // Nothing was half-loaded into the model from the corrupted checkpoints' weights file.
  EXPECT_TRUE(LoadModelWeights(ckpt, *other).ok());
  fs::remove_all(dir);
}

TEST(Checkpoint, LoadsAShardedHuggingFaceDirectory) {
  fs::path dir = TempDir("motley_hf");
  ModelSpec spec = Tiny();
  LlamaModel source(spec, 11);
  // As Hugging Face writes it: bf16 shards, an index, config.json, and a stray rotary buffer.
  std::vector<NamedTensor> first, second;
  int i = 0;
  nlohmann::json weight_map;
  for (const auto& p : source->named_parameters()) {
    const bool in_first = i++ % 2 == 0;
    (in_first ? first : second).push_back({p.key(), p.value().to(torch::kBFloat16)});
    weight_map[p.key()] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  second.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", torch::ones({4})});
  weight_map["model.layers.0.self_attn.rotary_emb.inv_freq"] = "model-00002-of-00002.safetensors";
  ASSERT_TRUE(WriteSafetensors((dir / "model-00001-of-00002.safetensors").string(), first, {}).ok());
  ASSERT_TRUE(WriteSafetensors((dir / "model-00002-of-00002.safetensors").string(), second, {}).ok());
  std::ofstream(dir / "model.safetensors.index.json")
      << nlohmann::json({{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}).dump();
  std::ofstream(dir / "config.json") << HfConfigJson(spec, "bfloat16");

  LlamaModel loaded(LoadCheckpointModelSpec(dir.string()).value(), 0);
  ASSERT_TRUE(LoadModelWeights(dir.string(), *loaded).ok());
  for (const auto& p : source->named_parameters())
    EXPECT_TRUE(
        torch::equal(loaded->named_parameters()[p.key()], p.value().to(torch::kBFloat16).to(torch::kFloat32)))
        << p.key();
  // A weight missing from the index is an error naming it.
  weight_map.erase("lm_head.weight");
  std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json({{"weight_map", weight_map}}).dump();
  Status s = LoadModelWeights(dir.string(), *loaded);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing 1 weight(s), first lm_head.weight"), std::string::npos) << s.message();
  fs::remove_all(dir);
}

// A sharded checkpoint as four ranks would write it: tensor-parallel pairs (the split weights as
// two slices), each slice's elements cut between two data-parallel ranks at uneven points, the
// weights no team splits written by the first pair only. Loading assembles every parameter and
// moment exactly; the export is the consolidated form of the same state.
TEST(ShardedCheckpoint, PiecesFromAnyLayoutLoadAsTheWholeModel) {
  fs::path run = TempDir("motley_sharded");
  const ModelSpec spec = Tiny();
  LlamaModel model(spec, 3);
  model->set_precision(Precision::kFp64);
  std::vector<ParamShard> shards = WholeParameterShards(*model);
  torch::manual_seed(5);
  for (auto& s : shards) {
    s.exp_avg = torch::randn_like(s.param);
    s.exp_avg_sq = torch::rand_like(s.param);
  }
  std::vector<std::vector<StatePiece>> ranks(4);
  for (const auto& s : shards) {
    const int tp = IsSplitParameter(s.name) ? 2 : 1;  // the layers' matrices, the embedding and the head
    for (int t = 0; t < tp; ++t) {
      auto slice = [&](const torch::Tensor& x) {
        return (tp > 1 ? SliceParameter(spec, s.name, x, t, tp) : x).contiguous().reshape(-1);
      };
      const torch::Tensor v = slice(s.param.detach()), m = slice(s.exp_avg), w = slice(s.exp_avg_sq);
      const int64_t cut = v.numel() / 3;  // ranks 2t and 2t+1 hold a third and the rest
      for (int half = 0; half < 2; ++half) {
        const int64_t begin = half == 0 ? 0 : cut, count = half == 0 ? cut : v.numel() - cut;
        ranks[2 * t + half].push_back({s.name,
                                       s.param.sizes().vec(),
                                       tp,
                                       t,
                                       begin,
                                       v.narrow(0, begin, count),
                                       m.narrow(0, begin, count),
                                       w.narrow(0, begin, count),
                                       0,
                                       {}});
      }
    }
  }
  TrainerState state;
  state.step = 7;
  state.total_steps = 20;
  state.precision = "fp64";
  const std::string tmp = BeginShardedCheckpoint(run.string(), 7).value();
  std::vector<CheckpointFileRecord> records;
  for (int r = 0; r < 4; ++r) records.push_back(WriteRankShards(tmp, r, ranks[r]).value());
  // A rank's file missing from the records: its pieces leave holes, and nothing moves into place.
  std::vector<CheckpointFileRecord> lost = records;
  lost[3] = {};
  Result<std::string> holes = FinishShardedCheckpoint(run.string(), 2, tmp, spec, lost, state);
  ASSERT_FALSE(holes.ok());
  EXPECT_NE(holes.status().message().find("(slice 1 of 2): the pieces cover"), std::string::npos)
      << holes.status().message();
  EXPECT_FALSE(fs::exists(run / "latest"));
  const std::string dir = FinishShardedCheckpoint(run.string(), 2, tmp, spec, records, state).value();
  EXPECT_EQ(dir, (run / "step-000007").string());
  EXPECT_TRUE(IsShardedCheckpoint(dir));
  EXPECT_FALSE(fs::exists(run / "step-000007.tmp"));
  EXPECT_FALSE(fs::exists(run / "step-000007" / "model.safetensors"));
  EXPECT_EQ(ReadFileToString((run / "latest").string()).value(), "step-000007\n");

  auto expect_same = [&](LlamaModelImpl& got, std::vector<ParamShard>& got_shards) {
    auto want = model->named_parameters();
    for (const auto& p : got.named_parameters())
      EXPECT_TRUE(torch::equal(p.value(), want[p.key()])) << p.key();
    for (size_t i = 0; i < shards.size(); ++i) {
      EXPECT_TRUE(torch::equal(got_shards[i].exp_avg, shards[i].exp_avg)) << shards[i].name;
      EXPECT_TRUE(torch::equal(got_shards[i].exp_avg_sq, shards[i].exp_avg_sq)) << shards[i].name;
    }
  };
  LlamaModel loaded(spec, 99);
  loaded->set_precision(Precision::kFp64);
  ASSERT_TRUE(LoadModelWeights(dir, *loaded).ok());
  std::vector<ParamShard> loaded_shards = WholeParameterShards(*loaded);
  Result<TrainerState> s = LoadTrainingState(dir, loaded_shards);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->step, 7);
  expect_same(*loaded, loaded_shards);

  // Only some parameters (a rank's own): the others keep their values.
  LlamaModel partial(spec, 99);
  partial->set_precision(Precision::kFp64);
  const torch::Tensor before = partial->named_parameters()["model.embed_tokens.weight"].clone();
  ASSERT_TRUE(LoadModelWeights(dir, *partial, {"model.layers.1.mlp.up_proj.weight"}).ok());
  EXPECT_TRUE(torch::equal(partial->named_parameters()["model.layers.1.mlp.up_proj.weight"],
                           model->named_parameters()["model.layers.1.mlp.up_proj.weight"]));
  EXPECT_TRUE(torch::equal(partial->named_parameters()["model.embed_tokens.weight"], before));

  // The export: consolidated, and the same state.
  const std::string out = (run / "export").string();
  ASSERT_TRUE(ExportCheckpoint(dir, out).ok());
  EXPECT_TRUE(fs::exists(fs::path(out) / "model.safetensors"));
  EXPECT_FALSE(IsShardedCheckpoint(out));
  LlamaModel exported(spec, 99);
  exported->set_precision(Precision::kFp64);
  ASSERT_TRUE(LoadModelWeights(out, *exported).ok());
  std::vector<ParamShard> exported_shards = WholeParameterShards(*exported);
  ASSERT_TRUE(LoadTrainingState(out, exported_shards).ok());
  expect_same(*exported, exported_shards);
  EXPECT_TRUE(VerifyCheckpoint(dir).ok());

  // A flipped byte in one rank's file: named, with what to do.
  FlipByte(fs::path(dir) / "rank-00003.safetensors", 5);
  LlamaModel again(spec, 99);
  again->set_precision(Precision::kFp64);
  Status corrupt = LoadModelWeights(dir, *again);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_NE(corrupt.message().find("rank-00003.safetensors: checksum mismatch"), std::string::npos)
      << corrupt.message();
  EXPECT_NE(corrupt.message().find("use another checkpoint"), std::string::npos);
  EXPECT_FALSE(VerifyCheckpoint(dir).ok());
  fs::remove_all(run);
}

TEST(LossScaler, SkipsOverflowsHalvesAndGrows) {
  torch::Tensor p = torch::zeros({4});
  std::vector<ParamShard> shards(1);
  shards[0].param = p;
  shards[0].grad = torch::full({4}, 8.0);
  LossScaler scaler({.initial_scale = 4, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 2});
  EXPECT_TRUE(scaler.UnscaleAndUpdate(shards));
  EXPECT_TRUE(torch::equal(shards[0].grad, torch::full({4}, 2.0)));
  EXPECT_EQ(scaler.scale(), 4);
  shards[0].grad.fill_(8.0);
  EXPECT_TRUE(scaler.UnscaleAndUpdate(shards));
  EXPECT_EQ(scaler.scale(), 8);  // two clean steps: grows
  shards[0].grad[1] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(scaler.UnscaleAndUpdate(shards));
  EXPECT_EQ(scaler.scale(), 4);  // overflow: halves, and the step is skipped
  EXPECT_EQ(scaler.good_steps(), 0);
}

}  // namespace
}  // namespace motley
