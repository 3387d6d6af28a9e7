// --lr-schedule against PyTorch's schedulers step by step (tests/golden/lr_schedules.json, from
// scripts/gen-lr-schedules.py), warm-up by its closed form, and train's --log-csv and --val-every
// end to end: the logged learning rates are the schedule's, and a resumed run continues both.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_sandbox.h"
#include "cpudl/optim.h"

namespace {

using cpudl::optim::LrSchedule;
using cpudl::optim::scheduled_lr;
using cpudl::testing::slurp;
using TrainLog = cpudl::testing::CliSandbox;

const std::string kGolden = std::string(CPUDL_FIXTURES_DIR) + "/../golden/";
const std::string kTiny = kGolden + "mnist_tiny";

TEST(LrSchedule, FollowsPyTorchsSchedulersStepByStep) {
  const auto golden = nlohmann::json::parse(slurp(kGolden + "lr_schedules.json"));
  LrSchedule s;
  s.base_lr = golden["lr"].get<float>();
  s.steps_per_epoch = golden["steps_per_epoch"];
  s.total_steps = s.steps_per_epoch * golden["epochs"].get<std::int64_t>();
  for (const auto& [kind, key, step_size] : std::vector<std::tuple<std::string, std::string, std::int64_t>>{
           {"onecycle", "onecycle", 1}, {"cosine", "cosine", 1}, {"step", "step_size_2", 2}}) {
    s.kind = kind;
    s.step_size_epochs = step_size;
    const auto& want = golden[key];
    ASSERT_EQ(static_cast<std::int64_t>(want.size()), s.total_steps);
    for (std::int64_t k = 0; k < s.total_steps; ++k)
      EXPECT_NEAR(scheduled_lr(s, k), want[static_cast<std::size_t>(k)].get<double>(),
                  1e-6 + 1e-5 * want[static_cast<std::size_t>(k)].get<double>())
          << kind << " step " << k;
  }
}

TEST(LrSchedule, WarmupRisesLinearlyThenTheScheduleRuns) {
  LrSchedule s;
  s.kind = "cosine";
  s.base_lr = 0.2f;
  s.total_steps = 25;
  s.warmup_steps = 5;
  EXPECT_FLOAT_EQ(scheduled_lr(s, 0), 0.0f);
  EXPECT_FLOAT_EQ(scheduled_lr(s, 2), 0.2f * 2 / 5);
  EXPECT_FLOAT_EQ(scheduled_lr(s, 5), 0.2f);                                          // cosine's start
  EXPECT_NEAR(scheduled_lr(s, 15), 0.1f, 1e-6);                                       // halfway down
  EXPECT_NEAR(scheduled_lr(s, 24), 0.2f * (1 + std::cos(M_PI * 19 / 20)) / 2, 1e-7);  // the last step
  s.kind = "constant";
  EXPECT_FLOAT_EQ(scheduled_lr(s, 3), 0.2f * 3 / 5);
  EXPECT_FLOAT_EQ(scheduled_lr(s, 20), 0.2f);
}

struct Row {
  std::string kind;
  std::int64_t global_step = 0;
  double lr = 0, test_accuracy = -1;
};

std::vector<Row> read_csv(const std::string& file) {
  std::istringstream in(slurp(file));
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "kind,epoch,step,global_step,loss,lr,images_per_second,seconds,test_loss,test_accuracy");
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    while (f.size() < 10) f.emplace_back();
    Row r{f[0]};
    if (!f[3].empty()) r.global_step = std::stoll(f[3]);
    if (!f[5].empty()) r.lr = std::stod(f[5]);
    if (!f[9].empty()) r.test_accuracy = std::stod(f[9]);
    rows.push_back(r);
  }
  return rows;
}

TEST_F(TrainLog, CsvLogsTheScheduleAndEvaluationsAndContinuesOnResume) {
  const std::string common = "train --model lenet5 --data " + kTiny +
                             " --batch 32 --epochs 3 --seed 1 --lr 0.01 --lr-schedule onecycle --val-every 3";
  const auto full = run(common + " --out " + path("full.safetensors") + " --log-csv " + path("full.csv"));
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_NE(full.out.find("step 3: test loss"), std::string::npos) << full.out;
  const std::vector<Row> rows = read_csv(path("full.csv"));
  std::int64_t steps = 0, epochs = 0, validations = 0;
  for (const Row& r : rows) {
    steps += r.kind == "step";
    epochs += r.kind == "epoch";
    validations += r.kind == "val";
  }
  EXPECT_EQ(epochs, 3);
  ASSERT_GT(steps, 6);
  LrSchedule s;
  s.kind = "onecycle";
  s.base_lr = 0.01f;
  s.total_steps = steps;
  for (const Row& r : rows) {
    if (r.kind == "step") {
      EXPECT_NEAR(r.lr, scheduled_lr(s, r.global_step - 1), 1e-9) << "step " << r.global_step;
    } else if (r.kind == "val") {
      EXPECT_EQ(r.global_step % 3, 0);
      EXPECT_GE(r.test_accuracy, 0.0);
    }
  }
  EXPECT_GE(validations, 2);

  // Stopped mid-run and resumed: the log continues where it stopped, with the same rates.
  const auto stopped =
      run(common + " --out " + path("r.safetensors") + " --log-csv " + path("r.csv") + " --stop-after 5");
  EXPECT_EQ(stopped.exit_code, 143) << stopped.err;
  const auto resumed = run("train --data " + kTiny + " --resume " + path("r.safetensors.ckpt") + " --out " +
                           path("r.safetensors") + " --log-csv " + path("r.csv"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  std::vector<double> full_lrs, resumed_lrs;
  for (const Row& r : rows)
    if (r.kind == "step") full_lrs.push_back(r.lr);
  for (const Row& r : read_csv(path("r.csv")))
    if (r.kind == "step") resumed_lrs.push_back(r.lr);
  EXPECT_EQ(resumed_lrs, full_lrs);

  EXPECT_EQ(run(common + " --warmup 3 --out " + path("x.safetensors")).exit_code,
            2);  // onecycle warms up itself
  EXPECT_EQ(run(common + " --log-csv " + dir.string() + " --out " + path("x.safetensors")).exit_code, 2);
}

}  // namespace
