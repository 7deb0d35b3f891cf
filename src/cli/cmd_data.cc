// motley data prepare --input TEXT|JSONL|FOLDER... [--tokenizer byte|PATH.model|DIR|tokenizer.json]
//                     [--init-from HF_DIR] [--text-field text] [--skip-bad-lines] -o DIR
//
// Built twice: into `motley` (byte tokenizer in-process; a sentencepiece model is handed to the
// helper) and into the torch-free `motley-data` helper (MOTLEY_WITH_SENTENCEPIECE), which loads
// sentencepiece models — see data/sentencepiece_tokenizer.h for why they cannot share a process.
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/progress_line.h"
#include "core/toml_reader.h"
#include "data/bpe_trainer.h"
#include "data/builtin_corpus.h"
#include "data/data_prepare.h"
#include "data/hf_tokenizer.h"
#ifdef MOTLEY_WITH_SENTENCEPIECE
#include "data/sentencepiece_tokenizer.h"
#endif

namespace motley::cli {
namespace fs = std::filesystem;
namespace {

// Runs `motley-data` (beside this executable) with the same arguments; returns its exit code.
[[maybe_unused]] int RunHelper(const std::vector<std::string>& args) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path helper = self.parent_path() / "motley-data";
  if (ec || !fs::exists(helper)) {
    fmt::print(
        stderr,
        "motley data: sentencepiece tokenizers run in the helper 'motley-data', which is missing beside {} "
        "(build it: ninja -C build motley-data)\n",
        self.string());
    return kExitFailure;
  }
  std::vector<std::string> argv_s = {"motley-data", "data"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execv(helper.c_str(), argv.data());
  fmt::print(stderr, "motley data: cannot run {}: {}\n", helper.string(), std::strerror(errno));
  return kExitFailure;
}

// `motley data train-tokenizer`: a byte-level BPE learned from the inputs' text.
int TrainTokenizer(const std::vector<std::string>& tok_inputs, const std::string& tok_out,
                   const BpeTrainingOptions& tok_options) {
  std::vector<std::string> texts;
  std::vector<std::string> files;
  for (const std::string& in : tok_inputs) {
    if (in == "builtin") {
      texts.push_back(std::string(BuiltinCorpus()));
      continue;
    }
    Result<std::vector<std::string>> found = ExpandInputFiles({in});
    if (!found.ok()) {
      fmt::print(stderr, "motley data: {}\n", found.status().message());
      return kExitFailure;
    }
    files.insert(files.end(), found->begin(), found->end());
  }
  for (const std::string& f : files) {
    Result<std::string> text = ReadTextFile(f);
    if (!text.ok()) {
      fmt::print(stderr, "motley data: {}\n", text.status().message());
      return kExitFailure;
    }
    texts.push_back(std::move(*text));
  }
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  Result<BpeTrainingSummary> s = TrainByteLevelBpe(views, tok_out, tok_options);
  if (!s.ok()) {
    fmt::print(stderr, "motley data: {}\n", s.status().message());
    return kExitFailure;
  }
  fmt::print(
      "{}/tokenizer.json: byte-level BPE, {} tokens ({} merges learned from {} distinct words), BOS "
      "<|begin_of_text|>, EOS <|end_of_text|>\n",
      tok_out, s->vocab_size, s->merges, s->words);
  return kExitOk;
}

}  // namespace

int RunData(const std::vector<std::string>& args) {
  CLI::App app("Prepare training data: tokenize text files into .bin shards with a validation split.",
               "motley data");
  app.require_subcommand(1);
  CLI::App* prepare =
      app.add_subcommand("prepare", "tokenize text files into DIR/train*.bin, DIR/val.bin, DIR/data.json");
  PrepareOptions options;
  std::string tokenizer_name, init_from;
  prepare
      ->add_option("--input", options.inputs,
                   "text files (a document each), .jsonl files (a document per line) or folders of them")
      ->required()
      ->expected(1, -1);
  prepare->add_option(
      "--tokenizer", tokenizer_name,
      "byte (built in, vocabulary 256; the default without --init-from), a Hugging Face tokenizer.json "
      "or the folder holding it, or a sentencepiece .model file");
  prepare->add_option(
      "--init-from", init_from,
      "the Hugging Face model folder a run starts from: its tokenizer.json is the default tokenizer");
  prepare->add_option("--text-field", options.text_field, "the field of a JSON line that holds its text")
      ->capture_default_str();
  prepare->add_flag(
      "--skip-bad-lines", options.skip_bad_lines,
      "skip malformed JSON lines and count them (without it, one is an error naming file:line)");
  prepare->add_option("-o,--output", options.output_dir, "the output directory")->required();
  prepare
      ->add_option("--validation-fraction", options.validation_fraction,
                   "of each input's tokens, taken from its end for validation")
      ->capture_default_str()
      ->check(Between(0, 1));
  prepare->add_option("--shard-tokens", options.shard_tokens, "tokens per training shard")
      ->capture_default_str()
      ->check(AtLeast(1));
  CLI::App* train_tok = app.add_subcommand(
      "train-tokenizer",
      "learn a byte-level BPE tokenizer from text: DIR/tokenizer.json (Llama 3's layout) and "
      "tokenizer_config.json");
  std::vector<std::string> tok_inputs;
  std::string tok_out;
  BpeTrainingOptions tok_options;
  train_tok
      ->add_option("--input", tok_inputs,
                   "text files, folders of them, or \"builtin\" (motley's built-in corpus)")
      ->required()
      ->expected(1, -1);
  train_tok->add_option("--vocab-size", tok_options.vocab_size, "tokens: 256 bytes, the merges, BOS and EOS")
      ->capture_default_str();
  train_tok->add_option("-o,--output", tok_out, "the folder to write")->required();
  if (auto rc = ParseArgs(app, args)) return *rc;

  if (train_tok->parsed()) return TrainTokenizer(tok_inputs, tok_out, tok_options);

  if (tokenizer_name.empty()) tokenizer_name = init_from.empty() ? "byte" : init_from;
  std::unique_ptr<Tokenizer> tokenizer;
  const HfTokenizer* hf = nullptr;
  if (tokenizer_name == "byte") {
    tokenizer = std::make_unique<ByteTokenizer>();
  } else if (fs::path(tokenizer_name).extension() != ".model") {
    Result<std::unique_ptr<HfTokenizer>> t = HfTokenizer::Load(tokenizer_name);
    if (!t.ok()) {
      fmt::print(stderr, "motley data: {}\n", t.status().message());
      return kExitFailure;
    }
    hf = t->get();
    tokenizer = std::move(*t);
  } else {
#ifdef MOTLEY_WITH_SENTENCEPIECE
    Result<std::unique_ptr<Tokenizer>> t = LoadSentencePieceTokenizer(tokenizer_name);
    if (!t.ok()) {
      fmt::print(stderr, "{}\n", t.status().message());
      return kExitFailure;
    }
    tokenizer = std::move(*t);
#else
    return RunHelper(args);
#endif
  }
  ProgressLine line(5.0);
  const auto start = std::chrono::steady_clock::now();
  Result<PrepareSummary> s = PrepareData(options, *tokenizer, [&](const PrepareProgress& p) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double frac = p.bytes_total > 0 ? static_cast<double>(p.bytes_done) / p.bytes_total : 1.0;
    line.Update(fmt::format("tokenizing {}: {:.0f}% of {:.1f} MB, {} tokens, {:.1f} MB/s, ETA {}", p.input,
                            100 * frac, p.bytes_total / 1e6, p.tokens,
                            p.bytes_done / 1e6 / std::max(elapsed, 1e-9),
                            FormatDuration(frac > 0 ? elapsed * (1 - frac) / frac : -1)));
  });
  line.Finish();
  if (!s.ok()) {
    fmt::print(stderr, "{}\n", s.status().message());
    return kExitFailure;
  }
  fmt::print("{}: {:.1f} MB tokenized with {} (vocabulary {})\n", options.output_dir, s->bytes / 1e6,
             tokenizer->name(), tokenizer->vocab_size());
  fmt::print(
      "  documents:  {}{}\n", s->documents,
      s->skipped_lines > 0 ? fmt::format(" ({} malformed JSON line(s) skipped)", s->skipped_lines) : "");
  if (hf != nullptr && hf->replaced_invalid_utf8() > 0)
    fmt::print("  note: {} invalid UTF-8 sequence(s) read as U+FFFD\n", hf->replaced_invalid_utf8());
  fmt::print("  train:      {} tokens in {} shard(s)\n", s->train_tokens, s->train_files.size());
  fmt::print("  validation: {} tokens ({})\n", s->validation_tokens, s->validation_file);
  fmt::print("  manifest:   {}\n", s->manifest_file);
  return kExitOk;
}

}  // namespace motley::cli
