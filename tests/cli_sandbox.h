// A temporary directory per test and a way to run the cpudl binary in it, capturing its exit
// code, stdout and stderr: the fixture of the end-to-end CLI tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace cpudl::testing {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CliSandbox : public ::testing::Test {
 protected:
  // ctest runs tests in parallel processes: name the directory after test and process.
  std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      ("cpudl_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
       std::to_string(getpid()));
  void SetUp() override { std::filesystem::create_directories(dir); }
  void TearDown() override { std::filesystem::remove_all(dir); }
  // `env`: extra VAR=value assignments, space-separated. The thread governor is off (results that
  // tests compare across runs must not depend on the load of the machine) unless `env` turns it on.
  CliResult run(const std::string& args, const std::string& env = "") {
    const std::string command =
        "env -u CPUDL_ISA -u CPUDL_PROFILE -u CPUDL_CONV_IMPL -u CPUDL_VERBOSE CPUDL_THREADS=2 "
        "CPUDL_GOVERNOR=off " +
        env + " " + std::string(CPUDL_BINARY) + " " + args + " >" + (dir / "out.txt").string() + " 2>" +
        (dir / "err.txt").string();
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir / "out.txt"), slurp(dir / "err.txt")};
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

}  // namespace cpudl::testing
