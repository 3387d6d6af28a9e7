// What a user at a terminal sees, on a real pseudo-terminal: progress lines for the commands that
// run longer than a second, drawn and erased on a terminal and absent from pipes and --json.
#include <nlohmann/json.hpp>

#include "cli_sandbox.h"

namespace cpudl {
namespace {

using testing::CliSandbox;
const std::string kTiny = std::string(CPUDL_FIXTURES_DIR) + "/../golden/mnist_tiny";
// doctor --measure loads BLIS: LeakSanitizer must stay off for it (tests/CMakeLists.txt says why).
const std::string kNoLeakCheck = "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1";

class TerminalCli : public CliSandbox {};

TEST_F(TerminalCli, DoctorMeasureShowsProgressOnATerminalOnly) {
  const auto shown = run_on_terminal("doctor --measure", {}, kNoLeakCheck);
  ASSERT_EQ(shown.exit_code, 0) << shown.out;
  EXPECT_NE(shown.out.find("doctor --measure ["), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("\r\033[K"), std::string::npos);  // erased before the report
  EXPECT_NE(shown.out.find("Kernel level"), std::string::npos);
  // The report follows an erased line: no bar text is left on the line of the first heading.
  const std::size_t report = shown.out.find("cpudl ");
  ASSERT_NE(report, std::string::npos);
  EXPECT_GT(report, shown.out.rfind("\r\033[K"));

  const auto piped = run("doctor --measure", kNoLeakCheck);
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.err.find("doctor --measure ["), std::string::npos) << piped.err;
  EXPECT_EQ(piped.out.find('\033'), std::string::npos);

  const auto json = run_on_terminal("doctor --measure --json", {}, kNoLeakCheck);
  ASSERT_EQ(json.exit_code, 0) << json.out;
  EXPECT_EQ(json.out.find("doctor --measure ["), std::string::npos);
  EXPECT_TRUE(nlohmann::json::accept(json.out)) << json.out;
}

// train's bar counts epochs and gives an ETA; lines it prints erase the bar first.
TEST_F(TerminalCli, TrainDrawsItsBarWithAnEta) {
  const auto r = run_on_terminal("train --model lenet5 --data " + kTiny +
                                 " --epochs 2 --batch 32 --log-every 0 --out " + path("m.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("epoch 1/2 ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 2/2 ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ETA "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\r\033[Kepoch 1: loss"), std::string::npos) << r.out;
  const auto piped =
      run("train --model lenet5 --data " + kTiny + " --epochs 1 --batch 32 --out " + path("p.safetensors"));
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.err.find("ETA"), std::string::npos) << piped.err;
  EXPECT_EQ(piped.out.find('\033'), std::string::npos) << piped.out;
}

// chat at a terminal edits lines (emacs keys: Ctrl-A goes to the start, where "/" is put before
// "help"), recalls them (the up arrow brings "/help" back) and keeps them for the next chat in the
// history file; Ctrl-D or Ctrl-C at the prompt ends the chat.
TEST_F(TerminalCli, ChatEditsLinesAndRemembersThemAcrossSessions) {
  const std::string chat = "chat -m " + std::string(CPUDL_LLM_FIXTURES_DIR) +
                           "/tiny-llama-q8_0.gguf --temp 0 -n 4 --history " + path("history");
  const std::string help = "commands: /help";
  auto r = run_on_terminal(
      chat,
      {{"> ", "help\x01/\r", true}, {help, ""}, {"> ", "\x1b[A\r", true}, {help, ""}, {"> ", "\x04", true}},
      "", 30);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::size_t shown = 0;
  for (std::size_t at = r.out.find(help); at != std::string::npos; at = r.out.find(help, at + 1)) ++shown;
  EXPECT_EQ(shown, 2u) << r.out;  // typed once with an edit, recalled once
  EXPECT_EQ(testing::slurp(path("history")), "/help\n/help\n");

  // The next chat recalls the last session's line with the up arrow.
  r = run_on_terminal(chat, {{"> ", "\x1b[A\r", true}, {help, ""}, {"> ", "\x04", true}}, "", 30);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find(help), std::string::npos) << r.out;

  // Ctrl-C at the prompt ends the chat as Ctrl-D does (the half-typed line is dropped).
  r = run_on_terminal(chat, {{"> ", "abc", true}, {"abc", "\x03", true}}, "", 30);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(testing::slurp(path("history")), "/help\n/help\n/help\n");

  // Piped input is read as plain lines: "help\x01/" is a message for the model, not /help.
  r = run(chat + " < /dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::ofstream(path("typed")) << "help\x01/\n";
  r = run(chat + " --no-history < " + path("typed"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find(help), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cpudl
