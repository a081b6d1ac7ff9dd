// `harness run CONFIG [--seed N] [--out DIR] [--threads N] [--set key=value]...`
// `harness run --resume RUN`
//
// Runs an experiment into <out>/<name>/ (the log, manifest, summary.md, metrics.csv and plots)
// and ends with the final fast_p table. --resume re-drives a run that was stopped at any point:
// every record already in its log is re-derived and compared, then the run continues, so it
// ends with the digest an uninterrupted run has.
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "core/atomic_file.h"
#include "core/cli.h"
#include "harness/checkpoints.h"
#include "harness/cli/commands.h"
#include "harness/experiment.h"
#include "harness/record_sink.h"
#include "harness/report.h"
#include "harness/trainer.h"
#include "harness/world.h"
#include "recorder/run.h"

namespace vinci {
namespace {

// A progress bar on a terminal, plain lines elsewhere (CI logs).
class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO) == 1) {}
  void operator()(int64_t done, int64_t total, const std::string& line) {
    if (tty_) {
      int width = 30;
      int filled = total ? static_cast<int>(width * done / total) : width;
      std::fprintf(stderr, "\r\033[K[%s%s] %lld/%lld %s", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), static_cast<long long>(done),
                   static_cast<long long>(total), line.c_str());
      if (done == total) std::fprintf(stderr, "\n");
    } else {
      std::fprintf(stderr, "[%lld/%lld] %s\n", static_cast<long long>(done), static_cast<long long>(total),
                   line.c_str());
    }
    std::fflush(stderr);
  }

 private:
  bool tty_;
};

int fail(const std::string& what) {
  std::cerr << "harness run: " << what << "\n";
  return 2;
}

}  // namespace

namespace {
// "N calls (F failed, R retries), median latency X ms" of a language model's calls made here.
std::string model_calls_line(const LlmCallLog::Stats& s) {
  std::vector<double> l = s.latencies_s;
  double med = median(l) * 1000.0;
  char line[200];
  std::snprintf(line, sizeof line, "%llu calls (%llu failed, %llu retries), median latency %.1f ms",
                static_cast<unsigned long long>(s.calls), static_cast<unsigned long long>(s.failed),
                static_cast<unsigned long long>(s.retries), med);
  return line;
}

int run_command(const std::vector<std::string>& args, bool coldstart_only);
}  // namespace

int cmd_run(const std::vector<std::string>& args) { return run_command(args, false); }

// `harness coldstart CONFIG [options]`: the experiment's cold start stage alone (coldstart.enabled
// = true, loop.steps = 0, tts off) into <out>/<name>_coldstart/, ending with the step-0 evaluation
// of the fitted backbone. Other runs start from it with backbone.init_run (init_step 0).
int cmd_coldstart(const std::vector<std::string>& args) { return run_command(args, true); }

namespace {

int run_command(const std::vector<std::string>& args, bool coldstart_only) {
  namespace po = boost::program_options;
  po::options_description opts(
      coldstart_only ? "usage: harness coldstart CONFIG [options]\n(config keys: docs/config_reference.toml)"
                     : "usage: harness run CONFIG [options] | harness run --resume RUN\n(config keys: "
                       "docs/config_reference.toml)");
  opts.add_options()("help,h", "show this help")("seed", po::value<std::string>(), "run.seed")(
      "out", po::value<std::string>(), "run.out: the runs root")("name", po::value<std::string>(), "run.name")(
      "threads", po::value<int>(), "run.threads")("set", po::value<std::vector<std::string>>()->composing(),
                                                  "override a config key: key=value")(
      "resume", po::value<std::string>(), "continue a stopped run (its folder)");
  po::variables_map vm;
  if (auto stop =
          parse_options(coldstart_only ? "harness coldstart" : "harness run", args, opts, {{"config", 1}}, &vm)) {
    return *stop;
  }
  pin_numeric_settings();
  const bool resume = vm.count("resume") > 0;
  if (coldstart_only && resume) {
    std::cerr << "harness coldstart: a stopped cold start run resumes with `harness run --resume RUN`\n";
    return 2;
  }
  if (resume == (vm.count("config") > 0)) {
    std::cerr << "harness run: give either an experiment config or --resume RUN\n" << opts;
    return 2;
  }
  if (resume) {
    // A resumed run continues the records it has: only the settings it recorded can do that.
    std::string given;
    for (const char* o : {"seed", "set", "out", "name", "threads"}) {
      if (vm.count(o)) given += std::string(given.empty() ? "" : ", ") + "--" + o;
    }
    if (!given.empty()) {
      return fail(
          "--resume takes the run's recorded settings (its config, seed, folder and name); "
          "found " +
          given + " beside it. Resume without them, or start a new run.");
    }
  }
  int64_t seed = -1;
  if (vm.count("seed")) {
    auto parsed = parse_int_option("--seed", vm["seed"].as<std::string>(), 0,
                                   static_cast<int64_t>(experiment_schema().find("run.seed")->max));
    if (!parsed.ok()) return fail(parsed.status().message());
    seed = *parsed;
  }
  if (vm.count("out")) {
    Status st = check_runs_root(vm["out"].as<std::string>(), "--out");
    if (!st.ok()) return fail(st.message());
  }
  if (vm.count("name")) {
    Status st = check_run_name(vm["name"].as<std::string>(), "--name");
    if (!st.ok()) return fail(st.message());
  }

  Experiment exp;
  std::string run_dir;
  std::unique_ptr<RunWriter> writer;
  std::unique_ptr<RecordSink> sink;
  std::vector<std::string> expected;
  World world;
  std::string config_shown;  // the config file the run was started with, as its summary names it
  Environment env = capture_environment();
  if (resume) {
    run_dir = vm["resume"].as<std::string>();
    auto manifest = read_manifest(RunLocation::of(run_dir).manifest_path);
    if (!manifest.ok()) return fail(manifest.status().to_string());
    if (manifest->completed) return fail("run " + run_dir + " is complete; nothing to resume");
    Status same = check_numeric_settings(manifest->environment, env, run_dir);
    if (!same.ok()) return fail(same.message());
    auto e = experiment_from_text(manifest->config_text, run_dir + "/manifest.bin (config)");
    if (!e.ok()) return fail(e.status().to_string());
    exp = std::move(e).value();
    config_shown = manifest->config_path;
    auto payloads = read_payloads(run_dir, /*allow_damage=*/true);
    if (!payloads.ok()) return fail(payloads.status().to_string());
    expected = std::move(payloads).value();
    LogRecovery rec;
    auto w = RunWriter::resume(run_dir, &rec);
    if (!w.ok()) return fail(w.status().to_string());
    writer = std::move(w).value();
    if (rec.damage) {
      std::cerr << "harness run: dropped a damaged tail of " << rec.bytes_dropped << " bytes ("
                << rec.damage->to_string() << ")\n";
    }
    std::cerr << "harness run: resuming " << run_dir << " after " << expected.size() << " records\n";
    sink = std::make_unique<CheckSink>(std::move(expected), &writer->store(), writer.get());
  } else {
    std::vector<std::string> overrides;
    if (vm.count("set")) overrides = vm["set"].as<std::vector<std::string>>();
    if (seed >= 0) overrides.push_back("run.seed=" + std::to_string(seed));
    if (vm.count("out")) overrides.push_back("run.out=" + vm["out"].as<std::string>());
    if (vm.count("name")) overrides.push_back("run.name=" + vm["name"].as<std::string>());
    if (vm.count("threads")) overrides.push_back("run.threads=" + std::to_string(vm["threads"].as<int>()));
    if (coldstart_only) {
      overrides.push_back("coldstart.enabled=true");
      overrides.push_back("loop.steps=0");
      overrides.push_back("tts.enabled=false");
    }
    auto e = load_experiment(vm["config"].as<std::string>(), overrides);
    if (!e.ok()) return fail(e.status().message());
    exp = std::move(e).value();
    if (coldstart_only && !vm.count("name")) {
      auto named = load_experiment(vm["config"].as<std::string>(), [&] {
        auto o = overrides;
        o.push_back("run.name=" + exp.name + "_coldstart");
        return o;
      }());
      if (!named.ok()) return fail(named.status().message());
      exp = std::move(named).value();
    }
    run_dir = exp.out_root + "/" + exp.name;
    config_shown = exp.config_path;
    // Everything the config names must be there before the run's folder is made.
    auto built = build_world(exp, ModelCalls::kLive, "", run_dir + "/llm_calls.jsonl");
    if (!built.ok()) return fail(built.status().to_string());
    world = std::move(built).value();
    if (!exp.init_run.empty()) {
      auto source = find_run_checkpoint(resolve_init_run(exp.init_run, exp.out_root), exp.init_step);
      if (!source.ok()) {
        return fail(exp.config_path + ": key 'backbone.init_run': " + source.status().to_string());
      }
    }
    ManifestInfo m;
    m.name = exp.name;
    m.config_path = exp.config_path;
    m.config_text = exp.effective_toml;
    m.seed = exp.seed;
    // A run on a real GPU is a live run: its measurements are events replay takes from the log.
    // Otherwise the config's run.world names it (its one choice today: sim).
    Result<RunWorld> world = parse_run_world(exp.world);
    if (!world.ok()) return fail(exp.config_path + ": key 'run.world': " + world.status().message());
    m.world = exp.device == "cuda" ? RunWorld::kLive : *world;
    m.environment = env;
    m.parent_run = exp.init_run;
    auto w = RunWriter::create(run_dir, m);
    if (!w.ok()) return fail(w.status().message());
    writer = std::move(w).value();
    sink = std::make_unique<WriteSink>(writer.get());
  }

  if (resume) {
    // A resumed run re-asks its model nothing it recorded: replies come from the log first.
    auto built = build_world(exp, ModelCalls::kRecordedThenLive, run_dir, run_dir + "/llm_calls.jsonl");
    if (!built.ok()) return fail(built.status().to_string());
    world = std::move(built).value();
  }
  if (!exp.queue.empty() && exp.threads < 2) {
    std::cerr << "harness run: device.queue with run.threads = " << exp.threads
              << " keeps one evaluation in flight; --threads N keeps N (records do not depend on it)\n";
  }
  Progress progress;
  auto start = std::chrono::steady_clock::now();
  auto out = run_experiment(
      exp, world.suite, *world.evaluator, *world.backbone, world.seed_library, *sink,
      [&](int64_t d, int64_t t, const std::string& l) {
        progress(d, t, world.evaluator_progress ? l + " | " + world.evaluator_progress() : l);
      },
      world.model.get());
  if (!out.ok()) {
    (void)writer->flush();
    return fail(out.status().to_string() + "\n(the run so far is kept; `harness run --resume " + run_dir +
                "` continues it)");
  }
  // The log's closing record, then the reports, then the manifest marked complete: a run stopped
  // anywhere before that (a kill, a full disk) is resumed, and the resume writes what is missing.
  capnp::MallocMessageBuilder end;
  init_run_end(end, sink->position(), sink->digest());
  Status st = sink->put(end);
  if (!st.ok()) return fail(st.to_string());
  if (auto* check = dynamic_cast<CheckSink*>(sink.get())) {
    if (check->position() < check->expected()) {
      return fail("run " + run_dir + ": its log holds " + std::to_string(check->expected()) +
                  " records, but the run ends after " + std::to_string(check->position()) +
                  ": the log is not this run's");
    }
    std::cerr << "harness run: re-derived and matched " << check->checked() << " recorded records\n";
  }
  st = writer->checkpoint();
  if (!st.ok()) return fail(st.to_string());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RunSummaryInfo info{exp.name, config_shown, writer->digest().hex(), writer->record_count(), seconds, "", ""};
  if (world.call_log) info.model_calls = model_calls_line(world.call_log->stats());
  std::vector<std::string> sets;
  for (const auto& id : out->eval_tasks) {
    const Task* t = world.suite.find(id);
    sets.push_back(t ? t->set_name() : "not in the suite");
  }
  info.scored = scored_set_line(sets, "all", exp.fast_p_compare);
  info.compare = exp.fast_p_compare;
  st = write_report(run_dir, *out, info);
  if (!st.ok()) {
    return fail(st.to_string() + "\n(the run's records are kept; `harness run --resume " + run_dir +
                "` writes its reports)");
  }
  st = writer->mark_complete();
  if (!st.ok()) return fail(st.to_string());
  if (!out->eval.empty()) {
    std::cout << "Final evaluation of " << exp.name << " (held-out tasks, after step " << out->eval.back().step << "; "
              << fast_p_compare_line(exp.fast_p_compare) << "):\n\n"
              << fast_p_table(out->eval.back().fast_p, TurnMode::kLast, Denominator::kAll, TableFormat::kMarkdown);
  }
  if (!out->tts.empty()) {
    std::cout << "\nTest-time scaling (" << exp.tts.iterations << " iterations x " << exp.tts.turns << " turns, window "
              << exp.tts.window << "; " << fast_p_compare_line(exp.fast_p_compare) << "), best turn:\n\n"
              << fast_p_table(out->tts, TurnMode::kBest, Denominator::kAll, TableFormat::kMarkdown)
              << "\nlast turn:\n\n"
              << fast_p_table(out->tts, TurnMode::kLast, Denominator::kAll, TableFormat::kMarkdown);
  }
  if (out->coldstart) {
    const auto& c = *out->coldstart;
    std::fprintf(stdout,
                 "\nCold start: %u of %u trajectories kept, %u skills written, %u verified, %zu "
                 "added after the diversity filter; cross-entropy (selection, policy, summary) "
                 "%.3f %.3f %.3f -> %.3f %.3f %.3f\n",
                 c.kept, c.trajectories, c.proposed, c.verified, c.added.size(), c.before.mean[0], c.before.mean[1],
                 c.before.mean[2], c.after.mean[0], c.after.mean[1], c.after.mean[2]);
  }
  double eval_seconds = world.evaluator_seconds ? world.evaluator_seconds() : 0.0;
  if (world.evaluator_progress) {
    std::fprintf(stdout,
                 "\n%llu rollouts, %llu turn evaluations in %.1f s (%.0f rollouts/s, %.0f turn evaluations/s), "
                 "evaluated through the queue %s\n",
                 static_cast<unsigned long long>(out->rollouts), static_cast<unsigned long long>(out->turn_evals),
                 seconds, seconds > 0 ? out->rollouts / seconds : 0.0, seconds > 0 ? out->turn_evals / seconds : 0.0,
                 exp.queue.c_str());
  } else {
    std::fprintf(stdout,
                 "\n%llu rollouts, %llu turn evaluations in %.1f s (%.0f rollouts/s, %.0f turn "
                 "evaluations/s; %.1f s inside the evaluator, %.1f s outside)\n",
                 static_cast<unsigned long long>(out->rollouts), static_cast<unsigned long long>(out->turn_evals),
                 seconds, seconds > 0 ? out->rollouts / seconds : 0.0, seconds > 0 ? out->turn_evals / seconds : 0.0,
                 eval_seconds, seconds - eval_seconds);
  }
  if (!info.model_calls.empty()) std::cout << "model calls: " << info.model_calls << "\n";
  std::cout << "run: " << run_dir << "\nrecords: " << writer->record_count() << "\ndigest: " << writer->digest().hex()
            << "\n";
  return 0;
}

}  // namespace
}  // namespace vinci
