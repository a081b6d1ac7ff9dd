// `harness run CONFIG [--seed N] [--out DIR] [--threads N] [--set key=value]...`
// `harness run --resume RUN`
//
// Runs an experiment into <out>/<name>/ (the log, manifest, summary.md, metrics.csv and plots)
// and ends with the final fast_p table. --resume re-drives a run that was stopped at any point:
// every record already in its log is re-derived and compared, then the run continues, so it
// ends with the digest an uninterrupted run has.
#include <signal.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
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

// "harness run" or "harness coldstart": the command whose messages these are.
const char* g_command = "harness run";

int fail(const std::string& what) {
  std::cerr << g_command << ": " << what << "\n";
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

// A run being recorded: its experiment and folder, its writer and sink, the world it runs in.
struct OpenRun {
  Experiment exp;
  std::string run_dir;
  std::string config_shown;  // the config file the run was started with, as its summary names it
  std::unique_ptr<RunWriter> writer;
  std::unique_ptr<RecordSink> sink;
  World world;
};

// What a resume refused for a record the run does not derive adds to the difference.
std::string not_this_runs_log(const std::string& run_dir) {
  return "\n(the log of " + run_dir +
         " is not this run's: the resume is refused and nothing in the folder was changed; make the run again "
         "from its config under another name)";
}

// A resumed run's first write: the log reopened after its last good record (a damaged tail
// dropped, and said so) and the unfinished writes of the stopped writer removed.
Status start_writing(RunWriter& writer) {
  if (writer.writing()) return Status();
  VINCI_RETURN_IF_ERROR(writer.start_writing());
  const LogRecovery& rec = writer.recovery();
  if (rec.damage) {
    std::cerr << g_command << ": dropped a damaged tail of " << rec.bytes_dropped << " bytes ("
              << rec.damage->to_string() << ")\n";
  }
  return Status();
}

// `--resume RUN`: the run's recorded settings, its writer after the last good record, and a sink
// that checks every re-derived record against the log before writing anything new. Errors are
// the messages `harness run` prints.
Result<OpenRun> resume_run(const std::string& run_dir, const Environment& env) {
  OpenRun run;
  run.run_dir = run_dir;
  auto manifest = read_manifest(RunLocation::of(run_dir).manifest_path);
  if (!manifest.ok()) return invalid_argument(manifest.status().to_string());
  if (manifest->completed) {
    // Complete is not enough to say there is nothing to do: a damaged complete run needs making
    // again, and the message must say why.
    auto reader = RunReader::open(run_dir);
    if (reader.ok()) {
      while ((*reader)->next()) {
      }
      if ((*reader)->damage()) {
        return invalid_argument("run " + run_dir + " is complete but damaged after record " +
                                std::to_string((*reader)->records_read()) + ": " + (*reader)->damage()->to_string() +
                                "; a complete run is not resumed: make it again from its config under another name");
      }
    }
    return invalid_argument("run " + run_dir + " is complete; nothing to resume");
  }
  VINCI_RETURN_IF_ERROR(check_numeric_settings(manifest->environment, env, run_dir));
  auto e = experiment_from_text(manifest->config_text, run_dir + "/manifest.bin (config)");
  if (!e.ok()) return invalid_argument(e.status().to_string());
  run.exp = std::move(e).value();
  run.config_shown = manifest->config_path;
  if (run.exp.backbone == BackboneKind::kOpenai) {
    // The setup may have changed since the run stopped (a key, a server): checked before anything
    // is touched or asked.
    Result<ModelServerInfo> server = preflight_model_server(run.exp);
    if (!server.ok()) {
      return invalid_argument(server.status().message() + "\n(run " + run_dir +
                              " is kept as it was; `harness run --resume " + run_dir + "` continues it once the " +
                              "server answers)");
    }
  }
  // The writer holds the folder's lock and writes nothing until every recorded record has been
  // re-derived and matched: a log that is not this run's (another config's or seed's) is refused
  // with the folder untouched, its damaged tail and unfinished writes included.
  auto w = RunWriter::resume(run_dir);
  if (!w.ok()) return invalid_argument(w.status().to_string());
  run.writer = std::move(w).value();
  // The recorded records up to the first damage, which the first write truncates; damage before
  // the last segment cannot be truncated away, so it is refused now.
  auto reader = RunLogReader::open(RunLocation::of(run_dir).log_dir);
  if (!reader.ok()) return invalid_argument(reader.status().to_string());
  std::vector<std::string> expected;
  LogFrame frame;
  while ((*reader)->next(&frame)) expected.emplace_back(frame.payload);
  if (!(*reader)->status().ok()) return invalid_argument((*reader)->status().to_string());
  if (const auto& damage = (*reader)->damage(); damage && damage->file != (*reader)->segment_files().back()) {
    return invalid_argument("run " + run_dir + " cannot be resumed: its log is damaged before its last segment, " +
                            damage->to_string() + "; make it again from its config under another name");
  }
  std::cerr << g_command << ": resuming " << run_dir << " after " << expected.size() << " records\n";
  RunWriter* writer = run.writer.get();
  run.sink = std::make_unique<CheckSink>(std::move(expected), &writer->store(), writer,
                                         [writer] { return start_writing(*writer); });
  // A resumed run re-asks its model nothing it recorded: replies come from the log first.
  auto built = build_world(run.exp, ModelCalls::kRecordedThenLive, run_dir, run_dir + "/llm_calls.jsonl");
  if (!built.ok()) return invalid_argument(built.status().to_string());
  run.world = std::move(built).value();
  // A folder an older vinci made before finding this: resuming would fail the same way forever.
  if (Status st = check_task_split(run.world.suite, run.exp); !st.ok()) {
    return invalid_argument(st.to_string() + "\n(run " + run_dir +
                            " cannot be resumed with the settings it recorded: remove it and run again)");
  }
  return run;
}

// A new run of `config` with the command line's overrides: everything the config names is
// checked before the run's folder is made.
Result<OpenRun> start_run(const std::string& config, const std::vector<std::string>& overrides, bool coldstart_only,
                          bool named, const Environment& env) {
  OpenRun run;
  auto e = load_experiment(config, overrides);
  if (!e.ok()) return e.status();
  run.exp = std::move(e).value();
  if (coldstart_only && !named) {
    std::vector<std::string> with_name = overrides;
    with_name.push_back("run.name=" + run.exp.name + "_coldstart");
    auto renamed = load_experiment(config, with_name);
    if (!renamed.ok()) return renamed.status();
    run.exp = std::move(renamed).value();
  }
  if (run.exp.backbone == BackboneKind::kOpenai) {
    // Before the folder exists: a setup the server refuses costs nothing and leaves nothing.
    Result<ModelServerInfo> server = preflight_model_server(run.exp);
    if (!server.ok()) return invalid_argument(server.status().message());
    std::cerr << g_command << ": model server " << run.exp.llm.base_url << " serves " << server->model;
    if (run.exp.llm.context_length == 0 && server->context_length > 0) {
      // The run records the context length its request limits were computed from.
      std::vector<std::string> with_ctx = overrides;
      if (coldstart_only && !named) with_ctx.push_back("run.name=" + run.exp.name);
      with_ctx.push_back("backbone.context_length=" + std::to_string(server->context_length));
      auto again = load_experiment(config, with_ctx);
      if (!again.ok()) return again.status();
      run.exp = std::move(again).value();
      std::cerr << ", context length " << server->context_length << " (the server's)";
    } else if (run.exp.llm.context_length > 0) {
      std::cerr << ", context length " << run.exp.llm.context_length << " (backbone.context_length)";
    } else if (run.exp.llm.max_tokens == 0) {
      std::cerr << "; it does not state the context length, so no request limit is sent (set "
                   "backbone.context_length or backbone.max_tokens)";
    }
    std::cerr << "\n";
  }
  const Experiment& exp = run.exp;
  run.run_dir = exp.out_root + "/" + exp.name;
  run.config_shown = exp.config_path;
  auto built = build_world(exp, ModelCalls::kLive, "", run.run_dir + "/llm_calls.jsonl");
  if (!built.ok()) return invalid_argument(built.status().to_string());
  run.world = std::move(built).value();
  VINCI_RETURN_IF_ERROR(check_task_split(run.world.suite, exp));
  if (!exp.init_run.empty()) {
    auto source = find_run_checkpoint(resolve_init_run(exp.init_run, exp.out_root), exp.init_step);
    if (!source.ok()) {
      return invalid_argument(exp.config_path + ": key 'backbone.init_run': " + source.status().to_string());
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
  if (!world.ok()) return invalid_argument(exp.config_path + ": key 'run.world': " + world.status().message());
  m.world = exp.device == DeviceKind::kCuda ? RunWorld::kLive : *world;
  m.environment = env;
  m.parent_run = exp.init_run;
  auto w = RunWriter::create(run.run_dir, m);
  if (!w.ok()) return w.status();
  run.writer = std::move(w).value();
  run.sink = std::make_unique<WriteSink>(run.writer.get());
  return run;
}

// The log's closing record, then the reports, then the manifest marked complete: a run stopped
// anywhere before that (a kill, a full disk) is resumed, and the resume writes what is missing.
// info's digest and record count are the finished log's.
Status finish_run(OpenRun& run, const TrainerOutput& out, RunSummaryInfo* info) {
  capnp::MallocMessageBuilder end;
  init_run_end(end, run.sink->position(), run.sink->digest());
  Status st = run.sink->put(end);
  if (!st.ok() && st.code() == StatusCode::kMismatch && !run.writer->writing()) {
    return invalid_argument(st.to_string() + not_this_runs_log(run.run_dir));
  }
  if (!st.ok()) return invalid_argument(st.to_string());
  if (auto* check = dynamic_cast<CheckSink*>(run.sink.get())) {
    if (check->position() < check->expected()) {
      return invalid_argument("run " + run.run_dir + ": its log holds " + std::to_string(check->expected()) +
                              " records, but the run ends after " + std::to_string(check->position()) +
                              ": the log is not this run's");
    }
    std::cerr << g_command << ": re-derived and matched " << check->checked() << " recorded records\n";
  }
  // A log that already held every record (the run stopped before its reports) starts writing here.
  st = start_writing(*run.writer);
  if (!st.ok()) return invalid_argument(st.to_string());
  st = run.writer->checkpoint();
  if (!st.ok()) return invalid_argument(st.to_string());
  info->run_digest = run.writer->digest().hex();
  info->records = run.writer->record_count();
  st = write_report(run.run_dir, out, *info);
  if (!st.ok()) {
    return invalid_argument(st.to_string() + "\n(the run's records are kept; `harness run --resume " + run.run_dir +
                            "` writes its reports)");
  }
  st = run.writer->mark_complete();
  if (!st.ok()) return invalid_argument(st.to_string());
  // The answers are in the log now: the journal that kept them for a resume has done its job.
  if (run.world.journal) ::unlink(run.world.journal->path().c_str());
  return Status();
}

// SIGINT and SIGTERM stop a run at once, as a kill would, with a line that says how to continue:
// every model answer it paid for is in its journal, and a resume re-derives the rest.
char g_stop_line[4096];
size_t g_stop_len = 0;

void on_stop_signal(int sig) {
  const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  ssize_t ignored = ::write(STDERR_FILENO, "\n", 1);
  ignored = ::write(STDERR_FILENO, g_stop_line, 20);  // "harness run: stopped"
  ignored = ::write(STDERR_FILENO, " by ", 4);
  ignored = ::write(STDERR_FILENO, name, std::strlen(name));
  ignored = ::write(STDERR_FILENO, g_stop_line + 20, g_stop_len - 20);
  (void)ignored;
  ::_exit(128 + sig);
}

void stop_cleanly_on_signals(const std::string& run_dir) {
  std::string line = std::string("harness run: stopped") + "; the run is kept: `harness run --resume " + run_dir +
                     "` continues it (model answers already paid for are not asked again)\n";
  g_stop_len = std::min(line.size(), sizeof g_stop_line);
  std::memcpy(g_stop_line, line.data(), g_stop_len);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// What a finished run prints: the final fast_p table, test-time scaling's, the cold start's line,
// throughput, and where the run is.
void print_outcome(const OpenRun& run, const TrainerOutput& out, const RunSummaryInfo& info, double seconds) {
  const Experiment& exp = run.exp;
  if (!out.eval.empty()) {
    std::cout << "Final evaluation of " << exp.name << " (held-out tasks, after step " << out.eval.back().step << "; "
              << fast_p_compare_line(exp.fast_p_compare) << "):\n\n"
              << fast_p_table(out.eval.back().fast_p, TurnMode::kLast, Denominator::kAll, TableFormat::kMarkdown);
  }
  if (!out.tts.empty()) {
    std::cout << "\nTest-time scaling (" << exp.tts.iterations << " iterations x " << exp.tts.turns << " turns, window "
              << exp.tts.window << "; " << fast_p_compare_line(exp.fast_p_compare) << "), best turn:\n\n"
              << fast_p_table(out.tts, TurnMode::kBest, Denominator::kAll, TableFormat::kMarkdown) << "\nlast turn:\n\n"
              << fast_p_table(out.tts, TurnMode::kLast, Denominator::kAll, TableFormat::kMarkdown);
  }
  if (out.coldstart) {
    const auto& c = *out.coldstart;
    std::fprintf(stdout,
                 "\nCold start: %u of %u trajectories kept, %u skills written, %u verified, %zu "
                 "added after the diversity filter; cross-entropy (selection, policy, summary) "
                 "%.3f %.3f %.3f -> %.3f %.3f %.3f\n",
                 c.kept, c.trajectories, c.proposed, c.verified, c.added.size(), c.before.mean[0], c.before.mean[1],
                 c.before.mean[2], c.after.mean[0], c.after.mean[1], c.after.mean[2]);
  }
  const World& world = run.world;
  double eval_seconds = world.evaluator_seconds ? world.evaluator_seconds() : 0.0;
  if (world.evaluator_progress) {
    std::fprintf(stdout,
                 "\n%llu rollouts, %llu turn evaluations in %.1f s (%.0f rollouts/s, %.0f turn evaluations/s), "
                 "evaluated through the queue %s\n",
                 static_cast<unsigned long long>(out.rollouts), static_cast<unsigned long long>(out.turn_evals),
                 seconds, seconds > 0 ? out.rollouts / seconds : 0.0, seconds > 0 ? out.turn_evals / seconds : 0.0,
                 exp.queue.c_str());
  } else {
    std::fprintf(stdout,
                 "\n%llu rollouts, %llu turn evaluations in %.1f s (%.0f rollouts/s, %.0f turn "
                 "evaluations/s; %.1f s inside the evaluator, %.1f s outside)\n",
                 static_cast<unsigned long long>(out.rollouts), static_cast<unsigned long long>(out.turn_evals),
                 seconds, seconds > 0 ? out.rollouts / seconds : 0.0, seconds > 0 ? out.turn_evals / seconds : 0.0,
                 eval_seconds, seconds - eval_seconds);
  }
  if (!info.model_calls.empty()) std::cout << "model calls: " << info.model_calls << "\n";
  std::cout << "run: " << run.run_dir << "\nrecords: " << run.writer->record_count()
            << "\ndigest: " << run.writer->digest().hex() << "\n";
}

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
  g_command = coldstart_only ? "harness coldstart" : "harness run";
  if (auto stop = parse_options(g_command, args, opts, {{"config", 1}}, &vm)) {
    return *stop;
  }
  pin_numeric_settings();
  const bool resume = vm.count("resume") > 0;
  if (coldstart_only && resume) {
    std::cerr << "harness coldstart: a stopped cold start run resumes with `harness run --resume RUN`\n";
    return 2;
  }
  if (resume == (vm.count("config") > 0)) {
    std::cerr << g_command << ": give either an experiment config or --resume RUN\n" << opts;
    return 2;
  }
  if (resume && vm["resume"].as<std::string>().empty()) {
    return fail("--resume: expected a run folder, found an empty string");
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

  Environment env = capture_environment();
  Result<OpenRun> opened = [&]() -> Result<OpenRun> {
    if (resume) return resume_run(vm["resume"].as<std::string>(), env);
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
    return start_run(vm["config"].as<std::string>(), overrides, coldstart_only, vm.count("name") > 0, env);
  }();
  if (!opened.ok()) return fail(opened.status().message());
  OpenRun& run = *opened;
  const Experiment& exp = run.exp;
  World& world = run.world;

  if (!exp.queue.empty() && exp.threads < 2) {
    std::cerr << g_command << ": device.queue with run.threads = " << exp.threads
              << " keeps one evaluation in flight; --threads N keeps N (records do not depend on it)\n";
  }
  stop_cleanly_on_signals(run.run_dir);
  Progress progress;
  auto start = std::chrono::steady_clock::now();
  auto out = run_experiment(
      exp, world.suite, *world.evaluator, *world.backbone, world.seed_library, *run.sink,
      [&](int64_t d, int64_t t, const std::string& l) {
        progress(d, t, world.evaluator_progress ? l + " | " + world.evaluator_progress() : l);
      },
      world.model.get(), world.trainer.trainer.get());
  if (!out.ok()) {
    if (resume && !run.writer->writing() && out.status().code() == StatusCode::kMismatch) {
      // A recorded record the run does not derive, found before the resume wrote anything.
      return fail(out.status().to_string() + not_this_runs_log(run.run_dir));
    }
    (void)run.writer->flush();
    return fail(out.status().to_string() + "\n(the run so far is kept; `harness run --resume " + run.run_dir +
                "` continues it)");
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RunSummaryInfo info{exp.name, run.config_shown, "", 0, seconds, "", ""};
  if (world.call_log) info.model_calls = model_calls_line(world.call_log->stats());
  std::vector<std::string> sets;
  for (const auto& id : out->eval_tasks) {
    const Task* t = world.suite.find(id);
    sets.push_back(t ? t->set_name() : "not in the suite");
  }
  info.scored = scored_set_line(sets, "all", exp.fast_p_compare);
  info.compare = exp.fast_p_compare;
  Status finished = finish_run(run, *out, &info);
  if (!finished.ok()) return fail(finished.message());
  print_outcome(run, *out, info, seconds);
  return 0;
}

}  // namespace
}  // namespace vinci
