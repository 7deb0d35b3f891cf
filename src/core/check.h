// Check macros for invariants: a failed check is a bug in motley, not bad user input. It prints
// the expression, both values and file:line, then aborts. (Not named CHECK/LOG: glog's macros leak
// in through torch headers.)
#pragma once

#include <sstream>
#include <string>

namespace motley::internal {

[[noreturn]] void CheckFailed(const char* file, int line, const std::string& what);

template <typename A, typename B>
[[noreturn]] void CheckOpFailed(const char* file, int line, const char* expr_a, const char* op,
                                const char* expr_b, const A& a, const B& b) {
  std::ostringstream os;
  os << expr_a << " " << op << " " << expr_b << " (" << a << " vs " << b << ")";
  CheckFailed(file, line, os.str());
}

}  // namespace motley::internal

#define MOTLEY_CHECK(cond)                                                   \
  do {                                                                       \
    if (!(cond)) ::motley::internal::CheckFailed(__FILE__, __LINE__, #cond); \
  } while (0)

#define MOTLEY_CHECK_MSG(cond, msg)                                                                      \
  do {                                                                                                   \
    if (!(cond)) ::motley::internal::CheckFailed(__FILE__, __LINE__, std::string(#cond) + ": " + (msg)); \
  } while (0)

#define MOTLEY_CHECK_OP_(op, a, b)                                                              \
  do {                                                                                          \
    const auto& motley_a_ = (a);                                                                \
    const auto& motley_b_ = (b);                                                                \
    if (!(motley_a_ op motley_b_))                                                              \
      ::motley::internal::CheckOpFailed(__FILE__, __LINE__, #a, #op, #b, motley_a_, motley_b_); \
  } while (0)

#define MOTLEY_CHECK_EQ(a, b) MOTLEY_CHECK_OP_(==, a, b)
#define MOTLEY_CHECK_NE(a, b) MOTLEY_CHECK_OP_(!=, a, b)
#define MOTLEY_CHECK_LT(a, b) MOTLEY_CHECK_OP_(<, a, b)
#define MOTLEY_CHECK_LE(a, b) MOTLEY_CHECK_OP_(<=, a, b)
#define MOTLEY_CHECK_GT(a, b) MOTLEY_CHECK_OP_(>, a, b)
#define MOTLEY_CHECK_GE(a, b) MOTLEY_CHECK_OP_(>=, a, b)
