#pragma once
// Errors as values (LLVM's Expected, in miniature). Bad user input becomes an Error whose
// message names the place ("resnet.onnx: node 'Conv_12' (Conv): ..."); tools unwrap once, at
// the boundary. Internal invariants use AT_CHECK, which aborts with context: a bug, not input.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace autotune {

struct Error {
  std::string message;
};

inline Error make_error(std::string message) { return Error{std::move(message)}; }

/**
 * `s` made safe for a one-line message: control characters and bytes that are not valid UTF-8
 * become \n, \t or \xNN escapes, and text past `max_bytes` is cut with "...". Names read from a
 * damaged file go through this before they reach a terminal.
 */
std::string printable(const std::string &s, size_t max_bytes = 2000);

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}
  Expected(Error error) : v_(std::move(error)) {}

  explicit operator bool() const { return v_.index() == 0; }
  T &operator*() { return std::get<0>(v_); }
  const T &operator*() const { return std::get<0>(v_); }
  T *operator->() { return &std::get<0>(v_); }
  const T *operator->() const { return &std::get<0>(v_); }
  const Error &error() const { return std::get<1>(v_); }
  T take() { return std::move(std::get<0>(v_)); }

 private:
  std::variant<T, Error> v_;
};

/** An Expected with no value: success or an Error. */
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), failed_(true) {}
  static Status ok() { return Status(); }
  explicit operator bool() const { return !failed_; }
  const Error &error() const { return error_; }

 private:
  Error error_;
  bool failed_ = false;
};

[[noreturn]] inline void check_failed(const char *cond, const char *file, int line, const std::string &msg) {
  std::fprintf(stderr, "autotune: internal error at %s:%d: check '%s' failed: %s\n", file, line, cond, msg.c_str());
  std::abort();
}

}  // namespace autotune

#define AT_CHECK(cond, msg)                                                     \
  do {                                                                          \
    if (!(cond)) ::autotune::check_failed(#cond, __FILE__, __LINE__, (msg));    \
  } while (0)

/** Propagates the error of an Expected/Status expression out of the enclosing function. */
#define AT_TRY(expr)                                \
  do {                                              \
    auto at_try_result_ = (expr);                   \
    if (!at_try_result_) return at_try_result_.error(); \
  } while (0)

/** Binds the value of an Expected expression to `var`, or returns its error. */
#define AT_ASSIGN(var, expr)                            \
  auto var##_expected_ = (expr);                        \
  if (!var##_expected_) return var##_expected_.error(); \
  auto var = var##_expected_.take()
