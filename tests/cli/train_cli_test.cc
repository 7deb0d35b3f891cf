// End-to-end tests of `motley data prepare`, `motley train` and `motley eval`.
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "core/file_io.h"

namespace {

using namespace motley_test;

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::string SmallText() {
  std::string text;
  for (int i = 0; i < 600; ++i)
    text +=
        "The " + std::to_string(i % 7) + " cats sat on " + std::to_string(i % 5) + " mats near the river.\n";
  return text;
}

std::string JobToml(const TempDir& dir, int steps) {
  return "model = \"llama-1m\"\ncluster = \"local-emulated\"\n"
         "[training]\nsteps = " +
         std::to_string(steps) +
         "\nseq_len = 64\nglobal_batch_sequences = 4\nprecision = \"fp32\"\n"
         "[data]\ntrain = \"data\"\nvalidation_interval_steps = 2\nvalidation_sequences = 4\n"
         "[lr_schedule]\nwarmup_steps = 1\n"
         "[checkpoint]\ndir = \"" +
         dir.Join("run") + "\"\n";
}

// The default job at a fraction of its size (32 tokens a sequence, 4 sequences a step): for the
// tests of what `motley train` does around training (its files, its refusals), where the size of a
// step only costs time.
std::string SmallDefaultJob(const TempDir& dir) {
  std::string job =
      motley::ReadFileToString(std::string(MOTLEY_SOURCE_DIR) + "/examples/jobs/default.toml").value();
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"seq_len = 128", "seq_len = 32"},
                                 {"global_batch_sequences = 32", "global_batch_sequences = 4"}}) {
    const size_t at = job.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) job.replace(at, from.size(), to);
  }
  return dir.Write("small.toml", job);
}

TEST(TrainCli, PrepareTrainResumeAndEvaluate) {
  TempDir dir;
  const std::string text = dir.Write("text.txt", SmallText());
  CliRun prep = Motley("data prepare --input " + text + " -o " + dir.Join("data"));
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  EXPECT_CONTAINS(prep.output, "validation:");
  const std::string job = dir.Write("job.toml", JobToml(dir, 4));
  CliRun train = Motley("train " + job + " --single-process --steps 3");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_CONTAINS(train.output, "step 3/3 | loss");
  EXPECT_CONTAINS(train.output, "checkpoint: " + dir.Join("run") + "/step-000003");
  // Continue the run to step 4 (its schedule is that of a 4-step run from the start).
  CliRun more = Motley("train " + job + " --single-process --resume " + dir.Join("run"));
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_CONTAINS(more.output, "steps 4..4 of 4");

  std::vector<nlohmann::json> metrics = ReadJsonLines(dir.Join("run") + "/metrics.jsonl");
  double last_val = -1;
  int steps_seen = 0;
  for (const auto& m : metrics) {
    if (m.contains("val_loss")) last_val = m["val_loss"].get<double>();
    if (m.contains("loss")) {
      ++steps_seen;
      for (const char* key : {"step", "loss", "lr", "tokens_per_s", "grad_norm"})
        EXPECT_TRUE(m.contains(key)) << key;
    }
  }
  EXPECT_EQ(steps_seen, 4);
  // eval on the checkpoint and the same validation windows gives the trainer's final validation loss.
  CliRun eval = Motley("eval --checkpoint " + dir.Join("run") + " --data " + dir.Join("data") +
                           " --seq-len 64 --num-sequences 4 --json",
                       /*stdout_only=*/true);
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  nlohmann::json e = nlohmann::json::parse(eval.output);
  EXPECT_DOUBLE_EQ(e["loss"].get<double>(), last_val);
  EXPECT_EQ(e["tokens"].get<int64_t>(), 256);

  // Asking for more windows than the file holds is refused with the count.
  CliRun too_many = Motley("eval --checkpoint " + dir.Join("run") + " --data " + dir.Join("data/val.bin") +
                           " --seq-len 64 --num-sequences 100000");
  EXPECT_EQ(too_many.exit_code, 1);
  EXPECT_CONTAINS(too_many.output, "ask for at most");
  // Windows longer than the model's positions are refused, naming its limit (#48).
  CliRun too_long = Motley("eval --checkpoint " + dir.Join("run") + " --data " + dir.Join("data/val.bin") +
                           " --seq-len 100000 --num-sequences 1");
  EXPECT_EQ(too_long.exit_code, 1);
  EXPECT_CONTAINS(too_long.output, "--seq-len 100000: longer than the");
  EXPECT_CONTAINS(too_long.output, "give at most");
  // A corrupted checkpoint: the checksum catches it.
  {
    std::fstream f(dir.Join("run/step-000004/model.safetensors"),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  CliRun corrupt = Motley("eval --checkpoint " + dir.Join("run") + " --data " + dir.Join("data") +
                          " --seq-len 64 --num-sequences 4");
  EXPECT_EQ(corrupt.exit_code, 1);
  EXPECT_CONTAINS(corrupt.output, "model.safetensors: checksum mismatch");
  // The same weights as a Hugging Face folder (no checksums) with a corrupted weight: refused by the
  // values no trained model holds (#28: it evaluated to exit 0), naming the tensor.
  fs::create_directories(dir.Join("hf"));
  for (const char* name : {"config.json", "model.safetensors"})
    fs::copy_file(dir.Join("run/step-000003/") + name, dir.Join("hf/") + name);
  CliRun clean = Motley("eval --checkpoint " + dir.Join("hf") + " --data " + dir.Join("data") +
                        " --seq-len 64 --num-sequences 4");
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  {
    std::fstream f(dir.Join("hf/model.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-64, std::ios::end);
    for (int i = 0; i < 8; ++i) f.put('\x7f');  // 0x7f7f7f7f: 3.4e38
  }
  CliRun hf = Motley("eval --checkpoint " + dir.Join("hf") + " --data " + dir.Join("data") +
                     " --seq-len 64 --num-sequences 4");
  EXPECT_EQ(hf.exit_code, 1) << hf.output;
  EXPECT_CONTAINS(hf.output, "holds an implausibly large value (largest magnitude 3.39");
  EXPECT_CONTAINS(hf.output, "the file is taken for corrupted; download or export it again");
}

// `motley train --init-from` and [model] init_from (#47): the first step trains the folder's
// weights — on data whose every window is alike, its loss is `motley eval` of the folder — and a
// shape the job gives that disagrees with the folder's config.json is one error naming both.
TEST(TrainCli, AFineTuneStartsFromTheFoldersWeights) {
  TempDir dir;
  // A folder as Hugging Face tools write one: a short run's weights, config.json and model.safetensors.
  const std::string text = dir.Write("text.txt", SmallText());
  ASSERT_EQ(Motley("data prepare --input " + text + " -o " + dir.Join("data")).exit_code, 0);
  const std::string job = dir.Write("job.toml", JobToml(dir, 2));
  CliRun first = Motley("train " + job + " --single-process");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  fs::create_directories(dir.Join("hf"));
  for (const char* name : {"config.json", "model.safetensors"})
    fs::copy_file(dir.Join("run/step-000002/") + name, dir.Join("hf/") + name);
  // Data of one repeated byte: every training window is the first validation window.
  ASSERT_EQ(Motley("data prepare --input " + dir.Write("same.txt", std::string(8000, 'e')) + " -o " +
                   dir.Join("same"))
                .exit_code,
            0);
  const std::string ft =
      dir.Write("ft.toml",
                "model = \"llama-1m\"\ncluster = \"local-emulated\"\n[training]\nsteps = 1\nseq_len = 64\n"
                "global_batch_sequences = 4\nprecision = \"fp32\"\n[data]\ntrain = \"same\"\n"
                "validation_interval_steps = 0\n[checkpoint]\ndir = \"" +
                    dir.Join("ft") + "\"\n");
  CliRun tuned = Motley("train " + ft + " --single-process --no-validation --init-from " + dir.Join("hf"));
  ASSERT_EQ(tuned.exit_code, 0) << tuned.output;
  double first_loss = -1;
  for (const auto& m : ReadJsonLines(dir.Join("ft") + "/metrics.jsonl")) {
    if (m.contains("loss") && m["step"] == 1) first_loss = m["loss"].get<double>();
  }
  CliRun eval = Motley("eval --checkpoint " + dir.Join("hf") + " --data " + dir.Join("same") +
                           " --seq-len 64 --num-sequences 4 --json",
                       /*stdout_only=*/true);
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  const double eval_loss = nlohmann::json::parse(eval.output)["loss"].get<double>();
  EXPECT_NEAR(first_loss, eval_loss, 1e-5 * eval_loss);
  // Without the folder the same job starts from random weights: a loss near ln(256).
  CliRun scratch = Motley("train " + ft + " --single-process --no-validation --overwrite");
  ASSERT_EQ(scratch.exit_code, 0) << scratch.output;
  for (const auto& m : ReadJsonLines(dir.Join("ft") + "/metrics.jsonl")) {
    if (m.contains("loss") && m["step"] == 1) {
      EXPECT_GT(std::abs(m["loss"].get<double>() - eval_loss), 0.1);
    }
  }

  // [model] init_from in the job file, relative to it; a shape that disagrees is refused, naming both.
  const std::string in_job =
      dir.Write("in-job.toml",
                "cluster = \"local-emulated\"\n[model]\ninit_from = \"hf\"\nshape = \"llama-tiny\"\n"
                "[training]\nsteps = 1\nseq_len = 16\nglobal_batch_sequences = 4\nprecision = \"fp32\"\n");
  CliRun bad = Motley("train " + in_job + " --single-process");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_CONTAINS(bad.output, "in-job.toml:3:");
  EXPECT_CONTAINS(bad.output, "the job's model");
  EXPECT_CONTAINS(bad.output,
                  "llama-tiny and " + dir.Join("hf") + "/config.json disagree (hidden_size 32 vs 128");
  CliRun wrong = Motley("train " + job + " --single-process --init-from " + dir.Join("data"));
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_CONTAINS(wrong.output, "not a Hugging Face model folder (no config.json)");
  CliRun other = Motley("validate " + dir.Write("ok-job.toml",
                                                "cluster = \"local-emulated\"\n[model]\ninit_from = "
                                                "\"hf\"\n[training]\nsteps = 1\nseq_len = 16\n"
                                                "global_batch_sequences = 4\nprecision = \"fp32\"\n"));
  EXPECT_EQ(other.exit_code, 0) << other.output;
}

// The README's fine-tuning example, as its commands say, in a copy of the repository's layout: a
// tokenizer trained on tinyshakespeare, a Hugging Face folder of fresh weights with it, the text
// prepared with the folder's tokenizer, then examples/jobs/finetune.toml (shortened, one process):
// validation perplexity falls.
TEST(TrainCli, TheFineTuneExampleRunsAsTheReadmeSays) {
  const fs::path shakespeare =
      fs::path(MOTLEY_SOURCE_DIR) / ".." / "shared" / "data" / "tinyshakespeare" / "input.txt";
  if (!fs::exists(shakespeare))
    GTEST_SKIP() << shakespeare << " is missing (the example reads it from ../shared)";
  TempDir dir;
  fs::create_directories(dir.path() / "examples" / "jobs");
  fs::copy_file(Example("jobs/finetune.toml"), dir.path() / "examples" / "jobs" / "finetune.toml");
  const std::string root = dir.path().string(), text = shakespeare.string();
  for (const std::string& step :
       {"data train-tokenizer --input " + text + " --vocab-size 1024 -o build/finetune/hf",
        std::string("init-model --hf build/finetune/hf --model llama-1m"),
        "data prepare --init-from build/finetune/hf --input " + text + " -o build/finetune/data",
        std::string("validate examples/jobs/finetune.toml")}) {
    CliRun r = Motley(step, false, root);
    ASSERT_EQ(r.exit_code, 0) << step << "\n" << r.output;
  }
  CliRun train = Motley("train examples/jobs/finetune.toml --single-process --steps 40", false, root);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  std::vector<double> perplexities;
  std::istringstream lines(train.output);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find("(perplexity ");
    if (at != std::string::npos && line.find(": validation loss") != std::string::npos)
      perplexities.push_back(std::stod(line.substr(at + 12)));
  }
  // Fresh weights start near the vocabulary's size (a uniform guess over 1,024 tokens).
  ASSERT_GE(perplexities.size(), 2u) << train.output;
  EXPECT_LT(perplexities.back(), perplexities.front()) << train.output;
  EXPECT_LT(perplexities.back(), 0.5 * 1024) << train.output;
}

// A `latest` naming a 5,000-character folder (the filesystem refused it with an exception that
// ended in "terminate called") is one clear error naming the file; meaningless step counts are
// refused, not ignored.
TEST(TrainCli, ABadLatestFileIsOneMessageAndBadStepCountsAreRefused) {
  TempDir dir;
  fs::create_directories(dir.path() / "run");
  dir.Write("run/latest", std::string(5000, 'x') + "\n");
  dir.Write("val.bin", "");
  CliRun r = Motley("eval --checkpoint " + dir.Join("run") + " --data " + dir.Join("val.bin") +
                    " --seq-len 8 --num-sequences 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output,
                  dir.Join("run/latest") + ": must name the newest checkpoint folder as motley writes it");
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  CliRun steps = Motley("train default --steps -5");
  EXPECT_EQ(steps.exit_code, 2) << steps.output;
  EXPECT_CONTAINS(steps.output, "--steps: must be at least 1, got -5");
}

// Islands train in one process so far (#52): on the default job's 4-device cluster `motley train`
// says so instead of launching ranks, and with --single-process it trains them, each outer step's
// line saying so.
TEST(TrainCli, IslandsTrainInOneProcessAndSaySoElsewhere) {
  TempDir dir;
  std::string job = motley::ReadFileToString(SmallDefaultJob(dir)).value();
  job += "\n[islands]\ncount = 2\ninner_steps = 2\n";
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"steps = 300", "steps = 4"},
                                 {"validation_interval_steps = 50", "validation_interval_steps = 2"},
                                 {"warmup_steps = 30", "warmup_steps = 1"},
                                 {"checkpoints/default", dir.Join("run")}}) {
    const size_t at = job.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    job.replace(at, from.size(), to);
  }
  const std::string path = dir.Write("islands.toml", job);
  CliRun refused = Motley("train " + path);
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_CONTAINS(refused.output, "[islands] count = 2: islands train in one process, one after another");
  CliRun run = Motley("train " + path + " --single-process");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  int outer_steps = 0;
  for (const nlohmann::json& line : ReadJsonLines(dir.Join("run/metrics.jsonl")))
    if (line.contains("outer_step")) {
      ++outer_steps;
      EXPECT_EQ(line["islands"], 2);
      EXPECT_EQ(line["step"].get<int>() % 2, 0) << line.dump();
    }
  EXPECT_EQ(outer_steps, 2);
}

// A metrics line that cannot be written (here a full device) stops the run with an error naming
// the file (#28: metrics were lost without a word on a full disk).
TEST(TrainCli, MetricsThatCannotBeWrittenStopTheRunNamingTheFile) {
  TempDir dir;
  CliRun r = Motley("train " + SmallDefaultJob(dir) +
                        " --single-process --steps 2 --no-checkpoint --no-validation --metrics /dev/full",
                    false, dir.path().string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "/dev/full: cannot append the metrics: No space left on device");
}

// A new run refuses a metrics file that holds another run's lines (#48: a fresh run appended to
// it, mixing two runs' steps) — unless told to add to it or to start it anew.
TEST(TrainCli, ANewRunRefusesAnotherRunsMetricsUnlessToldToAppendOrOverwrite) {
  TempDir dir;
  const std::string run = "train " + SmallDefaultJob(dir) +
                          " --single-process --steps 2 --no-checkpoint --no-validation --metrics m.jsonl";
  CliRun first = Motley(run, false, dir.path().string());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const size_t lines = ReadJsonLines(dir.Join("m.jsonl")).size();
  // --no-validation: no validation at all (the single-process trainer validated at step 0 regardless).
  EXPECT_EQ(first.output.find("validation loss"), std::string::npos) << first.output;
  for (const auto& line : ReadJsonLines(dir.Join("m.jsonl"))) EXPECT_FALSE(line.contains("val_loss")) << line;
  CliRun r = Motley(run, false, dir.path().string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "m.jsonl: holds another run's metrics");
  EXPECT_CONTAINS(r.output, "--metrics-append");
  EXPECT_EQ(ReadJsonLines(dir.Join("m.jsonl")).size(), lines);
  ASSERT_EQ(Motley(run + " --metrics-append", false, dir.path().string()).exit_code, 0);
  EXPECT_EQ(ReadJsonLines(dir.Join("m.jsonl")).size(), 2 * lines);
  ASSERT_EQ(Motley(run + " --overwrite", false, dir.path().string()).exit_code, 0);
  EXPECT_EQ(ReadJsonLines(dir.Join("m.jsonl")).size(), lines);
}

TEST(TrainCli, TwoRunsIntoOneFolderAtOnceRunExactlyOne) {
  TempDir dir;
  const std::string base = "cd '" + dir.path().string() + "' && " + MOTLEY_BIN + " train " +
                           SmallDefaultJob(dir) + " --single-process --no-validation";
  // Long enough that the second start finds the first still running (a few seconds).
  const std::string run = base + " --steps 150";
  Shell("(" + run + " > a.txt 2>&1; echo $? > a.rc) & (" + run + " > b.txt 2>&1; echo $? > b.rc) & wait");
  auto read = [&](const std::string& name) {
    std::ifstream in(dir.Join(name));
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string a = read("a.rc"), b = read("b.rc");
  EXPECT_TRUE((a == "0\n" && b == "1\n") || (a == "1\n" && b == "0\n"))
      << a << b << read("a.txt") << read("b.txt");
  EXPECT_CONTAINS(read(a == "1\n" ? "a.txt" : "b.txt"),
                  "checkpoints/default: another run is writing its checkpoints and metrics here (");
  // The survivor's metrics are its own: 150 steps, once each.
  std::ifstream metrics(dir.Join("checkpoints/default/metrics.jsonl"));
  int steps = 0;
  for (std::string line; std::getline(metrics, line);)
    steps += line.find("\"loss\"") != std::string::npos && line.find("\"val_loss\"") == std::string::npos;
  EXPECT_EQ(steps, 150);
  // Once it has ended, the folder is free: the next run resumes from it.
  CliRun next = RunCommandLine(base + " --resume checkpoints/default --steps 151 2>&1");
  EXPECT_EQ(next.exit_code, 0) << next.output;
  // A run that does not resume is refused there, unless it says to start over.
  CliRun again = RunCommandLine(base + " --steps 3 2>&1");
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_CONTAINS(again.output,
                  "checkpoints/default: holds another run's checkpoints (latest: step-000151); continue "
                  "that run with --resume checkpoints/default, start over here with --overwrite");
  CliRun over = RunCommandLine(base + " --steps 3 --overwrite 2>&1");
  ASSERT_EQ(over.exit_code, 0) << over.output;
  EXPECT_FALSE(fs::exists(dir.Join("checkpoints/default/step-000150")));
  std::ifstream fresh(dir.Join("checkpoints/default/metrics.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(fresh, line);)
    lines += line.find("\"loss\"") != std::string::npos && line.find("\"val_loss\"") == std::string::npos;
  EXPECT_EQ(lines, 3);  // this run's steps only
}

TEST(TrainCli, BadDataGetsOneClearError) {
  TempDir dir;
  ASSERT_EQ(
      Motley("data prepare --input " + dir.Write("t.txt", SmallText()) + " -o " + dir.Join("data")).exit_code,
      0);
  const std::string job = dir.Write("job.toml", JobToml(dir, 2));
  // Truncated shard.
  fs::resize_file(dir.Join("data/train.bin"), fs::file_size(dir.Join("data/train.bin")) - 7);
  CliRun cut = Motley("train " + job + " --single-process");
  EXPECT_EQ(cut.exit_code, 1);
  EXPECT_CONTAINS(cut.output, "train.bin: truncated or padded");
  // Wrong magic.
  dir.Write("data/train.bin", std::string(4096, 'x'));
  CliRun magic = Motley("train " + job + " --single-process");
  EXPECT_EQ(magic.exit_code, 1);
  EXPECT_CONTAINS(magic.output, "wrong magic");
  // Data tokenized for a larger vocabulary than the model's.
  dir.Write("data/data.json", R"({"format": "motley-data-1", "tokenizer": "big.model", "vocab_size": 32000,
                                  "train_files": ["train.bin"], "validation_file": "val.bin"})");
  CliRun vocab = Motley("train " + job + " --single-process");
  EXPECT_EQ(vocab.exit_code, 1);
  EXPECT_CONTAINS(vocab.output, "vocabulary of 32000 (big.model) but the model's vocab_size is 256");
  // A sentencepiece model that does not exist: the helper answers.
  CliRun spm = Motley("data prepare --input " + dir.Join("t.txt") + " --tokenizer " + dir.Join("none.model") +
                      " -o " + dir.Join("d2"));
  EXPECT_EQ(spm.exit_code, 1);
  EXPECT_CONTAINS(spm.output, "none.model: no such sentencepiece model");
}

// A plan given for another batch than the job's is one error, before anything is measured or any
// rank starts (before: four ranks each said it after the links were measured and the plan simulated).
TEST(TrainCli, APlanForAnotherBatchIsOneErrorBeforeAnythingStarts) {
  TempDir dir;
  std::string plan =
      motley::ReadFileToString(std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/local-even-dp.toml").value();
  const std::string from = "num_microbatches = [4, 4, 4, 4]";
  plan.replace(plan.find(from), from.size(), "num_microbatches = [4, 4, 4, 2]");
  const std::string path = dir.Write("short.plan.toml", plan);
  CliRun r = Motley("train default --steps 1 --plan " + path, false, dir.path().string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::string error =
      "short.plan.toml: the plan's microbatches add up to 28 sequences a step but the job";
  EXPECT_CONTAINS(r.output, error + " builtin:examples/jobs/default.toml has global_batch_sequences = 32");
  EXPECT_EQ(r.output.find(error), r.output.rfind(error)) << "said more than once: " << r.output;
  EXPECT_EQ(r.output.find("measure, plan"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("motley launch"), std::string::npos) << r.output;
}

// The built-in default job's ~1M-parameter model learns the built-in corpus: validation loss falls
// well below its starting value (ln 256 = 5.55 for uniform guesses) in a minute of CPU time.
TEST(TrainCli, DefaultModelLowersValidationLossOnTheBuiltinCorpus) {
  TempDir dir;
  CliRun train = Motley("train default --single-process --steps 60", false, dir.path().string());
  ASSERT_EQ(train.exit_code, 0) << train.output;
  std::map<int64_t, double> val;
  for (const auto& m : ReadJsonLines(dir.Join("checkpoints/default/metrics.jsonl")))
    if (m.contains("val_loss")) val[m["step"].get<int64_t>()] = m["val_loss"].get<double>();
  ASSERT_TRUE(val.count(0) && val.count(60));
  EXPECT_GT(val[0], 5.0);
  EXPECT_LT(val[60], 0.6 * val[0]) << train.output;
  EXPECT_TRUE(fs::exists(dir.Join("checkpoints/default/step-000060/model.safetensors")));
}

}  // namespace
