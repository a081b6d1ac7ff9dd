// The run's SVG plots: axis ticks at round values, the legend clear of the title.
#include "harness/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

namespace vinci {
namespace {

// Whether step is 1, 2 or 5 times a power of ten.
bool is_round_step(double step) {
  const double power = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double m = step / power;
  return std::fabs(m - 1) < 1e-9 || std::fabs(m - 2) < 1e-9 || std::fabs(m - 5) < 1e-9;
}

// The rule, over ranges like the ones plots meet (rewards, fast_p, library sizes, step counts):
// round steps, evenly spaced values that are multiples of the step, covering the range with at
// most one step to spare at each end, and a handful of them.
TEST(PlotTicks, AreRoundValuesCoveringTheRange) {
  const double ranges[][2] = {{0, 41.7},  {14.8, 44.2}, {0, 1},      {0, 0.37},  {-0.2, 0.9}, {0, 3},
                              {0, 12},    {0, 250},     {0.5, 0.52}, {-3, -1},   {0, 1e-4},   {1, 1234567},
                              {0, 0.999}, {2, 2.5},     {-0.0, 5.0}, {0.1, 0.3}, {7, 8}};
  for (const auto& r : ranges) {
    SCOPED_TRACE(std::to_string(r[0]) + " .. " + std::to_string(r[1]));
    AxisTicks t = nice_ticks(r[0], r[1]);
    EXPECT_TRUE(is_round_step(t.step)) << t.step;
    ASSERT_GE(t.values.size(), 3u);
    EXPECT_LE(t.values.size(), 7u);
    const double eps = t.step * 1e-9;
    EXPECT_LE(t.values.front(), r[0] + eps);
    EXPECT_GT(t.values.front(), r[0] - t.step);
    EXPECT_GE(t.values.back(), r[1] - eps);
    EXPECT_LT(t.values.back(), r[1] + t.step);
    for (size_t i = 0; i < t.values.size(); ++i) {
      EXPECT_NEAR(t.values[i] / t.step, std::round(t.values[i] / t.step), 1e-6);
      if (i > 0) {
        EXPECT_NEAR(t.values[i] - t.values[i - 1], t.step, t.step * 1e-6);
      }
      // The label is the value, exactly, with no float noise and no trailing digits.
      const std::string label = tick_label(t.values[i], t);
      EXPECT_NEAR(std::stod(label), t.values[i], t.step * 1e-6) << label;
      EXPECT_EQ(label.find("e"), std::string::npos) << label;
      EXPECT_NE(label, "-0");
    }
  }
  // The axes the report's plots once had, now: 0, 10, ..., 50 and 10, 20, ..., 50.
  AxisTicks a = nice_ticks(0, 41.7);
  EXPECT_EQ(a.step, 10);
  EXPECT_EQ(tick_label(a.values.back(), a), "50");
  AxisTicks b = nice_ticks(14.8, 44.2);
  EXPECT_EQ(tick_label(b.values.front(), b), "10");
  EXPECT_EQ(nice_ticks(0, 0.37).step, 0.1);
  EXPECT_EQ(tick_label(0.3, nice_ticks(0, 0.37)), "0.3");
  // Training steps are whole: no tick at step 0.5.
  EXPECT_EQ(nice_ticks(0, 3, 6, true).step, 1);
}

std::vector<std::string> matches(const std::string& svg, const std::string& pattern) {
  std::vector<std::string> out;
  std::regex re(pattern);
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1].str());
  }
  return out;
}

TEST(PlotTicks, ChartsLabelTheirAxesAtRoundValuesBelowTheTitle) {
  Series reward{"mean turn reward", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {}};
  for (double x : reward.x) reward.y.push_back(14.8 + x * (44.2 - 14.8) / 11);
  const std::string line = svg_line_chart("Training reward", "step", "reward", {reward});
  // y labels sit at x="4" (a line chart's y axis starts at 0 or below); x labels on the line below
  // the axis (y="366.0").
  std::vector<std::string> y = matches(line, "<text x=\"4\" y=\"[0-9.]+\">([^<]+)</text>");
  EXPECT_EQ(y, (std::vector<std::string>{"0", "10", "20", "30", "40", "50"}));
  std::vector<std::string> x = matches(line, "<text x=\"[0-9.]+\" y=\"366.0\">([^<]+)</text>");
  EXPECT_EQ(x, (std::vector<std::string>{"0", "2", "4", "6", "8", "10", "12"}));
  const std::string bars =
      svg_bar_chart("Final fast_p", {"a", "b"}, {"fast_1", "fast_2"}, {{0.4, 0.2}, {0.37, 0.1}}, "fast_p");
  EXPECT_EQ(matches(bars, "<text x=\"4\" y=\"[0-9.]+\">([^<]+)</text>"),
            (std::vector<std::string>{"0.0", "0.1", "0.2", "0.3", "0.4"}));
  // The title's baseline is at 22 (15 px); every legend row and the axis label start below it.
  for (const std::string& svg : {line, bars}) {
    for (const std::string& ly : matches(svg, "<text x=\"(?:5[0-9]{2}|4[5-9][0-9])\\.[0-9]\" y=\"([0-9.]+)\"")) {
      EXPECT_GT(std::stod(ly), 22 + 15) << ly;
    }
    EXPECT_EQ(matches(svg, "<text x=\"12\" y=\"([0-9]+)\">").size(), 1u);
    EXPECT_GT(std::stod(matches(svg, "<text x=\"12\" y=\"([0-9]+)\">")[0]), 22 + 12);
  }
}

}  // namespace
}  // namespace vinci
