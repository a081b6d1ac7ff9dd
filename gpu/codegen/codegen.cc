#include "gpu/codegen/codegen.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

#include "gpu/expr.h"
#include "gpu/ops.h"
#include "gpu/shapes.h"

namespace vinci {
namespace {

// ---------------------------------------------------------------------------------------------
// Analysis of the graph

enum class Bcast { kSame, kDim, kScalar, kNone };
struct BcastInfo {
  Bcast kind = Bcast::kNone;
  std::string inner, dim;  // kDim: element index of the operand = (flat / inner) % dim
};

// How an operand of shape `o` broadcasts against the main shape `s` (right-aligned, as PyTorch).
BcastInfo classify(const SymShape& o, const SymShape& s) {
  BcastInfo b;
  if (o.size() > s.size()) return b;
  SymShape p(s.size() - o.size(), "1");
  p.insert(p.end(), o.begin(), o.end());
  if (p == s) return {Bcast::kSame, "", ""};
  int where = -1;
  for (size_t k = 0; k < p.size(); ++k) {
    if (p[k] == "1") continue;
    if (where >= 0 || p[k] != s[k]) return b;
    where = static_cast<int>(k);
  }
  if (where < 0) return {Bcast::kScalar, "", ""};
  return {Bcast::kDim, expr_product(SymShape(s.begin() + where + 1, s.end())), s[static_cast<size_t>(where)]};
}

struct GemmShape {
  std::string A, B, bias;  // buffer names
  bool ta = false, tb = false;
  std::string M, N, K, batch, a_bs, b_bs;
};

struct RowLayout {
  std::string outer, R, inner;
};

// A run of the task's ops that becomes one kernel of a kernel family, or one library step.
struct Group {
  bool library = false;                              // a library step (family unused)
  KernelFamily family = KernelFamily::kElementwise;  // else: the kernel's family
  std::vector<size_t> ops;
};

struct Ctx {
  const Task* task = nullptr;
  ShapeMap shapes;
  std::map<std::string, std::string> dtype;
  std::map<std::string, std::string> knobs;  // every knob of every family, resolved
  std::map<std::string, std::vector<size_t>> consumers;
  std::map<std::string, const ModuleSpec*> modules;

  const std::string& knob(const std::string& k) const { return knobs.at(k); }
  int64_t knob_int(const std::string& k) const { return std::stoll(knobs.at(k)); }
  const OpSpec& op(size_t i) const { return task->ops[i]; }
};

bool is_elementwise(const OpSpec& op) {
  const OpInfo* info = find_op(op.op);
  return info && (info->kind == OpKind::kUnary || info->kind == OpKind::kBinary);
}

bool gemm_shape(const Ctx& c, const OpSpec& op, GemmShape* g) {
  if (op.code() == OpCode::kLinear) {
    const ModuleSpec* m = c.modules.at(op.module);
    const SymShape& x = c.shapes.at(op.inputs[0]);
    if (x.size() < 2) return false;
    g->A = op.inputs[0];
    g->B = op.module + ".weight";
    if (attr_bool_or(m->attrs, "bias", true)) g->bias = op.module + ".bias";
    g->tb = true;
    g->K = x.back();
    g->M = expr_product(SymShape(x.begin(), x.end() - 1));
    g->N = c.shapes.at(op.outputs[0]).back();
    g->batch = "1";
    g->a_bs = g->b_bs = "0";
    return true;
  }
  if (op.code() != OpCode::kMatmul) return false;
  const SymShape& a = c.shapes.at(op.inputs[0]);
  const SymShape& b = c.shapes.at(op.inputs[1]);
  size_t ra = a.size(), rb = b.size();
  if (ra < 2 || rb < 2) return false;
  if (rb > 2 && (rb != ra || !std::equal(a.begin(), a.end() - 2, b.begin()))) return false;
  if (c.dtype.at(op.inputs[0]) != "f32" || c.dtype.at(op.inputs[1]) != "f32") return false;
  g->A = op.inputs[0];
  g->B = op.inputs[1];
  g->ta = attr_bool_or(op.attrs, "transpose_a", false);
  g->tb = attr_bool_or(op.attrs, "transpose_b", false);
  g->M = g->ta ? a[ra - 1] : a[ra - 2];
  g->K = g->ta ? a[ra - 2] : a[ra - 1];
  g->N = g->tb ? b[rb - 2] : b[rb - 1];
  g->batch = expr_product(SymShape(a.begin(), a.end() - 2));
  g->a_bs = ra > 2 ? expr_mul(g->M, g->K) : "0";
  g->b_bs = rb > 2 ? expr_mul(g->K, g->N) : "0";
  return true;
}

bool row_layout(const Ctx& c, const OpSpec& op, RowLayout* r) {
  const OpInfo* info = find_op(op.op);
  if (!info || (info->kind != OpKind::kReduce && info->kind != OpKind::kRowNorm)) return false;
  const SymShape& x = c.shapes.at(op.inputs[0]);
  if (x.empty() || c.dtype.at(op.inputs[0]) != "f32") return false;
  size_t d0, d1;  // reduce dims [d0, d1)
  if (op.code() == OpCode::kLayerNorm) {
    size_t n = c.modules.at(op.module)->attrs.at("shape").size();
    if (n > x.size()) return false;
    d0 = x.size() - n;
    d1 = x.size();
  } else {
    int64_t d = attr_int_or(op.attrs, "dim", -1);
    if (d < 0) d += static_cast<int64_t>(x.size());
    if (d < 0 || d >= static_cast<int64_t>(x.size())) return false;
    d0 = static_cast<size_t>(d);
    d1 = d0 + 1;
  }
  r->outer = expr_product(SymShape(x.begin(), x.begin() + d0));
  r->R = expr_product(SymShape(x.begin() + d0, x.begin() + d1));
  r->inner = expr_product(SymShape(x.begin() + d1, x.end()));
  return true;
}

// Can op (elementwise) start a group of its own?
bool elementwise_head_ok(const Ctx& c, const OpSpec& op) {
  if (!is_elementwise(op)) return false;
  if (op.inputs.size() == 2) return classify(c.shapes.at(op.inputs[1]), c.shapes.at(op.inputs[0])).kind != Bcast::kNone;
  return true;
}

std::vector<Group> build_groups(const Ctx& c, bool fused) {
  std::vector<Group> groups;
  const auto& ops = c.task->ops;
  size_t i = 0;
  while (i < ops.size()) {
    Group g;
    GemmShape gs;
    RowLayout rl;
    if (gemm_shape(c, ops[i], &gs))
      g.family = KernelFamily::kGemm;
    else if (row_layout(c, ops[i], &rl))
      g.family = KernelFamily::kRowReduction;
    else if (elementwise_head_ok(c, ops[i]))
      g.family = KernelFamily::kElementwise;
    else
      g.library = true;
    g.ops.push_back(i++);
    if (fused && !g.library) {
      std::set<std::string> regs(ops[g.ops[0]].outputs.begin(), ops[g.ops[0]].outputs.end());
      const SymShape main = c.shapes.at(ops[g.ops[0]].outputs[0]);
      while (i < ops.size() && is_elementwise(ops[i]) && c.shapes.at(ops[i].outputs[0]) == main) {
        const OpSpec& op = ops[i];
        bool first_in_reg = regs.count(op.inputs[0]) > 0;
        bool commutes = op.code() == OpCode::kAdd || op.code() == OpCode::kMul;
        if (op.inputs.size() == 1) {
          if (!first_in_reg) break;
        } else {
          bool second_in_reg = regs.count(op.inputs[1]) > 0;
          if (!first_in_reg && !(commutes && second_in_reg)) break;
          const std::string& other = first_in_reg ? op.inputs[1] : op.inputs[0];
          if (!regs.count(other) && classify(c.shapes.at(other), main).kind == Bcast::kNone) break;
        }
        regs.insert(op.outputs[0]);
        g.ops.push_back(i++);
      }
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

// Values of group g that someone outside g reads (or the task output).
std::vector<std::string> materialized(const Ctx& c, const Group& g) {
  std::set<size_t> in_group(g.ops.begin(), g.ops.end());
  std::vector<std::string> out;
  for (size_t i : g.ops) {
    for (const auto& v : c.op(i).outputs) {
      bool needed = v == c.task->output;
      auto it = c.consumers.find(v);
      if (it != c.consumers.end())
        for (size_t j : it->second) needed |= !in_group.count(j);
      if (needed) out.push_back(v);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Emission

std::string flit(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s + "f";
}

bool transcendental(OpCode op) {
  switch (op) {
    case OpCode::kSigmoid:
    case OpCode::kTanh:
    case OpCode::kGelu:
    case OpCode::kSilu:
    case OpCode::kElu:
    case OpCode::kSelu:
    case OpCode::kSoftplus:
    case OpCode::kMish:
    case OpCode::kExp:
    case OpCode::kLog: return true;
    default: return false;
  }
}

// Floating-point operations per element, for the cost model: 1 per arithmetic op, more for the
// transcendental ones (roughly their instruction counts in libdevice).
int64_t op_flops(OpCode op) {
  if (op == OpCode::kMish) return 24;
  if (op == OpCode::kGelu || op == OpCode::kSoftplus) return 12;
  if (transcendental(op)) return 8;
  if (op == OpCode::kHardswish || op == OpCode::kHardsigmoid || op == OpCode::kSoftsign) return 4;
  return 1;
}

std::string unary_expr(const OpSpec& op, const std::string& v, bool fast) {
  const auto& a = op.attrs;
  std::string ex = fast ? "__expf" : "expf";
  const OpCode n = op.code();
  if (n == OpCode::kRelu) return "fmaxf(" + v + ", 0.0f)";
  if (n == OpCode::kLeakyRelu)
    return "(" + v + " > 0.0f ? " + v + " : " + v + " * " + flit(attr_double_or(a, "negative_slope", 0.01)) + ")";
  if (n == OpCode::kSigmoid)
    return fast ? "__fdividef(1.0f, 1.0f + __expf(-" + v + "))" : "(1.0f / (1.0f + expf(-" + v + ")))";
  if (n == OpCode::kTanh) return "tanhf(" + v + ")";
  if (n == OpCode::kGelu) return "(0.5f * " + v + " * (1.0f + erff(" + v + " * 0.707106781f)))";
  if (n == OpCode::kSilu)
    return fast ? "__fdividef(" + v + ", 1.0f + __expf(-" + v + "))" : "(" + v + " / (1.0f + expf(-" + v + ")))";
  if (n == OpCode::kElu)
    return "(" + v + " > 0.0f ? " + v + " : " + flit(attr_double_or(a, "alpha", 1.0)) + " * expm1f(" + v + "))";
  if (n == OpCode::kSelu) return "(1.05070098f * (" + v + " > 0.0f ? " + v + " : 1.67326324f * expm1f(" + v + ")))";
  if (n == OpCode::kSoftplus) return "(" + v + " > 20.0f ? " + v + " : log1pf(" + ex + "(" + v + ")))";
  if (n == OpCode::kSoftsign) return "(" + v + " / (1.0f + fabsf(" + v + ")))";
  if (n == OpCode::kHardsigmoid) return "fminf(fmaxf(" + v + " / 6.0f + 0.5f, 0.0f), 1.0f)";
  if (n == OpCode::kHardswish) return "(" + v + " * fminf(fmaxf(" + v + " + 3.0f, 0.0f), 6.0f) / 6.0f)";
  if (n == OpCode::kHardtanh)
    return "fminf(fmaxf(" + v + ", " + flit(attr_double_or(a, "min", -1)) + "), " + flit(attr_double_or(a, "max", 1)) +
           ")";
  if (n == OpCode::kMish) return "(" + v + " * tanhf(" + v + " > 20.0f ? " + v + " : log1pf(" + ex + "(" + v + "))))";
  if (n == OpCode::kExp) return ex + "(" + v + ")";
  if (n == OpCode::kLog) return (fast ? "__logf(" : "logf(") + v + ")";
  if (n == OpCode::kAbs) return "fabsf(" + v + ")";
  if (n == OpCode::kSquare) return "(" + v + " * " + v + ")";
  if (n == OpCode::kSqrt) return "sqrtf(" + v + ")";
  if (n == OpCode::kClamp) {
    std::string r = v;
    if (a.contains("min")) r = "fmaxf(" + r + ", " + flit(attr_double_or(a, "min", 0)) + ")";
    if (a.contains("max")) r = "fminf(" + r + ", " + flit(attr_double_or(a, "max", 0)) + ")";
    return r;
  }
  if (n == OpCode::kMulScalar) return "(" + v + " * " + flit(attr_double_or(a, "value", 1)) + ")";
  if (n == OpCode::kAddScalar) return "(" + v + " + " + flit(attr_double_or(a, "value", 0)) + ")";
  if (n == OpCode::kDivScalar) return "(" + v + " / " + flit(attr_double_or(a, "value", 1)) + ")";
  VINCI_ASSERT_MSG(false, "no CUDA expression for op " << op.op);
  return "";
}

const char* ctype(const std::string& dtype) { return dtype == "i64" ? "long long" : "float"; }

// A kernel's parameter list, kept beside the plan arguments that fill it.
struct Params {
  std::vector<std::string> decls;
  std::vector<PlanArg> args;
  void in(const std::string& name, const std::string& var, const std::string& dtype) {
    decls.push_back(std::string("const ") + ctype(dtype) + "* __restrict__ " + var);
    args.push_back({name, ""});
  }
  void out(const std::string& name, const std::string& var) {
    decls.push_back("float* __restrict__ " + var);
    args.push_back({name, ""});
  }
  void i64(const std::string& expr, const std::string& var) {
    decls.push_back("long long " + var);
    args.push_back({"", expr});
  }
  std::string list() const {
    std::string s;
    for (const auto& d : decls) s += (s.empty() ? "" : ", ") + d;
    return s;
  }
};

struct ExtOperand {
  std::string value, dtype, var;
  BcastInfo b;
};

// The elementwise tail of a group as one device function:
//   elem(flat, head, e, res): computes the group's ops from `head` (the value the kernel computed
//   or loaded) and stores the materialized values in res[0..].
struct Elem {
  std::string source;
  std::vector<ExtOperand> ext;
  std::vector<std::string> outs;
  int64_t flops = 0;
  bool uses_transcendental = false;
  std::vector<std::string> op_names, values;
};

// noinline: call sites that are replicated many times (a GEMM's register block) call one copy
// instead of inlining the chain at each: NVRTC/ptxas time grows with code size, and an epilogue
// runs once per output element, so the call costs nothing next to the K loop.
Elem make_elem(const Ctx& c, const Group& g, size_t first, const std::string& head_value,
               const std::vector<std::string>& mat, const SymShape& main, const std::string& kname, bool fast,
               bool noinline = false) {
  Elem el;
  std::map<std::string, std::string> reg;
  reg[head_value] = "v0";
  std::ostringstream body;
  body << "  float v0 = head;\n";
  auto operand = [&](const std::string& value) -> std::string {
    auto it = reg.find(value);
    if (it != reg.end()) return it->second;
    for (const auto& e : el.ext)
      if (e.value == value) goto found;
    {
      ExtOperand e;
      e.value = value;
      e.dtype = c.dtype.at(value);
      e.var = "p" + std::to_string(el.ext.size());
      e.b = classify(c.shapes.at(value), main);
      el.ext.push_back(e);
    }
  found:
    for (const auto& e : el.ext) {
      if (e.value != value) continue;
      std::string idx = e.b.kind == Bcast::kSame     ? "flat"
                        : e.b.kind == Bcast::kScalar ? "0"
                                                     : "(flat / e." + e.var + "_inner) % e." + e.var + "_dim";
      return "(float)e." + e.var + "[" + idx + "]";
    }
    return "";
  };
  int next = 1;
  for (size_t k = first; k < g.ops.size(); ++k) {
    const OpSpec& op = c.op(g.ops[k]);
    std::string v = "v" + std::to_string(next++);
    std::string expr;
    if (op.inputs.size() == 1) {
      expr = unary_expr(op, operand(op.inputs[0]), fast);
    } else {
      std::string a = operand(op.inputs[0]), b = operand(op.inputs[1]);
      const char* sym = op.code() == OpCode::kAdd   ? " + "
                        : op.code() == OpCode::kSub ? " - "
                        : op.code() == OpCode::kMul ? " * "
                                                    : " / ";
      expr = "(" + a + sym + b + ")";
    }
    body << "  float " << v << " = " << expr << ";\n";
    reg[op.outputs[0]] = v;
    el.flops += op_flops(op.code());
    el.uses_transcendental |= transcendental(op.code());
    el.op_names.push_back(op.op);
    el.values.push_back(op.outputs[0]);
  }
  for (const auto& m : mat) {
    auto it = reg.find(m);
    if (it == reg.end()) continue;
    body << "  res[" << el.outs.size() << "] = " << it->second << ";\n";
    el.outs.push_back(m);
  }
  std::ostringstream s;
  s << "struct Ext_" << kname << " {";
  for (const auto& e : el.ext) {
    s << " const " << ctype(e.dtype) << "* " << e.var << ";";
    if (e.b.kind == Bcast::kDim) s << " long long " << e.var << "_inner; long long " << e.var << "_dim;";
  }
  if (el.ext.empty()) s << " int unused;";
  s << " };\n";
  s << (noinline ? "__device__ __noinline__ void elem_" : "__device__ __forceinline__ void elem_") << kname
    << "(long long flat, float head, const Ext_" << kname << "& e, float* res) {\n"
    << body.str() << "  (void)flat; (void)e;\n}\n";
  el.source = s.str();
  return el;
}

// Adds the elem operands to the kernel's parameters and returns the code that fills the struct.
std::string ext_params(const Elem& el, const std::string& kname, Params* p) {
  std::string fill = "  Ext_" + kname + " e;\n";
  if (el.ext.empty()) fill += "  e.unused = 0;\n";
  for (const auto& e : el.ext) {
    p->in(e.value, e.var, e.dtype);
    fill += "  e." + e.var + " = " + e.var + ";\n";
  }
  for (const auto& e : el.ext) {
    if (e.b.kind != Bcast::kDim) continue;
    p->i64(e.b.inner, e.var + "_inner");
    p->i64(e.b.dim, e.var + "_dim");
    fill += "  e." + e.var + "_inner = " + e.var + "_inner;\n  e." + e.var + "_dim = " + e.var + "_dim;\n";
  }
  return fill;
}

std::string ext_bytes(const Ctx& c, const Elem& el, const std::string& n) {
  std::string total = "0";
  for (const auto& e : el.ext) {
    std::string w = c.dtype.at(e.value) == "i64" ? "8" : "4";
    std::string count = e.b.kind == Bcast::kSame ? n : e.b.kind == Bcast::kScalar ? "1" : e.b.dim;
    total = expr_add(total, expr_mul(w, count));
  }
  return total;
}

void add_reason(Verdict* v, const std::string& reason, const std::string& fails_when) {
  v->guaranteed = false;
  v->reason += (v->reason.empty() ? "" : "; ") + reason;
  if (!fails_when.empty()) v->fails_when = v->fails_when.empty() ? fails_when : expr_add(v->fails_when, fails_when);
}

std::map<std::string, std::string> family_knob_values(const Ctx& c, const std::string& family) {
  std::map<std::string, std::string> out;
  for (const auto& k : family_knobs(family)) out[k.name] = c.knob(k.name);
  out["fusion"] = c.knob("fusion");
  return out;
}

// NVRTC has no <cmath>: INFINITY comes from its bit pattern. The header is part of every generated
// kernel's bytes, and so of every plan's address: it keeps the path this file had when it was
// written (gpu/codegen.cc), since a new text would make every committed measurement stale.
const char* kHeader =
    "// Generated by vinci's code generator (gpu/codegen.cc). Device code only.\n"
    "#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n";

// --- elementwise -----------------------------------------------------------------------------

// first > 0: the kernel is the epilogue of g, whose ops before `first` ran elsewhere (a library
// GEMM) and left their result in `head_value`, which the kernel reads and does not write.
void emit_elementwise(const Ctx& c, const Group& g, const std::string& kname, PlanKernel* k, PlanStep* step,
                      size_t first = 0, const std::string& head_value = "") {
  const OpSpec& head = c.op(g.ops[0]);
  const std::string& x = first == 0 ? head.inputs[0] : head_value;
  std::vector<std::string> mat = materialized(c, g);
  if (first > 0) mat.erase(std::remove(mat.begin(), mat.end(), x), mat.end());
  SymShape main = c.shapes.at(head.outputs[0]);
  int64_t B = c.knob_int("ew.block"), I = c.knob_int("ew.items_per_thread");
  int64_t V = c.knob_int("ew.vector_width");
  bool guarded = c.knob("ew.tail") == "guarded";
  bool fast = c.knob("ew.math") == "fast";
  std::string xdt = c.dtype.at(x);
  if (xdt != "f32") V = 1;  // vector loads are float2/float4 only
  Elem el = make_elem(c, g, first, x, mat, main, kname, fast);
  Params p;
  p.in(x, "x", xdt);
  std::string fill = ext_params(el, kname, &p);
  for (size_t o = 0; o < el.outs.size(); ++o) p.out(el.outs[o], "o" + std::to_string(o));
  std::string n = expr_product(main);
  p.i64(n, "n");
  size_t nout = el.outs.size();
  std::ostringstream s;
  s << kHeader << el.source;
  s << "extern \"C\" __global__ void __launch_bounds__(" << B << ") " << kname << "(" << p.list() << ") {\n"
    << fill << "  const long long base = (long long)blockIdx.x * " << (B * I * V) << "LL;\n"
    << "#pragma unroll\n"
    << "  for (int j = 0; j < " << I << "; ++j) {\n"
    << "    const long long i0 = base + ((long long)j * " << B << " + threadIdx.x) * " << V << ";\n";
  if (guarded)
    s << "    if (i0 + " << V << " <= n) {\n";
  else
    s << "    {\n";
  s << "      float hv[" << V << "];\n";
  if (V == 4)
    s << "      float4 q = *reinterpret_cast<const float4*>(x + i0);\n      hv[0] = q.x; hv[1] = q.y; hv[2] = q.z; "
         "hv[3] = q.w;\n";
  else if (V == 2)
    s << "      float2 q = *reinterpret_cast<const float2*>(x + i0);\n      hv[0] = q.x; hv[1] = q.y;\n";
  else
    s << "      hv[0] = (float)x[i0];\n";
  s << "      float r[" << V << "][" << nout << "];\n"
    << "#pragma unroll\n"
    << "      for (int t = 0; t < " << V << "; ++t) elem_" << kname << "(i0 + t, hv[t], e, r[t]);\n";
  for (size_t o = 0; o < nout; ++o) {
    std::string ov = "o" + std::to_string(o);
    if (V == 4)
      s << "      *reinterpret_cast<float4*>(" << ov << " + i0) = make_float4(r[0][" << o << "], r[1][" << o
        << "], r[2][" << o << "], r[3][" << o << "]);\n";
    else if (V == 2)
      s << "      *reinterpret_cast<float2*>(" << ov << " + i0) = make_float2(r[0][" << o << "], r[1][" << o << "]);\n";
    else
      s << "      " << ov << "[i0] = r[0][" << o << "];\n";
  }
  s << "    }\n";
  if (guarded) {
    s << "    else if (i0 < n) {\n"
      << "      for (long long i = i0; i < n; ++i) {\n"
      << "        float r[" << nout << "];\n"
      << "        elem_" << kname << "(i, (float)x[i], e, r);\n";
    for (size_t o = 0; o < nout; ++o) s << "        o" << o << "[i] = r[" << o << "];\n";
    s << "      }\n    }\n";
  }
  s << "  }\n}\n";

  k->name = kname;
  k->source = s.str();
  k->family = KernelFamily::kElementwise;
  k->knobs = family_knob_values(c, "elementwise");
  k->fused_ops = el.op_names;
  k->fused_values = el.values;
  k->block_threads = B;
  k->vector_width = V;
  k->items_per_thread = I;
  k->cost.elements = n;
  k->cost.bytes_read = expr_add(expr_mul(xdt == "i64" ? "8" : "4", n), ext_bytes(c, el, n));
  k->cost.bytes_written = expr_mul(std::to_string(4 * nout), n);
  k->cost.flops = expr_mul(std::to_string(el.flops), n);
  if (!guarded)
    add_reason(&k->verdict,
               "no tail handling: out-of-bounds accesses unless numel is a multiple of " + std::to_string(B * I * V),
               n + " % " + std::to_string(B * I * V));
  if (fast && el.uses_transcendental && c.task->atol < 1e-3)
    add_reason(&k->verdict, "precision: fast-math intrinsics against a tolerance below 1e-3", "");
  step->kind = StepKind::kKernel;
  step->kernel = kname;
  step->grid = {expr_ceil_div(n, std::to_string(B * I * V)), "1", "1"};
  step->block = {std::to_string(B), "1", "1"};
  step->args = p.args;
}

// --- row reductions --------------------------------------------------------------------------

const char* kRowPrelude = R"(struct MS { float m; float s; };
__device__ __forceinline__ float shfl_x(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ MS shfl_x(MS v, int o) {
  MS r; r.m = __shfl_xor_sync(0xffffffffu, v.m, o); r.s = __shfl_xor_sync(0xffffffffu, v.s, o); return r;
}
struct OpSum { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };
struct OpMax { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct OpMin { __device__ __forceinline__ float operator()(float a, float b) const { return fminf(a, b); } };
// Combines two (running max, sum of exp(x - max)) pairs: the online-softmax step.
struct OpMS {
  __device__ __forceinline__ MS operator()(MS a, MS b) const {
    MS r; r.m = fmaxf(a.m, b.m);
    if (r.m == -INFINITY) { r.s = 0.0f; return r; }
    r.s = a.s * expf(a.m - r.m) + b.s * expf(b.m - r.m);
    return r;
  }
};
template <class T, class F> __device__ __forceinline__ T warp_allreduce(T v, F f) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = f(v, shfl_x(v, o));
  return v;
}
template <int BLOCK, class T, class F> __device__ __forceinline__ T block_tree(T v, F f, T* sm) {
  sm[threadIdx.x] = v;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sm[threadIdx.x] = f(sm[threadIdx.x], sm[threadIdx.x + s]);
    __syncthreads();
  }
  T r = sm[0];
  __syncthreads();
  return r;
}
// The classic warp-synchronous tail: no synchronisation among the last 32 lanes. A race on
// sm_70+ (independent thread scheduling); kept because the policy must learn to avoid it.
template <int BLOCK, class T, class F> __device__ __forceinline__ T block_tree_racy(T v, F f, T* sm) {
  sm[threadIdx.x] = v;
  __syncthreads();
  for (int s = BLOCK / 2; s > 32; s >>= 1) {
    if (threadIdx.x < s) sm[threadIdx.x] = f(sm[threadIdx.x], sm[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x < 32)
    for (int s = 32; s > 0; s >>= 1) sm[threadIdx.x] = f(sm[threadIdx.x], sm[threadIdx.x + s]);
  __syncthreads();
  T r = sm[0];
  __syncthreads();
  return r;
}
template <int BLOCK, class T, class F> __device__ __forceinline__ T block_shuffle(T v, F f, T id, T* sm) {
  v = warp_allreduce(v, f);
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  if (l == 0) sm[w] = v;
  __syncthreads();
  if (w == 0) {
    T t = (l < BLOCK / 32) ? sm[l] : id;
    t = warp_allreduce(t, f);
    if (l == 0) sm[0] = t;
  }
  __syncthreads();
  T r = sm[0];
  __syncthreads();
  return r;
}
)";

// row.strategy inner_tile: lane l of every warp owns the block's row l; the warps split the
// row's length. Each lane's partial results meet in shared memory and warp 0 folds them in warp
// order (a fixed order: the result does not depend on scheduling); every thread gets its row's.
const char* kTileReduce = R"(template <int BLOCK, typename T, typename F>
__device__ __forceinline__ T tile_reduce(T v, F f, T* sm) {
  const int l = threadIdx.x & 31, w = threadIdx.x >> 5;
  sm[threadIdx.x] = v;
  __syncthreads();
  if (w == 0) {
    T t = sm[l];
#pragma unroll
    for (int k = 1; k < BLOCK / 32; ++k) t = f(t, sm[k * 32 + l]);
    sm[l] = t;
  }
  __syncthreads();
  T r = sm[l];
  __syncthreads();
  return r;
}
)";

// One element into a running (max, sum of exp(x - max)) pair: one expf per element. -inf
// elements (a causal mask's) add nothing, and never form -inf - -inf.
const char* kOnlineStep =
    "if (v > acc.m) { acc.s = acc.s * expf(acc.m - v) + 1.0f; acc.m = v; } "
    "else if (v > -INFINITY) { acc.s += expf(v - acc.m); }";

// What a row kernel's strategy (row.strategy and its knobs) writes: how a thread's partial result
// meets the others', and how a thread walks its row.
struct RowText {
  std::string strategy;
  bool racy = false;  // block_tree with a warp-synchronous tail (row.sync): a race on sm_70+
  int64_t B = 0;      // row.block
  int64_t V = 0;      // row.vector_width
  int64_t U = 0;      // row.unroll
  RowLayout L;

  bool tile() const { return strategy == "inner_tile"; }
  bool block() const { return strategy == "block_tree" || strategy == "block_shuffle"; }
  bool per_thread() const { return strategy == "thread_per_row"; }

  std::string reduce_call(const std::string& v, const std::string& op, const std::string& id, bool pair) const {
    std::string sm = pair ? "smp" : "smf";
    std::string T = pair ? "MS" : "float";
    if (strategy == "thread_per_row") return v;  // the thread saw the whole row
    if (tile()) return "tile_reduce<" + std::to_string(B) + ", " + T + ">(" + v + ", " + op + "(), " + sm + ")";
    if (strategy == "warp_shuffle") return "warp_allreduce(" + v + ", " + op + "())";
    if (strategy == "block_tree")
      return std::string(racy ? "block_tree_racy<" : "block_tree<") + std::to_string(B) + ", " + T + ">(" + v + ", " +
             op + "(), " + sm + ")";
    return "block_shuffle<" + std::to_string(B) + ", " + T + ">(" + v + ", " + op + "(), " + id + ", " + sm + ")";
  }
  std::string loop(const std::string& body) const {
    std::ostringstream s;
    s << "  {\n";
    // A strided row (inner > 1) is read a float at a time, unrolled by row.unroll so that its
    // loads are in flight together: on the H200, inner_tile's sum over dim 1 of [128, 4096, 4095]
    // went from 0.62x of PyTorch with the loop rolled to 1.01x unrolled
    // (docs/h200_kernelbench_suite.md, "Strided rows unrolled").
    if (!(V == 4 && L.inner == "1")) {
      s << "    {\n#pragma unroll " << U << "\n"
        << "      for (long long r = tid; r < R; r += nth) { const float v = xr[r * inner]; (void)r; " << body << " }\n"
        << "    }\n  }\n";
      return s.str();
    }
    // A contiguous row whose length divides by 4 is read as float4; other rows fall back to
    // scalar loads. The float4 loop already handles 4 elements per iteration; unrolling it again
    // would only multiply code size (and compile time), and the fallback stays rolled: on the
    // H200, a float4 path that also covered odd rows (peeled to the first 16-byte boundary) took
    // l1_norm and l2_norm over rows of 65535 from 0.94x and 0.91x to 1.05x and 1.08x, but its
    // larger body slowed the aligned rows of other tasks even behind a uniform branch (softmax
    // over rows of 393216: 1.30x to 1.10x; conv_transpose3d_layernorm_gelu_scaling: 0.96x to
    // 0.79x), so it is not generated (docs/h200_kernelbench_suite.md).
    s << "    if (inner == 1 && (R & 3) == 0) {\n"
      << "      const float4* x4 = reinterpret_cast<const float4*>(xr);\n"
      << "#pragma unroll 1\n"
      << "      for (long long q = tid; q < R / 4; q += nth) {\n"
      << "        const float4 t4 = x4[q];\n"
      << "        const float vv[4] = {t4.x, t4.y, t4.z, t4.w};\n"
      << "#pragma unroll\n"
      << "        for (int u = 0; u < 4; ++u) { const long long r = 4 * q + u; const float v = vv[u]; (void)r; " << body
      << " }\n"
      << "      }\n    } else\n"
      << "    {\n#pragma unroll 1\n"
      << "      for (long long r = tid; r < R; r += nth) { const float v = xr[r * inner]; (void)r; " << body << " }\n"
      << "    }\n  }\n";
    return s.str();
  }
};

// The body of a row kernel after the row's set-up: the op's passes over the row (a reduction's
// result, or the row normalised and written through write_out) and the row's epilogue.
struct RowBody {
  std::string text;
  int passes = 1;  // reads of the row
  std::string algorithm;
};

RowBody row_body(const Ctx& c, const OpSpec& head, const RowText& t, const std::string& kname, size_t nout,
                 const std::string& write_out, bool online) {
  RowBody out;
  std::ostringstream b;
  const OpCode n = head.code();
  if (find_op(head.op)->kind == OpKind::kReduce) {
    std::string result;
    if (n == OpCode::kSum || n == OpCode::kMean || n == OpCode::kNormL2) {
      b << "  float acc = 0.0f;\n" << t.loop(n == OpCode::kNormL2 ? "acc += v * v;" : "acc += v;");
      b << "  acc = " << t.reduce_call("acc", "OpSum", "0.0f", false) << ";\n";
      result = n == OpCode::kSum ? "acc" : n == OpCode::kMean ? "acc / (float)R" : "sqrtf(acc)";
    } else if (n == OpCode::kAmax || n == OpCode::kAmin) {
      bool mx = n == OpCode::kAmax;
      b << "  float acc = " << (mx ? "-INFINITY" : "INFINITY") << ";\n"
        << t.loop(std::string("acc = ") + (mx ? "fmaxf" : "fminf") + "(acc, v);");
      b << "  acc = " << t.reduce_call("acc", mx ? "OpMax" : "OpMin", mx ? "-INFINITY" : "INFINITY", false) << ";\n";
      result = "acc";
    } else {  // logsumexp: online (max, sum) pairs
      b << "  MS acc; acc.m = -INFINITY; acc.s = 0.0f;\n" << t.loop(kOnlineStep);
      b << "  MS idm; idm.m = -INFINITY; idm.s = 0.0f;\n";
      b << "  acc = " << t.reduce_call("acc", "OpMS", "idm", true) << ";\n";
      result = "acc.m + logf(acc.s)";
      out.algorithm = "online";
    }
    b << (t.tile() ? "  if (tid == 0 && live) { const float h = " : "  if (tid == 0) { const float h = ") << result
      << "; float rr[" << nout << "]; elem_" << kname << "(row, h, e, rr);";
    for (size_t o = 0; o < nout; ++o) b << " o" << o << "[row] = rr[" << o << "];";
    b << " }\n";
  } else if (n == OpCode::kSoftmax || n == OpCode::kLogSoftmax) {
    if (online) {
      b << "  MS acc; acc.m = -INFINITY; acc.s = 0.0f;\n"
        << t.loop(kOnlineStep) << "  MS idm; idm.m = -INFINITY; idm.s = 0.0f;\n"
        << "  acc = " << t.reduce_call("acc", "OpMS", "idm", true) << ";\n"
        << "  const float mx = acc.m, sum = acc.s;\n";
      out.passes = 2;
      out.algorithm = "online";
    } else {
      b << "  float mx = -INFINITY;\n"
        << t.loop("mx = fmaxf(mx, v);") << "  mx = " << t.reduce_call("mx", "OpMax", "-INFINITY", false) << ";\n"
        << "  float sum = 0.0f;\n"
        << t.loop("sum += expf(v - mx);") << "  sum = " << t.reduce_call("sum", "OpSum", "0.0f", false) << ";\n";
      out.passes = 3;
      out.algorithm = "two_pass";
    }
    b << "  const float inv = 1.0f / sum, lse = mx + logf(sum);\n  (void)inv; (void)lse;\n";
    b << t.loop(std::string("const float h = ") + (n == OpCode::kSoftmax ? "expf(v - mx) * inv;" : "v - lse;") + " " +
                write_out);
  } else if (n == OpCode::kRmsNorm) {
    b << "  float acc = 0.0f;\n"
      << t.loop("acc += v * v;") << "  acc = " << t.reduce_call("acc", "OpSum", "0.0f", false) << ";\n"
      << "  const float den = sqrtf(acc / (float)R + " << flit(attr_double_or(head.attrs, "eps", 1e-5)) << ");\n"
      << t.loop("const float h = v / den; " + write_out);
    out.passes = 2;
  } else {  // layer_norm: mean, then the variance around it (two passes: no cancellation)
    double eps = attr_double_or(c.modules.at(head.module)->attrs, "eps", 1e-5);
    b << "  float acc = 0.0f;\n"
      << t.loop("acc += v;") << "  const float mean = " << t.reduce_call("acc", "OpSum", "0.0f", false)
      << " / (float)R;\n"
      << "  float acc2 = 0.0f;\n"
      << t.loop("const float d = v - mean; acc2 += d * d;") << "  const float rstd = rsqrtf("
      << t.reduce_call("acc2", "OpSum", "0.0f", false) << " / (float)R + " << flit(eps) << ");\n"
      << t.loop("const float h = (v - mean) * rstd * lw[r] + lb[r]; " + write_out);
    out.passes = 3;
    out.algorithm = "two_pass";
  }
  out.text = b.str();
  return out;
}

// Which row a thread works on, and its place in the row's threads (tid of nth).
std::string row_indexing(const RowText& t) {
  std::ostringstream s;
  if (t.block()) {
    s << "  const int tid = threadIdx.x; const int nth = " << t.B << ";\n  const long long row = blockIdx.x;\n";
  } else if (t.tile()) {
    s << "  const int tid = threadIdx.x >> 5; const int nth = " << t.B / 32 << ";\n"
      << "  const long long tiles = (inner + 31) / 32;\n"
      << "  const long long o = blockIdx.x / tiles, ii0 = (blockIdx.x % tiles) * 32 + (threadIdx.x & 31);\n"
      << "  const bool live = ii0 < inner;\n"
      << "  const long long ii = live ? ii0 : inner - 1;\n"
      << "  const long long row = o * inner + ii;  // < rows: the grid is outer x tiles\n"
      << "  (void)rows;\n";
  } else if (t.per_thread()) {
    // One thread per row: neighbouring threads take neighbouring rows, which is coalesced when
    // the reduced dim is strided (inner > 1) and uncoalesced when rows are contiguous.
    s << "  const int tid = 0; const int nth = 1;\n"
      << "  const long long row = (long long)blockIdx.x * " << t.B << " + threadIdx.x;\n"
      << "  if (row >= rows) return;\n";
  } else {
    s << "  const int tid = threadIdx.x & 31; const int nth = 32;\n"
      << "  const long long row = (long long)blockIdx.x * " << t.B / 32 << " + (threadIdx.x >> 5);\n"
      << "  if (row >= rows) return;\n";
  }
  if (!t.tile()) s << "  const long long o = row / inner, ii = row % inner;\n";
  return s.str();
}

void emit_row(const Ctx& c, const Group& g, const std::string& kname, PlanKernel* k, PlanStep* step) {
  const OpSpec& head = c.op(g.ops[0]);
  RowText t;
  VINCI_ASSERT(row_layout(c, head, &t.L));
  const RowLayout& L = t.L;
  const std::string& x = head.inputs[0];
  std::vector<std::string> mat = materialized(c, g);
  SymShape main = c.shapes.at(head.outputs[0]);
  t.strategy = c.knob("row.strategy");
  t.racy = c.knob("row.sync") == "warp_synchronous" && t.strategy == "block_tree";
  t.B = c.knob_int("row.block");
  t.V = c.knob_int("row.vector_width");
  t.U = c.knob_int("row.unroll");
  const int64_t B = t.B;
  Elem el = make_elem(c, g, 1, head.outputs[0], mat, main, kname, false);
  Params p;
  p.in(x, "x", "f32");
  bool ln = head.code() == OpCode::kLayerNorm;
  if (ln) {
    p.in(head.module + ".weight", "lw", "f32");
    p.in(head.module + ".bias", "lb", "f32");
  }
  std::string fill = ext_params(el, kname, &p);
  for (size_t o = 0; o < el.outs.size(); ++o) p.out(el.outs[o], "o" + std::to_string(o));
  std::string rows = expr_mul(L.outer, L.inner);
  p.i64(rows, "rows");
  p.i64(L.R, "R");
  p.i64(L.inner, "inner");
  size_t nout = el.outs.size();

  std::string write_out = "float rr[" + std::to_string(nout) +
                          "]; const long long flat = (o * R + r) * inner + ii; elem_" + kname + "(flat, h, e, rr);";
  for (size_t o = 0; o < nout; ++o) write_out += " o" + std::to_string(o) + "[flat] = rr[" + std::to_string(o) + "];";
  // inner_tile: lanes past the last row read a live row's data (in bounds) and write nothing.
  const bool tile = t.tile(), block = t.block(), per_thread = t.per_thread();
  if (tile) write_out = "if (live) { " + write_out + " }";

  const RowBody body = row_body(c, head, t, kname, nout, write_out, c.knob("row.softmax") == "online");

  std::ostringstream s;
  s << kHeader << kRowPrelude << (tile ? kTileReduce : "") << el.source;
  s << "extern \"C\" __global__ void __launch_bounds__(" << B << ") " << kname << "(" << p.list() << ") {\n";
  if (block || tile)
    s << "  __shared__ float smf[" << B << "];\n  __shared__ MS smp[" << B << "];\n  (void)smf; (void)smp;\n";
  else
    s << "  float* smf = nullptr; MS* smp = nullptr; (void)smf; (void)smp;\n";
  s << fill;
  s << row_indexing(t);
  s << "  const float* xr = x + o * R * inner + ii;\n" << body.text << "}\n";

  k->name = kname;
  k->source = s.str();
  k->family = KernelFamily::kRowReduction;
  k->knobs = family_knob_values(c, "row_reduction");
  k->fused_ops.push_back(head.op);
  k->fused_values.push_back(head.outputs[0]);
  k->fused_ops.insert(k->fused_ops.end(), el.op_names.begin(), el.op_names.end());
  k->fused_values.insert(k->fused_values.end(), el.values.begin(), el.values.end());
  k->block_threads = B;
  k->vector_width = (t.V == 4 && L.inner == "1") ? 4 : 1;
  k->reduction = per_thread ? "sequential" : t.strategy;
  k->algorithm = body.algorithm;
  k->shared_bytes = block || tile ? B * 12 : 0;
  std::string numel = expr_product(c.shapes.at(x));
  std::string out_n = expr_product(main);
  k->cost.elements = out_n;
  k->cost.bytes_read = expr_add(expr_mul(std::to_string(4 * body.passes), numel),
                                expr_add(ext_bytes(c, el, out_n), ln ? expr_mul("8", L.R) : "0"));
  k->cost.bytes_written = expr_mul(std::to_string(4 * nout), out_n);
  k->cost.flops = expr_add(expr_mul(std::to_string(find_op(head.op)->kind == OpKind::kReduce ? 2 : 6), numel),
                           expr_mul(std::to_string(el.flops), out_n));
  if (t.racy) add_reason(&k->verdict, "race: warp-synchronous tree tail without __syncwarp (undefined on sm_70+)", "");
  step->kind = StepKind::kKernel;
  step->kernel = kname;
  step->grid = {block  ? rows
                : tile ? expr_mul(L.outer, expr_ceil_div(L.inner, "32"))
                       : expr_ceil_div(rows, std::to_string(per_thread ? B : B / 32)),
                "1", "1"};
  step->block = {std::to_string(B), "1", "1"};
  step->args = p.args;
}

// --- GEMM ------------------------------------------------------------------------------------

// What both GEMM bodies share: the tile's knobs and the text of the loads and of the epilogue.
struct GemmText {
  int64_t TM = 0, TN = 0, TK = 0;  // gemm.tile_m, tile_n, tile_k (tile_k raised to 16 for 16-bit operands)
  int64_t T = 0, U = 0;            // threads per block (raised to fit the accumulators), gemm.unroll
  bool checked = false;            // gemm.bounds: loads and stores guarded at the matrices' edges
  bool half = false;               // 16-bit operands (fp16, bf16)
  std::string ht, to_ht;           // their type and conversion
  std::string a_at, b_at;          // A(m, k) and B(k, n) in their stored layouts
  std::string a_idx, b_idx;        // a thread's element of a tile load (coalesced)
  std::string store, store_guard;  // the epilogue of one output element

  std::string guard(const std::string& cond, const std::string& load) const {
    return checked ? "(" + cond + ") ? " + load + " : 0.0f" : load;
  }
};

// The body of a GEMM kernel on the CUDA cores: each thread accumulates an RM x RN block of the
// tile in registers from the tiles staged in shared memory.
std::string gemm_simt_body(const GemmText& t, int64_t* RM_out, int64_t* RN_out, int64_t* shared) {
  const int64_t TM = t.TM, TN = t.TN, TK = t.TK, T = t.T, U = t.U;
  auto guard = [&](const std::string& cond, const std::string& load) { return t.guard(cond, load); };
  std::ostringstream s;
  int64_t RM = 0, RN = 0;
  int64_t per = TM * TN / T;  // outputs per thread: a power of two in [4, 64]
  RN = 1;
  while (RN * RN < per) RN *= 2;
  RM = per / RN;
  if (RM < RN) std::swap(RM, RN);
  int64_t TXN = TN / RN;
  *shared = 4 * TK * (TM + TN);
  s << "  __shared__ float As[" << TK << "][" << TM << "];\n  __shared__ float Bs[" << TK << "][" << TN << "];\n"
    << "  const int tx = tid % " << TXN << ", ty = tid / " << TXN << ";\n"
    << "  float acc[" << RM << "][" << RN << "];\n"
    << "#pragma unroll\n  for (int i = 0; i < " << RM << "; ++i)\n#pragma unroll\n    for (int j = 0; j < " << RN
    << "; ++j) acc[i][j] = 0.0f;\n"
    << "  for (long long k0 = 0; k0 < K; k0 += " << TK << ") {\n"
    << "    for (int idx = tid; idx < " << TM * TK << "; idx += " << T << ") {\n"
    << "      " << t.a_idx << "\n      const long long gm = m0 + mm, gk = k0 + kk;\n"
    << "      As[kk][mm] = " << guard("gm < M && gk < K", t.a_at) << ";\n    }\n"
    << "    for (int idx = tid; idx < " << TN * TK << "; idx += " << T << ") {\n"
    << "      " << t.b_idx << "\n      const long long gn = n0 + nn, gk = k0 + kk;\n"
    << "      Bs[kk][nn] = " << guard("gn < N && gk < K", t.b_at) << ";\n    }\n"
    << "    __syncthreads();\n"
    << "#pragma unroll " << U << "\n"
    << "    for (int kk = 0; kk < " << TK << "; ++kk) {\n"
    << "      float a[" << RM << "], b[" << RN << "];\n"
    << "#pragma unroll\n      for (int i = 0; i < " << RM << "; ++i) a[i] = As[kk][ty * " << RM << " + i];\n"
    << "#pragma unroll\n      for (int j = 0; j < " << RN << "; ++j) b[j] = Bs[kk][tx * " << RN << " + j];\n"
    << "#pragma unroll\n      for (int i = 0; i < " << RM << "; ++i)\n#pragma unroll\n        for (int j = 0; j < "
    << RN << "; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);\n"
    << "    }\n    __syncthreads();\n  }\n"
    << "#pragma unroll\n  for (int i = 0; i < " << RM << "; ++i)\n#pragma unroll\n    for (int j = 0; j < " << RN
    << "; ++j) {\n"
    << "      const long long gm = m0 + ty * " << RM << " + i, gn = n0 + tx * " << RN << " + j;\n"
    << "      const float acc_v = acc[i][j];\n"
    << "      " << t.store_guard << "{ " << t.store << " }\n    }\n}\n";
  *RM_out = RM;
  *RN_out = RN;
  return s.str();
}

// The body of a GEMM kernel on the tensor cores (wmma): each warp owns up to 8 16x16 accumulator
// fragments of the tile; the epilogue goes through a per-warp 16x16 staging tile in shared memory.
std::string gemm_wmma_body(const GemmText& t, int64_t* shared) {
  const int64_t TM = t.TM, TN = t.TN, TK = t.TK, T = t.T, U = t.U;
  const bool half = t.half;
  auto guard = [&](const std::string& cond, const std::string& load) { return t.guard(cond, load); };
  std::ostringstream s;
  int64_t W = T / 32, FM = TM / 16, FN = TN / 16, NF = FM * FN, FPW = (NF + W - 1) / W;
  // Padding of 32 bytes (4 floats, 8 halves): keeps 32-byte fragment alignment, fewer bank conflicts.
  int64_t pad = half ? 8 : 4, lda = TK + pad, ldb = TN + pad, fk = half ? 16 : 8;
  const std::string et = half ? t.ht : "float";
  *shared = (half ? 2 : 4) * (TM * lda + TK * ldb) + 4 * W * 256;
  auto to_et = [&](const std::string& v) { return half ? t.to_ht + "(" + v + ")" : v; };
  const std::string frag_t = half ? t.ht : "wmma::precision::tf32";
  s << "  __shared__ __align__(32) " << et << " As[" << TM << "][" << lda << "];\n"
    << "  __shared__ __align__(32) " << et << " Bs[" << TK << "][" << ldb << "];\n"
    << "  __shared__ __align__(32) float Cs[" << W << "][256];\n"
    << "  const int warp = tid >> 5, lane = tid & 31;\n"
    << "  wmma::fragment<wmma::accumulator, 16, 16, " << fk << ", float> acc[" << FPW << "];\n"
    << "#pragma unroll\n  for (int f = 0; f < " << FPW << "; ++f) wmma::fill_fragment(acc[f], 0.0f);\n"
    << "  for (long long k0 = 0; k0 < K; k0 += " << TK << ") {\n"
    << "    for (int idx = tid; idx < " << TM * TK << "; idx += " << T << ") {\n"
    << "      " << t.a_idx << "\n      const long long gm = m0 + mm, gk = k0 + kk;\n"
    << "      As[mm][kk] = " << to_et(guard("gm < M && gk < K", t.a_at)) << ";\n    }\n"
    << "    for (int idx = tid; idx < " << TN * TK << "; idx += " << T << ") {\n"
    << "      " << t.b_idx << "\n      const long long gn = n0 + nn, gk = k0 + kk;\n"
    << "      Bs[kk][nn] = " << to_et(guard("gn < N && gk < K", t.b_at)) << ";\n    }\n"
    << "    __syncthreads();\n"
    << "#pragma unroll " << U << "\n"
    << "    for (int ks = 0; ks < " << TK << "; ks += " << fk << ") {\n"
    << "#pragma unroll\n      for (int f = 0; f < " << FPW << "; ++f) {\n"
    << "        const int fi = warp + f * " << W << ";\n"
    << "        if (fi < " << NF << ") {\n"
    << "          const int fm = fi / " << FN << ", fn = fi % " << FN << ";\n"
    << "          wmma::fragment<wmma::matrix_a, 16, 16, " << fk << ", " << frag_t << ", wmma::row_major> a;\n"
    << "          wmma::fragment<wmma::matrix_b, 16, 16, " << fk << ", " << frag_t << ", wmma::row_major> b;\n"
    << "          wmma::load_matrix_sync(a, &As[fm * 16][ks], " << lda << ");\n"
    << "          wmma::load_matrix_sync(b, &Bs[ks][fn * 16], " << ldb << ");\n";
  if (!half)
    s << "#pragma unroll\n          for (int t = 0; t < a.num_elements; ++t) a.x[t] = "
         "wmma::__float_to_tf32(a.x[t]);\n"
      << "#pragma unroll\n          for (int t = 0; t < b.num_elements; ++t) b.x[t] = "
         "wmma::__float_to_tf32(b.x[t]);\n";
  s << "          wmma::mma_sync(acc[f], a, b, acc[f]);\n"
    << "        }\n      }\n    }\n    __syncthreads();\n  }\n"
    << "#pragma unroll\n  for (int f = 0; f < " << FPW << "; ++f) {\n"
    << "    const int fi = warp + f * " << W << ";\n"
    << "    if (fi >= " << NF << ") break;\n"
    << "    const int fm = fi / " << FN << ", fn = fi % " << FN << ";\n"
    << "    wmma::store_matrix_sync(&Cs[warp][0], acc[f], 16, wmma::mem_row_major);\n"
    << "    __syncwarp();\n"
    << "    for (int el = lane; el < 256; el += 32) {\n"
    << "      const long long gm = m0 + fm * 16 + el / 16, gn = n0 + fn * 16 + el % 16;\n"
    << "      const float acc_v = Cs[warp][el];\n"
    << "      " << t.store_guard << "{ " << t.store << " }\n"
    << "    }\n    __syncwarp();\n  }\n}\n";
  return s.str();
}

// The precision gemm.tensor_cores names: off is fp32, the others their own names (the knob space
// allows off, tf32, bf16 and fp16 only).
Precision tensor_cores_precision(const Ctx& c) {
  const std::string& knob = c.knob("gemm.tensor_cores");
  Result<Precision> p = kPrecisions.parse(knob);
  return knob == "off" || !p.ok() ? Precision::kFp32 : *p;
}

// What a GEMM kernel's knobs put at risk, for the verdict: unguarded edges, reduced precision.
void add_gemm_reasons(const GemmShape& G, const GemmText& t, Precision precision, Verdict* verdict) {
  const int64_t TM = t.TM, TN = t.TN, TK = t.TK;
  if (!t.checked)
    add_reason(verdict, "no edge handling: out-of-bounds tiles unless M, N, K divide the tile",
               G.M + " % " + std::to_string(TM) + " + " + G.N + " % " + std::to_string(TN) + " + " + G.K + " % " +
                   std::to_string(TK));
  if (precision == Precision::kTf32)
    add_reason(verdict,
               "precision: tf32 products (10-bit mantissa); the error grows like sqrt(K) and can pass "
               "atol/rtol 1e-2 yet fails a strict 1e-4 check",
               "");
  if (precision == Precision::kBf16)
    add_reason(verdict,
               "precision: bf16 operands (7-bit mantissa, 4x tf32's rounding); the error grows like sqrt(K) "
               "and fails atol/rtol 1e-2 on long products of unit-scale inputs",
               "");
  if (precision == Precision::kFp16)
    add_reason(verdict,
               "precision: fp16 operands (10-bit mantissa, as tf32; values beyond 65504 overflow to inf); the "
               "error grows like sqrt(K) and fails a strict 1e-4 check",
               "");
}

void emit_gemm(const Ctx& c, const Group& g, const std::string& kname, PlanKernel* k, PlanStep* step) {
  const OpSpec& head = c.op(g.ops[0]);
  GemmShape G;
  VINCI_ASSERT(gemm_shape(c, head, &G));
  std::vector<std::string> mat = materialized(c, g);
  SymShape main = c.shapes.at(head.outputs[0]);
  GemmText t;
  int64_t &TM = t.TM, &TN = t.TN, &TK = t.TK, &T = t.T;
  TM = c.knob_int("gemm.tile_m");
  TN = c.knob_int("gemm.tile_n");
  TK = c.knob_int("gemm.tile_k");
  T = c.knob_int("gemm.threads");
  t.U = c.knob_int("gemm.unroll");
  const Precision precision = tensor_cores_precision(c);
  bool tc = precision != Precision::kFp32;
  // 16-bit operands: wmma m16n16k16, tiles kept in shared memory in that type (converted as they are
  // loaded), a k-step of 16. A 16-deep fragment needs tile_k >= 16; it is raised (tile records it).
  t.half = is_16bit_precision(precision);
  if (t.half) TK = std::max<int64_t>(TK, 16);
  t.ht = precision == Precision::kBf16 ? "__nv_bfloat16" : "__half";
  t.to_ht = precision == Precision::kBf16 ? "__float2bfloat16" : "__float2half";
  const bool checked = t.checked = c.knob("gemm.bounds") == "checked";
  // At most 64 accumulators per thread (an 8x8 register block): more spills to local memory and
  // takes seconds to compile. The thread count is raised to fit; block_threads records it.
  if (!tc) T = std::max(T, TM * TN / 64);
  // Likewise at most 8 accumulator fragments per warp on the tensor-core path (a 128x128 tile on
  // 2 warps took 5.5 s to compile on the GPU machine); 8 warps keep static shared memory <= 43 KiB.
  if (tc) T = std::max(T, 32 * (((TM / 16) * (TN / 16) + 7) / 8));
  Elem el = make_elem(c, g, 1, head.outputs[0], mat, main, kname, false, /*noinline=*/g.ops.size() > 2);
  Params p;
  p.in(G.A, "A", "f32");
  p.in(G.B, "B", "f32");
  if (!G.bias.empty()) p.in(G.bias, "bias", "f32");
  std::string fill = ext_params(el, kname, &p);
  for (size_t o = 0; o < el.outs.size(); ++o) p.out(el.outs[o], "o" + std::to_string(o));
  p.i64(G.M, "M");
  p.i64(G.N, "N");
  p.i64(G.K, "K");
  p.i64(G.a_bs, "a_bs");
  p.i64(G.b_bs, "b_bs");
  size_t nout = el.outs.size();
  // Global index of A(m, k) and B(k, n) in their stored layouts.
  t.a_at = G.ta ? "Ab[gk * M + gm]" : "Ab[gm * K + gk]";
  t.b_at = G.tb ? "Bb[gn * K + gk]" : "Bb[gk * N + gn]";
  std::string& store = t.store;
  store = "const float h = acc_v" + std::string(G.bias.empty() ? "" : " + bias[gn]") + "; float rr[" +
          std::to_string(nout) + "]; const long long flat = (bz * M + gm) * N + gn; elem_" + kname +
          "(flat, h, e, rr);";
  for (size_t o = 0; o < nout; ++o) store += " o" + std::to_string(o) + "[flat] = rr[" + std::to_string(o) + "];";
  t.store_guard = checked ? "if (gm < M && gn < N) " : "";
  // Coalesced tile loads: consecutive threads walk the dimension that is contiguous in memory.
  t.a_idx = G.ta ? "const int mm = idx % " + std::to_string(TM) + ", kk = idx / " + std::to_string(TM) + ";"
                 : "const int kk = idx % " + std::to_string(TK) + ", mm = idx / " + std::to_string(TK) + ";";
  t.b_idx = G.tb ? "const int kk = idx % " + std::to_string(TK) + ", nn = idx / " + std::to_string(TK) + ";"
                 : "const int nn = idx % " + std::to_string(TN) + ", kk = idx / " + std::to_string(TN) + ";";

  std::ostringstream s;
  s << kHeader;
  int64_t RM = 0, RN = 0, shared = 0;
  if (tc)
    s << "#include <mma.h>\n"
      << (precision == Precision::kBf16   ? "#include <cuda_bf16.h>\n"
          : precision == Precision::kFp16 ? "#include <cuda_fp16.h>\n"
                                          : "")
      << "using namespace nvcuda;\n";
  s << el.source;
  s << "extern \"C\" __global__ void __launch_bounds__(" << T << ") " << kname << "(" << p.list() << ") {\n"
    << fill << "  const int tid = threadIdx.x;\n"
    << "  const long long bz = blockIdx.z, m0 = (long long)blockIdx.y * " << TM << ", n0 = (long long)blockIdx.x * "
    << TN << ";\n"
    << "  const float* Ab = A + bz * a_bs;\n  const float* Bb = B + bz * b_bs;\n";
  if (!tc)
    s << gemm_simt_body(t, &RM, &RN, &shared);
  else
    s << gemm_wmma_body(t, &shared);
  k->name = kname;
  k->source = s.str();
  k->family = KernelFamily::kGemm;
  k->knobs = family_knob_values(c, "gemm");
  k->fused_ops.push_back(head.op);
  k->fused_values.push_back(head.outputs[0]);
  k->fused_ops.insert(k->fused_ops.end(), el.op_names.begin(), el.op_names.end());
  k->fused_values.insert(k->fused_values.end(), el.values.begin(), el.values.end());
  k->block_threads = T;
  k->tile = {{TM, TN, TK}};
  k->thread_tile = {{RM, RN}};
  k->tensor_cores = tc;
  k->precision = precision;
  k->shared_bytes = shared;
  std::string mn = expr_mul(G.batch, expr_mul(G.M, G.N));
  std::string a_n = expr_mul(G.a_bs == "0" ? "1" : G.batch, expr_mul(G.M, G.K));
  std::string b_n = expr_mul(G.b_bs == "0" ? "1" : G.batch, expr_mul(G.K, G.N));
  k->cost.elements = mn;
  k->cost.bytes_read = expr_add(expr_mul("4", expr_add(a_n, b_n)),
                                expr_add(ext_bytes(c, el, mn), G.bias.empty() ? "0" : expr_mul("4", G.N)));
  k->cost.bytes_written = expr_mul(std::to_string(4 * nout), mn);
  k->cost.flops = expr_add(expr_mul("2", expr_mul(mn, G.K)), expr_mul(std::to_string(el.flops), mn));
  add_gemm_reasons(G, t, precision, &k->verdict);
  step->kind = StepKind::kKernel;
  step->kernel = kname;
  step->grid = {expr_ceil_div(G.N, std::to_string(TN)), expr_ceil_div(G.M, std::to_string(TM)), G.batch};
  step->block = {std::to_string(T), "1", "1"};
  step->args = p.args;
}

// ---------------------------------------------------------------------------------------------

Result<Ctx> analyse(const Task& task) {
  Ctx c;
  c.task = &task;
  VINCI_ASSIGN_OR_RETURN(c.shapes, infer_shapes(task));
  for (const auto& in : task.inputs) c.dtype[in.name] = in.domain == InputDomain::kIndex ? "i64" : "f32";
  VINCI_ASSIGN_OR_RETURN(std::vector<WeightSpec> weights, weight_specs(task));
  for (const auto& w : weights) c.dtype[w.name] = "f32";
  for (size_t i = 0; i < task.ops.size(); ++i) {
    for (const auto& in : task.ops[i].inputs) c.consumers[in].push_back(i);
    for (const auto& out : task.ops[i].outputs) c.dtype[out] = op_outputs_indices(task.ops[i].op) ? "i64" : "f32";
  }
  for (const auto& m : task.modules) c.modules[m.name] = &m;
  for (const char* fam : {"plan", "elementwise", "row_reduction", "gemm"})
    for (const auto& k : family_knobs(fam)) c.knobs[k.name] = k.choices[static_cast<size_t>(k.default_index)];
  return c;
}

void declare_common_buffers(const Ctx& c, Plan* plan) {
  for (const auto& in : c.task->inputs) plan->buffers.push_back({in.name, "input", c.dtype.at(in.name), in.shape});
  Result<std::vector<WeightSpec>> weights = weight_specs(*c.task);
  VINCI_ASSERT(weights.ok());
  for (const auto& w : *weights) plan->buffers.push_back({w.name, "weight", "f32", w.shape});
}

void declare_value(const Ctx& c, const std::string& v, Plan* plan) {
  if (plan->find_buffer(v)) return;
  plan->buffers.push_back({v, v == c.task->output ? "output" : "intermediate", c.dtype.at(v), c.shapes.at(v)});
}

PlanStep library_step(const OpSpec& op) {
  PlanStep s;
  s.kind = StepKind::kLibrary;
  s.op = op;
  if (s.op.attrs.is_null()) s.op.attrs = nlohmann::json::object();
  return s;
}

}  // namespace

KnobSpace knob_space(const Task& task) {
  KnobSpace space;
  Result<Ctx> c = analyse(task);
  if (!c.ok()) return space;  // a task that loaded always analyses; an empty space is inert
  std::set<std::string> families;
  for (const auto& g : build_groups(*c, /*fused=*/false))
    if (!g.library) families.insert(kernel_family_name(g.family));
  if (task.ops.size() >= 2) space.knobs = family_knobs("plan");
  for (const char* fam : {"elementwise", "row_reduction", "gemm"})
    if (families.count(fam))
      for (const auto& k : family_knobs(fam)) space.knobs.push_back(k);
  return space;
}

Result<Plan> generate_plan(const Task& task, const KnobSetting& setting) {
  KnobSpace space = knob_space(task);
  VINCI_RETURN_IF_ERROR(check_setting(space, setting));
  VINCI_ASSIGN_OR_RETURN(Ctx c, analyse(task));
  std::map<std::string, std::string> values = knob_values(space, setting);
  for (const auto& [k, v] : values) c.knobs[k] = v;
  Plan plan;
  plan.task_id = task.id;
  plan.origin = "codegen";
  plan.knobs = values;
  plan.output = task.output;
  declare_common_buffers(c, &plan);
  int counter = 0;
  for (const Group& g : build_groups(c, c.knob("fusion") == "fused")) {
    if (g.library) {
      const OpSpec& op = c.op(g.ops[0]);
      for (const auto& out : op.outputs) declare_value(c, out, &plan);
      plan.steps.push_back(library_step(op));
      continue;
    }
    if (g.family == KernelFamily::kGemm && c.knob("gemm.impl") == "library") {
      // The product as the library's GEMM, then the epilogue as one elementwise kernel.
      const OpSpec& op = c.op(g.ops[0]);
      for (const auto& out : op.outputs) declare_value(c, out, &plan);
      PlanStep ls = library_step(op);
      ls.precision = tensor_cores_precision(c);
      plan.steps.push_back(std::move(ls));
      std::vector<std::string> outs = materialized(c, g);
      outs.erase(std::remove(outs.begin(), outs.end(), op.outputs[0]), outs.end());
      if (g.ops.size() == 1 || outs.empty()) continue;
      for (const auto& v : outs) declare_value(c, v, &plan);
      std::string kname = "k" + std::to_string(counter++) + "_elementwise";
      PlanKernel k;
      PlanStep step;
      emit_elementwise(c, g, kname, &k, &step, /*first=*/1, op.outputs[0]);
      plan.kernels.push_back(std::move(k));
      plan.steps.push_back(std::move(step));
      continue;
    }
    std::vector<std::string> outs = materialized(c, g);
    // A group nothing downstream reads (L3_036 computes a Linear and returns the LSTM's state)
    // is dead code: a kernel for it would write nothing.
    if (outs.empty()) continue;
    for (const auto& v : outs) declare_value(c, v, &plan);
    std::string kname = "k" + std::to_string(counter++) + "_" + kernel_family_name(g.family);
    PlanKernel k;
    PlanStep step;
    if (g.family == KernelFamily::kGemm)
      emit_gemm(c, g, kname, &k, &step);
    else if (g.family == KernelFamily::kRowReduction)
      emit_row(c, g, kname, &k, &step);
    else
      emit_elementwise(c, g, kname, &k, &step);
    plan.kernels.push_back(std::move(k));
    plan.steps.push_back(std::move(step));
  }
  VINCI_RETURN_IF_ERROR(validate_plan(plan, task));
  return plan;
}

Result<Plan> generate_plan(const Task& task, const std::map<std::string, std::string>& values) {
  VINCI_ASSIGN_OR_RETURN(KnobSetting s, setting_from_values(knob_space(task), values));
  return generate_plan(task, s);
}

Result<Plan> default_plan(const Task& task) { return generate_plan(task, default_setting(knob_space(task))); }

Result<Plan> eager_plan(const Task& task) {
  VINCI_ASSIGN_OR_RETURN(Ctx c, analyse(task));
  Plan plan;
  plan.task_id = task.id;
  plan.origin = "eager";
  plan.output = task.output;
  declare_common_buffers(c, &plan);
  for (const auto& op : task.ops) {
    for (const auto& out : op.outputs) declare_value(c, out, &plan);
    plan.steps.push_back(library_step(op));
  }
  VINCI_RETURN_IF_ERROR(validate_plan(plan, task));
  return plan;
}

}  // namespace vinci
