// Tokenizer encoding speed on one core, against independent implementations in the same run:
//   - Llama 3's tokenizer.json (built from llama3-tokenizer-js's vocabulary and merges) by motley's
//     HfTokenizer against @huggingface/tokenizers (JavaScript, Node) on the same text;
//   - a sentencepiece-style BPE tokenizer.json (byte fallback, merges learned on the text) by
//     HfTokenizer against the sentencepiece library encoding a BPE model of about the same
//     vocabulary, trained on the same text.
// Each figure is the median of --repeats encodings of the whole text (after one warm-up); the
// ratios are paired in the same process run.
//
//   tokenizer_speed [--text ../shared/data/tinyshakespeare/input.txt] [--repeats 5]
// Needs the reference npm packages (ctest installs them: Reference.InstallNpmPackages).
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <nlohmann/json.hpp>

#include "data/hf_tokenizer.h"

namespace fs = std::filesystem;
using motley::HfTokenizer;

namespace {

const fs::path kNpm = MOTLEY_REFERENCE_NPM;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double MedianSeconds(int repeats, F&& f) {
  f();  // warm-up (the word cache fills, pages fault in)
  std::vector<double> s;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return Median(s);
}

double NodeSeconds(const fs::path& folder, const fs::path& text, int repeats) {
  std::vector<double> s;
  for (int i = 0; i < repeats; ++i) {
    const std::string cmd = fmt::format("cd {} && taskset -c 0 node tokenizers.mjs bench {} {} 1",
                                        kNpm.string(), folder.string(), text.string());
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[256];
    while (p && fgets(buf, sizeof buf, p)) out += buf;
    if (!p || pclose(p) != 0) {
      fmt::print(stderr, "tokenizer_speed: {} failed\n", cmd);
      std::exit(1);
    }
    s.push_back(nlohmann::json::parse(out)["seconds"].get<double>());
  }
  return Median(s);
}

}  // namespace

int main(int argc, char** argv) {
  fs::path text_path =
      fs::path(MOTLEY_SOURCE_DIR) / ".." / "shared" / "data" / "tinyshakespeare" / "input.txt";
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--text") text_path = argv[i + 1];
    if (std::string(argv[i]) == "--repeats") repeats = std::atoi(argv[i + 1]);
  }
  if (!fs::exists(kNpm / "node_modules" / "@huggingface" / "tokenizers")) {
    fmt::print(stderr,
               "tokenizer_speed: the reference npm packages are not in {} (run ctest -R Reference first)\n",
               kNpm.string());
    return 1;
  }
  // One core for every contender: this process and each node.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  sched_setaffinity(0, sizeof one, &one);
  const std::string text = ReadFile(text_path);
  const double mb = static_cast<double>(text.size()) / 1e6;
  const fs::path dir = fs::temp_directory_path() / fmt::format("motley_tokbench_{}", ::getpid());
  fs::create_directories(dir);
  auto node = [&](const std::string& args) {
    if (std::system(fmt::format("cd {} && node tokenizers.mjs {}", kNpm.string(), args).c_str()) != 0)
      std::exit(1);
  };
  node(fmt::format("llama3-folder {}", (dir / "llama3").string()));
  node(fmt::format("sp-folder {} {} 400", (dir / "sp").string(), text_path.string()));
  fmt::print("text: {} ({:.2f} MB), median of {} encodings on one core\n\n", text_path.string(), mb, repeats);
  fmt::print(
      "| tokenizer | implementation | tokens | seconds | MB/s | motley's speed-up "
      "|\n|---|---|---|---|---|---|\n");

  for (const char* kind : {"llama3", "sp"}) {
    auto t = HfTokenizer::Load((dir / kind).string());
    if (!t.ok()) {
      fmt::print(stderr, "{}\n", t.status().message());
      return 1;
    }
    std::vector<uint32_t> ids;
    const double ours = MedianSeconds(repeats, [&] {
      ids.clear();
      (void)(*t)->Encode(text, &ids);
    });
    const double js = NodeSeconds(dir / kind, text_path, repeats);
    const std::string name =
        std::string(kind) == "llama3" ? "Llama 3 byte-level BPE" : "sentencepiece-style BPE (400 merges)";
    fmt::print("| {} | motley HfTokenizer | {} | {:.3f} | {:.2f} | |\n", name, ids.size(), ours, mb / ours);
    fmt::print("| {} | @huggingface/tokenizers (JS) | | {:.3f} | {:.2f} | {:.2f}x |\n", name, js, mb / js,
               js / ours);
    if (std::string(kind) == "sp") {
      // sentencepiece's own BPE on a model of about the same vocabulary, trained on the same text.
      const int vocab = static_cast<int>((*t)->vocab_size());
      const auto status = sentencepiece::SentencePieceTrainer::Train(
          fmt::format("--input={} --model_prefix={} --model_type=bpe --vocab_size={} --byte_fallback=true "
                      "--character_coverage=1.0 --minloglevel=2",
                      text_path.string(), (dir / "spm").string(), vocab));
      if (!status.ok()) {
        fmt::print(stderr, "sentencepiece training: {}\n", status.ToString());
        return 1;
      }
      sentencepiece::SentencePieceProcessor spm;
      if (!spm.Load((dir / "spm.model").string()).ok()) return 1;
      std::vector<int> spm_ids;
      const double theirs = MedianSeconds(repeats, [&] { (void)spm.Encode(text, &spm_ids); });
      fmt::print(
          "| sentencepiece BPE (vocabulary {}) | sentencepiece library (C++) | {} | {:.3f} | {:.2f} | "
          "{:.2f}x |\n",
          vocab, spm_ids.size(), theirs, mb / theirs, theirs / ours);
    }
  }
  fs::remove_all(dir);
  return 0;
}
