// `harness serve`: the OpenAI chat completions API answered by vinci's sim backbone
// (harness/sim_server.h), for experiments with backbone.kind = "openai" on a machine without model
// weights, and for tests against a real HTTP server.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "agents/sim_backbone.h"
#include "agents/skill_library.h"
#include "core/cli.h"
#include "harness/cli/commands.h"
#include "harness/sim_server.h"
#include "harness/sim_world.h"
#include "harness/world.h"

namespace vinci {
namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

}  // namespace

int cmd_serve(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description opts("usage: harness serve [options]");
  opts.add_options()("help,h", "show this help")("host", po::value<std::string>()->default_value("127.0.0.1"),
                                                 "address to listen on (loopback by default)")(
      "port", po::value<std::string>()->default_value("8000"), "port (0: any free port, printed)")(
      "model", po::value<std::string>()->default_value("vinci-sim"), "the model name served")(
      "seed", po::value<std::string>()->default_value("0"), "seed of the sim backbone's parameters")(
      "library", po::value<std::string>()->default_value("experiments/seed_skills.jsonl"),
      "skills the server knows by name (their knob recommendations)")(
      "api-key-env", po::value<std::string>()->default_value(""),
      "require the key held by this environment variable (Authorization: Bearer KEY)")(
      "faults", po::value<std::string>()->default_value(""),
      "faults for the next requests, in order: 500, 429:SECONDS, 503:SECONDS, 400, malformed, "
      "truncated, no_tool_call, hang:SECONDS (comma-separated)");
  po::variables_map vm;
  if (auto stop = parse_options("harness serve", args, opts, {}, &vm)) return *stop;
  pin_numeric_settings();
  auto fail = [](const std::string& msg) {
    std::cerr << "harness serve: " << msg << "\n";
    return 2;
  };
  Experiment exp;
  exp.seed_library = vm["library"].as<std::string>();
  auto seed = parse_int_option("--seed", vm["seed"].as<std::string>(), 0, INT64_MAX);
  if (!seed.ok()) return fail(seed.status().message());
  auto port = parse_int_option("--port", vm["port"].as<std::string>(), 0, 65535);
  if (!port.ok()) return fail(port.status().message());
  exp.seed = static_cast<uint64_t>(*seed);
  exp.backbone = BackboneKind::kSim;
  exp.queue.clear();  // the server answers model calls; it evaluates nothing
  // Named by --library here, not by a config key: its errors say so. A relative path resolves as
  // build_world resolves it: the current folder, then the source tree.
  {
    std::string path = exp.seed_library;
    if (!path.empty() && path[0] != '/' && ::access(path.c_str(), F_OK) != 0) {
      std::string in_tree = std::string(VINCI_SOURCE_DIR) + "/" + path;
      if (::access(in_tree.c_str(), F_OK) == 0) path = in_tree;
    }
    if (auto library = SkillLibrary::load(path); !library.ok()) return fail("--library: " + library.status().message());
  }
  auto world = build_world(exp);
  if (!world.ok()) return fail(world.status().to_string());
  ChatServerOptions so;
  so.model = vm["model"].as<std::string>();
  std::string key_env = vm["api-key-env"].as<std::string>();
  if (!key_env.empty()) {
    const char* key = std::getenv(key_env.c_str());
    if (key == nullptr || *key == 0) return fail("--api-key-env names " + key_env + ", which is not set");
    so.api_key = key;
  }
  auto faults = parse_chat_faults(vm["faults"].as<std::string>());
  if (!faults.ok()) return fail("--faults: " + faults.status().message());
  so.faults = std::move(faults).value();
  SimChatResponder responder(world->suite, world->seed_library, *world->backbone);
  ChatServer server([&](const nlohmann::json& request) { return responder.answer(request); }, so);
  Status st = server.start(vm["host"].as<std::string>(), static_cast<int>(*port));
  if (!st.ok()) return fail(st.to_string());
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  std::printf("listening on %s:%d\n", vm["host"].as<std::string>().c_str(), server.port());
  std::fflush(stdout);
  // Polled rather than pause(): a signal between the test and pause() would be missed.
  while (!g_stop) {
    struct timespec tick = {0, 100 * 1000 * 1000};
    nanosleep(&tick, nullptr);
  }
  server.stop();
  std::fprintf(stderr, "harness serve: %lld requests, %lld faults injected\n",
               static_cast<long long>(server.requests()), static_cast<long long>(server.faults_injected()));
  return 0;
}

}  // namespace vinci
