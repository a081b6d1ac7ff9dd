// The held-out agreement of the sim world with measured sweeps (gpu/sim_agreement.h), on sweeps
// written here in `harness measure`'s format: measured by the sim world itself, then distorted.
#include "gpu/sim_agreement.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "gpu/codegen.h"
#include "gpu/sim_evaluator.h"
#include "tests/gpu/sim_test_util.h"
#include "tests/recorder/test_util.h"

namespace vinci {
namespace {

const char* const kTasks[] = {"L1_001", "L1_019", "L1_023", "L1_047", "L2_081", "L3_001", "L1_040", "L2_012"};

// One measure row a plan (default plan and one knob setting per task): the sim's own verdict and
// times, the speedup multiplied by `scale`.
std::string sweep(double scale) {
  SimEvaluator sim(simtest::h200());
  std::string out;
  for (const char* id : kTasks) {
    const Task& t = simtest::task(id);
    for (const std::map<std::string, std::string>& knobs :
         {std::map<std::string, std::string>{}, std::map<std::string, std::string>{{"fusion", "unfused"}}}) {
      Result<Plan> p = generate_plan(t, knobs);
      if (!p.ok()) continue;  // a knob the task's family does not have
      EvalRequest req;
      req.samples = 1;
      Result<EvalResult> r = sim.evaluate(t, *p, req);
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      nlohmann::json row = {{"task", id}, {"size", "full"}, {"knobs", knobs}, {"plan_address", plan_address(*p).hex()}};
      row["live"] = {{"compiled", r->compiled}, {"correct", r->correct}, {"kernel_us", r->kernel_us / scale},
                     {"reference_us", r->reference_us}, {"speedup", r->speedup * scale}};
      out += row.dump() + "\n";
    }
  }
  return out;
}

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::vector<const MeasuredPlan*> pointers(const MeasuredPlans& m) {
  std::vector<const MeasuredPlan*> v;
  for (const auto& p : m.plans) v.push_back(&p);
  return v;
}

TEST(SimAgreement, TheSimAgreesWithItselfAndSeesADistortion) {
  std::string dir = make_temp_dir("agreement");
  Result<MeasuredPlans> same = load_measured_plans(write(dir, "same.jsonl", sweep(1.0)), simtest::suite());
  ASSERT_TRUE(same.ok()) << same.status().to_string();
  ASSERT_GE(same->plans.size(), 10u);
  EXPECT_EQ(same->stale, 0);
  Result<AgreementTable> t = sim_agreement(simtest::h200(), pointers(*same), {1.0, 1.2});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->rows.back().family, "all");
  const FamilyAgreement& all = t->rows.back();
  EXPECT_EQ(all.plans, static_cast<int>(same->plans.size()));
  EXPECT_EQ(all.correct_agree, all.plans);
  EXPECT_EQ(all.fast_p_agree, (std::vector<int>{all.plans, all.plans}));
  EXPECT_NEAR(all.median_log_error, 0.0, 1e-9);

  // Every measured speedup doubled: the error is ln 2 everywhere, and fast_p verdicts move.
  Result<MeasuredPlans> doubled = load_measured_plans(write(dir, "doubled.jsonl", sweep(2.0)), simtest::suite());
  ASSERT_TRUE(doubled.ok()) << doubled.status().to_string();
  Result<AgreementTable> d = sim_agreement(simtest::h200(), pointers(*doubled), {1.0, 1.2});
  ASSERT_TRUE(d.ok());
  EXPECT_NEAR(d->rows.back().median_log_error, std::log(2.0), 1e-9);
  EXPECT_LT(d->rows.back().fast_p_agree[0], d->rows.back().plans);

  // Held out: fitted to sim-made times, each half's profile judges the other perfectly.
  HeldOutOptions options;
  options.fit.max_rounds = 3;
  Result<HeldOutReport> h = held_out_calibration(simtest::h200(), same->plans, options);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->tasks, static_cast<int>(std::size(kTasks)));
  EXPECT_GT(h->halves[0], 0);
  EXPECT_GT(h->halves[1], 0);
  EXPECT_TRUE(h->shortfalls.empty()) << h->shortfalls.front();
  Result<HeldOutReport> hd = held_out_calibration(simtest::h200(), doubled->plans, options);
  ASSERT_TRUE(hd.ok());
  EXPECT_FALSE(hd->shortfalls.empty());
  std::string md = held_out_report_markdown(*hd, options.goals);
  EXPECT_NE(md.find("speedup > p"), std::string::npos);
  EXPECT_NE(md.find("| all |"), std::string::npos);
  EXPECT_NE(md.find("Missed"), std::string::npos);
}

TEST(SimAgreement, BadRowsNameFileLineAndKeyAndStaleRowsAreCounted) {
  std::string dir = make_temp_dir("agreement");
  std::string rows = sweep(1.0);
  std::string first = rows.substr(0, rows.find('\n') + 1);
  nlohmann::json j = nlohmann::json::parse(first);
  j["plan_address"] = "00000000000000000000000000000000";
  Result<MeasuredPlans> m = load_measured_plans(write(dir, "stale.jsonl", rows + j.dump() + "\n"), simtest::suite());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->stale, 1);
  j = nlohmann::json::parse(first);
  j["live"].erase("speedup");
  std::string path = write(dir, "bad.jsonl", "\n" + j.dump() + "\n");
  m = load_measured_plans(path, simtest::suite());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(path + ":2: key 'live.speedup'"), std::string::npos) << m.status().message();
  j = nlohmann::json::parse(first);
  j["task"] = "L9_999";
  m = load_measured_plans(write(dir, "task.jsonl", j.dump() + "\n"), simtest::suite());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("no task 'L9_999'"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace vinci
