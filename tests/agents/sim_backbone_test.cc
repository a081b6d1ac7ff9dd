#include "agents/sim_backbone.h"
#include "agents/sim_checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "core/rng.h"

namespace vinci {
namespace {

// Every randomized input below derives from this seed; VINCI_TEST_SEED=<n> reruns with another.
uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("VINCI_TEST_SEED");
    uint64_t s = env != nullptr ? std::strtoull(env, nullptr, 10) : 20261202;
    std::cout << "sim_backbone_test seed: " << s << " (set VINCI_TEST_SEED to change)\n";
    return s;
  }();
  return seed;
}

BackboneShape small_shape() {
  BackboneShape s;
  s.task_dim = 4;
  s.head_sizes = {3, 2, 4};
  s.feedback_dim = 3;
  s.candidate_dim = 5;
  return s;
}

SimBackboneConfig small_config(uint64_t init_seed = 7) {
  SimBackboneConfig c;
  c.shape = small_shape();
  c.hidden = 16;
  c.role_dim = 4;
  c.init_seed = init_seed;
  return c;
}

std::unique_ptr<SimBackbone> make(const SimBackboneConfig& c) {
  auto b = SimBackbone::create(c);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return std::move(b).value();
}

std::vector<float> features(const std::string& what, int64_t index, int32_t n) {
  Stream s(RngKey::root(test_seed()).with("input", what).with("index", index));
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(2 * s.uniform() - 1);
  return v;
}

// A one-hot setting over all heads (choice c_k of head k).
std::vector<float> one_hot(const BackboneShape& s, const std::vector<int32_t>& choice) {
  std::vector<float> v(s.choice_dim(), 0.0f);
  int32_t off = 0;
  for (size_t k = 0; k < s.head_sizes.size(); ++k) {
    v[off + choice[k]] = 1;
    off += s.head_sizes[k];
  }
  return v;
}

PolicyInput policy_input(int64_t i, std::vector<int32_t> heads = {0, 1, 2}) {
  BackboneShape s = small_shape();
  PolicyInput in;
  in.task = features("task", i, s.task_dim);
  in.skill_hint = one_hot(s, {1, 0, 3});
  in.previous = i % 2 == 0 ? std::vector<float>(s.choice_dim(), 0.0f) : one_hot(s, {2, 1, 0});
  in.feedback = features("feedback", i, s.feedback_dim);
  in.active_heads = std::move(heads);
  return in;
}

SelectionInput selection_input(int64_t i, int32_t candidates = 6, int32_t max_pick = 3) {
  SelectionInput in;
  in.task = features("task", i, small_shape().task_dim);
  for (int32_t j = 0; j < candidates; ++j) {
    in.candidates.push_back(features("candidate", i * 100 + j, small_shape().candidate_dim));
  }
  in.max_pick = max_pick;
  return in;
}

SummaryInput summary_input(int64_t i, std::vector<int32_t> heads = {0, 1, 2}) {
  BackboneShape s = small_shape();
  SummaryInput in;
  in.task = features("task", i, s.task_dim);
  in.winning = one_hot(s, {2, 1, 1});
  in.feedback = features("feedback", i, s.feedback_dim);
  in.active_heads = std::move(heads);
  return in;
}

RngKey key(int64_t i) { return RngKey::root(test_seed()).with("draw", i); }

// Log-softmax computed here, independently of the backbone.
std::vector<double> log_softmax(std::vector<double> x) {
  double m = *std::max_element(x.begin(), x.end());
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  for (double& v : x) v = v - m - std::log(s);
  return x;
}

double log_sigmoid(double z) { return -std::log1p(std::exp(-z)); }

std::vector<double> head_logits(const std::vector<double>& all, const BackboneShape& s, int32_t k) {
  int32_t off = 0;
  for (int32_t i = 0; i < k; ++i) off += s.head_sizes[i];
  return std::vector<double>(all.begin() + off, all.begin() + off + s.head_sizes[k]);
}

// Log-probability of a policy action, from the backbone's logits and the test's own math.
double policy_log_prob(SimBackbone& b, const PolicyInput& in, const std::vector<int32_t>& choices) {
  auto logits = b.policy_logits(in);
  EXPECT_TRUE(logits.ok());
  double lp = 0;
  for (size_t a = 0; a < in.active_heads.size(); ++a) {
    lp += log_softmax(head_logits(*logits, small_shape(), in.active_heads[a]))[choices[a]];
  }
  return lp;
}

double selection_log_prob(SimBackbone& b, const SelectionInput& in, const std::vector<int32_t>& picked) {
  auto scores = b.selection_scores(in);
  EXPECT_TRUE(scores.ok());
  std::vector<bool> left(scores->size(), true);
  double lp = 0;
  for (int32_t p : picked) {
    std::vector<double> rest;
    int32_t pos = 0;
    for (size_t j = 0; j < scores->size(); ++j) {
      if (!left[j]) continue;
      if (static_cast<int32_t>(j) == p) pos = static_cast<int32_t>(rest.size());
      rest.push_back((*scores)[j]);
    }
    lp += log_softmax(rest)[pos];
    left[p] = false;
  }
  return lp;
}

double summary_log_prob(SimBackbone& b, const SummaryInput& in, const std::vector<uint8_t>& include, int32_t scope) {
  auto logits = b.summary_logits(in);
  EXPECT_TRUE(logits.ok());
  double lp = 0;
  for (size_t a = 0; a < include.size(); ++a) {
    lp += log_sigmoid(include[a] ? (*logits)[a] : -(*logits)[a]);
  }
  size_t n = in.active_heads.size();
  lp += log_softmax({(*logits)[n], (*logits)[n + 1]})[scope];
  return lp;
}

Experience policy_experience(int64_t i, std::vector<int32_t> choices, double advantage) {
  Experience e;
  e.role = AgentRole::kPolicy;
  e.advantage = advantage;
  e.policy_input = policy_input(i);
  e.policy.choices = std::move(choices);
  return e;
}

Experience selection_experience(int64_t i, std::vector<int32_t> picked, double advantage) {
  Experience e;
  e.role = AgentRole::kSelection;
  e.advantage = advantage;
  e.selection_input = selection_input(i);
  e.selection.picked = std::move(picked);
  return e;
}

Experience summary_experience(int64_t i, std::vector<uint8_t> include, int32_t scope, double advantage) {
  Experience e;
  e.role = AgentRole::kSummary;
  e.advantage = advantage;
  e.summary_input = summary_input(i);
  e.summary.include = std::move(include);
  e.summary.scope = scope;
  return e;
}

// A batch with every role, varied advantages and inputs.
std::vector<Experience> mixed_batch() {
  std::vector<Experience> batch;
  for (int64_t i = 0; i < 6; ++i) {
    batch.push_back(policy_experience(
        i, {static_cast<int32_t>(i % 3), static_cast<int32_t>(i % 2), static_cast<int32_t>(i % 4)}, 0.5 - 0.3 * i));
    batch.push_back(
        selection_experience(i, {static_cast<int32_t>((i + 3) % 6), static_cast<int32_t>(i % 6)}, 0.2 * i - 0.4));
    batch.push_back(
        summary_experience(i, {static_cast<uint8_t>(i % 2), 1, 0}, static_cast<int32_t>(i % 2), 1.0 - 0.25 * i));
  }
  // A selection with nothing picked and one with a single pick.
  batch.push_back(selection_experience(9, {}, 1.0));
  batch.push_back(selection_experience(10, {2}, -1.0));
  return batch;
}

// ---- tests ----

TEST(BackboneShape, ChoiceDimAndRoleNames) {
  EXPECT_EQ(small_shape().choice_dim(), 9);
  EXPECT_EQ(BackboneShape{}.choice_dim(), 0);
  EXPECT_STREQ(agent_role_name(AgentRole::kSelection), "selection");
  EXPECT_STREQ(agent_role_name(AgentRole::kPolicy), "policy");
  EXPECT_STREQ(agent_role_name(AgentRole::kSummary), "summary");
}

TEST(SimBackbone, ReportsVersionAndThreads) {
  auto b = make(small_config());
  EXPECT_EQ(b->kind(), "sim");
  EXPECT_EQ(b->torch_threads(), 1);
  std::string v = libtorch_version();
  EXPECT_FALSE(v.empty());
  EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(v[0]))) << v;
  EXPECT_NE(v.find('.'), std::string::npos) << v;
  std::cout << "libtorch " << v << ", CPU capability " << libtorch_cpu_capability() << "\n";
}

TEST(SimBackbone, RejectsBadConfigs) {
  SimBackboneConfig c = small_config();
  c.shape.head_sizes = {3, 0};
  auto r = SimBackbone::create(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("head_sizes[1] = 0"), std::string::npos) << r.status().message();
  c = small_config();
  c.lr = 0;
  EXPECT_FALSE(SimBackbone::create(c).ok());
  c = small_config();
  c.shape.task_dim = -1;
  EXPECT_FALSE(SimBackbone::create(c).ok());
  c = small_config();
  c.shape.head_sizes.clear();
  EXPECT_FALSE(SimBackbone::create(c).ok());
}

TEST(SimBackbone, SameConfigSameParametersOtherSeedOtherParameters) {
  auto a = make(small_config(7));
  auto b = make(small_config(7));
  auto c = make(small_config(8));
  EXPECT_EQ(a->parameter_digest(), b->parameter_digest());
  EXPECT_EQ(a->save_parameters(), b->save_parameters());
  EXPECT_NE(a->parameter_digest(), c->parameter_digest());
  // Building a backbone does not depend on (or disturb) what was built before it.
  auto d = make(small_config(7));
  EXPECT_EQ(a->parameter_digest(), d->parameter_digest());
}

TEST(SimBackbone, SampleIsAFunctionOfParametersInputAndKey) {
  auto a = make(small_config());
  auto b = make(small_config());
  std::set<std::vector<int32_t>> policies, selections;
  std::set<std::pair<std::vector<uint8_t>, int32_t>> summaries;
  for (int64_t i = 0; i < 200; ++i) {
    auto p1 = a->sample_policy(policy_input(1), key(i), false);
    auto p2 = b->sample_policy(policy_input(1), key(i), false);
    auto p3 = a->sample_policy(policy_input(1), key(i), false);
    ASSERT_TRUE(p1.ok() && p2.ok() && p3.ok());
    EXPECT_EQ(p1->choices, p2->choices);
    EXPECT_EQ(p1->choices, p3->choices);
    EXPECT_EQ(p1->log_prob, p2->log_prob);
    policies.insert(p1->choices);

    auto s1 = a->sample_selection(selection_input(1), key(i), false);
    auto s2 = b->sample_selection(selection_input(1), key(i), false);
    ASSERT_TRUE(s1.ok() && s2.ok());
    EXPECT_EQ(s1->picked, s2->picked);
    EXPECT_EQ(s1->log_prob, s2->log_prob);
    selections.insert(s1->picked);

    auto u1 = a->sample_summary(summary_input(1), key(i), false);
    auto u2 = b->sample_summary(summary_input(1), key(i), false);
    ASSERT_TRUE(u1.ok() && u2.ok());
    EXPECT_EQ(u1->include, u2->include);
    EXPECT_EQ(u1->scope, u2->scope);
    EXPECT_EQ(u1->log_prob, u2->log_prob);
    summaries.insert({u1->include, u1->scope});
  }
  // 24 policy actions, 120 ordered picks of 3 out of 6, 16 summary actions: near-uniform at
  // initialisation, so 200 keys reach many of them.
  EXPECT_GT(policies.size(), 12u);
  EXPECT_GT(selections.size(), 40u);
  EXPECT_GT(summaries.size(), 8u);
}

TEST(SimBackbone, GreedyIsArgmax) {
  auto b = make(small_config());
  const BackboneShape s = small_shape();
  for (int64_t i = 0; i < 20; ++i) {
    PolicyInput in = policy_input(i, {2, 0});
    auto g = b->sample_policy(in, key(i), true);
    auto again = b->sample_policy(in, key(i + 1000), true);  // greedy ignores the key
    ASSERT_TRUE(g.ok() && again.ok());
    EXPECT_EQ(g->choices, again->choices);
    auto logits = b->policy_logits(in);
    ASSERT_TRUE(logits.ok());
    ASSERT_EQ(g->choices.size(), 2u);
    for (size_t a = 0; a < 2; ++a) {
      auto l = head_logits(*logits, s, in.active_heads[a]);
      int32_t argmax = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      EXPECT_EQ(g->choices[a], argmax);
      // Changing one head's choice never gives a likelier action.
      for (int32_t c = 0; c < s.head_sizes[in.active_heads[a]]; ++c) {
        std::vector<int32_t> alt = g->choices;
        alt[a] = c;
        EXPECT_GE(g->log_prob, policy_log_prob(*b, in, alt) - 1e-12);
      }
    }

    SelectionInput sin = selection_input(i);
    auto gs = b->sample_selection(sin, key(i), true);
    auto scores = b->selection_scores(sin);
    ASSERT_TRUE(gs.ok() && scores.ok());
    std::vector<int32_t> order(scores->size());
    for (size_t j = 0; j < order.size(); ++j) order[j] = static_cast<int32_t>(j);
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return (*scores)[x] > (*scores)[y]; });
    order.resize(3);
    EXPECT_EQ(gs->picked, order);

    SummaryInput uin = summary_input(i);
    auto gu = b->sample_summary(uin, key(i), true);
    auto ul = b->summary_logits(uin);
    ASSERT_TRUE(gu.ok() && ul.ok());
    for (size_t a = 0; a < 3; ++a) EXPECT_EQ(gu->include[a], (*ul)[a] > 0 ? 1 : 0);
    EXPECT_EQ(gu->scope, (*ul)[4] > (*ul)[3] ? 1 : 0);
  }
}

TEST(SimBackbone, ReportedLogProbIsTheLogSoftmax) {
  auto b = make(small_config());
  for (int64_t i = 0; i < 50; ++i) {
    PolicyInput in = policy_input(i);
    auto p = b->sample_policy(in, key(i), false);
    ASSERT_TRUE(p.ok());
    EXPECT_NEAR(p->log_prob, policy_log_prob(*b, in, p->choices), 1e-12);
    SelectionInput sin = selection_input(i);
    auto s = b->sample_selection(sin, key(i), false);
    ASSERT_TRUE(s.ok());
    EXPECT_NEAR(s->log_prob, selection_log_prob(*b, sin, s->picked), 1e-12);
    SummaryInput uin = summary_input(i);
    auto u = b->sample_summary(uin, key(i), false);
    ASSERT_TRUE(u.ok());
    EXPECT_NEAR(u->log_prob, summary_log_prob(*b, uin, u->include, u->scope), 1e-12);
  }
}

// Checks that the frequencies of `draws` outcomes match exp(log_prob) within 5 standard errors,
// and that the distribution is far enough from uniform for the check to mean something.
template <typename Outcome>
void expect_frequencies_match(const std::map<Outcome, int>& counts, const std::map<Outcome, double>& log_probs,
                              int draws, size_t outcomes) {
  EXPECT_EQ(counts.size(), outcomes);
  double total_p = 0, min_p = 1, max_p = 0;
  for (const auto& [o, lp] : log_probs) {
    double p = std::exp(lp);
    total_p += p;
    min_p = std::min(min_p, p);
    max_p = std::max(max_p, p);
    double freq = static_cast<double>(counts.at(o)) / draws;
    double se = std::sqrt(p * (1 - p) / draws);
    EXPECT_NEAR(freq, p, 5 * se + 1e-9);
  }
  EXPECT_NEAR(total_p, 1.0, 1e-9);  // the reported probabilities of all outcomes sum to 1
  EXPECT_GT(max_p / min_p, 1.3) << "too close to uniform to test the sampler";
}

TEST(SimBackbone, SampledFrequenciesMatchReportedProbabilities) {
  SimBackboneConfig c = small_config();
  c.lr = 0.05;
  auto b = make(c);
  // A few updates push the distributions away from uniform, so a sampler that ignored the logits
  // would be caught.
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(b->update({policy_experience(3, {0, 1, 3}, 1.0), selection_experience(3, {4, 1}, 1.0),
                           summary_experience(3, {1, 0, 1}, 1, 1.0)})
                    .ok());
  }
  const int draws = 20000;
  {
    PolicyInput in = policy_input(3, {2});  // one head of 4 choices
    std::map<std::vector<int32_t>, int> counts;
    std::map<std::vector<int32_t>, double> lps;
    for (int i = 0; i < draws; ++i) {
      auto p = b->sample_policy(in, key(i), false);
      ASSERT_TRUE(p.ok());
      counts[p->choices]++;
      lps[p->choices] = p->log_prob;
    }
    expect_frequencies_match(counts, lps, draws, 4);
  }
  {
    SelectionInput in = selection_input(3, 3, 2);  // 6 ordered picks of 2 out of 3
    std::map<std::vector<int32_t>, int> counts;
    std::map<std::vector<int32_t>, double> lps;
    for (int i = 0; i < draws; ++i) {
      auto s = b->sample_selection(in, key(i), false);
      ASSERT_TRUE(s.ok());
      counts[s->picked]++;
      lps[s->picked] = s->log_prob;
    }
    expect_frequencies_match(counts, lps, draws, 6);
  }
  {
    SummaryInput in = summary_input(3, {0});  // include x scope: 4 outcomes
    std::map<std::pair<int, int>, int> counts;
    std::map<std::pair<int, int>, double> lps;
    for (int i = 0; i < draws; ++i) {
      auto u = b->sample_summary(in, key(i), false);
      ASSERT_TRUE(u.ok());
      std::pair<int, int> o{u->include[0], u->scope};
      counts[o]++;
      lps[o] = u->log_prob;
    }
    expect_frequencies_match(counts, lps, draws, 4);
  }
}

TEST(SimBackbone, SelectionEdgeCases) {
  auto b = make(small_config());
  SelectionInput none = selection_input(0, 0, 3);
  auto s = b->sample_selection(none, key(0), false);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->picked.empty());
  EXPECT_EQ(s->log_prob, 0.0);
  SelectionInput zero = selection_input(0, 4, 0);
  s = b->sample_selection(zero, key(0), false);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->picked.empty());
  SelectionInput few = selection_input(0, 2, 3);  // max_pick above the candidates: all of them
  s = b->sample_selection(few, key(0), false);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->picked.size(), 2u);
  EXPECT_NE(s->picked[0], s->picked[1]);
  // The last pick has one candidate left: its factor is 1, so the log-prob is the first pick's.
  auto scores = b->selection_scores(few);
  ASSERT_TRUE(scores.ok());
  EXPECT_NEAR(s->log_prob, log_softmax(*scores)[s->picked[0]], 1e-12);
  SelectionInput one = selection_input(0, 1, 3);
  s = b->sample_selection(one, key(0), false);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->picked, std::vector<int32_t>{0});
  EXPECT_EQ(s->log_prob, 0.0);
}

TEST(SimBackbone, RejectsMalformedInputs) {
  auto b = make(small_config());
  PolicyInput in = policy_input(0);
  in.task.pop_back();
  auto p = b->sample_policy(in, key(0), false);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("task: expected 4 values, got 3"), std::string::npos) << p.status().message();
  in = policy_input(0, {0, 3});
  EXPECT_FALSE(b->sample_policy(in, key(0), false).ok());
  in = policy_input(0, {1, 1});
  EXPECT_FALSE(b->sample_policy(in, key(0), false).ok());
  in = policy_input(0);
  in.feedback[1] = std::nanf("");
  EXPECT_FALSE(b->sample_policy(in, key(0), false).ok());
  SelectionInput sin = selection_input(0);
  sin.candidates[2].push_back(0);
  EXPECT_FALSE(b->sample_selection(sin, key(0), false).ok());
  SummaryInput uin = summary_input(0);
  uin.winning.clear();
  EXPECT_FALSE(b->sample_summary(uin, key(0), false).ok());

  // An update with one bad experience changes nothing.
  Digest before = b->parameter_digest();
  std::vector<Experience> batch = mixed_batch();
  batch.push_back(policy_experience(0, {0, 2, 0}, 1.0));  // head 1 has 2 choices
  auto u = b->update(batch);
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("experience " + std::to_string(batch.size() - 1)), std::string::npos)
      << u.status().message();
  batch.back() = selection_experience(0, {1, 1}, 1.0);
  EXPECT_FALSE(b->update(batch).ok());
  batch.back() = summary_experience(0, {1, 2, 0}, 0, 1.0);
  EXPECT_FALSE(b->update(batch).ok());
  EXPECT_EQ(b->parameter_digest(), before);
}

// REINFORCE with a positive advantage on one fixed action raises that action's log-probability
// and its sampled frequency, for each role.
TEST(SimBackbone, ReinforceLearnsEveryRole) {
  SimBackboneConfig c = small_config();
  c.lr = 1e-2;
  auto b = make(c);
  const PolicyInput pin = policy_input(5);
  const std::vector<int32_t> target_policy = {2, 0, 1};
  const SelectionInput sin = selection_input(5);
  const std::vector<int32_t> target_pick = {4, 0, 2};
  const SummaryInput uin = summary_input(5);
  const std::vector<uint8_t> target_include = {1, 0, 1};
  const int32_t target_scope = 1;

  auto frequencies = [&](double* fp, double* fs, double* fu) {
    int hp = 0, hs = 0, hu = 0;
    const int n = 1000;
    for (int i = 0; i < n; ++i) {
      hp += b->sample_policy(pin, key(i), false)->choices == target_policy;
      hs += b->sample_selection(sin, key(i), false)->picked == target_pick;
      auto u = b->sample_summary(uin, key(i), false);
      hu += u->include == target_include && u->scope == target_scope;
    }
    *fp = static_cast<double>(hp) / n;
    *fs = static_cast<double>(hs) / n;
    *fu = static_cast<double>(hu) / n;
  };
  double fp0, fs0, fu0;
  frequencies(&fp0, &fs0, &fu0);
  double lp0 = policy_log_prob(*b, pin, target_policy);
  double ls0 = selection_log_prob(*b, sin, target_pick);
  double lu0 = summary_log_prob(*b, uin, target_include, target_scope);

  for (int step = 0; step < 40; ++step) {
    Experience p = policy_experience(5, target_policy, 1.0);
    Experience s = selection_experience(5, target_pick, 1.0);
    Experience u = summary_experience(5, target_include, target_scope, 1.0);
    auto stats = b->update({p, s, u});
    ASSERT_TRUE(stats.ok()) << stats.status().to_string();
    EXPECT_EQ(stats->experiences, 3);
    EXPECT_GT(stats->grad_norm, 0);
  }
  double fp1, fs1, fu1;
  frequencies(&fp1, &fs1, &fu1);
  double lp1 = policy_log_prob(*b, pin, target_policy);
  double ls1 = selection_log_prob(*b, sin, target_pick);
  double lu1 = summary_log_prob(*b, uin, target_include, target_scope);
  std::cout << "policy  log_prob " << lp0 << " -> " << lp1 << ", frequency " << fp0 << " -> " << fp1
            << "\nselect  log_prob " << ls0 << " -> " << ls1 << ", frequency " << fs0 << " -> " << fs1
            << "\nsummary log_prob " << lu0 << " -> " << lu1 << ", frequency " << fu0 << " -> " << fu1 << "\n";
  EXPECT_GT(lp1, lp0 + 1.0);
  EXPECT_GT(ls1, ls0 + 1.0);
  EXPECT_GT(lu1, lu0 + 1.0);
  EXPECT_GT(fp1, fp0 + 0.3);
  EXPECT_GT(fs1, fs0 + 0.3);
  EXPECT_GT(fu1, fu0 + 0.3);
}

TEST(SimBackbone, NegativeAdvantageLowersLogProb) {
  auto b = make(small_config());
  const PolicyInput pin = policy_input(2);
  double before = policy_log_prob(*b, pin, {1, 1, 1});
  for (int step = 0; step < 10; ++step) {
    ASSERT_TRUE(b->update({policy_experience(2, {1, 1, 1}, -1.0)}).ok());
  }
  EXPECT_LT(policy_log_prob(*b, pin, {1, 1, 1}), before - 0.05);
}

// Locked choices (PolicyInput::allowed): head 0 keeps only choice 2, head 2 loses choices 0 and 3.
std::vector<float> some_locks() {
  std::vector<float> allowed(small_shape().choice_dim(), 1.0f);
  allowed[0] = allowed[1] = 0;  // head 0: choices 0, 1 locked
  allowed[3 + 2 + 0] = 0;       // head 2: choice 0 locked
  allowed[3 + 2 + 3] = 0;       // head 2: choice 3 locked
  return allowed;
}

TEST(SimBackbone, LockedChoicesAreNeverSampledAndTheLogProbIsTheMaskedSoftmax) {
  auto b = make(small_config());
  std::map<std::vector<int32_t>, int> counts;
  for (int64_t i = 0; i < 400; ++i) {
    PolicyInput in = policy_input(i % 4);
    in.allowed = some_locks();
    auto p = b->sample_policy(in, key(i), false);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->choices[0], 2);
    EXPECT_TRUE(p->choices[2] == 1 || p->choices[2] == 2) << p->choices[2];
    counts[p->choices]++;
    // The masked softmax, computed here: the open choices' logits renormalised.
    auto logits = b->policy_logits(in);
    ASSERT_TRUE(logits.ok());
    std::vector<double> h2 = head_logits(*logits, small_shape(), 2);
    std::vector<double> open2 = log_softmax({h2[1], h2[2]});
    double want = 0 + log_softmax(head_logits(*logits, small_shape(), 1))[p->choices[1]] + open2[p->choices[2] - 1];
    EXPECT_NEAR(p->log_prob, want, 1e-12);
    auto g = b->sample_policy(in, key(i), true);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->choices[0], 2);
    EXPECT_NE(g->choices[2], 0);
    EXPECT_NE(g->choices[2], 3);
  }
  EXPECT_EQ(counts.size(), 4u);  // head 1 x head 2's two open choices all occur
  // Without locks the same keys sample the locked choices too: the mask is what kept them out.
  int locked_seen = 0;
  for (int64_t i = 0; i < 400; ++i) {
    auto p = b->sample_policy(policy_input(i % 4), key(i), false);
    ASSERT_TRUE(p.ok());
    locked_seen += p->choices[0] != 2 || p->choices[2] == 0 || p->choices[2] == 3;
  }
  EXPECT_GT(locked_seen, 0);
}

TEST(SimBackbone, LocksAreCheckedAndTheUpdateUsesTheMaskedDistribution) {
  auto b = make(small_config());
  PolicyInput in = policy_input(1);
  in.allowed = some_locks();
  in.allowed[3 + 2 + 1] = in.allowed[3 + 2 + 2] = 0;  // every choice of head 2 locked
  auto bad = b->sample_policy(in, key(0), false);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("every choice of active head 2 is locked"), std::string::npos)
      << bad.status().to_string();
  in.allowed.pop_back();
  EXPECT_FALSE(b->sample_policy(in, key(0), false).ok());  // wrong length
  // An experience whose action is a locked choice is refused, and changes nothing.
  Experience e = policy_experience(1, {0, 1, 1}, 1.0);
  e.policy_input.allowed = some_locks();
  Digest before = b->parameter_digest();
  auto refused = b->update({e});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("locked"), std::string::npos) << refused.status().to_string();
  EXPECT_EQ(b->parameter_digest(), before);
  // A positive advantage on an open choice raises its masked log-probability, and the loss the
  // update reports is -advantage x that log-probability (one experience).
  Experience ok = policy_experience(1, {2, 0, 1}, 1.0);
  ok.policy_input.allowed = some_locks();
  auto logits = b->policy_logits(ok.policy_input);
  ASSERT_TRUE(logits.ok());
  std::vector<double> h2 = head_logits(*logits, small_shape(), 2);
  double masked = log_softmax(head_logits(*logits, small_shape(), 1))[0] + log_softmax({h2[1], h2[2]})[0];
  auto stats = b->update({ok});
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  EXPECT_NEAR(stats->loss, -masked, 1e-5);
  auto after = b->policy_logits(ok.policy_input);
  ASSERT_TRUE(after.ok());
  std::vector<double> a2 = head_logits(*after, small_shape(), 2);
  EXPECT_GT(log_softmax(head_logits(*after, small_shape(), 1))[0] + log_softmax({a2[1], a2[2]})[0], masked);
}

TEST(SimBackbone, UntrainedRolesLeaveParametersUnchanged) {
  SimBackboneConfig c = small_config();
  c.train_selection = false;
  auto b = make(c);
  Digest before = b->parameter_digest();
  std::vector<Experience> only_selection;
  for (int64_t i = 0; i < 5; ++i) only_selection.push_back(selection_experience(i, {1, 3}, 1.0));
  auto stats = b->update(only_selection);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->experiences, 0);
  EXPECT_EQ(b->parameter_digest(), before);

  // In a mixed batch the untrained role's experiences are skipped entirely: the result equals an
  // update on the batch without them...
  std::vector<Experience> mixed = mixed_batch(), without;
  for (const Experience& e : mixed) {
    if (e.role != AgentRole::kSelection) without.push_back(e);
  }
  auto twin = make(c);
  auto s1 = b->update(mixed);
  auto s2 = twin->update(without);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(s1->experiences, static_cast<int64_t>(without.size()));
  EXPECT_EQ(s1->loss, s2->loss);
  EXPECT_EQ(b->parameter_digest(), twin->parameter_digest());
  // ...while a backbone that trains selection does see them.
  auto trained = make(small_config());
  ASSERT_TRUE(trained->update(mixed).ok());
  EXPECT_NE(trained->parameter_digest(), b->parameter_digest());
}

TEST(SimBackbone, UpdateIsDeterministic) {
  auto a = make(small_config());
  auto b = make(small_config());
  std::vector<Experience> batch = mixed_batch();
  for (int step = 0; step < 3; ++step) {
    auto sa = a->update(batch);
    auto sb = b->update(batch);
    ASSERT_TRUE(sa.ok() && sb.ok());
    EXPECT_EQ(sa->loss, sb->loss);
    EXPECT_EQ(sa->grad_norm, sb->grad_norm);
    EXPECT_EQ(sa->experiences, static_cast<int64_t>(batch.size()));
    EXPECT_EQ(a->parameter_digest(), b->parameter_digest());
  }
  // The update did something, and a different batch does something else.
  auto c = make(small_config());
  EXPECT_NE(c->parameter_digest(), a->parameter_digest());
  std::vector<Experience> flipped = batch;
  for (Experience& e : flipped) e.advantage = -e.advantage;
  for (int step = 0; step < 3; ++step) ASSERT_TRUE(c->update(flipped).ok());
  EXPECT_NE(c->parameter_digest(), a->parameter_digest());
}

TEST(SimBackbone, UpdateStatsFollowTheLossDefinition) {
  auto b = make(small_config());
  std::vector<Experience> batch = {policy_experience(1, {0, 1, 2}, 0.7), selection_experience(1, {3, 1}, -0.4),
                                   summary_experience(1, {1, 0, 0}, 1, 1.3)};
  double expected = -(0.7 * policy_log_prob(*b, batch[0].policy_input, {0, 1, 2}) +
                      -0.4 * selection_log_prob(*b, batch[1].selection_input, {3, 1}) +
                      1.3 * summary_log_prob(*b, batch[2].summary_input, {1, 0, 0}, 1)) /
                    3;
  auto stats = b->update(batch);
  ASSERT_TRUE(stats.ok());
  EXPECT_NEAR(stats->loss, expected, 1e-5);  // float32 recomputation of double log-probs
  EXPECT_EQ(stats->experiences, 3);
  EXPECT_GT(stats->grad_norm, 0);
}

TEST(SimBackbone, SaveLoadRoundTripIncludesOptimizerState) {
  auto a = make(small_config(7));
  std::vector<Experience> batch = mixed_batch();
  for (int step = 0; step < 2; ++step) ASSERT_TRUE(a->update(batch).ok());
  std::string bytes = a->save_parameters();

  auto b = make(small_config(99));  // other initial parameters, same shape
  ASSERT_NE(b->parameter_digest(), a->parameter_digest());
  Status st = b->load_parameters(bytes);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(b->parameter_digest(), a->parameter_digest());
  EXPECT_EQ(b->save_parameters(), bytes);
  for (int64_t i = 0; i < 20; ++i) {
    auto pa = a->sample_policy(policy_input(i), key(i), false);
    auto pb = b->sample_policy(policy_input(i), key(i), false);
    EXPECT_EQ(pa->choices, pb->choices);
    EXPECT_EQ(pa->log_prob, pb->log_prob);
    auto sa = a->sample_selection(selection_input(i), key(i), false);
    auto sb = b->sample_selection(selection_input(i), key(i), false);
    EXPECT_EQ(sa->picked, sb->picked);
    EXPECT_EQ(sa->log_prob, sb->log_prob);
  }
  // The next step is the same too: Adam's moments and step counts came along.
  ASSERT_TRUE(a->update(batch).ok());
  ASSERT_TRUE(b->update(batch).ok());
  EXPECT_EQ(b->parameter_digest(), a->parameter_digest());
  // (b's own Adam state was fresh: had the load kept it, b would have taken a first-step Adam
  // update here, not a's third.) And a backbone that took the three steps itself agrees.
  auto direct = make(small_config(7));
  for (int step = 0; step < 3; ++step) ASSERT_TRUE(direct->update(batch).ok());
  EXPECT_EQ(direct->parameter_digest(), a->parameter_digest());
}

TEST(SimBackbone, LoadRejectsOtherShapesAndDamagedBytes) {
  auto a = make(small_config());
  std::string bytes = a->save_parameters();
  Digest before = a->parameter_digest();

  SimBackboneConfig other = small_config();
  other.shape.head_sizes = {2, 3, 4};  // same choice_dim, other heads
  auto b = make(other);
  Digest b_before = b->parameter_digest();
  Status st = b->load_parameters(bytes);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kMismatch);
  EXPECT_NE(st.message().find("head_sizes[0] is 3, this backbone has 2"), std::string::npos) << st.message();
  EXPECT_EQ(b->parameter_digest(), b_before);

  SimBackboneConfig wider = small_config();
  wider.hidden = 17;
  st = make(wider)->load_parameters(bytes);
  EXPECT_EQ(st.code(), StatusCode::kMismatch);
  EXPECT_NE(st.message().find("hidden is 16, this backbone has 17"), std::string::npos) << st.message();

  auto c = make(small_config(3));
  Digest c_before = c->parameter_digest();
  st = c->load_parameters(bytes.substr(0, bytes.size() - 5));
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.to_string();
  st = c->load_parameters(bytes + "x");
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.to_string();
  st = c->load_parameters("not a checkpoint");
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.to_string();
  EXPECT_EQ(c->parameter_digest(), c_before);  // nothing half-loaded
  EXPECT_EQ(a->parameter_digest(), before);
}

// A checkpoint whose dims multiply past 2^40 values is refused before the product overflows; one
// written by SimCheckpointWriter parses back to what was written.
TEST(SimCheckpoint, ParsesWhatTheWriterWroteAndRefusesOverlargeShapes) {
  const int32_t fields[kSimCheckpointFields] = {4, 3, 5, 8, 3};
  SimCheckpointWriter w(fields, {2, 3}, 1);
  const float values[6] = {1, 2, 3, 4, 5, 6}, avg[6] = {0}, sq[6] = {0};
  w.add("trunk.weight", {2, 3}, values, 9, avg, sq);
  std::string bytes = w.take();
  Result<SimCheckpoint> c = parse_sim_checkpoint(bytes);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ(c->params.size(), 1u);
  EXPECT_EQ(c->params[0].numel, 6);
  EXPECT_EQ(c->params[0].step, 9);
  EXPECT_EQ(c->head_sizes, (std::vector<int32_t>{2, 3}));
  // Eight dims of 2^32 each: each one alone is in range, their product is not.
  ByteWriter big;
  big.raw(bytes.substr(0, bytes.find("trunk.weight") - 4));
  big.str("p");
  big.u32(8);
  for (int i = 0; i < 8; ++i) big.i64(int64_t{1} << 32);
  Result<SimCheckpoint> refused = parse_sim_checkpoint(big.take());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("while reading the shape of p"), std::string::npos)
      << refused.status().message();
}

TEST(SimBackbone, ConcurrentCallsGiveTheSequentialResults) {
  auto b = make(small_config());
  const int n = 64;
  std::vector<PolicySample> expected;
  for (int i = 0; i < n; ++i) expected.push_back(*b->sample_policy(policy_input(i), key(i), false));
  std::vector<PolicySample> got(n);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < n; i += 4) got[i] = *b->sample_policy(policy_input(i), key(i), false);
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(got[i].choices, expected[i].choices) << i;
    EXPECT_EQ(got[i].log_prob, expected[i].log_prob) << i;
  }
}

// Timing, not a check: run with --gtest_also_run_disabled_tests --gtest_filter='*Timing*'.
// Sizes are close to harness/sim_world's shape (25 task features, ~30 knob choices).
// The cold start's supervised steps (harness/coldstart.h): cross-entropy on the three heads,
// every role trained even when train_* says otherwise.
std::vector<Experience> sft_batch() {
  std::vector<Experience> batch;
  for (int64_t i = 0; i < 12; ++i) {
    Experience p;
    p.role = AgentRole::kPolicy;
    p.advantage = 1;
    p.policy_input = policy_input(i);
    p.policy.choices = {static_cast<int32_t>(i % 3), static_cast<int32_t>(i % 2), 3};
    batch.push_back(p);
    Experience s;
    s.role = AgentRole::kSelection;
    s.advantage = 1;
    s.selection_input = selection_input(i);
    s.selection.picked = {static_cast<int32_t>(i % 6), static_cast<int32_t>((i + 1) % 6)};
    batch.push_back(s);
    Experience u;
    u.role = AgentRole::kSummary;
    u.advantage = 1;
    u.summary_input = summary_input(i);
    u.summary.include = {1, static_cast<uint8_t>(i % 2), 0};
    u.summary.scope = static_cast<int32_t>(i % 2);
    batch.push_back(u);
  }
  return batch;
}

TEST(SimBackbone, SupervisedStepsLowerTheCrossEntropyOfEveryHead) {
  SimBackboneConfig c = small_config();
  c.train_selection = false;  // the cold start trains every head regardless
  c.train_summary = false;
  auto b = make(c);
  const std::vector<Experience> batch = sft_batch();
  auto before = b->cross_entropy(batch);
  ASSERT_TRUE(before.ok()) << before.status().to_string();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(before->count[r], 12) << agent_role_name(static_cast<AgentRole>(r));
    EXPECT_GT(before->mean[r], 0.1);
  }
  // The cross-entropy is the mean negative log-likelihood the backbone reports for a policy target.
  double nll = 0;
  for (const auto& e : batch) {
    if (e.role == AgentRole::kPolicy) nll -= policy_log_prob(*b, e.policy_input, e.policy.choices);
  }
  EXPECT_NEAR(before->mean[1], nll / 12, 1e-4);
  double first_loss = 0;
  for (int step = 0; step < 80; ++step) {
    auto st = b->supervised_step(batch, 1e-2);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    if (step == 0) first_loss = st->loss;
  }
  EXPECT_NEAR(first_loss, before->total(), 1e-4);
  auto after = b->cross_entropy(batch);
  ASSERT_TRUE(after.ok());
  for (int r = 0; r < 3; ++r) {
    EXPECT_LT(after->mean[r], 0.7 * before->mean[r]) << agent_role_name(static_cast<AgentRole>(r));
  }
  // Advantages are ignored: a batch with other advantages has the same cross-entropy.
  std::vector<Experience> other = batch;
  for (auto& e : other) e.advantage = -3;
  auto same = b->cross_entropy(other);
  ASSERT_TRUE(same.ok());
  for (int r = 0; r < 3; ++r) EXPECT_EQ(same->mean[r], after->mean[r]);
  EXPECT_FALSE(b->supervised_step(batch, 0).ok());
}

TEST(SimBackbone, CheckpointDigestMatchesTheParameterDigest) {
  auto b = make(small_config());
  for (int step = 0; step < 3; ++step) ASSERT_TRUE(b->supervised_step(sft_batch(), 1e-2).ok());
  auto bytes = b->checkpoint();
  ASSERT_TRUE(bytes.ok());
  auto d = SimBackbone::checkpoint_digest(*bytes);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(*d, b->parameter_digest());
  // Round trip into a fresh backbone: same digest, same bytes.
  auto fresh = make(small_config(99));
  EXPECT_NE(fresh->parameter_digest(), b->parameter_digest());
  ASSERT_TRUE(fresh->load_checkpoint(*bytes).ok());
  EXPECT_EQ(fresh->parameter_digest(), b->parameter_digest());
  EXPECT_EQ(*fresh->checkpoint(), *bytes);
  // A flipped bit anywhere either breaks the parse, changes the digest (a parameter value or
  // shape), or lands in the Adam state, which the digest leaves out; every kind occurs.
  int changed = 0, optimizer_only = 0;
  for (size_t at = 0; at < bytes->size(); ++at) {
    std::string tampered = *bytes;
    tampered[at] ^= 0x10;
    auto td = SimBackbone::checkpoint_digest(tampered);
    if (td.ok() && *td == *d) {
      ++optimizer_only;
    } else {
      ++changed;
    }
  }
  EXPECT_GT(changed, static_cast<int>(bytes->size() / 4));
  EXPECT_GT(optimizer_only, static_cast<int>(bytes->size() / 4));
  EXPECT_FALSE(SimBackbone::checkpoint_digest(bytes->substr(0, bytes->size() - 5)).ok());
  // Resetting the optimizer keeps the parameters (and their digest) but not the Adam state.
  ASSERT_TRUE(b->reset_optimizer().ok());
  EXPECT_EQ(b->parameter_digest(), *d);
  EXPECT_NE(*b->checkpoint(), *bytes);
}

TEST(SimBackbone, DISABLED_Timing) {
  SimBackboneConfig c;
  c.shape.task_dim = 25;
  c.shape.head_sizes = {2, 3, 4, 4, 3, 2, 4, 3, 2, 3};
  c.shape.feedback_dim = 8;
  c.shape.candidate_dim = c.shape.choice_dim() + 3;
  c.init_seed = 1;
  auto b = make(c);
  const int32_t C = c.shape.choice_dim();
  auto vec = [](const std::string& w, int64_t i, int32_t n) { return features(w, i, n); };
  std::vector<Experience> batch;
  for (int64_t i = 0; i < 768; ++i) {
    Experience e;
    e.role = AgentRole::kPolicy;
    e.advantage = (i % 7) * 0.1 - 0.3;
    e.policy_input.task = vec("task", i, 25);
    e.policy_input.skill_hint = vec("hint", i, C);
    e.policy_input.previous = vec("prev", i, C);
    e.policy_input.feedback = vec("fb", i, 8);
    e.policy_input.active_heads = {0, 2, 3, 5, 7, 9};
    e.policy = *b->sample_policy(e.policy_input, key(i), false);
    batch.push_back(e);
  }
  using clock = std::chrono::steady_clock;
  const int samples = 2000;
  auto t0 = clock::now();
  for (int i = 0; i < samples; ++i) (void)b->sample_policy(batch[i % 768].policy_input, key(i), false);
  auto t1 = clock::now();
  const int updates = 20;
  for (int i = 0; i < updates; ++i) ASSERT_TRUE(b->update(batch).ok());
  auto t2 = clock::now();
  double us_sample = std::chrono::duration<double, std::micro>(t1 - t0).count() / samples;
  double ms_update = std::chrono::duration<double, std::milli>(t2 - t1).count() / updates;
  std::cout << "one policy sample: " << us_sample << " us; one update of 768 policy experiences: " << ms_update
            << " ms (libtorch " << libtorch_version() << ", " << libtorch_cpu_capability() << ", 1 thread)\n";
}

}  // namespace
}  // namespace vinci
