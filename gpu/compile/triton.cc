#include "gpu/compile/triton.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/text.h"

namespace vinci {

namespace {

using nlohmann::json;

constexpr const char* kArtifactMagic = "vinci.triton/1\n";

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

namespace {

TritonOptions resolved(TritonOptions o) {
  if (o.python.empty()) o.python = env_or("VINCI_TRITON_PYTHON", "python3");
  if (o.script.empty()) o.script = env_or("VINCI_TRITON_COMPILE", VINCI_TRITON_SCRIPT);
  return o;
}

SandboxOptions sandbox_options(const TritonOptions& o) {
  SandboxOptions s;
  s.python = o.python;
  s.script = o.script;
  s.package = "triton";
  s.what = "compile";
  s.purpose = "Triton compiles";
  s.cannot = "cannot run the Triton compile step '" + o.python + " " + o.script + "': ";
  s.fix = " (set VINCI_TRITON_PYTHON to a python with triton installed)";
  s.off_reason = "TritonOptions::sandbox is off";
  s.temp_prefix = "vinci_triton";
  s.limits = o.limits;
  s.sandbox = o.sandbox;
  s.bwrap = o.bwrap;
  return s;
}

}  // namespace

TritonCompiler::TritonCompiler(TritonOptions options)
    : options_(resolved(std::move(options))), sandbox_(sandbox_options(options_)) {}

int64_t TritonCompiler::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t TritonCompiler::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

Result<std::string> TritonCompiler::version() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!version_.empty()) return version_;
  }
  Result<std::string> script = sandbox_.script();
  if (!script.ok()) return failed_precondition("Triton is not available: " + script.status().message());
  Result<ProcessRun> r = sandbox_.run({*script, "--version"}, "", 60);
  if (!r.ok()) return failed_precondition("Triton is not available: " + r.status().message());
  if (r->timed_out || r->signal != 0 || r->exit_code != 0)
    return failed_precondition("Triton is not available: the Triton compile step failed (" + sandbox_.ending_text(*r) +
                               "): " + r->err.substr(0, 2000));
  std::string v = r->out;
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
  VINCI_ASSIGN_OR_RETURN(std::string script, sandbox_.script());
  json request = {{"source", req.source},
                  {"kernel", req.kernel},
                  {"signature", req.signature},
                  {"constexprs", req.constexprs},
                  {"num_warps", req.num_warps},
                  {"num_stages", req.num_stages},
                  {"arch", req.arch}};
  auto t0 = std::chrono::steady_clock::now();
  VINCI_ASSIGN_OR_RETURN(ProcessRun run, sandbox_.run({script}, request.dump(), options_.timeout_s));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // From here on everything the process did may be the module's doing: a process that ends
  // without its answer is the candidate's failure, not the evaluator's.
  std::string failed = req.kernel + " does not compile with Triton " + triton_version + ": ";
  if (run.timed_out)
    return invalid_argument("the Triton compile exceeded its time limit of " +
                            format_number("%.6g", options_.timeout_s) + " s and was stopped");
  if (run.out_truncated)
    return invalid_argument(failed + "the compile process wrote more than " + bytes_text(kMaxSandboxStdout) +
                            " to its standard output");
  json answer = json::parse(run.out, nullptr, false);
  if (answer.is_discarded() || !answer.is_object() || !answer.contains("ok") || !answer["ok"].is_boolean()) {
    std::string why = run.signal != 0 || run.exit_code != 0
                          ? sandbox_.ending_text(run)
                          : "the compile process answered something that is not its JSON: " + run.out.substr(0, 300);
    std::string err = run.err.substr(0, 2000);
    return invalid_argument(failed + why + (err.empty() ? "" : ": " + err) + sandbox_.limit_hint(err));
  }
  if (!answer["ok"].get<bool>()) {
    // The module ran in that process and may have written this answer itself: fields of the
    // wrong type read as absent, and what would be the machine's error (no Triton, a request the
    // script refuses) cannot be, since version() found Triton and the request is vinci's: it is
    // the candidate's failure, with the text it gave.
    auto field = [&answer](const char* key) {
      auto it = answer.find(key);
      return it != answer.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    std::string kind = field("kind");
    std::string error = field("error");
    if (kind != "compile_error") error = "the compile process answered " + kind + ": " + error;
    return invalid_argument(failed + error + sandbox_.limit_hint(error));
  }
  if (!answer.contains("meta") || !answer.contains("cubin") || !answer["cubin"].is_string())
    return invalid_argument(failed + "the compile process's answer lacks meta or cubin");
  Result<TritonKernelMeta> meta = decode_triton_meta(answer["meta"].dump());
  if (!meta.ok()) return invalid_argument(failed + meta.status().message());
  Result<std::string> cubin = base64_decode(answer["cubin"].get<std::string>());
  if (!cubin.ok()) return invalid_argument(failed + cubin.status().message());
  auto k = std::make_shared<CompiledTriton>();
  k->key = key;
  k->meta = std::move(*meta);
  k->cubin = std::move(*cubin);
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
