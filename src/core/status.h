// Status and Result<T>: expected failures as values (bad file, infeasible plan, OOM, I/O).
//
// A Status carries a code and a message written for the user: it names the file, line, key and
// the fix. Broken invariants are not Statuses; they abort through the check macros in check.h.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "core/check.h"

namespace motley {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input: a config file, a flag, a value out of range
  kNotFound,         // a file, preset or device type that does not exist
  kIoError,          // a read or write that failed
  kOutOfMemory,      // a plan or an op that does not fit a device
  kInfeasible,       // no plan satisfies the constraints
  kInternal,         // a failure in a library we call
  kPeerFailed,       // another rank of the run failed first; this one stops because of it
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status IoError(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  static Status OutOfMemory(std::string msg) { return {StatusCode::kOutOfMemory, std::move(msg)}; }
  static Status Infeasible(std::string msg) { return {StatusCode::kInfeasible, std::move(msg)}; }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }
  static Status PeerFailed(std::string msg) { return {StatusCode::kPeerFailed, std::move(msg)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  /// Prefixes the message with context, e.g. the file being loaded: "jobs/a.toml: <message>".
  Status WithPrefix(const std::string& prefix) const {
    if (ok()) return *this;
    return Status(code_, prefix + message_);
  }

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    MOTLEY_CHECK(!std::get<Status>(v_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    MOTLEY_CHECK_MSG(ok(), status().message());
    return std::get<T>(v_);
  }
  const T& value() const& {
    MOTLEY_CHECK_MSG(ok(), status().message());
    return std::get<T>(v_);
  }
  T&& value() && {
    MOTLEY_CHECK_MSG(ok(), status().message());
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace motley

/// Returns the Status from the enclosing function when `expr` (a Status) is not OK.
#define MOTLEY_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::motley::Status motley_status_ = (expr);        \
    if (!motley_status_.ok()) return motley_status_; \
  } while (0)

#define MOTLEY_CONCAT_INNER_(a, b) a##b
#define MOTLEY_CONCAT_(a, b) MOTLEY_CONCAT_INNER_(a, b)

/// `MOTLEY_ASSIGN_OR_RETURN(auto x, LoadThing())`: unwraps a Result or returns its Status.
#define MOTLEY_ASSIGN_OR_RETURN(lhs, expr)                    \
  auto MOTLEY_CONCAT_(motley_result_, __LINE__) = (expr);     \
  if (!MOTLEY_CONCAT_(motley_result_, __LINE__).ok())         \
    return MOTLEY_CONCAT_(motley_result_, __LINE__).status(); \
  lhs = std::move(MOTLEY_CONCAT_(motley_result_, __LINE__)).value()
