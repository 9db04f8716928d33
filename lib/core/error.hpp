#pragma once
// Errors that reach the user. Every error says where (file, key or line) and
// what was expected; its exit code tells scripts what kind of failure it was.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace trlx {

enum class ExitCode : int {
  kOk = 0,
  kRuntime = 1,   // something failed while running (I/O, a peer rank, ...)
  kBadInput = 2,  // config, data, checkpoint or tokenizer the user gave is wrong
};

class Error : public std::runtime_error {
 public:
  explicit Error(std::string message, ExitCode code = ExitCode::kRuntime)
      : std::runtime_error(std::move(message)), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// Bad user input: a config, data file, tokenizer or checkpoint. Exit code 2.
class InputError : public Error {
 public:
  explicit InputError(std::string message) : Error(std::move(message), ExitCode::kBadInput) {}
};

template <typename... Args>
[[noreturn]] void fail_input(fmt::format_string<Args...> f, Args&&... args) {
  throw InputError(fmt::format(f, std::forward<Args>(args)...));
}

// Rethrows the InputError in flight with `where` (a data row's file:line)
// in front of its message, unless the message starts with it already: an
// error raised while preparing a row (a chat template's raise_exception,
// ...) names the row. Call inside a catch block.
[[noreturn]] inline void rethrow_at(const std::string& where) {
  try {
    throw;
  } catch (const InputError& e) {
    const std::string message = e.what();
    if (where.empty() || message.rfind(where, 0) == 0) throw;
    throw InputError(where + ": " + message);
  }
}

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace trlx
