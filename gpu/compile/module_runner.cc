#include "gpu/compile/module_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/json_fields.h"
#include "core/text.h"

namespace vinci {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kSocketName = "runner.sock";
constexpr uint32_t kMaxHeaderBytes = 16u << 20;
constexpr size_t kStderrTail = 64 << 10;
// How long the worker polls without sleeping for the end of one timed sample (read_byte_spinning).
constexpr double kSpinWhileTimedS = 2.0;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

ModuleRunOptions resolved(ModuleRunOptions o) {
  if (o.python.empty()) o.python = env_or("VINCI_MODULE_PYTHON", "python3");
  if (o.script.empty()) o.script = env_or("VINCI_MODULE_RUN", VINCI_MODULE_RUN_SCRIPT);
  return o;
}

SandboxOptions sandbox_options(const ModuleRunOptions& o) {
  SandboxOptions s;
  s.python = o.python;
  s.script = o.script;
  s.package = "torch";
  s.what = "module runner";
  s.purpose = "KernelBench module runs";
  s.cannot = "cannot run the module runner '" + o.python + " " + o.script + "': ";
  s.fix = " (set VINCI_MODULE_PYTHON to a python with torch installed)";
  s.off_reason = "ModuleRunOptions::sandbox is off";
  s.temp_prefix = "vinci_modrun";
  s.extension_dir = "/vinci/torch_extensions";  // where ModuleChecker's builds were made
  s.env = o.env;
  s.env.push_back("TORCH_CUDA_ARCH_LIST=" + env_or("TORCH_CUDA_ARCH_LIST", "9.0"));
  s.limits = o.limits;
  s.sandbox = o.sandbox;
  s.bwrap = o.bwrap;
  s.gpu = o.device == "cuda";
  return s;
}

void signal_fd(int fd) {
  uint64_t one = 1;
  while (::write(fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

// Shared memory the tensors cross in: a memfd mapped here and, by the fd sent beside a command, in
// the runner. Its size is sealed (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL): a runner that truncated
// it would make this process's next access to the mapping fault (SIGBUS), so it cannot.
struct Region {
  int fd = -1;
  char* data = nullptr;
  size_t size = 0;
  bool pinned = false;
  std::function<bool(void*, size_t)> pin;  // ModuleRunOptions::pin
  std::function<void(void*)> unpin;

  Region() = default;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() { release(); }

  void release() {
    if (pinned && unpin) unpin(data);
    pinned = false;
    if (data != nullptr) ::munmap(data, size);
    if (fd >= 0) ::close(fd);
    fd = -1, data = nullptr, size = 0;
  }

  // Room for at least bytes (a new memfd when this one is smaller); "" or why not.
  std::string reserve(size_t bytes, const char* name) {
    if (fd >= 0 && size >= bytes) return "";
    release();
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    size_t want = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
    fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return std::string("memfd_create: ") + std::strerror(errno);
    if (::ftruncate(fd, static_cast<off_t>(want)) != 0 ||
        ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      std::string why = std::string("memfd of ") + std::to_string(want) + " bytes: " + std::strerror(errno);
      release();
      return why;
    }
    void* p = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      std::string why = std::string("mmap of ") + std::to_string(want) + " bytes: " + std::strerror(errno);
      release();
      return why;
    }
    data = static_cast<char*>(p);
    size = want;
    pinned = pin && pin(data, size);
    return "";
  }
};

constexpr size_t kTensorAlign = 64;

}  // namespace

struct ModuleSession::Impl {
  ModuleRunOptions options;
  PythonSandbox* sandbox = nullptr;
  std::string build;
  int listen_fd = -1;
  int fd = -1;       // the conversation
  int done_fd = -1;  // signalled: the conversation is over, stop the runner
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool connected = false, ended = false;
  bool process_ended = false;  // the runner's process has ended (during() saw it)
  Result<ProcessRun> run = invalid_argument("not run");
  ModuleOutcome dead;  // the failure that ended the runner, once it has
  std::string tail;    // the runner's stderr once it ended
  Region inputs;       // a run's inputs, written here and read by the runner
  Region output;       // a run's output, written by the runner and read here

  ~Impl() {
    stop();
    for (int f : {listen_fd, fd, done_fd})
      if (f >= 0) ::close(f);
  }

  // Ends the conversation and waits for the process (and the sandbox's cleanup).
  void stop() {
    if (!thread.joinable()) return;
    signal_fd(done_fd);
    thread.join();
    if (run.ok()) {
      const std::string& err = run->err;
      tail = err.size() > kStderrTail ? err.substr(err.size() - kStderrTail) : err;
    }
  }

  // The conversation's side of the sandbox: accept the runner's connection, then wait until the
  // session is over.
  Status during(int ended_fd) {
    int accepted = -1;
    std::string why;
    pollfd p[3] = {{listen_fd, POLLIN, 0}, {ended_fd, POLLIN, 0}, {done_fd, POLLIN, 0}};
    Clock::time_point t0 = Clock::now();
    for (;;) {
      double left = options.load_timeout_s * 1000 - ms_since(t0);
      if (left <= 0) {
        why = "the module runner did not connect within " + format_number("%.6g", options.load_timeout_s) + " s";
        break;
      }
      int n = ::poll(p, 3, static_cast<int>(std::min(left, 1000.0)) + 1);
      if (n < 0 && errno != EINTR) {
        why = std::string("poll: ") + std::strerror(errno);
        break;
      }
      if (p[0].revents & POLLIN) {
        accepted = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (accepted >= 0) break;
      }
      if (p[1].revents & POLLIN) {
        why = "the module runner ended before it connected";
        break;
      }
      if (p[2].revents & POLLIN) return Status();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      fd = accepted;
      connected = accepted >= 0;
      ended = !connected;
    }
    cv.notify_all();
    // Until the session is over; the process's own end is told on the way (crash messages wait
    // for it, so that they say how it ended).
    pollfd p2[2] = {{done_fd, POLLIN, 0}, {ended_fd, POLLIN, 0}};
    for (;;) {
      int n = ::poll(p2, 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 || (p2[0].revents & POLLIN)) break;
      if (p2[1].revents & POLLIN) {
        {
          std::lock_guard<std::mutex> lock(mu);
          process_ended = true;
        }
        cv.notify_all();
        p2[1].fd = -1;  // told once; poll ignores it from here
      }
    }
    return Status();
  }

  // Waits until fd has `events` or the deadline passes: false on timeout.
  bool wait(short events, Clock::time_point deadline) {
    for (;;) {
      double left = std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p = {fd, events, 0};
      int n = ::poll(&p, 1, static_cast<int>(std::min(left, 1000.0)) + 1);
      if (n > 0) return true;
      if (n < 0 && errno != EINTR) return true;  // the read or write says what is wrong
    }
  }

  // "" when all n bytes were written, else why not (hang: the runner reads nothing).
  std::string write_all(const char* data, size_t n, Clock::time_point deadline) {
    while (n > 0) {
      if (!wait(POLLOUT, deadline)) return "hang";
      ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (w <= 0) return "crashed";
      data += w;
      n -= static_cast<size_t>(w);
    }
    return "";
  }

  std::string read_exact(char* data, size_t n, Clock::time_point deadline) {
    while (n > 0) {
      if (!wait(POLLIN, deadline)) return "hang";
      ssize_t r = ::recv(fd, data, n, MSG_DONTWAIT);
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (r <= 0) return "crashed";
      data += r;
      n -= static_cast<size_t>(r);
    }
    return "";
  }

  // One byte, waited for by polling the socket without sleeping for up to spin_s, then as
  // read_exact waits. The end of a timed sample: a thread asleep in poll() wakes up late after a
  // wait of a millisecond or more (the core's idle states: measured at 150-200 us on an H100
  // host), which the worker's clock would charge to the module.
  std::string read_byte_spinning(char* c, Clock::time_point deadline, double spin_s) {
    Clock::time_point stop =
        std::min(deadline, Clock::now() + std::chrono::microseconds(static_cast<int64_t>(spin_s * 1e6)));
    for (unsigned i = 0;; ++i) {
      ssize_t r = ::recv(fd, c, 1, MSG_DONTWAIT);
      if (r == 1) return "";
      if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) return "crashed";
      if ((i & 255) == 0 && Clock::now() >= stop) break;
    }
    return read_exact(c, 1, deadline);
  }

  // Sends header; fds (the regions a run's tensors are in) go beside its first byte.
  std::string send(const json& header, Clock::time_point deadline, const std::vector<int>& fds = {}) {
    std::string body = header.dump();
    uint32_t n = static_cast<uint32_t>(body.size());
    char len[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff), static_cast<char>((n >> 16) & 0xff),
                   static_cast<char>((n >> 24) & 0xff)};
    size_t sent = 0;
    if (!fds.empty()) {
      if (!wait(POLLOUT, deadline)) return "hang";
      iovec iov = {len, sizeof len};
      std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()), 0);
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control.data();
      msg.msg_controllen = control.size();
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
      for (;;) {
        ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EINTR || errno == EAGAIN)) {
          if (!wait(POLLOUT, deadline)) return "hang";
          continue;
        }
        if (w <= 0) return "crashed";
        sent = static_cast<size_t>(w);
        break;
      }
    }
    std::string e = write_all(len + sent, sizeof len - sent, deadline);
    if (e.empty()) e = write_all(body.data(), body.size(), deadline);
    return e;
  }

  // Reads one header; "" or why not (hang, crashed, bad_answer with *out holding why).
  // first: the header's first byte, read already (-1: none).
  std::string receive(json* out, Clock::time_point deadline, int first = -1) {
    unsigned char len[4];
    if (first >= 0) len[0] = static_cast<unsigned char>(first);
    std::string e = read_exact(reinterpret_cast<char*>(len) + (first >= 0), first >= 0 ? 3 : 4, deadline);
    if (!e.empty()) return e;
    uint32_t n = len[0] | (len[1] << 8) | (len[2] << 16) | (static_cast<uint32_t>(len[3]) << 24);
    if (n > kMaxHeaderBytes) {
      *out = "an answer header of " + std::to_string(n) + " bytes";
      return "bad_answer";
    }
    std::string body(n, '\0');
    e = read_exact(body.data(), n, deadline);
    if (!e.empty()) return e;
    *out = json::parse(body, nullptr, false);
    if (!out->is_object()) {
      *out = "an answer that is not a JSON object";
      return "bad_answer";
    }
    return "";
  }

  // Records the failure that ends the runner and ends it; for crashes and hangs, what the
  // process's end says.
  ModuleOutcome failed(const std::string& kind, const std::string& error, double timeout_s) {
    if (!dead.kind.empty()) return dead;
    dead.ok = false;
    dead.kind = kind;
    if (kind == "crashed") {
      // The socket closed: the process is ending. Its own end says how (an exit status, a
      // signal); a process that closed the socket and went on is stopped after a while.
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::seconds(30), [this] { return process_ended || ended; });
    }
    stop();
    if (kind == "hang") {
      dead.error = error.empty() ? "the module did not answer within " + format_number("%.6g", timeout_s) +
                                       " s (an endless loop, a deadlock or a kernel that never ends): stopped"
                                 : error;
    } else if (kind == "crashed") {
      std::string how = run.ok() ? sandbox->ending_text(*run) : run.status().message();
      std::string last = tail.size() > 2000 ? tail.substr(tail.size() - 2000) : tail;
      dead.error = "the module's process ended in the middle of a command (" + how + ")" +
                   (last.empty() ? "" : ": " + last) + (run.ok() ? sandbox->limit_hint(last) : "");
    } else {
      dead.error = error;
    }
    return dead;
  }

  // The outcome of an answer header: ok, or the runner's own failure (it exits after one).
  ModuleOutcome outcome(const json& h) {
    auto ok = h.find("ok");
    if (ok == h.end() || !ok->is_boolean())
      return failed("bad_answer", "the runner answered " + h.dump().substr(0, 300), 0);
    if (ok->get<bool>()) return ModuleOutcome{true, "", ""};
    std::string kind = text_field(h, "kind");
    static const char* kKinds[] = {"import_error",  "no_model_new", "construct_error", "runtime_error",
                                   "out_of_memory", "wrong_type",   "writes_input",    "output_aliases_input"};
    bool known = false;
    for (const char* k : kKinds) known = known || kind == k;
    return failed(known ? kind : "bad_answer", text_field(h, "error"), 0);
  }
};

ModuleRunner::ModuleRunner(ModuleRunOptions options)
    : options_(resolved(std::move(options))), sandbox_(sandbox_options(options_)) {}

ModuleRunner::~ModuleRunner() = default;

ModuleSession::ModuleSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ModuleSession::~ModuleSession() = default;

Result<std::unique_ptr<ModuleSession>> ModuleRunner::start(const std::string& module, const std::string& reference,
                                                           ModuleBackend backend, int64_t seed,
                                                           const std::string& build, uint64_t timing_seed) {
  VINCI_ASSIGN_OR_RETURN(std::string script, sandbox_.script());
  auto impl = std::make_unique<ModuleSession::Impl>();
  ModuleSession::Impl* s = impl.get();
  s->options = options_;
  s->inputs.pin = s->output.pin = options_.pin;
  s->inputs.unpin = s->output.unpin = options_.unpin;
  s->sandbox = &sandbox_;
  s->build = build;
  s->done_fd = ::eventfd(0, EFD_CLOEXEC);
  if (s->done_fd < 0) return io_error(std::string("module runner: eventfd: ") + std::strerror(errno));
  SandboxHooks hooks;
  hooks.before = [s](const std::string& folder) -> Status {
    if (!s->build.empty()) {
      Status copied = copy_plain_tree(s->build, folder + "/torch_extensions", 1LL << 30, 1000000);
      if (!copied.ok()) return copied;
    }
    std::string path = folder + "/" + kSocketName;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) return io_error("module runner: socket path too long: " + path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    s->listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0 || ::bind(s->listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(s->listen_fd, 1) != 0)
      return io_error("module runner: socket " + path + ": " + std::strerror(errno));
    return Status();
  };
  hooks.during = [s](const std::string&, int ended_fd) { return s->during(ended_fd); };
  // The process's own limit is the CPU time (options.limits); the wall clock is the session's,
  // each command with its own timeout.
  const double forever_s = 7 * 24 * 3600.0;
  s->thread = std::thread([s, script, hooks, forever_s] {
    Result<ProcessRun> r = s->sandbox->run({script, kSocketName}, "", forever_s, hooks);
    std::lock_guard<std::mutex> lock(s->mu);
    s->run = std::move(r);
    s->ended = true;
    s->cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(s->mu);
    s->cv.wait(lock, [s] { return s->connected || s->ended; });
  }
  std::unique_ptr<ModuleSession> session(new ModuleSession(std::move(impl)));
  ModuleLoad& load = session->load_;
  Clock::time_point t0 = Clock::now();
  auto machine_failure = [&](const std::string& why) -> Status {
    s->stop();
    std::string last = s->tail.size() > 2000 ? s->tail.substr(s->tail.size() - 2000) : s->tail;
    std::string how = s->run.ok() ? s->sandbox->ending_text(*s->run) : s->run.status().message();
    return failed_precondition("the module runner could not start (" + why + "; " + how + ")" +
                               (last.empty() ? "" : ": " + last));
  };
  if (!s->connected) {
    if (!s->run.ok() && s->ended) {
      s->stop();
      return s->run.status();
    }
    return machine_failure("it never connected");
  }
  Clock::time_point deadline = t0 + std::chrono::milliseconds(static_cast<int64_t>(options_.load_timeout_s * 1000));
  json request = {{"cmd", "load"},
                  {"module", module},
                  {"reference", reference},
                  {"backend", module_backend_name(backend)},
                  {"seed", seed},
                  {"timing_seed", timing_seed},
                  {"pristine_on_device_bytes", options_.pristine_on_device_bytes},
                  {"pin_regions", static_cast<bool>(options_.pin)},
                  {"device", options_.device}};
  json h;
  std::string e = s->send(request, deadline);
  if (e.empty()) e = s->receive(&h, deadline);
  if (!e.empty()) return machine_failure(e == "hang" ? "no answer within the load timeout" : "it ended early");
  // Before "ready" no module has run: a failure here is the machine's.
  if (!h.contains("ready")) {
    std::string kind = text_field(h, "kind"), error = text_field(h, "error");
    s->stop();
    if (kind == "bad_request") return internal_error("module runner: " + error);
    return failed_precondition(error.empty() ? "the module runner's first answer was " + h.dump().substr(0, 300)
                                             : error);
  }
  load.torch_version = text_field(h, "torch");
  load.device_name = text_field(h, "device_name");
  load.threads = int_field(h, "threads");
  // The module runs from here: its failures are its own.
  e = s->receive(&h, deadline);
  if (!e.empty()) {
    static_cast<ModuleOutcome&>(load) =
        s->failed(e, e == "bad_answer" ? h.get<std::string>() : "", options_.load_timeout_s);
    if (e == "hang")
      load.error = "importing the module and building ModelNew took more than " +
                   format_number("%.6g", options_.load_timeout_s) + " s: stopped";
  } else {
    static_cast<ModuleOutcome&>(load) = s->outcome(h);
    load.parameters = int_field(h, "parameters");
  }
  load.ms = ms_since(t0);
  return session;
}

Result<ModuleRunAnswer> ModuleSession::run(int slot, bool reuse, const std::vector<ModuleTensor>& inputs,
                                           const ModuleOutput& output, int64_t max_output_bytes,
                                           const ModuleFill& fill) {
  Impl* s = impl_.get();
  ModuleRunAnswer a;
  if (!load_.ok || !s->dead.kind.empty()) {
    static_cast<ModuleOutcome&>(a) = load_.ok ? s->dead : static_cast<const ModuleOutcome&>(load_);
    return a;
  }
  // The inputs, each at an aligned offset of the inputs' region; the output's region as large as
  // the largest output taken.
  json metas = json::array();
  size_t total = 0;
  for (const ModuleTensor& t : inputs) {
    if (t.bytes < 0) return invalid_argument("module runner: an input of " + std::to_string(t.bytes) + " bytes");
    metas.push_back({{"dtype", t.dtype}, {"shape", t.shape}, {"bytes", t.bytes}, {"offset", total}});
    total += (static_cast<size_t>(t.bytes) + kTensorAlign - 1) / kTensorAlign * kTensorAlign;
  }
  std::string why = s->inputs.reserve(total, "vinci-module-inputs");
  if (why.empty())
    why = s->output.reserve(static_cast<size_t>(std::max<int64_t>(max_output_bytes, 0)), "vinci-module-output");
  if (!why.empty()) return io_error("module runner: the shared memory of a run: " + why);
  for (size_t i = 0; i < inputs.size(); ++i) {
    char* dst = s->inputs.data + metas[i]["offset"].get<size_t>();
    if (fill)
      fill(i, dst);
    else if (inputs[i].bytes > 0)
      std::memcpy(dst, inputs[i].data, static_cast<size_t>(inputs[i].bytes));
  }
  const double timeout_s = s->options.call_timeout_s;
  Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  json h;
  std::string e = s->send({{"cmd", "run"},
                           {"slot", slot},
                           {"reuse", reuse},
                           {"tensors", metas},
                           {"input_region", s->inputs.size},
                           {"output_region", s->output.size}},
                          deadline, {s->inputs.fd, s->output.fd});
  if (e.empty()) e = s->receive(&h, deadline);
  if (!e.empty()) {
    static_cast<ModuleOutcome&>(a) = s->failed(e, e == "bad_answer" ? h.get<std::string>() : "", timeout_s);
    return a;
  }
  static_cast<ModuleOutcome&>(a) = s->outcome(h);
  if (!a.ok) return a;
  a.ms = number_field(h, "ms");
  a.threads = texts_field(h, "threads");
  a.slots = int_field(h, "slots");
  auto tensors = h.find("tensors");
  if (tensors == h.end() || !tensors->is_array() || tensors->size() != 1 || !(*tensors)[0].is_object()) {
    static_cast<ModuleOutcome&>(a) = s->failed("bad_answer", "the runner's answer carries no output tensor", 0);
    return a;
  }
  const json& t = (*tensors)[0];
  a.output.dtype = text_field(t, "dtype");
  a.output.bytes = int_field(t, "bytes");
  if (t.contains("shape") && t["shape"].is_array())
    for (const auto& d : t["shape"]) a.output.shape.push_back(d.is_number_integer() ? d.get<int64_t>() : -1);
  // The bytes are in the output's region when they fit; a larger output is refused unread.
  bool taken = false;
  if (a.output.bytes < 0 || a.output.bytes > max_output_bytes)
    why = "the output is " + std::to_string(a.output.bytes) + " bytes, more than the " +
          std::to_string(max_output_bytes) + " the reference's output takes";
  else if (!(h.contains("in_region") && h["in_region"].is_boolean() && h["in_region"].get<bool>()))
    why = "the runner did not put the output's bytes where they are read";
  else
    taken = output(a.output, s->output.data, &why);
  if (!taken) static_cast<ModuleOutcome&>(a) = s->failed("wrong_output", why, 0);
  return a;
}

Result<ModuleTiming> ModuleSession::time(int slot, int samples, int warmups, int64_t flush_bytes, int pings) {
  Impl* s = impl_.get();
  ModuleTiming a;
  if (!load_.ok || !s->dead.kind.empty()) {
    static_cast<ModuleOutcome&>(a) = load_.ok ? s->dead : static_cast<const ModuleOutcome&>(load_);
    return a;
  }
  const double timeout_s = s->options.call_timeout_s;
  Clock::time_point t0 = Clock::now();
  Clock::time_point deadline = t0 + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  json h;
  std::string e = s->send({{"cmd", "time"},
                           {"slot", slot},
                           {"samples", samples},
                           {"warmups", warmups},
                           {"flush_bytes", flush_bytes},
                           {"pings", pings}},
                          deadline);
  // Each ping and sample: the runner's 'r' when it is ready, this side's 'g', the runner's 'd'
  // when the work is done; the time from 'g' to 'd' is this side's.
  // Any other byte starts the runner's answer: its failure, past which it sends nothing more.
  int first = -1;
  for (int i = 0; e.empty() && first < 0 && i < pings + samples; ++i) {
    char c = 0;
    e = s->read_exact(&c, 1, deadline);
    if (!e.empty() || c != 'r') {
      first = static_cast<unsigned char>(c);
      break;
    }
    Clock::time_point go = Clock::now();
    e = s->write_all("g", 1, deadline);
    if (e.empty()) e = s->read_byte_spinning(&c, deadline, kSpinWhileTimedS);
    if (e.empty() && c != 'd') first = static_cast<unsigned char>(c);
    if (e.empty() && first < 0) (i < pings ? a.ping_us : a.worker_us).push_back(ms_since(go) * 1000);
  }
  if (e.empty()) e = s->receive(&h, deadline, first);
  a.wall_us = ms_since(t0) * 1000;
  if (!e.empty()) {
    static_cast<ModuleOutcome&>(a) = s->failed(e, e == "bad_answer" ? h.get<std::string>() : "", timeout_s);
    return a;
  }
  static_cast<ModuleOutcome&>(a) = s->outcome(h);
  if (!a.ok) return a;
  a.device_us = numbers_field(h, "device_us");
  a.stream_us = numbers_field(h, "stream_us");
  a.host_us = numbers_field(h, "host_us");
  a.overhead_us = numbers_field(h, "overhead_us");
  a.threads = texts_field(h, "threads");
  size_t n = static_cast<size_t>(samples);
  if (a.device_us.size() != n || a.stream_us.size() != n || a.host_us.size() != n || a.overhead_us.size() != n ||
      a.worker_us.size() != n)
    static_cast<ModuleOutcome&>(a) =
        s->failed("bad_answer", "the runner's timing answer does not hold " + std::to_string(samples) + " samples", 0);
  return a;
}

Result<ModuleProfile> ModuleSession::profile(int slot) {
  Impl* s = impl_.get();
  ModuleProfile a;
  if (!load_.ok || !s->dead.kind.empty()) {
    static_cast<ModuleOutcome&>(a) = load_.ok ? s->dead : static_cast<const ModuleOutcome&>(load_);
    return a;
  }
  const double timeout_s = s->options.call_timeout_s;
  Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  json h;
  std::string e = s->send({{"cmd", "profile"}, {"slot", slot}}, deadline);
  if (e.empty()) e = s->receive(&h, deadline);
  if (!e.empty()) {
    static_cast<ModuleOutcome&>(a) = s->failed(e, e == "bad_answer" ? h.get<std::string>() : "", timeout_s);
    return a;
  }
  static_cast<ModuleOutcome&>(a) = s->outcome(h);
  if (!a.ok) return a;
  auto kernels = h.find("kernels");
  if (kernels != h.end() && kernels->is_array())
    for (const auto& k : *kernels)
      if (k.is_array() && k.size() == 3 && k[0].is_string() && k[1].is_number() && k[2].is_number_integer())
        a.kernels.push_back({k[0].get<std::string>(), k[1].get<double>(), k[2].get<int64_t>()});
  return a;
}

std::string ModuleSession::finish() {
  impl_->stop();
  return impl_->tail;
}

}  // namespace vinci
