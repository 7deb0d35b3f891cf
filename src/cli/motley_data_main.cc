// motley-data: the torch-free helper that runs `motley data ...` with sentencepiece tokenizers
// (see data/sentencepiece_tokenizer.h). `motley data prepare --tokenizer X.model` execs it.
#include <string>
#include <vector>

#include "cli/command.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "data") args.erase(args.begin());
  return motley::cli::RunGuarded("motley data", [&] { return motley::cli::RunData(args); });
}
