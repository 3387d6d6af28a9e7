// Errors cpudl's library raises. Library code throws; the CLI catches once and prints one line.
#pragma once

#include <cstddef>
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

// An allocation that would take the tensors' memory past the limit set for it (train
// --max-memory, or the cgroup's memory limit): the run ends with this instead of the kernel's OOM
// kill. `needed` is the tensor bytes the allocation asked to reach.
class MemoryLimitError : public Error {
 public:
  MemoryLimitError(const std::string& what, std::size_t needed, std::size_t limit)
      : Error(what), needed(needed), limit(limit) {}
  std::size_t needed, limit;
};

}  // namespace cpudl
