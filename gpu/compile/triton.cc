#include "gpu/compile/triton.h"

#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/text.h"

extern char** environ;

namespace vinci {

namespace {

using nlohmann::json;

constexpr const char* kArtifactMagic = "vinci.triton/1\n";

std::string from_env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// The base64 alphabet of RFC 4648; the script writes the cubin so.
Result<std::string> base64_decode(std::string_view in) {
  static int8_t table[256];
  static bool ready = [] {
    std::memset(table, -1, sizeof table);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) table[static_cast<unsigned char>(a[i])] = static_cast<int8_t>(i);
    return true;
  }();
  (void)ready;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    int8_t v = table[static_cast<unsigned char>(c)];
    if (v < 0) return invalid_argument("triton compile: the cubin is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

// A child's environment: the parent's, less proxies (no network is reachable anyway where
// `unshare -rn` works), with Triton's cache and home in the compile's own temporary folder.
std::vector<std::string> child_env(const std::string& temp) {
  static const std::set<std::string> kDropped = {"http_proxy",
                                                 "https_proxy",
                                                 "HTTP_PROXY",
                                                 "HTTPS_PROXY",
                                                 "all_proxy",
                                                 "ALL_PROXY",
                                                 "no_proxy",
                                                 "NO_PROXY",
                                                 "ftp_proxy",
                                                 "FTP_PROXY",
                                                 "TRITON_CACHE_DIR",
                                                 "TRITON_HOME",
                                                 "TRITON_DEFAULT_FP_FUSION",
                                                 "TMPDIR"};
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (!kDropped.count(key)) env.push_back(kv);
  }
  env.push_back("TRITON_CACHE_DIR=" + temp + "/cache");
  env.push_back("TRITON_HOME=" + temp);
  env.push_back("TMPDIR=" + temp);
  env.push_back("TRITON_DEFAULT_FP_FUSION=1");
  return env;
}

int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }

// Removes a compile's temporary folder and everything in it. With nftw, not
// std::filesystem::remove_all: a libtorch build exports its own copy of that function, and the
// dynamic linker binds the call to it (on the GPU machine's PyTorch it jumps to address 0).
void remove_tree(const std::string& dir) {
  if (dir.empty() || dir.find("vinci_triton_") == std::string::npos) return;
  ::nftw(dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

// Starts argv[0] (searched on PATH) with env, in its own process group, stdin/stdout/stderr from
// the given descriptors (-1: /dev/null) and cwd as its folder. posix_spawn, not fork: the worker
// that calls this holds a CUDA context and large mappings that a fork would copy.
Result<pid_t> spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int in, int out, int err,
                    const std::string& cwd) {
  std::vector<char*> cargv, cenv;
  std::vector<std::string> a = argv, e = env;
  for (auto& x : a) cargv.push_back(x.data());
  cargv.push_back(nullptr);
  for (auto& x : e) cenv.push_back(x.data());
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const int fds[3] = {in, out, err};
  for (int i = 0; i < 3; ++i) {
    if (fds[i] >= 0)
      posix_spawn_file_actions_adddup2(&fa, fds[i], i);
    else
      posix_spawn_file_actions_addopen(&fa, i, "/dev/null", i == 0 ? O_RDONLY : O_WRONLY, 0);
  }
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&at, 0);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, cargv[0], &fa, &at, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) return failed_precondition("cannot start '" + argv[0] + "': " + std::strerror(rc));
  return pid;
}

}  // namespace

bool operator==(const TritonKernelMeta& a, const TritonKernelMeta& b) {
  return encode_triton_meta(a) == encode_triton_meta(b);
}

std::string encode_triton_meta(const TritonKernelMeta& m) {
  json j = {{"name", m.name},
            {"shared", m.shared},
            {"num_warps", m.num_warps},
            {"num_stages", m.num_stages},
            {"num_ctas", m.num_ctas},
            {"global_scratch_size", m.global_scratch_size},
            {"global_scratch_align", m.global_scratch_align},
            {"profile_scratch_size", m.profile_scratch_size},
            {"profile_scratch_align", m.profile_scratch_align},
            {"launch_cooperative_grid", m.launch_cooperative_grid},
            {"launch_pdl", m.launch_pdl},
            {"tmem_size", m.tmem_size},
            {"params", m.params},
            {"triton_version", m.triton_version},
            {"options", m.options}};
  return j.dump();
}

Result<TritonKernelMeta> decode_triton_meta(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("triton metadata: expected a JSON object, found " +
                            std::string(j.is_discarded() ? "text that is not JSON" : j.type_name()));
  TritonKernelMeta m;
  auto field = [&](const char* key, auto* out, bool (json::*is)() const noexcept, const char* what) -> Status {
    auto it = j.find(key);
    if (it == j.end())
      return invalid_argument(std::string("triton metadata: ") + key + ": expected " + what + ", found nothing");
    if (!((*it).*is)())
      return invalid_argument(std::string("triton metadata: ") + key + ": expected " + what + ", found " +
                              it->type_name());
    *out = it->get<std::remove_pointer_t<decltype(out)>>();
    return Status();
  };
  VINCI_RETURN_IF_ERROR(field("name", &m.name, &json::is_string, "a string"));
  VINCI_RETURN_IF_ERROR(field("shared", &m.shared, &json::is_number_integer, "an integer"));
  VINCI_RETURN_IF_ERROR(field("num_warps", &m.num_warps, &json::is_number_integer, "an integer"));
  VINCI_RETURN_IF_ERROR(field("num_stages", &m.num_stages, &json::is_number_integer, "an integer"));
  VINCI_RETURN_IF_ERROR(field("num_ctas", &m.num_ctas, &json::is_number_integer, "an integer"));
  VINCI_RETURN_IF_ERROR(field("global_scratch_size", &m.global_scratch_size, &json::is_number_integer, "an integer"));
  VINCI_RETURN_IF_ERROR(field("global_scratch_align", &m.global_scratch_align, &json::is_number_integer, "an integer"));
  VINCI_RETURN_IF_ERROR(field("profile_scratch_size", &m.profile_scratch_size, &json::is_number_integer, "an integer"));
  VINCI_RETURN_IF_ERROR(
      field("profile_scratch_align", &m.profile_scratch_align, &json::is_number_integer, "an integer"));
  VINCI_RETURN_IF_ERROR(field("launch_cooperative_grid", &m.launch_cooperative_grid, &json::is_boolean, "a boolean"));
  VINCI_RETURN_IF_ERROR(field("launch_pdl", &m.launch_pdl, &json::is_boolean, "a boolean"));
  VINCI_RETURN_IF_ERROR(field("tmem_size", &m.tmem_size, &json::is_number_integer, "an integer"));
  VINCI_RETURN_IF_ERROR(field("triton_version", &m.triton_version, &json::is_string, "a string"));
  VINCI_RETURN_IF_ERROR(field("options", &m.options, &json::is_string, "a string"));
  auto p = j.find("params");
  if (p == j.end() || !p->is_array())
    return invalid_argument("triton metadata: params: expected an array of type names");
  for (const auto& t : *p) {
    if (!t.is_string()) return invalid_argument("triton metadata: params: expected an array of type names");
    m.params.push_back(t.get<std::string>());
  }
  if (m.name.empty()) return invalid_argument("triton metadata: name: expected the entry point, found \"\"");
  if (m.num_warps < 1 || m.num_warps > 32)
    return invalid_argument("triton metadata: num_warps: expected 1 to 32, found " + std::to_string(m.num_warps));
  if (m.shared < 0 || m.global_scratch_size < 0 || m.profile_scratch_size < 0)
    return invalid_argument("triton metadata: shared memory and scratch sizes must not be negative");
  return m;
}

std::string encode_triton_artifact(const TritonKernelMeta& meta, const std::string& cubin) {
  std::string m = encode_triton_meta(meta);
  return std::string(kArtifactMagic) + std::to_string(m.size()) + "\n" + m + cubin;
}

Result<std::pair<TritonKernelMeta, std::string>> decode_triton_artifact(std::string_view bytes) {
  std::string_view magic = kArtifactMagic;
  if (bytes.substr(0, magic.size()) != magic)
    return invalid_argument("triton artifact: expected it to start with 'vinci.triton/1', found another file");
  bytes.remove_prefix(magic.size());
  size_t nl = bytes.find('\n');
  if (nl == std::string_view::npos || nl == 0 || nl > 12)
    return invalid_argument("triton artifact: expected the metadata's length and a newline");
  uint64_t n = 0;
  for (char c : bytes.substr(0, nl)) {
    if (c < '0' || c > '9') return invalid_argument("triton artifact: the metadata's length is not a number");
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  bytes.remove_prefix(nl + 1);
  if (n > bytes.size())
    return invalid_argument("triton artifact: metadata of " + std::to_string(n) + " bytes, but " +
                            std::to_string(bytes.size()) + " bytes follow");
  VINCI_ASSIGN_OR_RETURN(TritonKernelMeta meta, decode_triton_meta(bytes.substr(0, n)));
  std::string cubin(bytes.substr(n));
  if (cubin.size() < 4 || cubin.compare(0, 4,
                                        "\x7f"
                                        "ELF") != 0)
    return invalid_argument("triton artifact: the cubin after the metadata is not an ELF image");
  return std::make_pair(std::move(meta), std::move(cubin));
}

std::string triton_meta_unsupported(const TritonKernelMeta& m) {
  if (m.num_ctas != 1) return "it runs clusters of " + std::to_string(m.num_ctas) + " CTAs (num_ctas must be 1)";
  if (m.launch_cooperative_grid) return "it needs a cooperative grid launch";
  if (m.launch_pdl) return "it needs programmatic dependent launch";
  if (m.profile_scratch_size > 0) return "it needs a profile scratch buffer (instrumentation is not supported)";
  if (m.tmem_size > 0) return "it uses tensor memory (sm_100 and later)";
  return "";
}

TritonCompiler::TritonCompiler(TritonOptions options) : options_(std::move(options)) {
  if (options_.python.empty()) options_.python = from_env("VINCI_TRITON_PYTHON", "python3");
  if (options_.script.empty()) options_.script = from_env("VINCI_TRITON_COMPILE", VINCI_TRITON_SCRIPT);
}

int64_t TritonCompiler::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t TritonCompiler::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

bool TritonCompiler::network_isolated() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (unshare_ >= 0) return unshare_ == 1;
  }
  bool works = false;
  if (options_.isolate_network) {
    Result<pid_t> pid = spawn({"unshare", "-rn", "true"}, child_env("/tmp"), -1, -1, -1, "");
    int status = 0;
    works = pid.ok() && ::waitpid(*pid, &status, 0) == *pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  std::lock_guard<std::mutex> lock(mu_);
  unshare_ = works ? 1 : 0;
  return works;
}

// Runs the script (under `unshare -rn` where that works) with input on stdin; returns its stdout.
// The process gets its own process group, killed whole at the time limit.
Result<std::string> TritonCompiler::run_script(const std::vector<std::string>& args, const std::string& input,
                                               double timeout_s) {
  bool isolate = network_isolated();
  char temp_template[] = "/tmp/vinci_triton_XXXXXX";
  if (!::mkdtemp(temp_template)) return io_error(std::string("triton compile: mkdtemp: ") + std::strerror(errno));
  std::string temp = temp_template;
  std::vector<std::string> argv;
  if (isolate) argv = {"unshare", "-rn"};
  argv.push_back(options_.python);
  argv.push_back(options_.script);
  for (const auto& a : args) argv.push_back(a);
  std::vector<std::string> env = child_env(temp);

  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    remove_tree(temp);
    return io_error(std::string("triton compile: pipe: ") + std::strerror(errno));
  }
  Result<pid_t> spawned = spawn(argv, env, in[0], out[1], err[1], temp);
  if (!spawned.ok()) {
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) ::close(fd);
    remove_tree(temp);
    return failed_precondition("cannot run the Triton compile step '" + options_.python + " " + options_.script +
                               "': " + spawned.status().message() +
                               " (set VINCI_TRITON_PYTHON to a python with triton installed)");
  }
  pid_t pid = *spawned;
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  // Input and output through poll, so neither side blocks the other on a full pipe.
  size_t written = 0;
  std::string stdout_text, stderr_text;
  int in_fd = in[1];
  ::fcntl(in_fd, F_SETFL, O_NONBLOCK);
  if (input.empty()) {
    ::close(in_fd);
    in_fd = -1;
  }
  auto t0 = std::chrono::steady_clock::now();
  bool timed_out = false;
  int open_outputs = 2;
  while (open_outputs > 0) {
    double left =
        timeout_s * 1000 - std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[3] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {in_fd, POLLOUT, 0}};
    int n = ::poll(fds, in_fd >= 0 ? 3 : 2, static_cast<int>(std::min(left, 1000.0)) + 1);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        std::string& dst = i == 0 ? stdout_text : stderr_text;
        if (i == 0 || dst.size() < (1 << 20)) dst.append(buf, static_cast<size_t>(r));
      } else if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
        ::close(fds[i].fd);
        (i == 0 ? out[0] : err[0]) = -1;
        --open_outputs;
      }
    }
    if (in_fd >= 0 && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = ::write(in_fd, input.data() + written, input.size() - written);
      if (w > 0) written += static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN && errno != EINTR) written = input.size();
      if (written >= input.size()) {
        ::close(in_fd);
        in_fd = -1;
      }
    }
  }
  if (in_fd >= 0) ::close(in_fd);
  if (out[0] >= 0) ::close(out[0]);
  if (err[0] >= 0) ::close(err[0]);
  if (timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!timed_out) ::kill(-pid, SIGKILL);  // anything the module left running
  remove_tree(temp);
  if (timed_out)
    return invalid_argument("the Triton compile exceeded its time limit of " + format_number("%.6g", timeout_s) +
                            " s and was stopped");
  if (WIFSIGNALED(status))
    return invalid_argument("the Triton compile process was killed by signal " + std::to_string(WTERMSIG(status)) +
                            (stderr_text.empty() ? "" : ": " + stderr_text.substr(0, 2000)));
  if (WEXITSTATUS(status) == 127 && stdout_text.empty())
    return failed_precondition("cannot run the Triton compile step '" + options_.python + " " + options_.script +
                               "' (set VINCI_TRITON_PYTHON to a python with triton installed)");
  if (WEXITSTATUS(status) != 0 && stdout_text.empty())
    return failed_precondition("the Triton compile step failed (exit " + std::to_string(WEXITSTATUS(status)) +
                               "): " + stderr_text.substr(0, 2000));
  return stdout_text;
}

Result<std::string> TritonCompiler::version() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!version_.empty()) return version_;
  }
  Result<std::string> out = run_script({"--version"}, "", 60);
  if (!out.ok()) {
    std::string msg = out.status().message();
    return failed_precondition("Triton is not available: " + msg);
  }
  std::string v = *out;
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ' || v.back() == '\r')) v.pop_back();
  if (v.empty()) return failed_precondition("Triton is not available: the compile step printed no version");
  std::lock_guard<std::mutex> lock(mu_);
  version_ = v;
  return v;
}

Result<std::shared_ptr<const CompiledTriton>> TritonCompiler::compile(const TritonCompileRequest& req) {
  VINCI_ASSIGN_OR_RETURN(std::string triton_version, version());
  Hasher h("triton_cache");
  h.update_digest(kernel_source_address(req.source));
  h.update_str(req.kernel);
  h.update_u64(req.signature.size());
  for (const auto& s : req.signature) h.update_str(s);
  h.update_str(req.constexprs.dump());
  h.update_i64(req.num_warps);
  h.update_i64(req.num_stages);
  h.update_i64(req.arch);
  h.update_str(triton_version);
  Digest key = h.finish();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = memory_.find(key);
    if (it != memory_.end()) {
      ++hits_;
      return it->second;
    }
  }
  std::string disk_path = options_.cache_dir.empty() ? "" : options_.cache_dir + "/" + key.hex() + ".triton";
  if (!disk_path.empty()) {
    Result<std::string> bytes = read_file(disk_path);
    if (bytes.ok()) {
      Result<std::pair<TritonKernelMeta, std::string>> a = decode_triton_artifact(*bytes);
      if (a.ok()) {
        auto k = std::make_shared<CompiledTriton>();
        k->key = key;
        k->meta = std::move(a->first);
        k->cubin = std::move(a->second);
        std::lock_guard<std::mutex> lock(mu_);
        ++hits_;
        memory_[key] = k;
        return std::shared_ptr<const CompiledTriton>(k);
      }
    }
  }
  json request = {{"source", req.source},
                  {"kernel", req.kernel},
                  {"signature", req.signature},
                  {"constexprs", req.constexprs},
                  {"num_warps", req.num_warps},
                  {"num_stages", req.num_stages},
                  {"arch", req.arch}};
  auto t0 = std::chrono::steady_clock::now();
  VINCI_ASSIGN_OR_RETURN(std::string out, run_script({}, request.dump(), options_.timeout_s));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  json answer = json::parse(out, nullptr, false);
  if (answer.is_discarded() || !answer.is_object() || !answer.contains("ok"))
    return internal_error("triton compile: the compile step answered something that is not its JSON: " +
                          out.substr(0, 300));
  if (!answer["ok"].get<bool>()) {
    std::string kind = answer.value("kind", "compile_error");
    std::string error = answer.value("error", "");
    if (kind == "no_triton") return failed_precondition(error);
    if (kind == "bad_request") return internal_error("triton compile: " + error);
    return invalid_argument(req.kernel + " does not compile with Triton " + triton_version + ": " + error);
  }
  if (!answer.contains("meta") || !answer.contains("cubin") || !answer["cubin"].is_string())
    return internal_error("triton compile: the answer lacks meta or cubin");
  VINCI_ASSIGN_OR_RETURN(TritonKernelMeta meta, decode_triton_meta(answer["meta"].dump()));
  VINCI_ASSIGN_OR_RETURN(std::string cubin, base64_decode(answer["cubin"].get<std::string>()));
  auto k = std::make_shared<CompiledTriton>();
  k->key = key;
  k->meta = std::move(meta);
  k->cubin = std::move(cubin);
  k->compile_ms = ms;
  if (!disk_path.empty())
    VINCI_RETURN_IF_ERROR(write_file_atomic(disk_path, encode_triton_artifact(k->meta, k->cubin)));
  std::lock_guard<std::mutex> lock(mu_);
  ++misses_;
  auto [it, fresh] = memory_.emplace(key, k);
  return it->second;
}

bool has_triton_kernels(const Plan& plan) {
  for (const auto& k : plan.kernels)
    if (k.language == kLanguageTriton) return true;
  return false;
}

Result<TritonCompileRequest> triton_request(const Plan& plan, const PlanStep& step, const ExprEnv& env, int arch) {
  const PlanKernel* k = plan.find_kernel(step.kernel);
  if (!k || k->language != kLanguageTriton)
    return invalid_argument("step launching '" + step.kernel + "': not a Triton kernel of the plan");
  TritonCompileRequest r;
  r.source = k->source;
  r.kernel = k->name;
  r.num_warps = step.triton.num_warps;
  r.num_stages = step.triton.num_stages;
  r.arch = arch;
  for (const PlanArg& a : step.args) {
    if (a.buffer.empty()) {
      r.signature.push_back("i64");
      continue;
    }
    const PlanBuffer* b = plan.find_buffer(a.buffer);
    if (!b) return invalid_argument("kernel " + k->name + ": no buffer '" + a.buffer + "'");
    r.signature.push_back(b->dtype == "i64" ? "*i64" : "*fp32");
  }
  for (const auto& [name, text] : step.triton.constexprs) {
    if (text == "True" || text == "False") {
      r.constexprs[name] = text == "True";
    } else if (is_float_literal(text)) {
      r.constexprs[name] = std::strtod(text.c_str(), nullptr);
    } else {
      Result<int64_t> v = eval_expr(text, env);
      if (!v.ok())
        return invalid_argument("kernel " + k->name + ": constexpr " + name + " = " + text + ": " +
                                v.status().message());
      r.constexprs[name] = *v;
    }
  }
  return r;
}

}  // namespace vinci
