// `harness lm`: vinci's tiny language model (lm/, docs/lm.md), trained and served in one process:
// the OpenAI chat completions API for the base model and every state in the store, and the
// trainer protocol's routes (POST /v1/vinci/update, /v1/vinci/load, /v1/vinci/logprob).
#include <signal.h>
#include <time.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/cli.h"
#include "harness/chat_server.h"
#include "harness/cli/commands.h"
#include "harness/world.h"
#include "lm/service.h"

namespace vinci {
namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

// A route answering with a service method's result, or its error.
ChatRoute route(Result<nlohmann::json> (lm::Service::*method)(const nlohmann::json&), lm::Service* service) {
  return [method, service](const nlohmann::json& body) {
    Result<nlohmann::json> r = (service->*method)(body);
    if (!r.ok()) return chat_route_error(r.status());
    return ChatRouteReply{200, std::move(r).value()};
  };
}

}  // namespace

int cmd_lm(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description opts("usage: harness lm --store DIR [options]");
  opts.add_options()("help,h", "show this help")("host", po::value<std::string>()->default_value("127.0.0.1"),
                                                 "address to listen on (loopback by default)")(
      "port", po::value<std::string>()->default_value("8100"), "port (0: any free port, printed)")(
      "model", po::value<std::string>()->default_value("vinci-tiny"),
      "the base model's name; trained states are served as NAME-<16 hex>")(
      "store", po::value<std::string>()->default_value(""), "folder of the model states (required; made when missing)")(
      "seed", po::value<std::string>()->default_value("0"), "seed of the base model's parameters")(
      "layers", po::value<std::string>()->default_value("2"), "transformer blocks")(
      "d-model", po::value<std::string>()->default_value("128"), "width of the residual stream")(
      "heads", po::value<std::string>()->default_value("4"), "attention heads (dividing --d-model)")(
      "context", po::value<std::string>()->default_value("512"), "positions: prompt and reply together")(
      "device", po::value<std::string>()->default_value("cpu"),
      "where the model computes: cpu, cuda or cuda:N (states do not depend on it)")(
      "train-batch", po::value<std::string>()->default_value("1"),
      "samples per forward/backward pass of an update (padded; 1: one at a time)")(
      "api-key-env", po::value<std::string>()->default_value(""),
      "require the key held by this environment variable (Authorization: Bearer KEY)")(
      "faults", po::value<std::string>()->default_value(""),
      "faults for the next updates, in order (testing): nonfinite (answered as a failed update: the loss is "
      "taken as NaN, the parent kept), stall (computed, then never stored or answered, until killed) or ok, "
      "comma-separated");
  po::variables_map vm;
  if (auto stop = parse_options("harness lm", args, opts, {}, &vm)) return *stop;
  pin_numeric_settings();
  auto fail = [](const std::string& msg) {
    std::cerr << "harness lm: " << msg << "\n";
    return 2;
  };
  lm::ServiceOptions so;
  so.base_name = vm["model"].as<std::string>();
  so.store = vm["store"].as<std::string>();
  if (so.store.empty()) return fail("--store: expected the folder of the model states, found nothing");
  auto seed = parse_int_option("--seed", vm["seed"].as<std::string>(), 0, INT64_MAX);
  if (!seed.ok()) return fail(seed.status().message());
  so.seed = static_cast<uint64_t>(*seed);
  auto port = parse_int_option("--port", vm["port"].as<std::string>(), 0, 65535);
  if (!port.ok()) return fail(port.status().message());
  struct SizeFlag {
    const char* flag;
    int32_t* out;
  } sizes[] = {{"layers", &so.shape.layers},
               {"d-model", &so.shape.d_model},
               {"heads", &so.shape.heads},
               {"context", &so.shape.context}};
  for (const auto& f : sizes) {
    auto v = parse_int_option(std::string("--") + f.flag, vm[f.flag].as<std::string>(), 1, 65536);
    if (!v.ok()) return fail(v.status().message());
    *f.out = static_cast<int32_t>(*v);
  }
  so.device = vm["device"].as<std::string>();
  auto train_batch = parse_int_option("--train-batch", vm["train-batch"].as<std::string>(), 1, 4096);
  if (!train_batch.ok()) return fail(train_batch.status().message());
  so.train_batch = static_cast<int32_t>(*train_batch);
  if (std::string list = vm["faults"].as<std::string>(); !list.empty()) {
    for (size_t begin = 0;;) {
      const size_t comma = list.find(',', begin);
      std::string f = list.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
      if (f != "ok" && f != "nonfinite" && f != "stall") {
        return fail("--faults: expected nonfinite, stall or ok, found \"" + f + "\"");
      }
      so.update_faults.push_back(std::move(f));
      if (comma == std::string::npos) break;
      begin = comma + 1;
    }
  }
  ChatServerOptions co;
  co.model = so.base_name;
  std::string key_env = vm["api-key-env"].as<std::string>();
  if (!key_env.empty()) {
    const char* key = std::getenv(key_env.c_str());
    if (key == nullptr || *key == 0) return fail("--api-key-env names " + key_env + ", which is not set");
    co.api_key = key;
  }
  auto service = lm::Service::open(so);
  if (!service.ok()) return fail(service.status().to_string());
  lm::Service* svc = service->get();
  co.models = [svc] { return svc->models(); };
  co.routes["/v1/vinci/update"] = route(&lm::Service::update, svc);
  co.routes["/v1/vinci/load"] = route(&lm::Service::load, svc);
  co.routes["/v1/vinci/logprob"] = route(&lm::Service::logprob, svc);
  ChatServer server(
      [svc](const nlohmann::json& request) -> Result<ChatAnswer> {
        VINCI_ASSIGN_OR_RETURN(lm::ChatReply r, svc->chat(request));
        ChatAnswer a;
        a.content = std::move(r.content);
        a.finish_reason = std::move(r.finish_reason);
        a.prompt_tokens = r.prompt_tokens;
        a.completion_tokens = r.completion_tokens;
        return a;
      },
      co);
  Status st = server.start(vm["host"].as<std::string>(), static_cast<int>(*port));
  if (!st.ok()) return fail(st.to_string());
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  std::fprintf(stderr, "harness lm: %s, %s, %lld parameters, base state %s, store %s, device %s, train batch %d\n",
               so.base_name.c_str(), svc->shape().text().c_str(), static_cast<long long>(svc->parameters()),
               svc->base_digest().c_str(), so.store.c_str(), svc->device().c_str(), static_cast<int>(so.train_batch));
  std::printf("listening on %s:%d\n", vm["host"].as<std::string>().c_str(), server.port());
  std::fflush(stdout);
  while (!g_stop) {
    struct timespec tick = {0, 100 * 1000 * 1000};
    nanosleep(&tick, nullptr);
  }
  server.stop();
  const lm::Service::Throughput t = svc->throughput();
  std::fprintf(stderr,
               "harness lm: %lld requests; generated %lld tokens in %.1f s (%.0f tokens/s); trained on %lld tokens "
               "in %.1f s (%.0f tokens/s)\n",
               static_cast<long long>(server.requests()), static_cast<long long>(t.generated_tokens),
               t.generation_seconds, t.generation_seconds > 0 ? t.generated_tokens / t.generation_seconds : 0.0,
               static_cast<long long>(t.trained_tokens), t.training_seconds,
               t.training_seconds > 0 ? t.trained_tokens / t.training_seconds : 0.0);
  return 0;
}

}  // namespace vinci
