// The top-level handler every motley process runs its work under (cli/command.h): whatever
// escapes — a standard exception, running out of host memory, anything else — is one line on
// stderr and exit 1, never "terminate called" and a signal.
#include <new>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "cli/command.h"

namespace {

std::string Guarded(const std::function<int()>& body, int* code) {
  testing::internal::CaptureStderr();
  *code = motley::cli::RunGuarded("motley", body);
  return testing::internal::GetCapturedStderr();
}

TEST(RunGuarded, EveryEscapingFailureIsOneLineAndExitOne) {
  int code = -1;
  EXPECT_EQ(Guarded([] { return 0; }, &code), "");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(
      Guarded([]() -> int { throw std::runtime_error("data/train.bin: changed while the job reads it"); },
              &code),
      "motley: data/train.bin: changed while the job reads it\n");
  EXPECT_EQ(code, 1);
  EXPECT_NE(Guarded([]() -> int { throw std::bad_alloc(); }, &code).find("motley: out of host memory"),
            std::string::npos);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(Guarded([]() -> int { throw 42; }, &code), "motley: failed with an unknown error\n");
  EXPECT_EQ(code, 1);
}

}  // namespace
