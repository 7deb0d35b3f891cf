// The subcommand table: each entry is a name, a one-line help and a handler. main.cc dispatches
// on it; `motley --help` lists it.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/exit_codes.h"  // kExit*: every command returns one

namespace motley::cli {

struct Command {
  std::string_view name;
  std::string_view help;
  /// `args` are the arguments after the subcommand name.
  int (*run)(const std::vector<std::string>& args);
};

const std::vector<Command>& Commands();

// Handlers, one file each (cmd_<name>.cc).
int RunValidate(const std::vector<std::string>& args);
int RunCatalog(const std::vector<std::string>& args);
int RunDescribe(const std::vector<std::string>& args);
int RunDemo(const std::vector<std::string>& args);
int RunReport(const std::vector<std::string>& args);
int RunSchedule(const std::vector<std::string>& args);
int RunSimulate(const std::vector<std::string>& args);
int RunPlan(const std::vector<std::string>& args);
int RunData(const std::vector<std::string>& args);
int RunTrain(const std::vector<std::string>& args);
int RunEval(const std::vector<std::string>& args);
int RunLaunch(const std::vector<std::string>& args);
int RunAgent(const std::vector<std::string>& args);
int RunComm(const std::vector<std::string>& args);
int RunCheckpoint(const std::vector<std::string>& args);
int RunInitModel(const std::vector<std::string>& args);
int RunProfile(const std::vector<std::string>& args);
int RunCalibrate(const std::vector<std::string>& args);

/// Runs `body` as a process's whole work: a failure nothing below caught — an exception of any
/// kind, running out of host memory — becomes one clear line on stderr and kExitFailure, never
/// "terminate called" or a signal.
int RunGuarded(const char* program, const std::function<int()>& body);

}  // namespace motley::cli
