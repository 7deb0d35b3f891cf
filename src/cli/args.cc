#include "cli/args.h"

#include <fmt/format.h>

#include "cli/command.h"
#include "core/suggest.h"

namespace motley::cli {

std::optional<int> ParseArgs(CLI::App& app, const std::vector<std::string>& args) {
  app.allow_extras();  // unknown arguments are reported below, with a suggestion
  std::vector<const char*> argv = {app.get_name().c_str()};
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "{}: {}\nRun '{} --help' for usage.\n", app.get_name(), e.what(), app.get_name());
    return kExitUsage;
  }
  std::vector<std::string> extras = app.remaining();
  if (extras.empty()) return std::nullopt;
  std::vector<std::string> flags;
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& l : opt->get_lnames()) flags.push_back("--" + l);
    for (const auto& s : opt->get_snames()) flags.push_back("-" + s);
  }
  for (const auto& extra : extras) {
    if (extra.starts_with("-")) {
      std::string flag = extra.substr(0, extra.find('='));
      fmt::print(stderr, "{}: unknown flag '{}'{} Valid flags: {}\n", app.get_name(), flag,
                 DidYouMeanOrPeriod(flag, flags), JoinNames(flags));
    } else {
      fmt::print(stderr, "{}: unexpected argument '{}'\n", app.get_name(), extra);
    }
  }
  fmt::print(stderr, "Run '{} --help' for usage.\n", app.get_name());
  return kExitUsage;
}

CLI::Validator AtLeast(double min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "must be a number, got '" + text + "'";
        return value >= min ? "" : fmt::format("must be at least {}, got {}", min, text);
      },
      fmt::format(">= {}", min));
}

CLI::Validator Between(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "must be a number, got '" + text + "'";
        return value >= min && value <= max
                   ? ""
                   : fmt::format("must be between {} and {}, got {}", min, max, text);
      },
      fmt::format("in [{}, {}]", min, max));
}

}  // namespace motley::cli
