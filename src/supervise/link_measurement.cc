#include "supervise/link_measurement.h"

#include <filesystem>

#include <fmt/format.h>

#include "supervise/launcher.h"

namespace motley {

namespace fs = std::filesystem;

Result<std::vector<ProfileLink>> MeasureLinks(const std::string& cluster_ref, int num_devices,
                                              const std::string& work_dir,
                                              const std::vector<LaunchHost>& hosts,
                                              const std::string& remote) {
  const std::string out = (fs::path(work_dir) / "links.json").string();
  std::error_code ec;
  fs::create_directories(work_dir, ec);
  fs::remove(out, ec);
  LaunchOptions launch;
  launch.nproc = num_devices;
  launch.hosts = hosts;
  if (!hosts.empty()) launch.remote = remote;
  launch.command = {fs::read_symlink("/proc/self/exe").string(),
                    "profile",
                    "--cluster",
                    cluster_ref,
                    "--links-only",
                    "-o",
                    out};
  if (Launch(launch) != 0) return Status::Internal("measuring the links failed (see above)");
  MOTLEY_ASSIGN_OR_RETURN(Profile p, LoadProfileFile(out));
  return p.links;
}

}  // namespace motley
