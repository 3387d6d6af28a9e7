// Errors cpudl's library raises. Library code throws; the CLI catches once and prints one line.
#pragma once

#include <stdexcept>
#include <string>

namespace cpudl {

// A failure with enough context (file, field, tensor, expected vs found) to act on.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The user asked for something malformed (a flag, an environment variable): the CLI exits 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

}  // namespace cpudl
