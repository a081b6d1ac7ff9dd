// `harness tasks`: lists the task suite, one task a line (id, level, name, op family, set), shows
// one task's knob space, generated plan or PyTorch module (as a language model is shown it), and writes one task's
// reference inputs and output as .npy files for a cross-check.
#include <cstdio>
#include <iostream>
#include <map>

#include <boost/program_options.hpp>

#include "core/cli.h"
#include "gpu/codegen/codegen.h"
#include "gpu/reference_dump.h"
#include "gpu/task.h"
#include "gpu/task_prompt.h"
#include "harness/cli/commands.h"

namespace vinci {

int cmd_tasks(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  int level = 0;
  std::string dir = default_task_dir(), knobs_of, plan_of, reference_of, pytorch_of, size = "small", out,
              distribution = "uniform01", set;
  int64_t seed = 0;
  bool eager = false;
  std::vector<std::string> sets;
  po::options_description opts(
      "usage: harness tasks [--level N] [--set-of kernelbench|kernelbench-flagged|vinci]\n"
      "       harness tasks --knobs ID | --plan ID [--eager | --set knob=value...]\n"
      "       harness tasks --reference ID --out DIR [--size small|full] [--seed S] [--distribution D]\n"
      "       harness tasks --pytorch ID [--size small|full]\n"
      "Listing columns: id, level, name, op family, set (kernelbench: a KernelBench problem;\n"
      "kernelbench-flagged: one KernelBench flags or that is degenerate; vinci: vinci's own).");
  opts.add_options()("help,h", "this text")("level", po::value<int>(&level), "only tasks of level 1, 2 or 3")(
      "dir", po::value<std::string>(&dir), "task folder (default: the source tree's data/tasks)")(
      "knobs", po::value<std::string>(&knobs_of), "print the knob space of task ID")(
      "plan", po::value<std::string>(&plan_of), "print the default plan of task ID as JSON")(
      "eager", po::bool_switch(&eager), "with --plan: the eager (library-only) plan instead")(
      "set", po::value<std::vector<std::string>>(&sets), "with --plan: a knob value, e.g. gemm.tensor_cores=tf32")(
      "set-of", po::value<std::string>(&set), "list only tasks of this set")(
      "reference", po::value<std::string>(&reference_of),
      "write task ID's inputs (input_<i>.npy), reference output (output.npy) and meta.json into --out")(
      "out", po::value<std::string>(&out), "with --reference: the folder to write")(
      "pytorch", po::value<std::string>(&pytorch_of),
      "print task ID as the PyTorch module (Model, get_inputs, get_init_inputs) a language model is shown")(
      "size", po::value<std::string>(&size), "with --reference or --pytorch: small (default) or full")(
      "seed", po::value<int64_t>(&seed), "with --reference: the inputs' torch generator seed (default 0)")(
      "distribution", po::value<std::string>(&distribution),
      "with --reference: uniform01 (default: KernelBench's torch.rand), signed or heavy_tailed");
  po::variables_map vm;
  if (auto stop = parse_options("harness tasks", args, opts, {}, &vm)) return *stop;
  if (level < 0 || level > 3) {
    std::fprintf(stderr, "harness tasks: --level: expected 1, 2 or 3, found %d\n", level);
    return 2;
  }
  Result<TaskSuite> suite = load_task_suite(dir);
  if (!suite.ok()) {
    std::fprintf(stderr, "harness tasks: %s\n", suite.status().to_string().c_str());
    return 2;
  }
  if (!set.empty() && set != "kernelbench" && set != "kernelbench-flagged" && set != "vinci") {
    std::fprintf(stderr, "harness tasks: --set-of: expected kernelbench, kernelbench-flagged or vinci, found '%s'\n",
                 set.c_str());
    return 2;
  }
  for (const std::string& id : {knobs_of, plan_of, reference_of, pytorch_of}) {
    if (!id.empty() && !suite->find(id)) {
      std::fprintf(stderr, "harness tasks: no task '%s' in %s\n", id.c_str(), dir.c_str());
      return 2;
    }
  }
  SizeName size_value = SizeName::kSmall;
  if (!reference_of.empty() || !pytorch_of.empty()) {
    Result<SizeName> parsed = parse_size_name(size);
    if (!parsed.ok()) {
      std::fprintf(stderr, "harness tasks: --size: %s\n", parsed.status().message().c_str());
      return 2;
    }
    size_value = *parsed;
  }
  if (!pytorch_of.empty()) {
    Result<std::string> py = task_as_pytorch(*suite->find(pytorch_of), size_value);
    if (!py.ok()) {
      std::fprintf(stderr, "harness tasks: %s\n", py.status().to_string().c_str());
      return 1;
    }
    std::fputs(py->c_str(), stdout);
    return 0;
  }
  if (!reference_of.empty()) {
    if (seed < 0) {
      std::fprintf(stderr, "harness tasks: --seed: expected a non-negative integer, found %lld\n",
                   static_cast<long long>(seed));
      return 2;
    }
    if (out.empty()) {
      std::fprintf(stderr, "harness tasks: --reference needs --out DIR\n");
      return 2;
    }
    Result<InputDistribution> dist = parse_distribution(distribution);
    if (!dist.ok()) {
      std::fprintf(stderr, "harness tasks: --distribution: %s\n", dist.status().message().c_str());
      return 2;
    }
    Status st = dump_reference(*suite->find(reference_of), size_value, *dist, static_cast<uint64_t>(seed), out);
    if (!st.ok()) {
      std::fprintf(stderr, "harness tasks: %s\n", st.to_string().c_str());
      return 1;
    }
    std::printf("%s: wrote %s/meta.json\n", reference_of.c_str(), out.c_str());
    return 0;
  }
  if (!knobs_of.empty()) {
    KnobSpace space = knob_space(*suite->find(knobs_of));
    for (const auto& k : space.knobs) {
      std::printf("%-20s", k.name.c_str());
      for (size_t i = 0; i < k.choices.size(); ++i)
        std::printf(" %s%s", k.choices[i].c_str(), static_cast<int32_t>(i) == k.default_index ? "*" : "");
      std::printf("   # %s\n", k.help.c_str());
    }
    std::printf("%zu knobs, %.0f settings (* = default)\n", space.knobs.size(), space.cardinality());
    return 0;
  }
  if (!plan_of.empty()) {
    const Task& t = *suite->find(plan_of);
    std::map<std::string, std::string> values;
    for (const auto& kv : sets) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "harness tasks: --set: expected knob=value, found '%s'\n", kv.c_str());
        return 2;
      }
      values[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    Result<Plan> plan = eager ? eager_plan(t) : generate_plan(t, values);
    if (!plan.ok()) {
      std::fprintf(stderr, "harness tasks: %s\n", plan.status().to_string().c_str());
      return 1;
    }
    std::printf("%s\n", plan_to_json(*plan).dump(2).c_str());
    return 0;
  }
  for (const Task* t : suite->at_level(level)) {
    if (!set.empty() && set != t->set_name()) continue;
    std::printf("%s\t%d\t%s\t%s\t%s\n", t->id.c_str(), t->level, t->name.c_str(), t->family_name(), t->set_name());
  }
  return 0;
}

}  // namespace vinci
