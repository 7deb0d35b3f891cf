// Helpers for the command-line tests: run the built binary, temporary directories.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace motley_test {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout, plus stderr unless `stdout_only`
};

/// Runs a shell command line exactly as given (redirections included); returns its stdout.
inline CliRun RunCommandLine(const std::string& cmd) {
  CliRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
#ifdef MOTLEY_BIN
  // Every error path motley's tests reach (#48): one message for a person, never a library's raw
  // exception text.
  if (r.exit_code != 0 && cmd.find(MOTLEY_BIN) != std::string::npos) {
    for (const char* raw : {"json.exception", "c10::", "std::", "what():"}) {
      EXPECT_EQ(r.output.find(raw), std::string::npos)
          << "raw exception text '" << raw << "' reached the user of `" << cmd << "`:\n"
          << r.output;
    }
  }
#endif
  return r;
}

/// Runs a shell command line; output is stdout and stderr together.
inline CliRun Shell(const std::string& cmd) { return RunCommandLine(cmd + " 2>&1"); }

/// Runs `motley args` (in `cwd` when given).
inline CliRun Motley(const std::string& args, bool stdout_only = false, const std::string& cwd = "") {
  return RunCommandLine((cwd.empty() ? "" : "cd '" + cwd + "' && ") + std::string(MOTLEY_BIN) + " " + args +
                        (stdout_only ? " 2>/dev/null" : " 2>&1"));
}

// Whether a line of rank `rank`'s output (the launcher's "[rank R] " prefix) holds `text`.
inline bool RankSaid(const std::string& output, int rank, const std::string& text) {
  const std::string prefix = "[rank " + std::to_string(rank) + "] ";
  for (size_t at = 0; (at = output.find(prefix, at)) != std::string::npos; ++at)
    if (output.substr(at, output.find('\n', at) - at).find(text) != std::string::npos) return true;
  return false;
}

inline std::string Example(const std::string& rel) {
  return std::string(MOTLEY_SOURCE_DIR) + "/examples/" + rel;
}

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("motley_cli_test_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  std::string Join(const std::string& name) const { return (path_ / name).string(); }
  std::string Write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return (path_ / name).string();
  }

 private:
  fs::path path_;
};

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "missing: " << (needle) << "\nin:\n" << (haystack)

}  // namespace motley_test
