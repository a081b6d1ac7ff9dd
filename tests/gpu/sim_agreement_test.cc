// The held-out agreement of the sim world with measured sweeps (gpu/sim/sim_agreement.h), on sweeps
// written here in `harness measure`'s format: measured by the sim world itself, then distorted.
#include "gpu/sim/sim_agreement.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "gpu/codegen/codegen.h"
#include "gpu/sim/sim_evaluator.h"
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
      row["live"] = {{"compiled", r->compiled},
                     {"correct", r->correct},
                     {"kernel_us", r->kernel_us / scale},
                     {"reference_us", r->reference_us},
                     {"speedup", r->speedup * scale}};
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

// The GPU against itself: every pair of rows of one plan is compared, and only those.
TEST(SimAgreement, RepeatabilityComparesEveryPairOfMeasurementsOfOnePlan) {
  std::string dir = make_temp_dir("agreement_repeats");
  const std::string once = sweep(1.0), twice = sweep(2.0);
  Result<MeasuredPlans> single = load_measured_plans(write(dir, "single.jsonl", once), simtest::suite());
  ASSERT_TRUE(single.ok()) << single.status().to_string();
  const int n = static_cast<int>(single->plans.size());
  ASSERT_GE(n, 10);
  // One row a plan: nothing to compare.
  EXPECT_TRUE(live_repeatability(pointers(*single), {1.0, 1.2}).rows.empty());

  // The same sweep twice: n pairs, every verdict and speedup the same.
  Result<MeasuredPlans> same = load_measured_plans(write(dir, "same.jsonl", once + once), simtest::suite());
  ASSERT_TRUE(same.ok());
  AgreementTable t = live_repeatability(pointers(*same), {1.0, 1.2});
  ASSERT_FALSE(t.rows.empty());
  const FamilyAgreement& all = t.rows.back();
  ASSERT_EQ(all.family, "all");
  EXPECT_EQ(all.plans, n);
  EXPECT_EQ(all.correct_agree, n);
  EXPECT_EQ(all.fast_p_agree, (std::vector<int>{n, n}));
  EXPECT_NEAR(all.median_log_error, 0.0, 1e-12);

  // Once at the measured speedup, once at twice it, once at the measured speedup again: three pairs a
  // plan, two of them ln 2 apart; a fast_1 verdict parts where s <= 1 < 2s.
  Result<MeasuredPlans> three = load_measured_plans(write(dir, "three.jsonl", once + twice + once), simtest::suite());
  ASSERT_TRUE(three.ok());
  AgreementTable u = live_repeatability(pointers(*three), {1.0});
  const FamilyAgreement& a = u.rows.back();
  int timed = 0, parts = 0;
  for (const MeasuredPlan& p : single->plans) {
    timed += p.live_correct ? 3 : 0;
    parts += p.live_correct && !p.live_decoy && p.live_speedup <= 1.0 && 2 * p.live_speedup > 1.0 ? 2 : 0;
  }
  EXPECT_EQ(a.plans, 3 * n);
  EXPECT_EQ(a.timed, timed);
  EXPECT_NEAR(a.median_log_error, std::log(2.0), 1e-9);  // two of every three pairs
  EXPECT_EQ(a.fast_p_agree[0], 3 * n - parts);
  EXPECT_GT(parts, 0);  // the sweep has plans between 0.5x and 1x, so the check can fail
  int family_pairs = 0;
  for (const auto& r : u.rows)
    if (r.family != "all") family_pairs += r.plans;
  EXPECT_EQ(family_pairs, 3 * n);

  // The held-out report shows it.
  HeldOutOptions options;
  options.fit.max_rounds = 1;
  Result<HeldOutReport> h = held_out_calibration(simtest::h200(), three->plans, options);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  std::string md = held_out_report_markdown(*h, options.goals);
  EXPECT_NE(md.find("The GPU against itself"), std::string::npos);
  EXPECT_NE(md.find(repeatability_table_markdown(h->repeats)), std::string::npos);
}

// A plan that launches none of its own kernels is a decoy in both worlds, on every task (a bare
// library GEMM here): it never counts toward fast_p, however fast it measured.
TEST(SimAgreement, DecoysNeverPassFastPInEitherWorld) {
  const Task& t = simtest::task("L1_001");
  Result<Plan> p = generate_plan(t, {{"gemm.impl", "library"}});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_TRUE(p->library_only());
  SimEvaluator sim(simtest::h200());
  EvalRequest req;
  req.samples = 1;
  Result<EvalResult> r = sim.evaluate(t, *p, req);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->decoy);
  EXPECT_TRUE(r->correct);
  // Measured at 1.5x with no decoy flag (a row recorded before the rule covered every task).
  nlohmann::json row = {
      {"task", "L1_001"}, {"size", "full"}, {"knobs", p->knobs}, {"plan_address", plan_address(*p).hex()}};
  row["live"] = {{"compiled", true},
                 {"correct", true},
                 {"kernel_us", r->reference_us / 1.5},
                 {"reference_us", r->reference_us},
                 {"speedup", 1.5},
                 {"flags", nlohmann::json::array()}};
  std::string dir = make_temp_dir("agreement_decoy");
  Result<MeasuredPlans> m = load_measured_plans(write(dir, "d.jsonl", row.dump() + "\n"), simtest::suite());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->plans.size(), 1u);
  EXPECT_TRUE(m->plans[0].live_decoy);
  Result<AgreementTable> a = sim_agreement(simtest::h200(), pointers(*m), {1.0, 1.2});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->rows.back().fast_p_agree, (std::vector<int>{1, 1}));
  EXPECT_FALSE(fast_p_verdict(true, true, 9.0, 1.0));
  EXPECT_FALSE(fast_p_verdict(true, false, 1.0, 1.0));  // strictly greater, as KernelBench
  EXPECT_TRUE(fast_p_verdict(true, false, 1.0000001, 1.0));
  std::string jl = plan_verdicts_jsonl(a->plans);
  nlohmann::json back = nlohmann::json::parse(jl.substr(0, jl.find('\n')));
  EXPECT_EQ(back["task"], "L1_001");
  EXPECT_EQ(back["sim"]["decoy"], true);
  EXPECT_EQ(back["live"]["speedup"], 1.5);
  // Both worlds' times, so a reader can tell whether the plan or the reference is mispriced.
  EXPECT_EQ(back["live"]["reference_us"], r->reference_us);
  EXPECT_EQ(back["live"]["kernel_us"], r->reference_us / 1.5);
  EXPECT_EQ(back["sim"]["kernel_us"], r->kernel_us);
  EXPECT_EQ(back["sim"]["reference_us"], r->reference_us);
  EXPECT_GT(r->kernel_us, 0);
}

TEST(SimAgreement, AllowancesAcceptKnownShortfallsAndCatchRegressions) {
  AgreementTable t;
  t.thresholds = {1.0, 1.2};
  FamilyAgreement ew;
  ew.family = "elementwise";
  ew.plans = 200;
  ew.timed = 190;
  ew.median_log_error = 0.0751;
  ew.correct_agree = 199;        // 99.5%: met
  ew.fast_p_agree = {136, 180};  // 68.0%, 90.0%
  t.rows = {ew};
  AgreementGoals g;
  GoalCheck none = check_goals(t, g, {});
  EXPECT_EQ(none.missed.size(), 2u);  // fast_1 and fast_1.2
  EXPECT_TRUE(none.allowed.empty());

  Result<std::vector<ShortfallAllowance>> a =
      parse_shortfall_allowances("exp.txt",
                                 "# known gaps\nelementwise fast_1 68.0   # noise-bound ties\n\nelementwise fast_1.2 "
                                 "90.1\nelementwise correct 98\n");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_EQ(a->size(), 3u);
  EXPECT_EQ((*a)[0].where, "exp.txt:2");
  GoalCheck c = check_goals(t, g, *a);
  ASSERT_EQ(c.allowed.size(), 1u);
  EXPECT_NE(c.allowed[0].find("fast_1 agrees on 68.0%"), std::string::npos) << c.allowed[0];
  ASSERT_EQ(c.missed.size(), 1u);  // 90.0 is below the 90.1 allowed
  EXPECT_NE(c.missed[0].find("exp.txt:4"), std::string::npos) << c.missed[0];
  ASSERT_EQ(c.now_met.size(), 1u);  // correctness meets its goal: its allowance can go
  EXPECT_NE(c.now_met[0].find("exp.txt:5"), std::string::npos);

  for (const char* bad : {"elementwise fast_1\n", "elementwise speed 3\n", "gemm log_error x\n", "gemm correct 101\n",
                          "gemm log_error 0.1 extra\n"}) {
    Result<std::vector<ShortfallAllowance>> b = parse_shortfall_allowances("e.txt", bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("e.txt:1"), std::string::npos) << b.status().message();
  }
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
