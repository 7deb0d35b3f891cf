#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sentencepiece_trainer.h>

#include "data/builtin_corpus.h"
#include "data/byte_level.h"
#include "data/data_prepare.h"
#include "data/data_sampler.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/token_dataset.h"
#include "data/token_file.h"
#include "data/training_data.h"

namespace motley {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

TEST(TokenFile, RoundTripsNarrowAndWideTokens) {
  fs::path dir = TempDir("motley_tokens");
  for (int64_t vocab : {256, 70000}) {
    std::vector<uint32_t> tokens;
    for (uint32_t i = 0; i < 1000; ++i) tokens.push_back((i * 7919) % vocab);
    const std::string path = (dir / ("t" + std::to_string(vocab) + ".bin")).string();
    ASSERT_TRUE(WriteTokenFile(path, tokens, vocab).ok());
    TokenFile f = TokenFile::Open(path, vocab).value();
    EXPECT_EQ(f.num_tokens(), 1000);
    EXPECT_EQ(f.bytes_per_token(), vocab > 65536 ? 4 : 2);
    std::vector<int64_t> all;
    ASSERT_TRUE(f.Copy(0, 1000, &all).ok());
    for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(all[i], tokens[i]);
    std::vector<int64_t> window;
    ASSERT_TRUE(f.Copy(10, 5, &window).ok());
    EXPECT_EQ(window[4], tokens[14]);
  }
  fs::remove_all(dir);
}

TEST(TokenFile, BadFilesGetClearErrors) {
  fs::path dir = TempDir("motley_bad_tokens");
  const std::string good = (dir / "good.bin").string();
  ASSERT_TRUE(WriteTokenFile(good, std::vector<uint32_t>(100, 200), 256).ok());
  // Truncated: cut the last tokens off.
  const std::string cut = (dir / "cut.bin").string();
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(cut) - 10);
  Result<TokenFile> truncated = TokenFile::Open(cut);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("truncated or padded: the header says 100 tokens"),
            std::string::npos)
      << truncated.status().message();
  // Wrong magic.
  const std::string text = (dir / "text.bin").string();
  std::ofstream(text) << std::string(2000, 'x');
  Result<TokenFile> magic = TokenFile::Open(text);
  ASSERT_FALSE(magic.ok());
  EXPECT_NE(magic.status().message().find("wrong magic"), std::string::npos);
  // Tokens beyond the model's vocabulary.
  Result<TokenFile> vocab = TokenFile::Open(good, 128);
  ASSERT_FALSE(vocab.ok());
  EXPECT_NE(vocab.status().message().find("token 200 at position 0 is outside the model's vocabulary of 128"),
            std::string::npos)
      << vocab.status().message();
  EXPECT_EQ(TokenFile::Open((dir / "missing.bin").string()).status().code(), StatusCode::kNotFound);
  fs::remove_all(dir);
}

// A shard cut short while a job reads it (#28: it was memory-mapped, and the job died of SIGBUS):
// the read that reaches past its new end is an error naming the file; what is still there reads.
TEST(TokenFile, AShardCutShortUnderARunningJobIsAnErrorNamingIt) {
  fs::path dir = TempDir("motley_cut_tokens");
  const std::string path = (dir / "train.bin").string();
  std::vector<uint32_t> tokens(5000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i % 251);
  ASSERT_TRUE(WriteTokenFile(path, tokens, 256).ok());
  TokenDataset data = TokenDataset::OpenFiles({path}, 256).value();
  fs::resize_file(path, 1024 + 2 * 1000);  // the header and the first 1,000 tokens stay
  std::vector<int64_t> out;
  ASSERT_TRUE(data.Copy(990, 10, &out).ok());
  EXPECT_EQ(out[9], 999 % 251);
  out.clear();
  Status cut = data.Copy(3000, 64, &out);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(
      cut.message().find(path + ": changed while the job reads it: tokens 3000..3064 are gone (the file now "
                                "has 3024 bytes, 11024 when it was opened)"),
      std::string::npos)
      << cut.message();
  std::vector<int64_t> windows;
  EXPECT_FALSE(SampleTrainingWindows(data, 1, 0, 0, 64, 128, &windows).ok());  // some window lies beyond
  fs::remove_all(dir);
}

// The header reader alone (fuzzed): sizes and counts checked against the file, never trusted.
TEST(TokenFile, HeadersAreCheckedAgainstTheFileSize) {
  std::string header(1024, '\0');
  const int32_t fields[3] = {kTokenFileMagic, 1, 10};
  std::memcpy(header.data(), fields, sizeof fields);
  EXPECT_EQ(ParseTokenFileHeader(header, 1024 + 20, "a.bin").value().num_tokens, 10);
  EXPECT_NE(ParseTokenFileHeader(header, 1024 + 22, "a.bin").status().message().find("truncated or padded"),
            std::string::npos);
  const int32_t negative[3] = {kTokenFileMagic, 2, -4};
  std::memcpy(header.data(), negative, sizeof negative);
  EXPECT_FALSE(ParseTokenFileHeader(header, 1024 - 16, "a.bin").ok());
  EXPECT_NE(ParseTokenFileHeader(header.substr(0, 5), 5, "a.bin").status().message().find("shorter than the"),
            std::string::npos);
}

TEST(DataSampler, DeterministicUniformAndInRange) {
  std::set<int64_t> starts;
  for (int64_t i = 0; i < 2000; ++i) {
    const int64_t s = SampleWindowStart(1234, 7, i, 10000, 128);
    EXPECT_EQ(s, SampleWindowStart(1234, 7, i, 10000, 128));
    EXPECT_GE(s, 0);
    EXPECT_LE(s + 128 + 1, 10000);
    starts.insert(s);
  }
  EXPECT_GT(starts.size(), 1700u);  // well spread
  EXPECT_NE(SampleWindowStart(1234, 7, 0, 10000, 128), SampleWindowStart(1234, 8, 0, 10000, 128));
  EXPECT_NE(SampleWindowStart(1234, 7, 0, 10000, 128), SampleWindowStart(99, 7, 0, 10000, 128));
}

TEST(BuiltinCorpus, IsDeterministicTextWithStructure) {
  const std::string& c = BuiltinCorpus();
  EXPECT_GE(c.size(), 400000u);
  EXPECT_EQ(c.substr(0, 5), "When ");
  EXPECT_NE(c.find(" make "), std::string::npos);
  // Byte-level: a small alphabet, far from random bytes.
  std::set<char> alphabet(c.begin(), c.end());
  EXPECT_LT(alphabet.size(), 60u);
}

TEST(TokenDataset, WindowsCrossShardBoundaries) {
  fs::path dir = TempDir("motley_dataset");
  std::vector<uint32_t> all;
  std::vector<std::string> paths;
  for (int shard = 0; shard < 3; ++shard) {
    std::vector<uint32_t> t;
    for (int i = 0; i < 50 + 10 * shard; ++i) t.push_back(static_cast<uint32_t>(all.size() + t.size()) % 250);
    all.insert(all.end(), t.begin(), t.end());
    paths.push_back((dir / ("s" + std::to_string(shard) + ".bin")).string());
    ASSERT_TRUE(WriteTokenFile(paths.back(), t, 256).ok());
  }
  TokenDataset files = TokenDataset::OpenFiles(paths, 256).value();
  TokenDataset memory = TokenDataset::FromTokens(all, "memory");
  ASSERT_EQ(files.num_tokens(), 180);
  std::vector<int64_t> a, b;
  for (int64_t begin : {0, 45, 49, 50, 100, 109, 110, 170}) {
    a.clear();
    b.clear();
    ASSERT_TRUE(files.Copy(begin, 10, &a).ok());
    ASSERT_TRUE(memory.Copy(begin, 10, &b).ok());
    EXPECT_EQ(a, b) << begin;
    EXPECT_EQ(a[0], static_cast<int64_t>(all[begin]));
  }
  // Evaluation windows: window i = tokens [i*S, (i+1)*S + 1).
  EXPECT_EQ(NumEvaluationWindows(files, 16), 11);
  ASSERT_TRUE(EvaluationWindows(files, 2, 3, 16, &a).ok());
  ASSERT_EQ(a.size(), 3u * 17);
  EXPECT_EQ(a[0], static_cast<int64_t>(all[32]));
  EXPECT_EQ(a[16], static_cast<int64_t>(all[48]));
  EXPECT_EQ(a[17], static_cast<int64_t>(all[48]));
  // Training windows follow the sampler, for any split of the batch.
  ASSERT_TRUE(SampleTrainingWindows(files, 7, 3, 0, 4, 16, &a).ok());
  ASSERT_TRUE(SampleTrainingWindows(files, 7, 3, 2, 2, 16, &b).ok());
  EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin() + 2 * 17));
  fs::remove_all(dir);
}

TEST(DataPrepare, SplitsEveryInputAndWritesAManifest) {
  fs::path dir = TempDir("motley_prepare");
  const std::string a = (dir / "a.txt").string(), b = (dir / "b.txt").string();
  std::string text_a, text_b(1000, 'b');
  for (int i = 0; i < 300; ++i) text_a += "line " + std::to_string(i) + " of a\n";
  std::ofstream(a) << text_a;
  std::ofstream(b) << text_b;
  PrepareOptions options;
  options.inputs = {a, b};
  options.output_dir = (dir / "out").string();
  options.validation_fraction = 0.1;
  options.chunk_bytes = 1000;  // several chunks, cut at line ends
  int calls = 0;
  PrepareSummary s = PrepareData(options, ByteTokenizer(), [&](const PrepareProgress&) { ++calls; }).value();
  EXPECT_GT(calls, 3);
  const int64_t na = static_cast<int64_t>(text_a.size()), nb = 1000;
  EXPECT_EQ(s.validation_tokens, na / 10 + nb / 10);
  EXPECT_EQ(s.train_tokens, na + nb - s.validation_tokens);
  TokenDataset train = OpenTokenData(options.output_dir, "train", 256).value();
  TokenDataset val = OpenTokenData(options.output_dir, "val", 256).value();
  std::vector<int64_t> t;
  ASSERT_TRUE(train.Copy(0, train.num_tokens(), &t).ok());
  std::string decoded(t.begin(), t.end());
  EXPECT_EQ(decoded, text_a.substr(0, text_a.size() - na / 10) + text_b.substr(0, 900));
  t.clear();
  ASSERT_TRUE(val.Copy(0, val.num_tokens(), &t).ok());
  EXPECT_EQ(std::string(t.begin(), t.end()), text_a.substr(text_a.size() - na / 10) + text_b.substr(900));
  // Shards roll over and concatenate back to the same stream.
  options.output_dir = (dir / "sharded").string();
  options.shard_tokens = 1000;
  s = PrepareData(options, ByteTokenizer()).value();
  EXPECT_EQ(s.train_files.size(), static_cast<size_t>((s.train_tokens + 999) / 1000));
  TokenDataset sharded = OpenTokenData(options.output_dir, "train", 256).value();
  std::vector<int64_t> u;
  ASSERT_TRUE(sharded.Copy(0, sharded.num_tokens(), &u).ok());
  t.clear();
  ASSERT_TRUE(train.Copy(0, train.num_tokens(), &t).ok());
  EXPECT_EQ(t, u);
  // A model vocabulary smaller than the data's is refused at open, naming both.
  Result<TokenDataset> small = OpenTokenData(options.output_dir, "train", 128);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("vocabulary of 256 (byte) but the model's vocab_size is 128"),
            std::string::npos)
      << small.status().message();
  EXPECT_FALSE(PrepareData({.inputs = {(dir / "nope.txt").string()}, .output_dir = options.output_dir},
                           ByteTokenizer())
                   .ok());
  fs::remove_all(dir);
}

// A tokenizer.json small enough to write here: byte-level, no merges, <|bos|> 256 and <|eos|> 257.
std::string TinyTokenizerJson(bool with_bos) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteLevelEncode(std::string(1, static_cast<char>(b)))] = b;
  nlohmann::json j = {
      {"added_tokens",
       {{{"id", 256}, {"content", "<|bos|>"}, {"special", true}},
        {{"id", 257}, {"content", "<|eos|>"}, {"special", true}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  if (with_bos)
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<|bos|>"}}}}, {{"Sequence", {{"id", "A"}}}}}}};
  return j.dump();
}

TEST(DataPrepare, JsonLinesFoldersAndDocumentsBetweenBosAndEos) {
  fs::path dir = TempDir("motley_jsonl");
  fs::create_directories(dir / "tok");
  std::ofstream(dir / "tok" / "tokenizer.json") << TinyTokenizerJson(true);
  std::ofstream(dir / "tok" / "tokenizer_config.json") << R"({"eos_token": "<|eos|>"})";
  auto tokenizer = HfTokenizer::Load((dir / "tok").string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  fs::create_directories(dir / "corpus" / "sub");
  fs::create_directories(dir / "corpus" / ".hidden");
  std::ofstream(dir / "corpus" / "a.jsonl") << R"({"text": "ab", "id": 1})"
                                            << "\n\n"
                                            << R"({"body": "x", "text": "c"})"
                                            << "\n";
  std::ofstream(dir / "corpus" / "sub" / "b.txt") << "de";
  std::ofstream(dir / "corpus" / ".hidden" / "c.txt") << "never read";
  PrepareOptions options;
  options.inputs = {(dir / "corpus").string()};
  options.output_dir = (dir / "out").string();
  options.validation_fraction = 0;
  PrepareSummary s = PrepareData(options, **tokenizer).value();
  EXPECT_EQ(s.documents, 3);
  TokenDataset train = OpenTokenData(options.output_dir, "train", 258).value();
  std::vector<int64_t> t;
  ASSERT_TRUE(train.Copy(0, train.num_tokens(), &t).ok());
  EXPECT_EQ(t, (std::vector<int64_t>{256, 'a', 'b', 257, 256, 'c', 257, 256, 'd', 'e', 257}));
  // The data records its tokenizer: a run with another refuses it, naming both.
  EXPECT_EQ(ReadDataManifest(options.output_dir).value().tokenizer_hash, (*tokenizer)->hash());
  EXPECT_TRUE(OpenTokenData(options.output_dir, "train", 258, {"tok", (*tokenizer)->hash()}).ok());
  fs::create_directories(dir / "other");
  std::ofstream(dir / "other" / "tokenizer.json") << TinyTokenizerJson(false);
  auto other = HfTokenizer::Load((dir / "other").string());
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)->hash(), (*tokenizer)->hash());
  Result<TokenDataset> refused = OpenTokenData(options.output_dir, "train", 258, {"other", (*other)->hash()});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("prepared with the tokenizer " +
                                            (dir / "tok" / "tokenizer.json").string()),
            std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("the run tokenizes with other"), std::string::npos);
  // Through the job's [data] section: the tokenizer named there.
  DataConfig config;
  config.train = options.output_dir;
  config.tokenizer = (dir / "other").string();
  Result<TrainingData> data = OpenTrainingData(config, "", 258, 4);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("prepare it again"), std::string::npos) << data.status().message();
  fs::remove_all(dir);
}

TEST(DataPrepare, AMalformedJsonLineIsAnErrorNamingFileAndLineOrSkippedAndCounted) {
  fs::path dir = TempDir("motley_badjsonl");
  const std::string file = (dir / "docs.jsonl").string();
  std::ofstream(file) << R"({"text": "fine"})"
                      << "\n"
                      << R"({"text": "cut off)"
                      << "\n"
                      << R"({"content": "wrong field"})"
                      << "\n"
                      << R"({"text": 42})"
                      << "\n"
                      << R"({"text": "also fine"})"
                      << "\n";
  PrepareOptions options;
  options.inputs = {file};
  options.output_dir = (dir / "out").string();
  Result<PrepareSummary> s = PrepareData(options, ByteTokenizer());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(file + ":2: not valid JSON; fix the line, or pass --skip-bad-lines"),
            std::string::npos)
      << s.status().message();
  options.skip_bad_lines = true;
  s = PrepareData(options, ByteTokenizer());
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->skipped_lines, 3);
  EXPECT_EQ(s->documents, 2);
  EXPECT_EQ(s->train_tokens + s->validation_tokens, 4 + 9);
  // The field is the user's to name.
  options.skip_bad_lines = false;
  options.inputs = {(dir / "other.jsonl").string()};
  std::ofstream(options.inputs[0]) << R"({"content": "x"})"
                                   << "\n";
  options.text_field = "body";
  s = PrepareData(options, ByteTokenizer());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(
                ":1: no \"body\" field (give the field that holds the text with --text-field)"),
            std::string::npos)
      << s.status().message();
  fs::remove_all(dir);
}

TEST(DataPrepare, SentencePieceModelsTokenize) {
  fs::path dir = TempDir("motley_spm");
  const std::string text = (dir / "text.txt").string();
  {
    std::ofstream out(text);
    const std::string& c = BuiltinCorpus();
    out << c.substr(0, 60000);
  }
  const std::string prefix = (dir / "spm").string();
  ASSERT_TRUE(sentencepiece::SentencePieceTrainer::Train("--input=" + text + " --model_prefix=" + prefix +
                                                         " --vocab_size=300 --model_type=bpe --minloglevel=2")
                  .ok());
  std::unique_ptr<Tokenizer> spm = LoadSentencePieceTokenizer(prefix + ".model").value();
  EXPECT_EQ(spm->vocab_size(), 300);
  std::vector<uint32_t> ids;
  ASSERT_TRUE(spm->Encode("When the people make sums", &ids).ok());
  EXPECT_LT(ids.size(), 25u);  // merges: fewer tokens than bytes
  EXPECT_EQ(spm->Decode(ids), "When the people make sums");
  PrepareSummary s = PrepareData({.inputs = {text}, .output_dir = (dir / "out").string()}, *spm).value();
  EXPECT_LT(s.train_tokens + s.validation_tokens, 60000 / 2);
  EXPECT_EQ(ReadDataManifest((dir / "out").string()).value().vocab_size, 300);
  // Not a model: a clear error.
  Result<std::unique_ptr<Tokenizer>> bad = LoadSentencePieceTokenizer(text);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not a sentencepiece model"), std::string::npos);
  fs::remove_all(dir);
}

TEST(TrainingData, BuiltinHoldsOutValidationAndChecksVocabulary) {
  DataConfig config;
  TrainingData d = OpenTrainingData(config, "", 256, 128).value();
  ASSERT_TRUE(d.validation.has_value());
  EXPECT_NEAR(
      static_cast<double>(d.validation->num_tokens()) / (d.train.num_tokens() + d.validation->num_tokens()),
      0.05, 1e-3);
  Result<TrainingData> small = OpenTrainingData(config, "", 128, 128);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("vocabulary 256"), std::string::npos);
  Result<TrainingData> long_seq = OpenTrainingData(config, "", 256, 100'000'000);
  ASSERT_FALSE(long_seq.ok());
  EXPECT_NE(long_seq.status().message().find("too few for one window"), std::string::npos);
}

}  // namespace
}  // namespace motley

namespace motley {
namespace {

TEST(DataPrepare, AnEmptyInputIsRefused) {
  const auto dir = std::filesystem::temp_directory_path() / ("motley_empty_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "empty.txt").flush();
  PrepareOptions o;
  o.inputs = {(dir / "empty.txt").string()};
  o.output_dir = (dir / "out").string();
  Result<PrepareSummary> s = PrepareData(o, ByteTokenizer());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("empty.txt: empty: there is no text to train on"), std::string::npos)
      << s.status().message();
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
  std::filesystem::remove_all(dir);
}

TEST(DataManifest, EveryFieldIsCheckedBeforeUse) {
  const auto dir = std::filesystem::temp_directory_path() / ("motley_manifest_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto read = [&](const std::string& json) {
    std::ofstream(dir / "data.json") << json;
    return ReadDataManifest(dir.string());
  };
  const std::string good_files = R"("train_files": ["train.bin"], "validation_file": "val.bin")";
  ASSERT_TRUE(read(R"({"vocab_size": 256, "tokenizer": "byte", )" + good_files + "}").ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"vocab_size": 256, "train_files": []})", "\"train_files\" must list at least one .bin file"},
      {R"({"vocab_size": 256, "tokenizer": 5, )" + good_files + "}", "\"tokenizer\" must be a string"},
      {R"({"vocab_size": -3, )" + good_files + "}", "\"vocab_size\" must be a whole number from 1"},
      {R"({"vocab_size": 256, "train_files": [7]})", "\"train_files\" must hold file names"},
      {R"({"vocab_size": 256, "train_files": ["../../etc/passwd"]})", "outside the data directory"},
      {R"({"vocab_size": 256, "vocab_size": 300, )" + good_files + "}", "key \"vocab_size\" appears twice"},
      {"[1, 2]", "expected a JSON object"},
  };
  for (const auto& [json, expected] : cases) {
    Result<DataManifest> m = read(json);
    ASSERT_FALSE(m.ok()) << json;
    EXPECT_NE(m.status().message().find(expected), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find("data.json"), std::string::npos) << m.status().message();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace motley
