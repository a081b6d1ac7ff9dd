#include "core/cli.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace vinci {
namespace {

void usage(FILE* out, const char* program, const std::vector<Subcommand>& commands, const char* footer) {
  std::fprintf(out, "usage: %s <command> [options]\n\ncommands:\n", program);
  for (const auto& c : commands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\n%s\n", footer);
}

}  // namespace

namespace {

// A crash says where it happened: the signal, then the stack as `binary(+offset)` frames (for
// `addr2line -f -C -e BINARY OFFSET`), written with async-signal-safe calls only; then the
// default action (a core dump, or the signal's exit status).
const char* g_program = "vinci";

// Writes v as 0x-prefixed hex (async-signal-safe).
void write_hex(uintptr_t v) {
  char buf[2 + 16];
  buf[0] = '0';
  buf[1] = 'x';
  for (int i = 0; i < 16; ++i) buf[2 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 0xf];
  ssize_t ignored = ::write(STDERR_FILENO, buf, sizeof buf);
  (void)ignored;
}

void say(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void on_crash(int sig, siginfo_t* info, void* context) {
  say(g_program);
  say(sig == SIGSEGV  ? ": crashed with SIGSEGV"
      : sig == SIGBUS ? ": crashed with SIGBUS"
      : sig == SIGFPE ? ": crashed with SIGFPE"
                      : ": crashed with SIGILL");
  say(" at address ");
  write_hex(reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr));
#if defined(__x86_64__)
  const auto* uc = static_cast<const ucontext_t*>(context);
  const uintptr_t pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const uintptr_t sp = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
  say(", pc ");
  write_hex(pc);
  say(", sp ");
  write_hex(sp);
  Dl_info where{};
  if (::dladdr(reinterpret_cast<void*>(pc), &where) != 0 && where.dli_fname != nullptr) {
    say(" in ");
    say(where.dli_fname);
    say(" +");
    write_hex(pc - reinterpret_cast<uintptr_t>(where.dli_fbase));
    if (where.dli_sname != nullptr) {
      say(" (");
      say(where.dli_sname);
      say(")");
    }
  }
#else
  (void)context;
#endif
  say("; the stack:\n");
  void* frames[64];
  int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_crash_handler(const char* program) {
  g_program = program;
  void* warm[1];
  ::backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  // Its own stack, so a stack overflow is reported too.
  static char alt[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt;
  ss.ss_size = sizeof alt;
  ::sigaltstack(&ss, nullptr);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    struct sigaction sa {};
    sa.sa_sigaction = on_crash;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND | SA_SIGINFO | SA_ONSTACK;
    ::sigaction(sig, &sa, nullptr);
  }
}

}  // namespace

int run_subcommand(const char* program, const std::vector<Subcommand>& commands, const char* footer, int argc,
                   char** argv) {
  install_crash_handler(program);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout, program, commands, footer);
    return argc < 2 ? 2 : 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : commands) {
    if (std::strcmp(argv[1], c.name) == 0) return c.run(args);
  }
  std::fprintf(stderr, "%s: unknown command '%s'\n\n", program, argv[1]);
  usage(stderr, program, commands, footer);
  return 2;
}

std::optional<int> parse_options(const std::string& what, const std::vector<std::string>& args,
                                 const boost::program_options::options_description& named,
                                 const std::vector<std::pair<std::string, int>>& positional,
                                 boost::program_options::variables_map* vm) {
  namespace po = boost::program_options;
  po::options_description hidden;
  po::positional_options_description pos;
  for (const auto& [name, count] : positional) {
    if (count == 1) {
      hidden.add_options()(name.c_str(), po::value<std::string>());
    } else {
      hidden.add_options()(name.c_str(), po::value<std::vector<std::string>>());
    }
    pos.add(name.c_str(), count);
  }
  po::options_description all;
  all.add(named).add(hidden);
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), *vm);
    po::notify(*vm);
  } catch (const po::error& e) {
    std::cerr << what << ": " << e.what() << "\n" << named;
    return 2;
  }
  if (vm->count("help")) {
    std::cout << named;
    return 0;
  }
  // An empty path or name ('' from an unset shell variable) would otherwise become "/manifest.bin"
  // or the current folder further on.
  for (const auto& [name, count] : positional) {
    if (!vm->count(name) || name == "query") continue;
    std::vector<std::string> values = count == 1 ? std::vector<std::string>{(*vm)[name].as<std::string>()}
                                                 : (*vm)[name].as<std::vector<std::string>>();
    for (const std::string& v : values) {
      if (!v.empty()) continue;
      std::string upper = name;
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      std::cerr << what << ": " << upper << ": expected "
                << (name == "run" || name == "runs" ? "a run folder" : "a value") << ", found an empty string\n";
      return 2;
    }
  }
  return std::nullopt;
}

namespace {

std::string number_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

}  // namespace

Result<int64_t> parse_int_option(const std::string& option, const std::string& text, int64_t lo, int64_t hi) {
  auto bad = [&] {
    return invalid_argument(option + ": expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                            ", found '" + text + "'");
  };
  size_t i = !text.empty() && text[0] == '-' ? 1 : 0;
  if (i == text.size()) return bad();
  for (size_t k = i; k < text.size(); ++k) {
    if (text[k] < '0' || text[k] > '9') return bad();
  }
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE || *end != 0 || v < lo || v > hi) return bad();
  return static_cast<int64_t>(v);
}

Result<double> parse_number_option(const std::string& option, const std::string& text, double lo, double hi) {
  auto bad = [&] {
    return invalid_argument(option + ": expected a number from " + number_text(lo) + " to " + number_text(hi) +
                            ", found '" + text + "'");
  };
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return bad();
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (*end != 0 || !std::isfinite(v) || v < lo || v > hi) return bad();
  return v;
}

}  // namespace vinci
