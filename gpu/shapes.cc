#include "gpu/shapes.h"

#include <algorithm>
#include <map>

#include "gpu/expr.h"
#include "gpu/ops.h"

namespace vinci {
namespace {

const ModuleSpec* find_module(const Task& task, const std::string& name) {
  for (const auto& m : task.modules)
    if (m.name == name) return &m;
  return nullptr;
}

int64_t norm_dim(int64_t dim, size_t rank) { return dim < 0 ? dim + static_cast<int64_t>(rank) : dim; }

// A dimension attribute (negative counts from the end) as an index into a shape of that rank.
Result<size_t> checked_dim(int64_t dim, size_t rank, const std::string& where, const std::string& key) {
  int64_t d = norm_dim(dim, rank);
  if (d < 0 || d >= static_cast<int64_t>(rank)) {
    return invalid_argument(where + ": key '" + key + "': dimension " + std::to_string(dim) +
                            " is out of range for rank " + std::to_string(rank));
  }
  return static_cast<size_t>(d);
}

// out = (in + 2p - d(k-1) - 1)/s + 1, the size rule of convolution and pooling.
std::string window_out(const std::string& in, int64_t k, int64_t s, int64_t p, int64_t d) {
  std::string num = expr_sub(expr_add(in, std::to_string(2 * p - d * (k - 1) - 1)), "0");
  return expr_add(expr_div(num, std::to_string(s)), "1");
}

// out = (in - 1)s - 2p + d(k-1) + output_padding + 1, transposed convolution.
std::string transposed_out(const std::string& in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op) {
  return expr_add(expr_mul(expr_sub(in, "1"), std::to_string(s)), std::to_string(-2 * p + d * (k - 1) + op + 1));
}

// PyTorch's broadcast of two shapes, right-aligned: a dim of 1 takes the other's size.
SymShape broadcast_shape(const SymShape& a, const SymShape& b) {
  size_t r = std::max(a.size(), b.size());
  SymShape out(r);
  for (size_t i = 0; i < r; ++i) {
    bool in_a = i + a.size() >= r, in_b = i + b.size() >= r;
    const std::string* da = in_a ? &a[i + a.size() - r] : nullptr;
    const std::string* db = in_b ? &b[i + b.size() - r] : nullptr;
    out[i] = !da ? *db : !db ? *da : (*da == "1" ? *db : *da);
  }
  return out;
}

}  // namespace

Result<std::string> attr_expr(const nlohmann::json& attrs, const std::string& key, const std::string& where) {
  auto it = attrs.find(key);
  if (it != attrs.end() && it->is_number_integer()) return std::to_string(it->get<int64_t>());
  if (it != attrs.end() && it->is_string()) {
    VINCI_RETURN_IF_ERROR(check_expr_syntax(it->get<std::string>()));
    return it->get<std::string>();
  }
  return invalid_argument(where + ": key '" + key + "': expected an integer or a size expression, found " +
                          (it == attrs.end() ? std::string("nothing") : it->dump()));
}

Result<std::vector<int64_t>> eval_shape(const SymShape& shape, const SizeMap& sizes) {
  ExprEnv env;
  env.symbols = sizes;
  std::vector<int64_t> out;
  for (const auto& d : shape) {
    VINCI_ASSIGN_OR_RETURN(int64_t v, eval_expr(d, env));
    out.push_back(v);
  }
  return out;
}

Result<std::vector<WeightSpec>> weight_specs(const Task& task) {
  std::vector<WeightSpec> out;
  for (const auto& m : task.modules) {
    std::string where = task.source_file + ": task '" + task.id + "': module '" + m.name + "'";
    auto add = [&](const std::string& param, SymShape shape) {
      out.push_back({m.name + "." + param, m.name, param, std::move(shape)});
    };
    bool bias = attr_bool_or(m.attrs, "bias", true);
    if (m.kind() == ModuleType::kLinear) {
      VINCI_ASSIGN_OR_RETURN(std::string in, attr_expr(m.attrs, "in", where));
      VINCI_ASSIGN_OR_RETURN(std::string o, attr_expr(m.attrs, "out", where));
      add("weight", {o, in});
      if (bias) add("bias", {o});
    } else if ((m.kind() >= ModuleType::kConv1d && m.kind() <= ModuleType::kConvTranspose3d)) {
      bool transposed = m.type.find("transpose") != std::string::npos;
      size_t rank = static_cast<size_t>(m.type[m.type.size() - 2] - '0');
      VINCI_ASSIGN_OR_RETURN(std::string in, attr_expr(m.attrs, "in", where));
      VINCI_ASSIGN_OR_RETURN(std::string o, attr_expr(m.attrs, "out", where));
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> k, attr_ints(m.attrs, "kernel", rank, where));
      // Per-dim lists must have one entry a spatial dim (a wrong length is an error, not the default).
      for (const char* key : {"stride", "padding", "dilation", "output_padding"})
        if (m.attrs.contains(key)) VINCI_RETURN_IF_ERROR(attr_ints(m.attrs, key, rank, where).status());
      std::string g = "1";  // groups: an integer or a size expression (depthwise: groups = "C")
      if (m.attrs.contains("groups")) {
        VINCI_ASSIGN_OR_RETURN(g, attr_expr(m.attrs, "groups", where));
      }
      SymShape w = transposed ? SymShape{in, expr_div(o, g)} : SymShape{o, expr_div(in, g)};
      for (int64_t ki : k) w.push_back(std::to_string(ki));
      add("weight", w);
      if (bias) add("bias", {o});
    } else if (m.kind() == ModuleType::kBatchNorm) {
      VINCI_ASSIGN_OR_RETURN(std::string f, attr_expr(m.attrs, "features", where));
      add("weight", {f});
      add("bias", {f});
      add("running_mean", {f});
      add("running_var", {f});
    } else if (m.kind() == ModuleType::kLayerNorm) {
      auto it = m.attrs.find("shape");
      if (it == m.attrs.end() || !it->is_array())
        return invalid_argument(where + ": key 'shape': expected an array of sizes");
      SymShape s;
      for (const auto& e : *it) s.push_back(e.is_string() ? e.get<std::string>() : e.dump());
      add("weight", s);
      add("bias", s);
    } else if (m.kind() == ModuleType::kGroupNorm) {
      VINCI_ASSIGN_OR_RETURN(std::string c, attr_expr(m.attrs, "channels", where));
      VINCI_RETURN_IF_ERROR(attr_int(m.attrs, "groups", where).status());
      add("weight", {c});
      add("bias", {c});
    } else if (m.kind() == ModuleType::kParameter) {
      auto it = m.attrs.find("shape");
      if (it == m.attrs.end() || !it->is_array())
        return invalid_argument(where + ": key 'shape': expected an array of sizes");
      SymShape s;
      for (const auto& e : *it) s.push_back(e.is_string() ? e.get<std::string>() : e.dump());
      out.push_back({m.name, m.name, "value", s});
    } else if (m.kind() == ModuleType::kBuffer) {
      // A constant tensor the constructor computes (register_buffer): no draws.
      std::string init = m.attrs.value("init", std::string());
      VINCI_ASSIGN_OR_RETURN(std::string w, attr_expr(m.attrs, "window", where));
      if (init == "relative_coords_log") {
        std::string side = expr_add(expr_mul("2", w), "-1");
        out.push_back({m.name, m.name, "value", {"1", side, side, "2"}});
      } else if (init == "shifted_window_mask") {
        VINCI_ASSIGN_OR_RETURN(std::string r, attr_expr(m.attrs, "resolution", where));
        VINCI_RETURN_IF_ERROR(attr_expr(m.attrs, "shift", where).status());
        std::string per_side = expr_div(r, w), area = expr_mul(w, w);
        out.push_back({m.name, m.name, "value", {expr_mul(per_side, per_side), area, area}});
      } else {
        return invalid_argument(where + ": key 'init': expected relative_coords_log or shifted_window_mask, found '" +
                                init + "'");
      }
    } else if (m.kind() == ModuleType::kMha) {
      VINCI_ASSIGN_OR_RETURN(std::string e, attr_expr(m.attrs, "embed", where));
      VINCI_RETURN_IF_ERROR(attr_int(m.attrs, "heads", where).status());
      // Construction order of nn.MultiheadAttention: out_proj (a Linear) draws first, then
      // _reset_parameters draws in_proj_weight; listed here in that order.
      add("out_proj.weight", {e, e});
      add("out_proj.bias", {e});
      add("in_proj_weight", {expr_mul("3", e), e});
      add("in_proj_bias", {expr_mul("3", e)});
    } else if (m.kind() == ModuleType::kLstm || m.kind() == ModuleType::kGru) {
      // nn.LSTM / nn.GRU: per layer, per direction (the reverse one suffixed _reverse), weight_ih,
      // weight_hh, bias_ih, bias_hh, in PyTorch's registration order (the order of the draws).
      VINCI_ASSIGN_OR_RETURN(std::string in, attr_expr(m.attrs, "input", where));
      VINCI_ASSIGN_OR_RETURN(std::string h, attr_expr(m.attrs, "hidden", where));
      int64_t layers = attr_int_or(m.attrs, "layers", 1);
      int64_t dirs = attr_bool_or(m.attrs, "bidirectional", false) ? 2 : 1;
      if (layers < 1) return invalid_argument(where + ": key 'layers': expected at least 1");
      std::string gh = expr_mul(m.kind() == ModuleType::kLstm ? "4" : "3", h);
      for (int64_t l = 0; l < layers; ++l) {
        for (int64_t d = 0; d < dirs; ++d) {
          std::string sfx = std::to_string(l) + (d ? "_reverse" : "");
          add("weight_ih_l" + sfx, {gh, l == 0 ? in : expr_mul(std::to_string(dirs), h)});
          add("weight_hh_l" + sfx, {gh, h});
          if (bias) {
            add("bias_ih_l" + sfx, {gh});
            add("bias_hh_l" + sfx, {gh});
          }
        }
      }
    } else {
      return invalid_argument(where + ": unknown module type '" + m.type + "'");
    }
  }
  return out;
}

Result<ShapeMap> infer_shapes(const Task& task) {
  ShapeMap shapes;
  for (const auto& in : task.inputs) shapes[in.name] = in.shape;
  VINCI_ASSIGN_OR_RETURN(std::vector<WeightSpec> weights, weight_specs(task));
  for (const auto& w : weights)
    if (w.param == "value") shapes[w.name] = w.shape;  // parameter modules are readable values
  for (const auto& op : task.ops) {
    std::string where = task.source_file + ": task '" + task.id + "': op '" + op.op + "' -> " +
                        (op.outputs.empty() ? std::string("?") : op.outputs[0]);
    const OpInfo* info = find_op(op.op);
    if (!info) return invalid_argument(where + ": unknown op");
    std::vector<SymShape> ins;
    for (const auto& n : op.inputs) {
      auto it = shapes.find(n);
      if (it == shapes.end()) return invalid_argument(where + ": input '" + n + "' not defined");
      ins.push_back(it->second);
    }
    const SymShape& x = ins[0];
    const ModuleSpec* mod = op.module.empty() ? nullptr : find_module(task, op.module);
    if (info->module[0] && !mod) return invalid_argument(where + ": module '" + op.module + "' not defined");
    std::vector<SymShape> outs;
    const OpCode name = op.code();
    auto need_dim = [&](const SymShape& s, int64_t dflt) -> Result<int64_t> {
      VINCI_ASSIGN_OR_RETURN(size_t d, checked_dim(attr_int_or(op.attrs, "dim", dflt), s.size(), where, "dim"));
      return static_cast<int64_t>(d);
    };
    if (info->kind == OpKind::kBinary) {
      outs.push_back(broadcast_shape(x, ins[1]));  // bias [1, C, 1, 1] + x [B, 1] is [1, C, B, 1]
    } else if (info->kind == OpKind::kUnary || info->kind == OpKind::kBinary || info->kind == OpKind::kRowNorm ||
               name == OpCode::kBatchNorm || name == OpCode::kGroupNorm || name == OpCode::kCumsum ||
               name == OpCode::kCumprod || name == OpCode::kCausalMask || name == OpCode::kSelfAttention) {
      outs.push_back(x);
    } else if (name == OpCode::kMatmul) {
      SymShape a = x, b = ins[1];
      if (a.size() < 2 || b.size() < 2) return invalid_argument(where + ": matmul needs rank >= 2 operands");
      if (attr_bool_or(op.attrs, "transpose_a", false)) std::swap(a[a.size() - 1], a[a.size() - 2]);
      if (attr_bool_or(op.attrs, "transpose_b", false)) std::swap(b[b.size() - 1], b[b.size() - 2]);
      SymShape o(a.begin(), a.end() - 1);
      o.push_back(b.back());
      outs.push_back(o);
    } else if (name == OpCode::kLinear) {
      VINCI_ASSIGN_OR_RETURN(std::string o, attr_expr(mod->attrs, "out", where));
      SymShape s = x;
      s.back() = o;
      outs.push_back(s);
    } else if (info->kind == OpKind::kReduce) {
      VINCI_ASSIGN_OR_RETURN(int64_t d, need_dim(x, -1));
      SymShape s = x;
      if (attr_bool_or(op.attrs, "keepdim", false))
        s[static_cast<size_t>(d)] = "1";
      else
        s.erase(s.begin() + d);
      outs.push_back(s);
    } else if (op_is_conv(name)) {
      bool transposed = op_is_transposed_conv(name);
      size_t rank = static_cast<size_t>(op_spatial_rank(name));
      if (x.size() != rank + 2)
        return invalid_argument(where + ": expected an input of rank " + std::to_string(rank + 2));
      const auto& a = mod->attrs;
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> k, attr_ints(a, "kernel", rank, where));
      auto s = attr_ints_or(a, "stride", rank, 1);
      auto p = attr_ints_or(a, "padding", rank, 0);
      auto dl = attr_ints_or(a, "dilation", rank, 1);
      auto opad = attr_ints_or(a, "output_padding", rank, 0);
      VINCI_ASSIGN_OR_RETURN(std::string o, attr_expr(a, "out", where));
      SymShape r = {x[0], o};
      for (size_t i = 0; i < rank; ++i)
        r.push_back(transposed ? transposed_out(x[i + 2], k[i], s[i], p[i], dl[i], opad[i])
                               : window_out(x[i + 2], k[i], s[i], p[i], dl[i]));
      outs.push_back(r);
    } else if (name == OpCode::kMaxPool1d || name == OpCode::kMaxPool2d || name == OpCode::kMaxPool3d ||
               name == OpCode::kAvgPool2d) {
      size_t rank = static_cast<size_t>(op_spatial_rank(name));
      if (x.size() != rank + 2)
        return invalid_argument(where + ": expected an input of rank " + std::to_string(rank + 2));
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> k, attr_ints(op.attrs, "kernel", rank, where));
      auto s = attr_ints_or(op.attrs, "stride", rank, 0);
      for (size_t i = 0; i < rank; ++i)
        if (s[i] == 0) s[i] = k[i];  // PyTorch: stride defaults to the kernel size
      auto p = attr_ints_or(op.attrs, "padding", rank, 0);
      auto dl = attr_ints_or(op.attrs, "dilation", rank, 1);
      SymShape r = {x[0], x[1]};
      bool ceil_mode = attr_bool_or(op.attrs, "ceil_mode", false);
      for (size_t i = 0; i < rank; ++i) {
        if (!ceil_mode) {
          r.push_back(window_out(x[i + 2], k[i], s[i], p[i], dl[i]));
          continue;
        }
        // ceil_mode: out = ceil((in + 2p - d(k-1) - 1) / s) + 1, less one when the last window
        // would start in the right padding; without padding and with s <= d(k-1) + 1 it never does.
        if (p[i] != 0 || s[i] > dl[i] * (k[i] - 1) + 1)
          return invalid_argument(where + ": key 'ceil_mode': supported with padding 0 and stride <= the window only");
        r.push_back(expr_add(
            expr_ceil_div(expr_add(x[i + 2], std::to_string(-dl[i] * (k[i] - 1) - 1)), std::to_string(s[i])), "1"));
      }
      outs.push_back(r);
    } else if (name == OpCode::kAdaptiveAvgPool2d) {
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> o, attr_ints(op.attrs, "output", 2, where));
      outs.push_back({x[0], x[1], std::to_string(o[0]), std::to_string(o[1])});
    } else if (name == OpCode::kReshape || name == OpCode::kExpand) {
      auto it = op.attrs.find("shape");
      if (it == op.attrs.end() || !it->is_array()) return invalid_argument(where + ": key 'shape': expected an array");
      SymShape s;
      for (const auto& e : *it) {
        std::string d = e.is_string() ? e.get<std::string>() : e.dump();
        VINCI_RETURN_IF_ERROR(check_expr_syntax(d));
        s.push_back(d);
      }
      outs.push_back(s);
    } else if (name == OpCode::kFlatten) {
      VINCI_ASSIGN_OR_RETURN(size_t sd,
                             checked_dim(attr_int_or(op.attrs, "start_dim", 1), x.size(), where, "start_dim"));
      SymShape s(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(sd));
      s.push_back(expr_product(SymShape(x.begin() + static_cast<std::ptrdiff_t>(sd), x.end())));
      outs.push_back(s);
    } else if (name == OpCode::kPermute) {
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> dims, attr_ints(op.attrs, "dims", x.size(), where));
      SymShape s;
      std::vector<bool> used(x.size(), false);
      for (int64_t d : dims) {
        VINCI_ASSIGN_OR_RETURN(size_t i, checked_dim(d, x.size(), where, "dims"));
        if (used[i]) return invalid_argument(where + ": key 'dims': dimension " + std::to_string(d) + " appears twice");
        used[i] = true;
        s.push_back(x[i]);
      }
      outs.push_back(s);
    } else if (name == OpCode::kTranspose) {
      VINCI_ASSIGN_OR_RETURN(size_t a, checked_dim(attr_int_or(op.attrs, "dim0", 0), x.size(), where, "dim0"));
      VINCI_ASSIGN_OR_RETURN(size_t b, checked_dim(attr_int_or(op.attrs, "dim1", 1), x.size(), where, "dim1"));
      SymShape s = x;
      std::swap(s[a], s[b]);
      outs.push_back(s);
    } else if (name == OpCode::kSplit) {
      VINCI_ASSIGN_OR_RETURN(int64_t d, need_dim(x, 0));
      for (size_t i = 0; i < op.outputs.size(); ++i) {
        SymShape s = x;
        s[static_cast<size_t>(d)] = expr_div(x[static_cast<size_t>(d)], std::to_string(op.outputs.size()));
        outs.push_back(s);
      }
    } else if (name == OpCode::kConcat) {
      // torch.cat: every input has the first one's shape but on dim, where the sizes add.
      VINCI_ASSIGN_OR_RETURN(int64_t d, need_dim(x, 0));
      SymShape s = x;
      for (size_t i = 1; i < ins.size(); ++i) {
        if (ins[i].size() != x.size())
          return invalid_argument(where + ": key 'in': '" + op.inputs[i] + "' has rank " +
                                  std::to_string(ins[i].size()) + ", expected " + std::to_string(x.size()));
        s[static_cast<size_t>(d)] = expr_add(s[static_cast<size_t>(d)], ins[i][static_cast<size_t>(d)]);
      }
      outs.push_back(s);
    } else if (name == OpCode::kMseLoss || name == OpCode::kCrossEntropy || name == OpCode::kSmoothL1Loss ||
               name == OpCode::kKlDiv || name == OpCode::kHingeLoss || name == OpCode::kCosineSimilarityLoss) {
      outs.push_back({});
    } else if (name == OpCode::kTriu || name == OpCode::kTril || name == OpCode::kCumsumReverse ||
               name == OpCode::kCumsumExclusive) {
      if ((name == OpCode::kTriu || name == OpCode::kTril) && x.size() < 2)
        return invalid_argument(where + ": expected an input of rank >= 2");
      if (name == OpCode::kCumsumReverse || name == OpCode::kCumsumExclusive)
        VINCI_RETURN_IF_ERROR(need_dim(x, -1).status());
      outs.push_back(x);
    } else if (name == OpCode::kFrobeniusNorm || name == OpCode::kTripletMarginLoss) {
      outs.push_back({});
    } else if (name == OpCode::kAvgPool1d || name == OpCode::kAvgPool3d) {
      size_t rank = static_cast<size_t>(op_spatial_rank(name));
      if (x.size() != rank + 2)
        return invalid_argument(where + ": expected an input of rank " + std::to_string(rank + 2));
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> k, attr_ints(op.attrs, "kernel", rank, where));
      auto s = attr_ints_or(op.attrs, "stride", rank, 0);
      auto p = attr_ints_or(op.attrs, "padding", rank, 0);
      SymShape r = {x[0], x[1]};
      for (size_t i = 0; i < rank; ++i) r.push_back(window_out(x[i + 2], k[i], s[i] == 0 ? k[i] : s[i], p[i], 1));
      outs.push_back(r);
    } else if (name == OpCode::kAdaptiveAvgPool3d) {
      if (x.size() != 5) return invalid_argument(where + ": expected an input of rank 5");
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> o, attr_ints(op.attrs, "output", 3, where));
      outs.push_back({x[0], x[1], std::to_string(o[0]), std::to_string(o[1]), std::to_string(o[2])});
    } else if (name == OpCode::kInstanceNorm) {
      if (x.size() < 3) return invalid_argument(where + ": expected an input of rank 3 to 5 ([N, C, ...])");
      outs.push_back(x);
    } else if (name == OpCode::kSlice || name == OpCode::kSelect) {
      // Python's x[..., start:end] and x[..., index]; a negative integer counts from the end.
      VINCI_ASSIGN_OR_RETURN(int64_t d, need_dim(x, 0));
      const std::string& len = x[static_cast<size_t>(d)];
      auto bound = [&](const char* key, const std::string& dflt) -> Result<std::string> {
        if (!op.attrs.contains(key)) return dflt;
        VINCI_ASSIGN_OR_RETURN(std::string e, attr_expr(op.attrs, key, where));
        if (op.attrs[key].is_number_integer() && op.attrs[key].get<int64_t>() < 0) return expr_add(len, e);
        return e;
      };
      SymShape s = x;
      if (name == OpCode::kSelect) {
        VINCI_RETURN_IF_ERROR(bound("index", "0").status());
        s.erase(s.begin() + d);
      } else {
        VINCI_ASSIGN_OR_RETURN(std::string start, bound("start", "0"));
        VINCI_ASSIGN_OR_RETURN(std::string end, bound("end", len));
        bool neg_start =
            op.attrs.contains("start") && op.attrs["start"].is_number_integer() && op.attrs["start"].get<int64_t>() < 0;
        if (neg_start && !op.attrs.contains("end"))  // x[..., -n:]: n long
          s[static_cast<size_t>(d)] = std::to_string(-op.attrs["start"].get<int64_t>());
        else if (start == "0")
          s[static_cast<size_t>(d)] = end;
        else
          s[static_cast<size_t>(d)] = expr_sub(end, start);
      }
      outs.push_back(s);
    } else if (name == OpCode::kEinsum) {
      // "bij,bjk->bik": every output letter takes its size from the first operand that has it.
      std::string eq = op.attrs.value("equation", std::string());
      size_t arrow = eq.find("->");
      if (arrow == std::string::npos || eq.find("...") != std::string::npos)
        return invalid_argument(where + ": key 'equation': expected 'ab,bc->ac' (explicit output, no '...'), found '" +
                                eq + "'");
      std::map<char, std::string> size_of;
      std::string lhs = eq.substr(0, arrow);
      size_t operand = 0, pos = 0;
      for (size_t i = 0; i <= lhs.size(); ++i) {
        if (i < lhs.size() && lhs[i] != ',') continue;
        std::string sub = lhs.substr(pos, i - pos);
        pos = i + 1;
        if (operand >= ins.size() || sub.size() != ins[operand].size())
          return invalid_argument(where + ": key 'equation': operand " + std::to_string(operand) + " subscripts '" +
                                  sub + "' do not match the inputs");
        for (size_t k = 0; k < sub.size(); ++k) size_of.emplace(sub[k], ins[operand][k]);
        ++operand;
      }
      if (operand != ins.size())
        return invalid_argument(where + ": key 'equation': " + std::to_string(operand) + " operands for " +
                                std::to_string(ins.size()) + " inputs");
      SymShape s;
      for (char c : eq.substr(arrow + 2)) {
        auto it = size_of.find(c);
        if (it == size_of.end())
          return invalid_argument(where + ": key 'equation': output letter '" + std::string(1, c) +
                                  "' not in any operand");
        s.push_back(it->second);
      }
      outs.push_back(s);
    } else if (name == OpCode::kLstm || name == OpCode::kGru) {
      if (x.size() != 3) return invalid_argument(where + ": expected an input of rank 3");
      VINCI_ASSIGN_OR_RETURN(std::string h, attr_expr(mod->attrs, "hidden", where));
      int64_t dirs = attr_bool_or(mod->attrs, "bidirectional", false) ? 2 : 1;
      std::string ld = expr_mul(std::to_string(attr_int_or(mod->attrs, "layers", 1)), std::to_string(dirs));
      std::string batch = attr_bool_or(mod->attrs, "batch_first", false) ? x[0] : x[1];
      SymShape o = x;
      o[2] = expr_mul(std::to_string(dirs), h);
      outs.push_back(o);
      outs.push_back({ld, batch, h});
      if (name == OpCode::kLstm) outs.push_back({ld, batch, h});
    } else if (name == OpCode::kElmanRnn) {
      if (x.size() != 3) return invalid_argument(where + ": expected an input of rank 3 [T, B, In]");
      VINCI_ASSIGN_OR_RETURN(std::string o, attr_expr(mod->attrs, "out", where));
      outs.push_back({x[0], x[1], o});
    } else if (name == OpCode::kPad) {
      // F.pad(x, pad) in constant mode: (before, after) pairs, the last dim first.
      if (!op.attrs.contains("pad") || !op.attrs["pad"].is_array() || op.attrs["pad"].size() % 2 != 0 ||
          op.attrs["pad"].size() / 2 > x.size())
        return invalid_argument(where + ": key 'pad' must be an even list of at most 2 * rank integers");
      SymShape s = x;
      for (size_t i = 0; i < op.attrs["pad"].size() / 2; ++i) {
        int64_t grow = op.attrs["pad"][2 * i].get<int64_t>() + op.attrs["pad"][2 * i + 1].get<int64_t>();
        std::string& d = s[x.size() - 1 - i];
        d = expr_add(d, std::to_string(grow));
      }
      outs.push_back(s);
    } else if (name == OpCode::kRoll) {
      // torch.roll(x, shifts, dims): one shift per dim, the shape unchanged.
      auto ints = [&](const char* key) -> Result<std::vector<int64_t>> {
        if (!op.attrs.contains(key) || !op.attrs[key].is_array() || op.attrs[key].empty())
          return invalid_argument(where + ": key '" + key + "': expected a non-empty list of integers");
        std::vector<int64_t> v;
        for (const auto& e : op.attrs[key]) {
          if (!e.is_number_integer())
            return invalid_argument(where + ": key '" + key + "': expected integers, found " + e.dump());
          v.push_back(e.get<int64_t>());
        }
        return v;
      };
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> shifts, ints("shifts"));
      VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ints("dims"));
      if (shifts.size() != dims.size())
        return invalid_argument(where + ": keys 'shifts' and 'dims': expected lists of the same length, found " +
                                std::to_string(shifts.size()) + " and " + std::to_string(dims.size()));
      for (int64_t d : dims)
        if (d < -static_cast<int64_t>(x.size()) || d >= static_cast<int64_t>(x.size()))
          return invalid_argument(where + ": key 'dims': " + std::to_string(d) + " is not a dim of a rank-" +
                                  std::to_string(x.size()) + " input");
      outs.push_back(x);
    } else if (name == OpCode::kNormalize) {
      VINCI_RETURN_IF_ERROR(need_dim(x, -1).status());
      outs.push_back(x);
    } else if (name == OpCode::kRelativePositionBias) {
      // Swin's table of one bias per relative offset and head, [(2W-1)^2, H], gathered for every
      // (query, key) pair of a W x W window: [H, W*W, W*W].
      VINCI_ASSIGN_OR_RETURN(std::string w, attr_expr(op.attrs, "window", where));
      if (x.size() != 2) return invalid_argument(where + ": expected a table of rank 2 [(2W-1)^2, heads]");
      std::string area = expr_mul(w, w);
      outs.push_back({x[1], area, area});
    } else if (name == OpCode::kArgmax || name == OpCode::kArgmin) {
      VINCI_ASSIGN_OR_RETURN(int64_t d, need_dim(x, -1));
      SymShape s = x;
      if (attr_bool_or(op.attrs, "keepdim", false))
        s[static_cast<size_t>(d)] = "1";
      else
        s.erase(s.begin() + d);
      outs.push_back(s);
    } else if (name == OpCode::kScaledDotProductAttention) {
      // Q [..., L, E], K [..., S, E], V [..., S, Ev] -> [..., L, Ev]
      const SymShape& v = ins[2];
      if (x.size() < 2 || ins[1].size() != x.size() || v.size() != x.size())
        return invalid_argument(where + ": expected Q, K and V of the same rank >= 2");
      SymShape s = x;
      s.back() = v.back();
      outs.push_back(s);
    } else {
      return invalid_argument(where + ": no shape rule");
    }
    if (outs.size() != op.outputs.size())
      return invalid_argument(where + ": key 'out': expected " + std::to_string(outs.size()) + " names, found " +
                              std::to_string(op.outputs.size()));
    for (size_t i = 0; i < outs.size(); ++i) shapes[op.outputs[i]] = outs[i];
  }
  return shapes;
}

}  // namespace vinci
