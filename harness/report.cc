#include "harness/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "core/atomic_file.h"
#include "core/text.h"

namespace vinci {
namespace {

std::string level_name(int level) { return level == 0 ? "all" : "L" + std::to_string(level); }

const char* mode_name(TurnMode m) { return m == TurnMode::kLast ? "last" : "best"; }
const char* den_name(Denominator d) { return d == Denominator::kAll ? "all" : "correct"; }

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// The start of a 640 x 400 plot: the svg element, a white background and the title, from the left
// edge along the top line (squeezed to the plot's width when it is longer), above the legend.
std::string svg_open(const std::string& title) {
  std::string svg =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"400\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n";
  svg += "<rect width=\"640\" height=\"400\" fill=\"white\"/>\n";
  // About 8.5 px a character at 15 px; a longer title is fitted to 616 px.
  const bool squeeze = title.size() * 8.5 > 616;
  svg += "<text x=\"12\" y=\"22\" font-size=\"15\"" +
         std::string(squeeze ? " textLength=\"616\" lengthAdjust=\"spacingAndGlyphs\"" : "") + ">" + xml_escape(title) +
         "</text>\n";
  return svg;
}

// The legend's first row, clear of the title (its baseline at 22, 15 px high).
constexpr double kLegendTop = 52;

}  // namespace

AxisTicks nice_ticks(double lo, double hi, int max_intervals, bool whole) {
  AxisTicks t;
  if (!(hi > lo)) hi = lo + 1;
  max_intervals = std::max(1, max_intervals);
  // The smallest round step whose ticks cover [lo, hi] in at most max_intervals intervals.
  double power = std::pow(10.0, std::floor(std::log10(hi - lo)) - 2);
  double step = power, first = 0, last = 0;
  for (int i = 0;; ++i) {
    step = power * (i % 3 == 0 ? 1 : i % 3 == 1 ? 2 : 5);
    if (whole && step < 1) {
      if (i % 3 == 2) power *= 10;
      continue;
    }
    first = std::floor(lo / step + 1e-9);
    last = std::ceil(hi / step - 1e-9);
    if (last - first <= max_intervals) break;
    if (i % 3 == 2) power *= 10;
  }
  t.step = step;
  t.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  const double scale = std::pow(10.0, t.decimals);  // k * step rounded to its decimals: no float noise
  for (double k = first; k <= last + 0.5; ++k) t.values.push_back(std::round(k * step * scale) / scale);
  return t;
}

std::string tick_label(double value, const AxisTicks& ticks) {
  if (std::fabs(value) < ticks.step * 1e-9) value = 0;  // no "-0"
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", ticks.decimals, value);
  return buf;
}

namespace {

const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

}  // namespace

std::string fast_p_table(const std::vector<FastP>& rows, TurnMode mode, Denominator denominator, TableFormat format) {
  std::vector<int> levels;
  std::vector<double> thresholds;
  for (const FastP& f : rows) {
    if (f.mode != mode || f.denominator != denominator) continue;
    if (std::find(levels.begin(), levels.end(), f.level) == levels.end()) levels.push_back(f.level);
    if (std::find(thresholds.begin(), thresholds.end(), f.threshold) == thresholds.end())
      thresholds.push_back(f.threshold);
  }
  auto find = [&](int level, double p) -> const FastP* {
    for (const FastP& f : rows) {
      if (f.mode == mode && f.denominator == denominator && f.level == level && f.threshold == p) return &f;
    }
    return nullptr;
  };
  std::string out;
  if (format == TableFormat::kMarkdown) {
    out = "| level |";
    for (double p : thresholds) out += " fast_" + format_number("%g", p) + " |";
    out += " tasks |\n|---|";
    for (size_t i = 0; i < thresholds.size(); ++i) out += "---|";
    out += "---|\n";
    for (int level : levels) {
      out += "| " + level_name(level) + " |";
      uint32_t count = 0;
      for (double p : thresholds) {
        const FastP* f = find(level, p);
        out += " " + format_number("%.1f", f ? 100.0 * f->value() : 0.0) + " |";
        if (f) count = f->count;
      }
      out += " " + std::to_string(count) + " |\n";
    }
  } else if (format == TableFormat::kCsv) {
    out = "turn,denominator,level,threshold,value,numerator,count\n";
    for (int level : levels) {
      for (double p : thresholds) {
        const FastP* f = find(level, p);
        if (!f) continue;
        out += std::string(mode_name(mode)) + "," + den_name(denominator) + "," + level_name(level) + "," +
               format_number("%.17g", p) + "," + format_number("%.17g", f->value()) + "," +
               std::to_string(f->numerator) + "," + std::to_string(f->count) + "\n";
      }
    }
  } else {
    out = "[";
    bool first = true;
    for (int level : levels) {
      for (double p : thresholds) {
        const FastP* f = find(level, p);
        if (!f) continue;
        out += std::string(first ? "" : ",") + "{\"turn\":\"" + mode_name(mode) + "\",\"denominator\":\"" +
               den_name(denominator) + "\",\"level\":\"" + level_name(level) +
               "\",\"threshold\":" + format_number("%.17g", p) + ",\"value\":" + format_number("%.17g", f->value()) +
               ",\"numerator\":" + std::to_string(f->numerator) + ",\"count\":" + std::to_string(f->count) + "}";
        first = false;
      }
    }
    out += "]";
  }
  return out;
}

std::string fast_p_report(const EvalPoint& point, TableFormat format) {
  std::string out;
  bool first = true;
  if (format == TableFormat::kJson) out = "{\"step\":" + std::to_string(point.step) + ",\"fast_p\":[";
  if (format == TableFormat::kCsv) out = "turn,denominator,level,threshold,value,numerator,count\n";
  for (TurnMode m : {TurnMode::kLast, TurnMode::kBest}) {
    for (Denominator d : {Denominator::kAll, Denominator::kCorrect}) {
      std::string t = fast_p_table(point.fast_p, m, d, format);
      if (format == TableFormat::kMarkdown) {
        out += std::string(first ? "" : "\n") + "fast_p, " + mode_name(m) + " turn, " +
               (d == Denominator::kAll ? "all tasks" : "correct tasks only") + " (%):\n\n" + t;
      } else if (format == TableFormat::kCsv) {
        out += t.substr(t.find('\n') + 1);
      } else {
        std::string inner = t.substr(1, t.size() - 2);
        if (!inner.empty()) out += std::string(first ? "" : ",") + inner;
      }
      first = false;
    }
  }
  if (format == TableFormat::kJson) out += "]}\n";
  return out;
}

std::string metrics_csv(const TrainerOutput& out) {
  std::string csv = "step,split,metric,level,threshold,turn,denominator,value,numerator,count\n";
  for (const TrainPoint& p : out.train) {
    auto row = [&](const char* name, double v) {
      csv += std::to_string(p.step) + ",train," + name + ",all,,,," + format_number("%.17g", v) + ",,\n";
    };
    row("reward_mean", p.reward_mean);
    row("correct_rate", p.correct_rate);
    row("best_speedup_mean", p.best_speedup_mean);
    row("triggered", p.triggered);
    row("skills_accepted", p.accepted);
    row("library_size", p.library_size);
    row("loss", p.loss);
  }
  for (const EvalPoint& e : out.eval) {
    for (const FastP& f : e.fast_p) {
      csv += std::to_string(e.step) + ",eval,fast_p," + level_name(f.level) + "," +
             format_number("%.17g", f.threshold) + "," + mode_name(f.mode) + "," + den_name(f.denominator) + "," +
             format_number("%.17g", f.value()) + "," + std::to_string(f.numerator) + "," + std::to_string(f.count) +
             "\n";
    }
  }
  return csv;
}

std::string fast_p_compare_line(FastPCompare compare) {
  return std::string("fast_p counts ") + fast_p_compare_text(compare) +
         (compare == FastPCompare::kStrict ? " (KernelBench's definition)"
                                           : " (inclusive; KernelBench's definition is speedup > p)");
}

std::string scored_set_line(const std::vector<std::string>& task_sets, const std::string& selection,
                            FastPCompare compare) {
  std::map<std::string, int> counts;
  for (const auto& s : task_sets) ++counts[s];
  std::string parts;
  for (const auto& [s, n] : counts) parts += (parts.empty() ? "" : ", ") + std::to_string(n) + " " + s;
  return "Scored tasks (" + selection + "): " + std::to_string(task_sets.size()) + " held-out (" + parts + "); " +
         fast_p_compare_line(compare) + ".\n\n";
}

std::string summary_markdown(const TrainerOutput& out, const RunSummaryInfo& info) {
  std::string md = "# Run " + info.name + "\n\n";
  md += "- config: `" + info.config_path + "`\n";
  md += "- records: " + std::to_string(info.records) + ", run digest `" + info.run_digest + "`\n";
  md += "- training tasks: " + std::to_string(out.train_tasks.size()) +
        ", held-out tasks: " + std::to_string(out.eval_tasks.size()) + "\n";
  md += "- wall time: " + format_number("%.1f", info.seconds) + " s; " + std::to_string(out.rollouts) + " rollouts (" +
        format_number("%.0f", info.seconds > 0 ? out.rollouts / info.seconds : 0) + "/s), " +
        std::to_string(out.turn_evals) + " turn evaluations (" +
        format_number("%.0f", info.seconds > 0 ? out.turn_evals / info.seconds : 0) + "/s)\n";
  if (!info.model_calls.empty()) md += "- model calls: " + info.model_calls + "\n";
  md += "\n";
  if (!out.eval.empty()) {
    const EvalPoint& last = out.eval.back();
    md += "## Final evaluation (after step " + std::to_string(last.step) + ")\n\n";
    md += info.scored + fast_p_report(last, TableFormat::kMarkdown) + "\n";
    md += "## fast_1.2 over training (last turn, all held-out tasks, " +
          std::string(fast_p_compare_text(info.compare)) +
          ", %)\n\n| step | L1 | L2 | L3 | all |\n|---|---|---|---|---|\n";
    for (const EvalPoint& e : out.eval) {
      md += "| " + std::to_string(e.step) + " |";
      for (int level : {1, 2, 3, 0}) {
        std::string cell = " - |";
        for (const FastP& f : e.fast_p) {
          if (f.level == level && f.threshold == 1.2 && f.mode == TurnMode::kLast && f.denominator == Denominator::kAll)
            cell = " " + format_number("%.1f", 100 * f.value()) + " |";
        }
        md += cell;
      }
      md += "\n";
    }
    md += "\n";
  }
  md +=
      "## Training\n\n| step | reward | correct | best speedup | triggered | accepted | library "
      "|\n|---|---|---|---|---|---|---|\n";
  for (const TrainPoint& p : out.train) {
    md += "| " + std::to_string(p.step) + " | " + format_number("%.3f", p.reward_mean) + " | " +
          format_number("%.3f", p.correct_rate) + " | " + format_number("%.2f", p.best_speedup_mean) + " | " +
          std::to_string(p.triggered) + " | " + std::to_string(p.accepted) + " | " + std::to_string(p.library_size) +
          " |\n";
  }
  md += "\n## Skill library (" + std::to_string(out.library.size()) + " skills)\n\n";
  for (const Skill& s : out.library.skills()) {
    md += "- `" + s.name + "` (" + s.scope + ", verified " +
          (s.verify_speedup ? format_number("%.2fx", *s.verify_speedup) : std::string("-")) + "): " + s.description +
          "\n";
  }
  md +=
      "\nPlots: reward.svg, fast_p.svg, library.svg, fast_p_final.svg. Every figure here is\n"
      "re-derived from the log by `replay score`.\n";
  return md;
}

std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<Series>& series) {
  const double W = 640, H = 400, L = 60, R = 160, T = 50, B = 50;
  double x0 = 1e300, x1 = -1e300, y0 = 0, y1 = -1e300;
  for (const auto& s : series) {
    for (double x : s.x) {
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
    }
    for (double y : s.y) {
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  if (x0 > x1) {
    x0 = 0;
    x1 = 1;
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  bool whole_x = true;
  for (const auto& s : series) {
    for (double x : s.x) whole_x = whole_x && x == std::floor(x);
  }
  const AxisTicks yt = nice_ticks(y0, y1), xt = nice_ticks(x0, x1, 6, whole_x);
  y0 = yt.values.front();
  y1 = yt.values.back();
  x0 = xt.values.front();
  x1 = xt.values.back();
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  std::string svg = svg_open(title);
  svg += "<line x1=\"" + format_number("%.1f", L) + "\" y1=\"" + format_number("%.1f", H - B) + "\" x2=\"" +
         format_number("%.1f", W - R) + "\" y2=\"" + format_number("%.1f", H - B) + "\" stroke=\"black\"/>\n";
  svg += "<line x1=\"" + format_number("%.1f", L) + "\" y1=\"" + format_number("%.1f", T) + "\" x2=\"" +
         format_number("%.1f", L) + "\" y2=\"" + format_number("%.1f", H - B) + "\" stroke=\"black\"/>\n";
  for (double y : yt.values) {
    svg += "<text x=\"4\" y=\"" + format_number("%.1f", py(y) + 4) + "\">" + tick_label(y, yt) + "</text>\n";
    svg += "<line x1=\"" + format_number("%.1f", L) + "\" y1=\"" + format_number("%.1f", py(y)) + "\" x2=\"" +
           format_number("%.1f", W - R) + "\" y2=\"" + format_number("%.1f", py(y)) + "\" stroke=\"#ddd\"/>\n";
  }
  for (double x : xt.values) {
    svg += "<text x=\"" + format_number("%.1f", px(x) - 8) + "\" y=\"" + format_number("%.1f", H - B + 16) + "\">" +
           tick_label(x, xt) + "</text>\n";
  }
  svg += "<text x=\"" + format_number("%.0f", (L + W - R) / 2) + "\" y=\"" + format_number("%.0f", H - 10) + "\">" +
         xml_escape(x_label) + "</text>\n";
  svg += "<text x=\"12\" y=\"" + format_number("%.0f", T - 8) + "\">" + xml_escape(y_label) + "</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % 8];
    std::string pts;
    for (size_t k = 0; k < series[i].x.size() && k < series[i].y.size(); ++k) {
      pts += format_number("%.1f", px(series[i].x[k])) + "," + format_number("%.1f", py(series[i].y[k])) + " ";
    }
    svg +=
        "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"2\" points=\"" + pts + "\"/>\n";
    double ly = kLegendTop + 16 * i;
    svg += "<line x1=\"" + format_number("%.1f", W - R + 10) + "\" y1=\"" + format_number("%.1f", ly) + "\" x2=\"" +
           format_number("%.1f", W - R + 30) + "\" y2=\"" + format_number("%.1f", ly) + "\" stroke=\"" + color +
           "\" stroke-width=\"2\"/>\n";
    svg += "<text x=\"" + format_number("%.1f", W - R + 34) + "\" y=\"" + format_number("%.1f", ly + 4) + "\">" +
           xml_escape(series[i].label) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

std::string svg_bar_chart(const std::string& title, const std::vector<std::string>& groups,
                          const std::vector<std::string>& bars, const std::vector<std::vector<double>>& values,
                          const std::string& y_label) {
  const double W = 640, H = 400, L = 60, R = 140, T = 50, B = 50;
  double ymax = 0;
  for (const auto& g : values)
    for (double v : g) ymax = std::max(ymax, v);
  if (ymax <= 0) ymax = 1;
  const AxisTicks yt = nice_ticks(0, ymax);
  ymax = yt.values.back();
  std::string svg = svg_open(title);
  svg += "<text x=\"12\" y=\"" + format_number("%.0f", T - 8) + "\">" + xml_escape(y_label) + "</text>\n";
  double gw = (W - L - R) / std::max<size_t>(1, groups.size());
  double bw = gw * 0.8 / std::max<size_t>(1, bars.size());
  for (double y : yt.values) {
    double yy = H - B - y / ymax * (H - T - B);
    svg += "<text x=\"4\" y=\"" + format_number("%.1f", yy + 4) + "\">" + tick_label(y, yt) + "</text>\n";
    svg += "<line x1=\"" + format_number("%.1f", L) + "\" y1=\"" + format_number("%.1f", yy) + "\" x2=\"" +
           format_number("%.1f", W - R) + "\" y2=\"" + format_number("%.1f", yy) + "\" stroke=\"#ddd\"/>\n";
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t b = 0; b < bars.size() && g < values.size() && b < values[g].size(); ++b) {
      double v = values[g][b];
      double x = L + gw * g + gw * 0.1 + bw * b;
      double h = v / ymax * (H - T - B);
      svg += "<rect x=\"" + format_number("%.1f", x) + "\" y=\"" + format_number("%.1f", H - B - h) + "\" width=\"" +
             format_number("%.1f", bw) + "\" height=\"" + format_number("%.1f", h) + "\" fill=\"" + kColors[b % 8] +
             "\"/>\n";
    }
    svg += "<text x=\"" + format_number("%.1f", L + gw * g + gw * 0.4) + "\" y=\"" + format_number("%.1f", H - B + 16) +
           "\">" + xml_escape(groups[g]) + "</text>\n";
  }
  for (size_t b = 0; b < bars.size(); ++b) {
    double ly = kLegendTop + 16 * b;
    svg += "<rect x=\"" + format_number("%.1f", W - R + 10) + "\" y=\"" + format_number("%.1f", ly - 8) +
           "\" width=\"12\" height=\"12\" fill=\"" + kColors[b % 8] + "\"/>\n";
    svg += "<text x=\"" + format_number("%.1f", W - R + 28) + "\" y=\"" + format_number("%.1f", ly + 2) + "\">" +
           xml_escape(bars[b]) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

Status write_report(const std::string& dir, const TrainerOutput& out, const RunSummaryInfo& info) {
  VINCI_RETURN_IF_ERROR(write_file_atomic(dir + "/metrics.csv", metrics_csv(out)));
  VINCI_RETURN_IF_ERROR(write_file_atomic(dir + "/summary.md", summary_markdown(out, info)));
  Series reward{"mean turn reward", {}, {}}, correct{"correct rate", {}, {}}, lib{"library size", {}, {}};
  for (const TrainPoint& p : out.train) {
    reward.x.push_back(p.step);
    reward.y.push_back(p.reward_mean);
    correct.x.push_back(p.step);
    correct.y.push_back(p.correct_rate);
    lib.x.push_back(p.step + 1);
    lib.y.push_back(p.library_size);
  }
  VINCI_RETURN_IF_ERROR(
      write_file_atomic(dir + "/reward.svg", svg_line_chart("Training reward", "step", "reward", {reward, correct})));
  VINCI_RETURN_IF_ERROR(
      write_file_atomic(dir + "/library.svg", svg_line_chart("Skill library size", "step", "skills", {lib})));
  std::vector<Series> fp;
  std::set<double> thresholds;
  for (const EvalPoint& e : out.eval)
    for (const FastP& f : e.fast_p) thresholds.insert(f.threshold);
  for (double p : thresholds) {
    Series s{"fast_" + format_number("%g", p), {}, {}};
    for (const EvalPoint& e : out.eval) {
      for (const FastP& f : e.fast_p) {
        if (f.level == 0 && f.threshold == p && f.mode == TurnMode::kLast && f.denominator == Denominator::kAll) {
          s.x.push_back(e.step);
          s.y.push_back(100 * f.value());
        }
      }
    }
    fp.push_back(s);
  }
  VINCI_RETURN_IF_ERROR(write_file_atomic(
      dir + "/fast_p.svg",
      svg_line_chart(std::string("Held-out fast_p (last turn, all levels, ") + fast_p_compare_text(info.compare) + ")",
                     "step", "%", fp)));
  if (!out.eval.empty()) {
    std::vector<std::string> groups;
    std::vector<std::vector<double>> values;
    std::vector<std::string> bars;
    for (double p : thresholds) bars.push_back("fast_" + format_number("%g", p));
    for (int level : {1, 2, 3, 0}) {
      std::vector<double> row;
      bool any = false;
      for (double p : thresholds) {
        double v = 0;
        for (const FastP& f : out.eval.back().fast_p) {
          if (f.level == level && f.threshold == p && f.mode == TurnMode::kLast && f.denominator == Denominator::kAll) {
            v = 100 * f.value();
            any = true;
          }
        }
        row.push_back(v);
      }
      if (any) {
        groups.push_back(level == 0 ? "all" : "L" + std::to_string(level));
        values.push_back(row);
      }
    }
    VINCI_RETURN_IF_ERROR(write_file_atomic(
        dir + "/fast_p_final.svg",
        svg_bar_chart(std::string("Final fast_p (last turn, ") + fast_p_compare_text(info.compare) + ")", groups, bars,
                      values, "%")));
  }
  return Status();
}

}  // namespace vinci
