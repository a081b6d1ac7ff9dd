// `harness queue status --queue URL`: what an evaluation queue holds and who serves it
// (docs/distributed.md).
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "core/cli.h"
#include "harness/cli/commands.h"
#include "queue/queue_evaluator.h"
#include "queue/redis.h"

namespace vinci {

int cmd_queue(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description opts("usage: harness queue status --queue redis://HOST:PORT[/NAME]");
  opts.add_options()("help,h", "show this help")("queue", po::value<std::string>(), "the queue");
  po::variables_map vm;
  if (auto stop = parse_options("harness queue", args, opts, {{"action", 1}}, &vm)) return *stop;
  auto fail = [](const std::string& msg) {
    std::cerr << "harness queue: " << msg << "\n";
    return 2;
  };
  std::string action = vm.count("action") ? vm["action"].as<std::string>() : "";
  if (action != "status") return fail("expected the action 'status', found '" + action + "'");
  if (!vm.count("queue")) return fail("--queue redis://HOST:PORT is required");
  auto url = parse_queue_url(vm["queue"].as<std::string>());
  if (!url.ok()) return fail(url.status().message());
  auto redis = Redis::connect(*url, 5, 10);
  if (!redis.ok()) return fail(redis.status().message());
  auto s = read_queue_status(**redis, QueueKeys(url->name));
  if (!s.ok()) return fail(s.status().message());
  std::printf("queue %s\nwaiting: %lld\nin progress: %lld\nworkers alive: %lld\nanswered: %lld\n", url->text.c_str(),
              s->waiting, s->in_progress, s->workers, s->done);
  for (const auto& w : s->worker_lines) std::printf("  %s\n", w.c_str());
  return 0;
}

}  // namespace vinci
