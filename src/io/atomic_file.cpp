// Whole-file reading, and crash-safe file replacement: write a temporary file beside the target, fsync it,
// rename it over the target, fsync the directory. Readers see the old file or the new one, never a mix.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cpudl/error.h"
#include "cpudl/io.h"

namespace cpudl::io {

namespace {
std::string os_error(const std::string& what, const std::filesystem::path& path) {
  return what + " " + path.string() + ": " + std::strerror(errno);
}
}  // namespace

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(path.string() + ": is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw Error(path.string() + ": read error");
  return buffer.str();
}

void write_file_atomically(const std::filesystem::path& path, const std::string& contents) {
  const std::string_view pieces[] = {contents};
  write_file_atomically(path, pieces);
}

void write_file_atomically(const std::filesystem::path& path, std::span<const std::string_view> pieces) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  // Built with appends: GCC 12 raises a false -Wrestrict on "." + name + "..." (GCC bug 105329).
  std::string hidden_name = ".";
  hidden_name += path.filename().string();
  hidden_name += ".tmp.XXXXXX";
  std::string tmpl = (dir / hidden_name).string();
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) throw Error(os_error("cannot create a temporary file beside", path));
  const std::filesystem::path tmp = tmpl;
  auto fail = [&](const std::string& what) {
    const std::string message = os_error(what, path);
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(message);
  };
  for (const std::string_view contents : pieces) {
    std::size_t written = 0;
    while (written < contents.size()) {
      const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("cannot write");
      }
      written += static_cast<std::size_t>(n);
    }
  }
  if (::fchmod(fd, 0644) != 0) fail("cannot set permissions of");
  if (::fsync(fd) != 0) fail("cannot sync");
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw Error(os_error("cannot close", path));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string message = os_error("cannot rename a temporary file onto", path);
    ::unlink(tmp.c_str());
    throw Error(message);
  }
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY); dfd >= 0) {
    ::fsync(dfd);  // make the rename itself durable
    ::close(dfd);
  }
}

void require_output_is_not_an_input(const std::filesystem::path& output,
                                    std::initializer_list<std::filesystem::path> inputs, const char* flag) {
  std::error_code ec;
  if (output.empty() || !std::filesystem::exists(output, ec)) return;
  for (const auto& input : inputs) {
    if (input.empty() || !std::filesystem::exists(input, ec)) continue;
    if (std::filesystem::equivalent(input, output, ec))
      throw UsageError(std::string(flag) + " " + output.string() + " is the same file as the input " +
                       input.string() + ": writing it would replace the input; choose another output");
  }
}

}  // namespace cpudl::io
