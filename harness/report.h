// What a run leaves for people: the fast_p tables, metrics.csv, summary.md and SVG plots.
// The table formatting is shared with `replay score`, which rebuilds it from the log alone, so
// the two print the same bytes.
#ifndef VINCI_HARNESS_REPORT_H_
#define VINCI_HARNESS_REPORT_H_

#include <string>
#include <vector>

#include "core/status.h"
#include "harness/trainer.h"

namespace vinci {

enum class TableFormat { kMarkdown, kCsv, kJson };

// The fast_p table of one evaluation: rows = levels (then "all"), columns = thresholds, for one
// turn mode and denominator. Values in percent with one decimal (markdown) or full precision
// (csv, json).
std::string fast_p_table(const std::vector<FastP>& rows, TurnMode mode, Denominator denominator, TableFormat format);

// Every table of an evaluation point (last/best x all/correct), titled, in the given format.
std::string fast_p_report(const EvalPoint& point, TableFormat format);

// metrics.csv: one row per metric value, long format.
std::string metrics_csv(const TrainerOutput& out);

struct RunSummaryInfo {
  std::string name;
  std::string config_path;
  std::string run_digest;
  uint64_t records = 0;
  double seconds = 0;
  std::string model_calls;                       // a language model's calls, one line ("" for the sim backbone)
  std::string scored;                            // which task set the fast_p tables score (scored_set_line)
  FastPCompare compare = FastPCompare::kStrict;  // what the fast_p figures count
};

// One line saying which held-out tasks a fast_p report scores: how many of each set
// (kernelbench, kernelbench-flagged, vinci; Task::set_name) under the selection `selection`
// (all, kernelbench, unflagged), and the comparison fast_p uses.
std::string scored_set_line(const std::vector<std::string>& task_sets, const std::string& selection,
                            FastPCompare compare);
// "fast_p counts speedup > p (KernelBench's definition)" or "fast_p counts speedup >= p
// (inclusive; KernelBench's definition is speedup > p)".
std::string fast_p_compare_line(FastPCompare compare);
std::string summary_markdown(const TrainerOutput& out, const RunSummaryInfo& info);

// Writes metrics.csv, summary.md, reward.svg, fast_p.svg, library.svg, fast_p_final.svg into dir.
Status write_report(const std::string& dir, const TrainerOutput& out, const RunSummaryInfo& info);

// An axis's ticks at round values: the smallest step of 1, 2 or 5 times a power of ten (as plotting
// libraries choose them) that covers [lo, hi] in at most max_intervals intervals, the first tick at
// or below lo and the last at or above hi. With `whole`, steps are at least 1 (training steps).
struct AxisTicks {
  double step = 1;
  std::vector<double> values;
  int decimals = 0;  // enough to write every value exactly: 0.25 is never a step, 0.05 needs 2
};
AxisTicks nice_ticks(double lo, double hi, int max_intervals = 6, bool whole = false);
std::string tick_label(double value, const AxisTicks& ticks);

// A small SVG line chart: one polyline per series.
struct Series {
  std::string label;
  std::vector<double> x, y;
};
std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<Series>& series);
// Grouped bars: groups (x categories) x bars (series labels).
std::string svg_bar_chart(const std::string& title, const std::vector<std::string>& groups,
                          const std::vector<std::string>& bars, const std::vector<std::vector<double>>& values,
                          const std::string& y_label);

}  // namespace vinci

#endif  // VINCI_HARNESS_REPORT_H_
