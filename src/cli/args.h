// Command-line parsing for one subcommand, on CLI11, with "did you mean" for mistyped flags.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace motley::cli {

/// Parses `args` into `app` (named "motley <command>"). Returns std::nullopt to go on, or the exit code to
/// return now (after --help, or an error that has been printed with a hint).
std::optional<int> ParseArgs(CLI::App& app, const std::vector<std::string>& args);

/// A check for a numeric flag: at least `min` ("must be at least 1, got -5").
CLI::Validator AtLeast(double min);
/// ... within [min, max].
CLI::Validator Between(double min, double max);

}  // namespace motley::cli
