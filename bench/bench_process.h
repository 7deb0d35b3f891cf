// Helpers for benchmarks that run the motley binary: a shell command's output, a metrics file's
// step times.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace motley_bench {

/// Runs a shell command; returns stdout and stderr together, sets `code` to the exit status.
inline std::string Run(const std::string& cmd, int* code) {
  std::string out;
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The JSON lines of a metrics file.
inline std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

/// A process benchmark's command line: [--steps N] [-o report.md]. Returns false (after printing
/// the usage) on anything else.
struct BenchArgs {
  int steps = 8;
  int rounds = 1;  // --rounds: how many times each measurement is repeated (where a benchmark does)
  std::string report_path;
};
inline bool ParseBenchArgs(int argc, char** argv, const char* name, BenchArgs* out) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) {
      out->steps = std::stoi(argv[++i]);
    } else if (a == "--rounds" && i + 1 < argc) {
      out->rounds = std::max(1, std::stoi(argv[++i]));
    } else if (a == "-o" && i + 1 < argc) {
      out->report_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--steps N] [--rounds R] [-o report.md]\n", name);
      return false;
    }
  }
  return true;
}

/// A fresh working directory for a benchmark's files.
inline std::filesystem::path MakeWorkDir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace motley_bench
