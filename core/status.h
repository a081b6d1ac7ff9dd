// Expected failures as values.
//
// A Status is ok or carries a code and a message written for the user: it names the file, line or
// key, what was expected and what was found. Result<T> is a T or a non-ok Status. Exceptions are
// not thrown through the loop; a CLI's main() turns a Status into a message and an exit code.
#ifndef VINCI_CORE_STATUS_H_
#define VINCI_CORE_STATUS_H_

#include <optional>
#include <string>
#include <utility>

#include "core/check.h"

namespace vinci {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input from the user: a config key, a file's contents
  kNotFound,         // a file, object or run that is not there
  kCorruption,       // stored bytes that fail their checksum or do not parse
  kIoError,          // the operating system refused
  kMismatch,         // two things that must be equal are not (replay divergence, hash clash)
  kFailedPrecondition,
  kInternal,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NotFound: no such file runs/a/manifest.bin"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status mismatch(std::string m) { return {StatusCode::kMismatch, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A T, or the Status that says why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    VINCI_REQUIRE(!status_.ok(), "Result built from an ok Status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & {
    VINCI_REQUIRE(ok(), "value() of a failed Result: " << status_.to_string());
    return *value_;
  }
  const T& value() const& {
    VINCI_REQUIRE(ok(), "value() of a failed Result: " << status_.to_string());
    return *value_;
  }
  T&& value() && {
    VINCI_REQUIRE(ok(), "value() of a failed Result: " << status_.to_string());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace vinci

// Returns early from a function returning Status or Result<T> when expr is not ok.
#define VINCI_RETURN_IF_ERROR(expr)        \
  do {                                     \
    ::vinci::Status vinci_st_ = (expr);    \
    if (!vinci_st_.ok()) return vinci_st_; \
  } while (0)

#define VINCI_CONCAT_INNER_(a, b) a##b
#define VINCI_CONCAT_(a, b) VINCI_CONCAT_INNER_(a, b)
// VINCI_ASSIGN_OR_RETURN(auto x, make_x()); declares x from a Result or returns its Status.
#define VINCI_ASSIGN_OR_RETURN(decl, expr)                                                        \
  auto VINCI_CONCAT_(vinci_r_, __LINE__) = (expr);                                                \
  if (!VINCI_CONCAT_(vinci_r_, __LINE__).ok()) return VINCI_CONCAT_(vinci_r_, __LINE__).status(); \
  decl = std::move(VINCI_CONCAT_(vinci_r_, __LINE__)).value()

#endif  // VINCI_CORE_STATUS_H_
