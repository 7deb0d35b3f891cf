#include "core/checkpoint_format.h"

#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"

namespace motley {
namespace {

TrainerStateFile Example() {
  TrainerStateFile f;
  f.state.step = 12;
  f.state.updates = 11;
  f.state.total_steps = 300;
  f.state.seed = 1234;
  f.state.tokens_seen = 49152;
  f.state.loss_scale = 1024;
  f.state.precision = "fp16";
  f.state.job_file = "job.toml";
  f.files["model.safetensors"] = {4200, 0x0a1b2c3d};
  return f;
}

// Re-signs a document edited by hand, as someone forging a state file would: the checksum then
// matches, and only the field checks stand between the reader and a field of the wrong type.
std::string Resigned(nlohmann::json j) {
  j.erase("checksum");
  j["checksum"] = fmt::format("{:08x}", Crc32(j.dump()));
  return j.dump();
}

TEST(TrainerStateFormat, RoundTrips) {
  const TrainerStateFile f = Example();
  Result<TrainerStateFile> back = ParseTrainerState(TrainerStateJson(f), "s.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->state.step, 12);
  EXPECT_EQ(back->state.updates, 11);
  EXPECT_EQ(back->state.seed, 1234u);
  EXPECT_EQ(back->state.loss_scale, 1024);
  EXPECT_EQ(back->state.precision, "fp16");
  EXPECT_EQ(back->files.at("model.safetensors").bytes, 4200);
  EXPECT_EQ(back->files.at("model.safetensors").crc32, 0x0a1b2c3du);
}

// #28: a trainer_state.json with a recomputed checksum but a field of the wrong type ended in a
// JSON type error; each field is now checked, and the error names the file and the field.
TEST(TrainerStateFormat, EveryFieldIsCheckedEvenUnderAValidChecksum) {
  const nlohmann::json good = nlohmann::json::parse(TrainerStateJson(Example()));
  struct Case {
    const char* pointer;
    nlohmann::json value;
    const char* message;
  };
  for (const Case& c :
       {Case{"/step", "twelve", "\"step\" must be an integer >= 0, got \"twelve\""},
        Case{"/step", -3, "\"step\" must be an integer >= 0, got -3"},
        Case{"/updates", 13, "\"updates\" (13) exceeds \"step\" (12)"},
        Case{"/seed", -1, "\"seed\" must be a non-negative integer, got -1"},
        Case{"/loss_scale", "big", "\"loss_scale\" must be a positive number"},
        Case{"/precision", 5, "\"precision\" must be a string, got 5"},
        Case{"/files/model.safetensors", 7, "files.\"model.safetensors\" must be"},
        Case{"/files/model.safetensors/crc32", "xyz", "files.\"model.safetensors\".crc32: not 8"},
        Case{"/files/model.safetensors/bytes", -1, "files.\"model.safetensors\".bytes must be a size"},
        Case{"/files/..", {{"bytes", 1}, {"crc32", "00000000"}}, "files: \"..\" is not a file name"}}) {
    nlohmann::json j = good;
    j[nlohmann::json::json_pointer(c.pointer)] = c.value;
    Result<TrainerStateFile> r = ParseTrainerState(Resigned(j), "ck/trainer_state.json");
    ASSERT_FALSE(r.ok()) << c.pointer;
    EXPECT_NE(r.status().message().find(std::string("ck/trainer_state.json: ") + c.message),
              std::string::npos)
        << r.status().message();
  }
  nlohmann::json edited = good;
  edited["step"] = 13;  // not re-signed
  EXPECT_NE(ParseTrainerState(edited.dump(), "s.json").status().message().find("checksum mismatch"),
            std::string::npos);
  EXPECT_NE(ParseTrainerState("[1, 2", "s.json").status().message().find("s.json:1:"), std::string::npos);
}

// The fuzzer's seeds (fuzz/seeds/) are documents the readers accept, so fuzzing starts from there.
TEST(TrainerStateFormat, TheFuzzSeedsAreAccepted) {
  const std::string seeds = std::string(MOTLEY_SOURCE_DIR) + "/fuzz/seeds/";
  Result<TrainerStateFile> state =
      ParseTrainerState(ReadFileToString(seeds + "trainer_state.json").value(), "trainer_state.json");
  ASSERT_TRUE(state.ok()) << state.status().message();
  EXPECT_EQ(state->state.step, 12);
  EXPECT_EQ(ParseLatest(ReadFileToString(seeds + "latest").value(), "latest").value(), "step-000012");
}

TEST(LatestFile, NamesAStepFolderOrSaysWhatIsWrong) {
  EXPECT_EQ(ParseLatest("step-000012\n", "run/latest").value(), "step-000012");
  EXPECT_EQ(CheckpointFolderName(12), "step-000012");
  for (const std::string& bad : {std::string(5000, 'x'), std::string("../../etc"), std::string("step-"),
                                 std::string("step-12/../x"), std::string("")}) {
    Result<std::string> r = ParseLatest(bad, "run/latest");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("run/latest: must name the newest checkpoint folder"),
              std::string::npos)
        << r.status().message();
    EXPECT_LT(r.status().message().size(), 400u);  // a 5,000-character name is not repeated whole
  }
}

// An island's own checkpoint (#52) sits in the run folder's islands/island-<i>/, at the island's own
// step: found beside a run checkpoint named with or without a trailing slash, "" where there is none.
TEST(IslandCheckpoint, IsFoundBesideTheRunCheckpointAtTheIslandsOwnStep) {
  const std::filesystem::path run = std::filesystem::path(::testing::TempDir()) / "motley-island-checkpoint";
  std::filesystem::remove_all(run);
  const std::string island1 = IslandCheckpointRunDir(run.string(), 1);
  EXPECT_EQ(island1, (run / "islands" / "island-1").string());
  std::filesystem::create_directories(std::filesystem::path(island1) / "step-000003");
  const std::string checkpoint = (run / "step-000004").string();
  EXPECT_EQ(IslandMomentsCheckpoint(checkpoint, 1, 3), island1 + "/step-000003");
  EXPECT_EQ(IslandMomentsCheckpoint(checkpoint + "/", 1, 3), island1 + "/step-000003");
  EXPECT_EQ(IslandMomentsCheckpoint(checkpoint, 1, 4), "");  // not at that step
  EXPECT_EQ(IslandMomentsCheckpoint(checkpoint, 2, 3), "");  // no such island's
  std::filesystem::remove_all(run);
}

}  // namespace
}  // namespace motley
