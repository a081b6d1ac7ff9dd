#include "gpu/compile/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

extern char** environ;

namespace vinci {

namespace {

using nlohmann::json;

// Removes a run's temporary folder and everything in it, without following symbolic links (the
// folder was the module's to fill); only folders vinci made (/tmp/vinci_*).
void remove_tree(const std::string& dir) {
  if (dir.empty() || dir.rfind("/tmp/vinci_", 0) != 0) return;
  remove_folder(dir);
}

// ---------------------------------------------------------------------------------------------
// The sandboxed process's environment.

// Variables a sandboxed process may see: what Python, Triton, PyTorch and the CUDA toolchain need
// to find themselves. Everything else the harness has (API keys, tokens, proxies, the run's own settings)
// stays out.
bool allowed_variable(const std::string& name) {
  static const std::set<std::string> kAllowed = {"PATH",
                                                 "LANG",
                                                 "LANGUAGE",
                                                 "TZ",
                                                 "LD_LIBRARY_PATH",
                                                 "PYTHONPATH",
                                                 "PYTHONHOME",
                                                 "VIRTUAL_ENV",
                                                 "CUDA_HOME",
                                                 "CUDA_PATH",
                                                 "TRITON_PTXAS_PATH",
                                                 "TRITON_PTXAS_BLACKWELL_PATH",
                                                 "TRITON_CUOBJDUMP_PATH",
                                                 "TRITON_NVDISASM_PATH",
                                                 "TRITON_CUDACRT_PATH",
                                                 "TRITON_CUDART_PATH",
                                                 "TRITON_LIBDEVICE_PATH"};
  return kAllowed.count(name) > 0 || name.rfind("LC_", 0) == 0;
}

// Whether a variable's name says it holds a secret. Such a variable never reaches a sandboxed process, even
// where the allowlist would let it (LC_AUTH_TOKEN).
bool looks_secret(const std::string& name) {
  std::string up;
  for (char c : name) up.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  for (const char* word :
       {"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION", "PRIVATE"})
    if (up.find(word) != std::string::npos) return true;
  return false;
}

// A sandboxed process's environment: the allowlisted variables of this process; home, temporary
// folder and Triton's and PyTorch's caches in the process's own folder; and extra
// (PYTHONUSERBASE where the python's user site holds packages).
std::vector<std::string> child_env(const std::string& temp, const std::string& extensions,
                                   const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string key = kv.substr(0, eq);
    if (allowed_variable(key) && !looks_secret(key)) env.push_back(kv);
  }
  env.push_back("HOME=" + temp);
  env.push_back("TMPDIR=" + temp);
  env.push_back("TRITON_HOME=" + temp);
  env.push_back("TRITON_CACHE_DIR=" + temp + "/cache");
  env.push_back("TRITON_DEFAULT_FP_FUSION=1");
  env.push_back("TORCH_EXTENSIONS_DIR=" + extensions);
  env.push_back("PYTHONDONTWRITEBYTECODE=1");  // the interpreter's folders are read-only there
  for (const auto& kv : extra) env.push_back(kv);
  return env;
}

// ---------------------------------------------------------------------------------------------
// Paths.

std::string real_path(const std::string& path) {
  char* r = ::realpath(path.c_str(), nullptr);
  if (!r) return "";
  std::string out = r;
  std::free(r);
  return out;
}

std::string dir_name(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Whether path is dir or inside it (both absolute and normalised).
bool is_within(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path.compare(0, dir.size(), dir) == 0 && (path.size() == dir.size() || path[dir.size()] == '/');
}

// name with its folder if it has one, else the first executable of that name on PATH; "" if none.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  std::string path = env_or("PATH", "/usr/local/bin:/usr/bin:/bin");
  for (size_t at = 0; at <= path.size();) {
    size_t end = path.find(':', at);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(at, end - at);
    at = end + 1;
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Processes.

// Starts argv[0] (searched on PATH) with env, in its own process group, with default signal
// dispositions and an empty signal mask, stdin/stdout/stderr from the given descriptors and, when
// info >= 0, that descriptor as fd 3; every other descriptor is closed, so nothing the calling
// process has open (run logs, sockets) reaches the child. posix_spawn, not fork: the worker
// that calls this holds a CUDA context and large mappings that a fork would copy.
Result<pid_t> spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int in, int out, int err,
                    int info, const std::string& cwd) {
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
  if (info >= 0) posix_spawn_file_actions_adddup2(&fa, info, 3);
  posix_spawn_file_actions_addclosefrom_np(&fa, info >= 0 ? 4 : 3);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&at, 0);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, cargv[0], &fa, &at, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) return failed_precondition("cannot start '" + argv[0] + "': " + std::strerror(rc));
  return pid;
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_kill(int pidfd) { return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0)); }

// A pidfd of the sandbox's PID 1, whose host pid bwrap's info gives; -1 unless it is still the
// child of bwrap (pid), so a pid reused after PID 1 ended is never the one killed.
int sandbox_init(pid_t init, pid_t bwrap) {
  int fd = pidfd_open(init);
  if (fd < 0) return -1;
  std::ifstream stat("/proc/" + std::to_string(init) + "/stat");
  std::string line;
  std::getline(stat, line);
  // pid (comm) state ppid ...; comm may hold spaces and parentheses, so read after the last ')'.
  size_t close = line.rfind(')');
  long ppid = -1;
  if (close != std::string::npos) std::sscanf(line.c_str() + close + 1, " %*c %ld", &ppid);
  if (ppid != bwrap) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool wait_readable(int fd, int timeout_ms) {
  pollfd p = {fd, POLLIN, 0};
  int n;
  while ((n = ::poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
  }
  return n > 0;
}

constexpr size_t kMaxStdout = kMaxSandboxStdout;
constexpr size_t kMaxStderr = 1 << 20;

// Runs argv with env and input on stdin (a memfd: no pipe to block on, no SIGPIPE), in cwd, and
// returns what it wrote and how it ended. It stops when the process exits: output still buffered
// then is read, but nothing it left behind is waited for (a daemon holding the pipes open), and
// its process group is killed. With bwrap_info, fd 3 is bwrap's --info-fd, and at the time limit
// the sandbox's PID 1 is killed, which ends every process of the sandbox before bwrap exits.
Result<ProcessRun> run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                               const std::string& input, const std::string& cwd, double timeout_s, bool bwrap_info,
                               int stop_fd = -1) {
  int in = ::memfd_create("vinci_sandbox_input", MFD_CLOEXEC);
  if (in < 0) return io_error(std::string("sandbox: memfd_create: ") + std::strerror(errno));
  for (size_t done = 0; done < input.size();) {
    ssize_t w = ::write(in, input.data() + done, input.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      ::close(in);
      return io_error(std::string("sandbox: writing the input: ") + std::strerror(errno));
    }
    done += static_cast<size_t>(w);
  }
  ::lseek(in, 0, SEEK_SET);
  int out[2] = {-1, -1}, err[2] = {-1, -1}, info[2] = {-1, -1};
  bool piped =
      ::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0 && (!bwrap_info || ::pipe2(info, O_CLOEXEC) == 0);
  auto close_all = [&] {
    for (int fd : {in, out[0], out[1], err[0], err[1], info[0], info[1]})
      if (fd >= 0) ::close(fd);
  };
  if (!piped) {
    std::string why = std::strerror(errno);
    close_all();
    return io_error("sandbox: pipe: " + why);
  }
  Result<pid_t> spawned = spawn(argv, env, in, out[1], err[1], info[1], cwd);
  ::close(in);
  ::close(out[1]);
  ::close(err[1]);
  if (info[1] >= 0) ::close(info[1]);
  if (!spawned.ok()) {
    for (int fd : {out[0], err[0], info[0]})
      if (fd >= 0) ::close(fd);
    return spawned.status();
  }
  pid_t pid = *spawned;
  int child_fd = pidfd_open(pid);  // -1 on kernels before 5.3: then the outputs' end says it ended
  int pid1_fd = -1;                // the sandbox's PID 1, from bwrap's info
  std::string info_text;
  int fds_open[3] = {out[0], err[0], info[0]};
  for (int fd : fds_open)
    if (fd >= 0) ::fcntl(fd, F_SETFL, O_NONBLOCK);
  ProcessRun run;
  // Reads what fd i has now; false once it is at its end (or broken).
  auto read_some = [&](int i) {
    char buf[65536];
    ssize_t r = ::read(fds_open[i], buf, sizeof buf);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    if (r <= 0) {
      ::close(fds_open[i]);
      fds_open[i] = -1;
      return false;
    }
    if (i == 0) {
      if (run.out.size() + static_cast<size_t>(r) <= kMaxStdout)
        run.out.append(buf, static_cast<size_t>(r));
      else
        run.out_truncated = true;
    } else if (i == 1) {
      if (run.err.size() < kMaxStderr) run.err.append(buf, static_cast<size_t>(r));
    } else {
      info_text.append(buf, static_cast<size_t>(r));
      json j = json::parse(info_text, nullptr, false);
      if (pid1_fd < 0 && j.is_object() && j.contains("child-pid") && j["child-pid"].is_number_integer())
        pid1_fd = sandbox_init(j["child-pid"].get<pid_t>(), pid);
    }
    return true;
  };
  auto t0 = std::chrono::steady_clock::now();
  bool exited = false;
  while (!exited && (fds_open[0] >= 0 || fds_open[1] >= 0 || child_fd >= 0)) {
    double left =
        timeout_s * 1000 - std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (left <= 0) {
      run.timed_out = true;
      break;
    }
    pollfd p[5] = {{fds_open[0], POLLIN, 0},
                   {fds_open[1], POLLIN, 0},
                   {fds_open[2], POLLIN, 0},
                   {child_fd, POLLIN, 0},
                   {stop_fd, POLLIN, 0}};
    int n = ::poll(p, 5, static_cast<int>(std::min(left, 1000.0)) + 1);
    if (n < 0 && errno != EINTR) break;
    if (stop_fd >= 0 && (p[4].revents & POLLIN)) break;  // the caller is done with it: stopped below
    for (int i = 0; i < 3; ++i)
      if (p[i].fd >= 0 && (p[i].revents & (POLLIN | POLLHUP | POLLERR))) read_some(i);
    if (child_fd >= 0 && (p[3].revents & POLLIN)) exited = true;
  }
  // Output written before the process ended is in the pipes; take it, without waiting for more
  // (and without following a writer it left behind for longer than the caps allow).
  for (int i = 0; i < 3; ++i)
    for (size_t reads = 0; reads < (kMaxStdout + kMaxStderr) / 65536 + 2 && fds_open[i] >= 0 &&
                           wait_readable(fds_open[i], 0) && read_some(i);
         ++reads) {
    }
  // bwrap exits as soon as its command does, and its PID 1 then dies of --die-with-parent: kill
  // it here and wait for it, since PID 1 exits only after every other process of its namespace
  // is gone (the module's daemons, a fork bomb). 30 s is for a process the kernel cannot kill.
  if (pid1_fd >= 0) {
    pidfd_kill(pid1_fd);
    wait_readable(pid1_fd, 30000);
  }
  // Whatever is left of its process group: bwrap at the time limit, or without bwrap what the
  // module started. The child is at most a zombie here, so its process group id is still its own.
  ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  for (int fd : {fds_open[0], fds_open[1], fds_open[2], child_fd, pid1_fd})
    if (fd >= 0) ::close(fd);
  if (WIFSIGNALED(status))
    run.signal = WTERMSIG(status);
  else
    run.exit_code = WEXITSTATUS(status);
  return run;
}

// ---------------------------------------------------------------------------------------------
// Limits.

std::string short_bytes(int64_t b) {
  std::string t = bytes_text(b);
  t.erase(std::remove(t.begin(), t.end(), ' '), t.end());
  return t;
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGTERM: return "SIGTERM";
    default: return "signal " + std::to_string(sig);
  }
}

}  // namespace

std::string bytes_text(int64_t b) {
  if (b % (1LL << 30) == 0) return std::to_string(b >> 30) + " GiB";
  if (b % (1LL << 20) == 0) return std::to_string(b >> 20) + " MiB";
  return std::to_string(b) + " bytes";
}

// ---------------------------------------------------------------------------------------------
// The sandbox.

// How a sandboxed process is started here, as probed once. See docs/live_evaluator.md, "Compile
// sandbox", for what each part keeps in.
struct PythonSandbox::Setup {
  std::string python;                            // the interpreter the probe found (sys.executable), run directly
  std::string script;                            // the script, as the process sees it
  std::vector<std::string> binds;                // read-only: what the interpreter, the package and the script need
  std::vector<std::string> env;                  // beyond the allowlist (PYTHONUSERBASE)
  std::string bwrap;                             // "": no bwrap
  bool bwrap_userns = false;                     // bwrap makes a user namespace (vinci is not root)
  bool disable_userns = false;                   // and forbids the process to make more
  bool drop_uid = false;                         // the process runs as uid and gid 65534 (vinci is root)
  bool own_userns = false;                       // in a user namespace of its own, where RLIMIT_NPROC counts it alone
  bool unshare_net = false;                      // without bwrap: `unshare -rn`
  std::string setpriv, unshare, prlimit, choom;  // util-linux programs, "" where missing
  SandboxLimits limits;
  std::string missing;  // what is not in place here, "" when nothing is
  std::string description;
  std::string temp_prefix;
  std::string what;
  std::string extension_dir;  // "" unless bwrap runs
  bool gpu = false;           // the GPUs' device nodes are bound (SandboxOptions::gpu)
};

namespace {

constexpr uid_t kNobody = 65534;

// The NVIDIA driver's device nodes: /dev/nvidia0.., nvidiactl, nvidia-uvm(-tools), nvidia-modeset
// and those under /dev/nvidia-caps.
std::vector<std::string> gpu_device_nodes() {
  std::vector<std::string> nodes;
  for (const std::string dir : {"/dev", "/dev/nvidia-caps"}) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) continue;
    while (dirent* e = ::readdir(d)) {
      std::string path = dir + "/" + e->d_name;
      struct stat st;
      if ((dir != "/dev" || std::strncmp(e->d_name, "nvidia", 6) == 0) && ::stat(path.c_str(), &st) == 0 &&
          S_ISCHR(st.st_mode))
        nodes.push_back(path);
    }
    ::closedir(d);
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

// The command line of one sandboxed process: bwrap (where it works) around setpriv, unshare and
// prlimit around the interpreter. temp is the process's own folder, its only writable place.
std::vector<std::string> sandbox_command(const PythonSandbox::Setup& s, const std::string& temp,
                                         const std::vector<std::string>& python_args) {
  std::vector<std::string> a;
  auto add = [&a](std::initializer_list<std::string> xs) { a.insert(a.end(), xs); };
  if (!s.bwrap.empty()) {
    add({s.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
         "--die-with-parent", "--new-session", "--info-fd", "3"});
    if (s.bwrap_userns) add({"--unshare-user"});
    if (s.disable_userns) add({"--disable-userns"});
    for (const char* d : {"/usr", "/etc"}) add({"--ro-bind", d, d});
    // Merged-/usr systems have these as links into /usr; others as folders of their own.
    for (const char* d : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
      struct stat st;
      if (::lstat(d, &st) != 0) continue;
      if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = ::readlink(d, target, sizeof target - 1);
        if (n > 0) add({"--symlink", std::string(target, static_cast<size_t>(n)), d});
      } else if (S_ISDIR(st.st_mode)) {
        add({"--ro-bind", d, d});
      }
    }
    add({"--proc", "/proc", "--dev", "/dev"});
    if (s.gpu) {
      // The driver's device nodes, as they are (character devices, opened read-write), and sysfs
      // read-only, where the driver libraries look the devices up.
      for (const std::string& node : gpu_device_nodes()) add({"--dev-bind", node, node});
      add({"--ro-bind", "/sys", "/sys"});
    }
    // bwrap makes a destination's missing parents mode 0700, which uid 65534 cannot enter.
    std::set<std::string> made;
    auto parents = [&](const std::string& path) {
      for (size_t i = path.find('/', 1); i != std::string::npos; i = path.find('/', i + 1))
        if (made.insert(path.substr(0, i)).second) add({"--perms", "0755", "--dir", path.substr(0, i)});
    };
    for (const auto& b : s.binds) {
      parents(b);
      add({"--ro-bind", b, b});
    }
    parents(temp);
    add({"--bind", temp, temp});
    if (!s.extension_dir.empty()) {
      parents(s.extension_dir);
      add({"--bind", temp + "/torch_extensions", s.extension_dir});
    }
    add({"--remount-ro", "/dev", "--remount-ro", "/", "--chdir", temp});
    if (s.drop_uid) add({"--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"});
    add({"--"});
    if (s.drop_uid)
      add({s.setpriv, "--reuid=" + std::to_string(kNobody), "--regid=" + std::to_string(kNobody), "--clear-groups",
           "--"});
    if (s.own_userns) add({s.unshare, "--user", "--"});
  } else if (s.unshare_net) {
    add({s.unshare, "-rn", "--"});
  }
  // The kernel's out-of-memory killer takes the sandboxed processes before anything else (the
  // worker and its CUDA context): RLIMIT_AS bounds each process, not all of them together.
  if (!s.choom.empty()) add({s.choom, "-n", "1000", "--"});
  const SandboxLimits& l = s.limits;
  if (!s.prlimit.empty()) {
    a.push_back(s.prlimit);
    // SIGXCPU at the limit, SIGKILL a second later for a process that ignores it.
    if (l.cpu_s > 0) a.push_back("--cpu=" + std::to_string(l.cpu_s) + ":" + std::to_string(l.cpu_s + 1));
    if (l.memory_bytes > 0) a.push_back("--as=" + std::to_string(l.memory_bytes));
    if (l.file_size_bytes > 0) a.push_back("--fsize=" + std::to_string(l.file_size_bytes));
    if (l.processes > 0) a.push_back("--nproc=" + std::to_string(l.processes));
    add({"--core=0", "--"});
  }
  a.push_back(s.python);
  a.insert(a.end(), python_args.begin(), python_args.end());
  return a;
}

// Runs the interpreter with python_args in the sandbox, in a fresh temporary folder (owned by the
// process's uid, removed afterwards).
int chown_entry(const char* path, const struct stat*, int, struct FTW*) {
  return ::lchown(path, kNobody, kNobody) == 0 ? 0 : -1;
}

Result<ProcessRun> run_sandboxed(const PythonSandbox::Setup& s, const std::vector<std::string>& python_args,
                                 const std::string& input, double timeout_s, const SandboxHooks& hooks) {
  std::string temp_template = "/tmp/" + s.temp_prefix + "_XXXXXX";
  if (!::mkdtemp(temp_template.data())) return io_error("sandbox: mkdtemp: " + std::string(std::strerror(errno)));
  std::string temp = temp_template;
  if (hooks.before) {
    Status filled = hooks.before(temp);
    if (!filled.ok()) {
      remove_tree(temp);
      return filled;
    }
  }
  const std::string extensions = temp + "/torch_extensions";
  if (!s.extension_dir.empty() && ::mkdir(extensions.c_str(), 0755) != 0 && errno != EEXIST) {
    std::string why = std::strerror(errno);
    remove_tree(temp);
    return io_error("sandbox: mkdir " + extensions + ": " + why);
  }
  if (s.drop_uid && ::nftw(temp.c_str(), chown_entry, 16, FTW_PHYS) != 0) {
    std::string why = std::strerror(errno);
    remove_tree(temp);
    return io_error("sandbox: chown " + temp + " to uid 65534: " + why);
  }
  std::vector<std::string> command = sandbox_command(s, temp, python_args);
  std::vector<std::string> env = child_env(temp, s.extension_dir.empty() ? extensions : s.extension_dir, s.env);
  Result<ProcessRun> run = invalid_argument("not run");
  if (!hooks.during) {
    run = run_process(command, env, input, temp, timeout_s, !s.bwrap.empty());
  } else {
    // The conversation runs beside the process: when it ends, stop_fd stops the process; when the
    // process ends, ended_fd tells the conversation.
    int stop_fd = ::eventfd(0, EFD_CLOEXEC), ended_fd = ::eventfd(0, EFD_CLOEXEC);
    if (stop_fd < 0 || ended_fd < 0) {
      std::string why = std::strerror(errno);
      for (int fd : {stop_fd, ended_fd})
        if (fd >= 0) ::close(fd);
      remove_tree(temp);
      return io_error("sandbox: eventfd: " + why);
    }
    auto signal_fd = [](int fd) {
      uint64_t one = 1;
      while (::write(fd, &one, sizeof one) < 0 && errno == EINTR) {
      }
    };
    Status talked;
    std::thread conversation([&] {
      talked = hooks.during(temp, ended_fd);
      signal_fd(stop_fd);
    });
    run = run_process(command, env, input, temp, timeout_s, !s.bwrap.empty(), stop_fd);
    signal_fd(ended_fd);
    conversation.join();
    ::close(stop_fd);
    ::close(ended_fd);
    if (run.ok() && !talked.ok()) run = talked;
  }
  if (run.ok() && hooks.after) {
    Status read = hooks.after(temp);
    if (!read.ok()) run = read;
  }
  remove_tree(temp);
  // bwrap exits with 128 + the signal that ended the sandbox's command.
  if (run.ok() && !s.bwrap.empty() && run->signal == 0 && run->exit_code > 128 && run->exit_code < 128 + 65) {
    run->signal = run->exit_code - 128;
    run->exit_code = 0;
  }
  return run;
}

// Prints the Python paths the sandbox must show: the interpreter, its prefixes, sys.path, the
// package's folder (argv[1]), and the user base when the user site is on sys.path. Trusted code only (no module).
const char* kPathProbe = R"(import importlib.util, json, site, sys
try:
    spec = importlib.util.find_spec(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else None
    package = list(spec.submodule_search_locations or []) if spec else []
except Exception:
    package = []
user = site.getusersitepackages() if site.ENABLE_USER_SITE else ""
print(json.dumps({"executable": sys.executable, "package": package,
                  "prefixes": [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix],
                  "path": [p for p in sys.path if p], "user_base": site.getuserbase() if user in sys.path else ""}))
)";

std::string first_line(const std::string& text) {
  std::string t = text.substr(0, text.find('\n'));
  return t.size() > 300 ? t.substr(0, 300) : t;
}

}  // namespace

namespace {

// The paths the sandbox shows read-only besides the system folders: the interpreter's folder and
// prefixes, sys.path, the package's folder, the script, the CUDA toolkit and the toolchain paths of the
// environment, as real paths. Never "/", and never the home folder or the working folder or a
// folder above them (runs live there): a sys.path entry like that is left out.
std::vector<std::string> bind_paths(const json& probe, const std::string& script) {
  std::vector<std::string> want;
  std::string exe = probe.value("executable", "");
  if (!exe.empty()) {
    want.push_back(dir_name(exe));
    want.push_back(dir_name(real_path(exe)));
  }
  for (const char* key : {"prefixes", "path", "package"})
    if (probe.contains(key) && probe[key].is_array())
      for (const auto& p : probe[key])
        if (p.is_string()) want.push_back(p.get<std::string>());
  want.push_back(script);
  want.push_back("/usr/local/cuda");
  for (const char* var :
       {"CUDA_HOME", "CUDA_PATH", "TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH", "TRITON_CUOBJDUMP_PATH",
        "TRITON_NVDISASM_PATH", "TRITON_CUDACRT_PATH", "TRITON_CUDART_PATH", "TRITON_LIBDEVICE_PATH"})
    want.push_back(env_or(var, ""));
  std::vector<std::string> never;
  char cwd[PATH_MAX];
  for (const std::string& d : {env_or("HOME", ""), std::string(::getcwd(cwd, sizeof cwd) ? cwd : "")})
    if (!d.empty() && !real_path(d).empty()) never.push_back(real_path(d));
  std::vector<std::string> paths;
  for (const std::string& w : want) {
    std::string r = w.empty() ? "" : real_path(w);
    if (r.empty() || r == "/") continue;
    bool above = false;
    for (const std::string& d : never) above = above || is_within(d, r);
    if (!above && !is_within(r, "/usr") && !is_within(r, "/etc")) paths.push_back(r);
  }
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> out;
  for (const std::string& p : paths)
    if (out.empty() || !is_within(p, out.back())) out.push_back(p);
  return out;
}

// The interpreter and what it needs, from a probe run outside the sandbox with this process's
// whole environment (trusted code only), so that a pyenv shim resolves as it does in a shell.
Result<PythonSandbox::Setup> probe_python(const SandboxOptions& o) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.push_back(*e);
  Result<ProcessRun> probe = run_process({o.python, "-c", kPathProbe, o.package}, env, "", "", 60, false);
  json paths = probe.ok() ? json::parse(probe->out, nullptr, false) : json();
  if (!probe.ok() || !paths.is_object()) {
    std::string why = !probe.ok()             ? probe.status().message()
                      : probe->signal != 0    ? "killed by " + signal_name(probe->signal)
                      : probe->exit_code != 0 ? "exit " + std::to_string(probe->exit_code) + ": " + probe->err
                                              : "it printed no paths: " + probe->out.substr(0, 300);
    return failed_precondition(why);
  }
  PythonSandbox::Setup s;
  // The interpreter by the path it was run as (a venv's bin/python finds its pyvenv.cfg so), in
  // its folder's real path, which is what the sandbox shows.
  std::string exe = paths.value("executable", "");
  s.python = exe.rfind('/', 0) == 0 ? real_path(dir_name(exe)) + exe.substr(exe.rfind('/')) : o.python;
  s.script = real_path(o.script).empty() ? o.script : real_path(o.script);
  s.binds = bind_paths(paths, s.script);
  if (!paths.value("user_base", "").empty()) s.env.push_back("PYTHONUSERBASE=" + paths.value("user_base", ""));
  s.limits = o.limits;
  s.temp_prefix = o.temp_prefix;
  s.extension_dir = o.extension_dir;
  s.env.insert(s.env.end(), o.env.begin(), o.env.end());
  s.what = o.what;
  s.gpu = o.gpu;
  s.prlimit = find_program("prlimit");
  s.setpriv = find_program("setpriv");
  s.unshare = find_program("unshare");
  s.choom = find_program("choom");
  return s;
}

// The sandboxes to try, strongest first: as root, bwrap with uid 65534 in a user namespace of its
// own, then without that namespace, then as uid 0; as another user, bwrap in a user namespace
// that forbids more of them, then one that does not (bwrap before 0.8); then without bwrap, under
// `unshare -rn`, then not even that.
std::vector<PythonSandbox::Setup> sandbox_tries(const PythonSandbox::Setup& base, const std::string& bwrap) {
  std::vector<PythonSandbox::Setup> tries;
  if (!bwrap.empty()) {
    PythonSandbox::Setup b = base;
    b.bwrap = bwrap;
    if (::geteuid() == 0) {
      b.drop_uid = !b.setpriv.empty();
      b.own_userns = b.drop_uid && !b.unshare.empty();
      if (b.own_userns) tries.push_back(b);
      b.own_userns = false;
      if (b.drop_uid) tries.push_back(b);
      b.drop_uid = false;
      tries.push_back(b);
    } else {
      b.bwrap_userns = b.disable_userns = true;
      tries.push_back(b);
      b.disable_userns = false;
      tries.push_back(b);
    }
  }
  PythonSandbox::Setup plain = base;
  plain.extension_dir.clear();  // no mount namespace: the folder is where it is
  if (!plain.unshare.empty()) {
    plain.unshare_net = true;
    tries.push_back(plain);
  }
  plain.unshare_net = false;
  tries.push_back(plain);
  return tries;
}

// Fills in what is missing from s and its description. no_bwrap: why bwrap is not used ("" when
// it is); failure: why the first (strongest) sandbox tried did not run.
void describe(PythonSandbox::Setup* s, const std::string& no_bwrap, const std::string& failure) {
  bool root = ::geteuid() == 0;
  std::vector<std::string> missing;
  std::string d;
  if (s->bwrap.empty()) {
    missing.push_back("no bwrap (" + no_bwrap +
                      "): the module sees the whole filesystem as vinci's user does, other processes, and the "
                      "processes it leaves behind outlive the " +
                      s->what);
    if (!s->unshare_net) missing.push_back("no network namespace (`unshare -rn` does not work here)");
    d = "none (" + no_bwrap + "): env allowlist, " + (s->unshare_net ? "net namespace" : "network not isolated") +
        ", process group kill";
  } else {
    if (root && !s->drop_uid)
      missing.push_back("it runs as uid 0 (" + (s->setpriv.empty() ? std::string("setpriv not found") : failure) +
                        "), so the process limit does not hold");
    else if (root && !s->own_userns)
      missing.push_back("no user namespace of its own (" +
                        (s->unshare.empty() ? std::string("unshare not found") : failure) +
                        "): the process limit counts every process of uid 65534");
    d = "bwrap: env allowlist, read-only fs, pid+net+ipc namespace";
    if (s->gpu) d += ", gpu device nodes";
  }
  uid_t uid = s->drop_uid ? kNobody : ::geteuid();
  d += ", uid " + std::to_string(uid);
  const SandboxLimits& l = s->limits;
  if (s->prlimit.empty()) {
    missing.push_back("prlimit not found: no CPU, memory, file size or process limits");
    d += ", no limits (prlimit not found)";
  } else {
    auto lim = [](int64_t v, const std::string& text) { return v > 0 ? text : std::string("none"); };
    d += ", limits cpu=" + lim(l.cpu_s, std::to_string(l.cpu_s) + "s") +
         " as=" + lim(l.memory_bytes, short_bytes(l.memory_bytes)) +
         " fsize=" + lim(l.file_size_bytes, short_bytes(l.file_size_bytes)) +
         " nproc=" + lim(l.processes, std::to_string(l.processes));
    if (l.processes > 0 && uid == 0) d += " (not enforced: uid 0)";
    if (l.processes > 0 && s->drop_uid && !s->own_userns) d += " (counted over every uid 65534 process)";
    d += " core=0";
  }
  if (s->choom.empty())
    missing.push_back("choom not found: the out-of-memory killer does not take the " + s->what + " first");
  else
    d += " oom_score_adj=1000";
  s->description = d;
  s->missing.clear();
  for (size_t i = 0; i < missing.size(); ++i) s->missing += (i ? "; " : "") + missing[i];
}

}  // namespace

PythonSandbox::PythonSandbox(SandboxOptions options) : options_(std::move(options)) {}

PythonSandbox::~PythonSandbox() = default;

Result<ProcessRun> PythonSandbox::run(const std::vector<std::string>& python_args, const std::string& input,
                                      double timeout_s, const SandboxHooks& hooks) {
  VINCI_ASSIGN_OR_RETURN(std::shared_ptr<const Setup> s, setup());
  return run_sandboxed(*s, python_args, input, timeout_s, hooks);
}

namespace {

Status copy_tree_into(const std::string& from, const std::string& to, int64_t max_bytes, int64_t max_entries,
                      int64_t* bytes, int64_t* entries) {
  DIR* dir = ::opendir(from.c_str());
  if (dir == nullptr) return io_error("copy " + from + ": " + std::strerror(errno));
  std::unique_ptr<DIR, int (*)(DIR*)> closer(dir, ::closedir);
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (++*entries > max_entries)
      return invalid_argument("copy " + from + ": more than " + std::to_string(max_entries) + " entries");
    std::string src = from + "/" + name, dst = to + "/" + name;
    struct stat st;
    if (::lstat(src.c_str(), &st) != 0) return io_error("copy " + src + ": " + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) {
      if (::mkdir(dst.c_str(), 0755) != 0 && errno != EEXIST)
        return io_error("mkdir " + dst + ": " + std::strerror(errno));
      VINCI_RETURN_IF_ERROR(copy_tree_into(src, dst, max_bytes, max_entries, bytes, entries));
      continue;
    }
    if (!S_ISREG(st.st_mode)) continue;  // links, fifos, sockets, devices stay behind
    *bytes += st.st_size;
    if (*bytes > max_bytes) return invalid_argument("copy " + from + ": more than " + bytes_text(max_bytes));
    int in = ::open(src.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0) return io_error("open " + src + ": " + std::strerror(errno));
    int out = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 0777);
    if (out < 0) {
      ::close(in);
      return io_error("create " + dst + ": " + std::strerror(errno));
    }
    char buf[1 << 16];
    ssize_t n = 0;
    bool ok = true;
    while (ok && (n = ::read(in, buf, sizeof buf)) != 0) {
      if (n < 0) {
        ok = errno == EINTR;
        continue;
      }
      for (ssize_t done = 0; ok && done < n;) {
        ssize_t w = ::write(out, buf + done, static_cast<size_t>(n - done));
        if (w < 0 && errno == EINTR) continue;
        ok = w > 0;
        done += w > 0 ? w : 0;
      }
    }
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    ok = ok && ::fchmod(out, st.st_mode & 0777) == 0 && ::futimens(out, times) == 0;
    std::string why = ok ? "" : std::strerror(errno);
    ::close(in);
    if (::close(out) != 0 && ok) {
      ok = false;
      why = std::strerror(errno);
    }
    if (!ok) return io_error("copy " + src + " to " + dst + ": " + why);
  }
  return Status();
}

}  // namespace

Status copy_plain_tree(const std::string& from, const std::string& to, int64_t max_bytes, int64_t max_entries) {
  for (size_t i = to.find('/', 1); i != std::string::npos; i = to.find('/', i + 1))
    ::mkdir(to.substr(0, i).c_str(), 0755);
  if (::mkdir(to.c_str(), 0755) != 0 && errno != EEXIST) return io_error("mkdir " + to + ": " + std::strerror(errno));
  int64_t bytes = 0, entries = 0;
  return copy_tree_into(from, to, max_bytes, max_entries, &bytes, &entries);
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

Result<std::string> PythonSandbox::script() {
  VINCI_ASSIGN_OR_RETURN(std::shared_ptr<const Setup> s, setup());
  return s->script;
}

// What a process's error says about a limit it ran into, " (...)" naming the limit, or "".
std::string PythonSandbox::limit_hint(const std::string& text) const {
  const SandboxLimits& l = options_.limits;
  const std::string& w = options_.what;
  auto has = [&](const char* s) { return text.find(s) != std::string::npos; };
  if (l.memory_bytes > 0 &&
      (has("MemoryError") || has("Cannot allocate memory") || has("std::bad_alloc") || has("out of memory")))
    return " (the " + w + "'s memory limit: " + bytes_text(l.memory_bytes) + " of address space)";
  if (l.file_size_bytes > 0 && has("File too large"))
    return " (the " + w + "'s file size limit: " + bytes_text(l.file_size_bytes) + " per file)";
  if (l.processes > 0 && (has("BlockingIOError") || has("can't start new thread") || has("Resource temporarily")))
    return " (the " + w + "'s process limit: " + std::to_string(l.processes) +
           " processes and threads; fork and thread creation fail past it)";
  return "";
}

// Why a process that gave no answer ended, naming the limit where it hit one.
std::string PythonSandbox::ending_text(const ProcessRun& r) const {
  const SandboxLimits& l = options_.limits;
  const std::string& w = options_.what;
  if (r.signal == SIGXCPU)
    return "the " + w + " process used up its CPU time limit of " + std::to_string(l.cpu_s) + " s (SIGXCPU)";
  if (r.signal == SIGXFSZ)
    return "the " + w + " process wrote a file past its file size limit of " + bytes_text(l.file_size_bytes) +
           " (SIGXFSZ)";
  if (r.signal == SIGKILL)
    return "the " + w + " process was killed (SIGKILL): past its CPU time limit's hard limit of " +
           std::to_string(l.cpu_s + 1) + " s (SIGXCPU ignored), or by the kernel's out-of-memory killer";
  if (r.signal != 0) return "the " + w + " process was killed by " + signal_name(r.signal);
  return "the " + w + " process exited with status " + std::to_string(r.exit_code) + " without an answer";
}
bool PythonSandbox::network_isolated() {
  Result<std::shared_ptr<const Setup>> s = setup();
  return s.ok() && (!(*s)->bwrap.empty() || (*s)->unshare_net);
}

// Probes once: the interpreter, then the strongest sandbox that runs it (sandbox_tries). What is
// missing is said once per process on stderr.
Result<std::shared_ptr<const PythonSandbox::Setup>> PythonSandbox::setup() {
  std::lock_guard<std::mutex> probe_lock(mu_);
  if (probed_) {
    if (!probe_error_.ok()) return probe_error_;
    return setup_;
  }
  probed_ = true;
  const std::string& cannot = options_.cannot;
  const std::string& fix = options_.fix;
  Result<Setup> base = probe_python(options_);
  if (!base.ok()) {
    probe_error_ = failed_precondition(cannot + base.status().message() + fix);
    return probe_error_;
  }
  std::string bwrap = find_program(options_.bwrap.empty() ? env_or("VINCI_BWRAP", "bwrap") : options_.bwrap);
  std::vector<Setup> tries = sandbox_tries(*base, options_.sandbox ? bwrap : "");
  std::string failure;
  for (Setup& t : tries) {
    Result<ProcessRun> r =
        run_sandboxed(t, {"-c", "import sys; open(sys.argv[1]).close()", t.script}, "", 60, SandboxHooks());
    if (r.ok() && r->signal == 0 && r->exit_code == 0) {
      std::string no_bwrap = !options_.sandbox ? options_.off_reason
                             : bwrap.empty()   ? "bwrap not found: install bubblewrap or set VINCI_BWRAP"
                                               : "bwrap does not work here: " + failure;
      describe(&t, no_bwrap, failure);
      if (!t.missing.empty()) {
        // Said once per process and purpose.
        static std::mutex said_mu;
        static std::set<std::string> said;
        std::lock_guard<std::mutex> said_lock(said_mu);
        if (said.insert(options_.purpose).second)
          std::fprintf(stderr,
                       "vinci: WARNING: %s run model-written Python without part of their sandbox here: "
                       "%s. (docs/live_evaluator.md, \"Compile sandbox\")\n",
                       options_.purpose.c_str(), t.missing.c_str());
      }
      setup_ = std::make_shared<const Setup>(std::move(t));
      return setup_;
    }
    if (failure.empty())
      failure = !r.ok() ? r.status().message() : first_line(r->err.empty() ? ending_text(*r) : r->err);
  }
  probe_error_ = failed_precondition(cannot + failure + fix);
  return probe_error_;
}

std::string PythonSandbox::description() {
  Result<std::shared_ptr<const Setup>> s = setup();
  return s.ok() ? (*s)->description : "unavailable: " + s.status().message();
}
}  // namespace vinci
