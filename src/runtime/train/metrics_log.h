// MetricsLog: the JSON-lines metrics file of a run, appended to with one write per line so a crash
// loses nothing already reported, and a line that cannot be written (a full disk) is an error
// naming the file rather than a metric silently lost.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/metrics_file.h"
#include "core/status.h"

namespace motley {

class MetricsLog {
 public:
  MetricsLog() = default;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  ~MetricsLog() {
    if (fd_ >= 0) ::close(fd_);
  }

  /// Opens `path` for appending. A new run's file must be new or empty: one holding lines (another
  /// run's) is refused — appending would mix two runs — unless `append` (a resumed run goes on, or
  /// the user asked) or `overwrite` (it is emptied).
  Status Open(const std::string& path, bool append = true, bool overwrite = false) {
    std::error_code ec;
    const std::filesystem::path p(path);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    if (fd_ >= 0) ::close(fd_);
    // Another run's steps are there when a line holds a loss (a run that stopped before its first
    // step left only its start: added to, not refused).
    struct stat st {};
    bool has_steps = false;
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && !append) {
      std::ifstream in(path);
      for (std::string line; !has_steps && std::getline(in, line);)
        has_steps = line.find("\"loss\"") != std::string::npos;
    }
    if (has_steps && !overwrite)
      return Status::InvalidArgument(fmt::format(
          "{}: holds another run's metrics ({} bytes); a new run would mix its steps with them — give "
          "--metrics-append to add to it, --overwrite to start it anew, or another --metrics path",
          path, st.st_size));
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (has_steps ? O_TRUNC : 0), 0644);
    if (fd_ < 0)
      return Status::IoError(
          fmt::format("{}: cannot open the metrics file for appending: {}", path, std::strerror(errno)));
    path_ = path;
    return Status::Ok();
  }

  /// Appends one line, stamped with when it was written ("time_unix_s": what `motley plan
  /// --restart-time RUN` measures a restart by); nothing when no file was opened.
  Status Write(const nlohmann::json& j) {
    if (fd_ < 0) return Status::Ok();
    nlohmann::json stamped = j;
    if (stamped.is_object() && !stamped.contains("time_unix_s")) stamped["time_unix_s"] = NowUnixS();
    const std::string line = stamped.dump() + "\n";
    size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return Status::IoError(
            fmt::format("{}: cannot append the metrics: {}; free space there or give the run "
                        "another folder (the checkpoints written so far are intact)",
                        path_, n < 0 ? std::strerror(errno) : "nothing written"));
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace motley
