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

namespace {

// What one op's shape rule reads: the op, its inputs' shapes, its module (null when it has none),
// and the place to name in an error.
struct OpShapeArgs {
  const OpSpec& op;
  const std::vector<SymShape>& ins;
  const ModuleSpec* mod;
  const std::string& where;
  const SymShape& x() const { return ins[0]; }
  Result<int64_t> dim(const SymShape& s, int64_t dflt) const {
    VINCI_ASSIGN_OR_RETURN(size_t d, checked_dim(attr_int_or(op.attrs, "dim", dflt), s.size(), where, "dim"));
    return static_cast<int64_t>(d);
  }
};

using OutShapes = Result<std::vector<SymShape>>;

OutShapes one(SymShape s) { return std::vector<SymShape>{std::move(s)}; }

OutShapes matmul_shape(const OpShapeArgs& a) {
  SymShape l = a.x(), r = a.ins[1];
  if (l.size() < 2 || r.size() < 2) return invalid_argument(a.where + ": matmul needs rank >= 2 operands");
  if (attr_bool_or(a.op.attrs, "transpose_a", false)) std::swap(l[l.size() - 1], l[l.size() - 2]);
  if (attr_bool_or(a.op.attrs, "transpose_b", false)) std::swap(r[r.size() - 1], r[r.size() - 2]);
  SymShape o(l.begin(), l.end() - 1);
  o.push_back(r.back());
  return one(o);
}

OutShapes linear_shape(const OpShapeArgs& a) {
  VINCI_ASSIGN_OR_RETURN(std::string o, attr_expr(a.mod->attrs, "out", a.where));
  SymShape s = a.x();
  s.back() = o;
  return one(s);
}

// sum, mean, ..., argmax: dim (default the last) dropped, or kept as 1 with keepdim.
OutShapes reduce_shape(const OpShapeArgs& a) {
  VINCI_ASSIGN_OR_RETURN(int64_t d, a.dim(a.x(), -1));
  SymShape s = a.x();
  if (attr_bool_or(a.op.attrs, "keepdim", false))
    s[static_cast<size_t>(d)] = "1";
  else
    s.erase(s.begin() + d);
  return one(s);
}

Status check_spatial_rank(const OpShapeArgs& a, size_t rank) {
  if (a.x().size() != rank + 2)
    return invalid_argument(a.where + ": expected an input of rank " + std::to_string(rank + 2));
  return Status();
}

OutShapes conv_shape(const OpShapeArgs& a) {
  const OpCode code = a.op.code();
  const SymShape& x = a.x();
  bool transposed = op_is_transposed_conv(code);
  size_t rank = static_cast<size_t>(op_spatial_rank(code));
  VINCI_RETURN_IF_ERROR(check_spatial_rank(a, rank));
  const auto& m = a.mod->attrs;
  VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> k, attr_ints(m, "kernel", rank, a.where));
  auto s = attr_ints_or(m, "stride", rank, 1);
  auto p = attr_ints_or(m, "padding", rank, 0);
  auto dl = attr_ints_or(m, "dilation", rank, 1);
  auto opad = attr_ints_or(m, "output_padding", rank, 0);
  VINCI_ASSIGN_OR_RETURN(std::string o, attr_expr(m, "out", a.where));
  SymShape r = {x[0], o};
  for (size_t i = 0; i < rank; ++i)
    r.push_back(transposed ? transposed_out(x[i + 2], k[i], s[i], p[i], dl[i], opad[i])
                           : window_out(x[i + 2], k[i], s[i], p[i], dl[i]));
  return one(r);
}

// max_pool1d/2d/3d and avg_pool2d (dilation and ceil_mode read).
OutShapes pool_shape(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  const auto& attrs = a.op.attrs;
  size_t rank = static_cast<size_t>(op_spatial_rank(a.op.code()));
  VINCI_RETURN_IF_ERROR(check_spatial_rank(a, rank));
  VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> k, attr_ints(attrs, "kernel", rank, a.where));
  auto s = attr_ints_or(attrs, "stride", rank, 0);
  for (size_t i = 0; i < rank; ++i)
    if (s[i] == 0) s[i] = k[i];  // PyTorch: stride defaults to the kernel size
  auto p = attr_ints_or(attrs, "padding", rank, 0);
  auto dl = attr_ints_or(attrs, "dilation", rank, 1);
  SymShape r = {x[0], x[1]};
  bool ceil_mode = attr_bool_or(attrs, "ceil_mode", false);
  for (size_t i = 0; i < rank; ++i) {
    if (!ceil_mode) {
      r.push_back(window_out(x[i + 2], k[i], s[i], p[i], dl[i]));
      continue;
    }
    // ceil_mode: out = ceil((in + 2p - d(k-1) - 1) / s) + 1, less one when the last window
    // would start in the right padding; without padding and with s <= d(k-1) + 1 it never does.
    if (p[i] != 0 || s[i] > dl[i] * (k[i] - 1) + 1)
      return invalid_argument(a.where + ": key 'ceil_mode': supported with padding 0 and stride <= the window only");
    r.push_back(expr_add(
        expr_ceil_div(expr_add(x[i + 2], std::to_string(-dl[i] * (k[i] - 1) - 1)), std::to_string(s[i])), "1"));
  }
  return one(r);
}

// avg_pool1d and avg_pool3d (no dilation).
OutShapes avg_pool_shape(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  size_t rank = static_cast<size_t>(op_spatial_rank(a.op.code()));
  VINCI_RETURN_IF_ERROR(check_spatial_rank(a, rank));
  VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> k, attr_ints(a.op.attrs, "kernel", rank, a.where));
  auto s = attr_ints_or(a.op.attrs, "stride", rank, 0);
  auto p = attr_ints_or(a.op.attrs, "padding", rank, 0);
  SymShape r = {x[0], x[1]};
  for (size_t i = 0; i < rank; ++i) r.push_back(window_out(x[i + 2], k[i], s[i] == 0 ? k[i] : s[i], p[i], 1));
  return one(r);
}

OutShapes adaptive_pool_shape(const OpShapeArgs& a, size_t rank) {
  const SymShape& x = a.x();
  if (rank == 3 && x.size() != 5) return invalid_argument(a.where + ": expected an input of rank 5");
  VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> o, attr_ints(a.op.attrs, "output", rank, a.where));
  SymShape r = {x[0], x[1]};
  for (int64_t v : o) r.push_back(std::to_string(v));
  return one(r);
}

OutShapes reshape_shape(const OpShapeArgs& a) {
  auto it = a.op.attrs.find("shape");
  if (it == a.op.attrs.end() || !it->is_array()) return invalid_argument(a.where + ": key 'shape': expected an array");
  SymShape s;
  for (const auto& e : *it) {
    std::string d = e.is_string() ? e.get<std::string>() : e.dump();
    VINCI_RETURN_IF_ERROR(check_expr_syntax(d));
    s.push_back(d);
  }
  return one(s);
}

OutShapes flatten_shape(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  VINCI_ASSIGN_OR_RETURN(size_t sd,
                         checked_dim(attr_int_or(a.op.attrs, "start_dim", 1), x.size(), a.where, "start_dim"));
  SymShape s(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(sd));
  s.push_back(expr_product(SymShape(x.begin() + static_cast<std::ptrdiff_t>(sd), x.end())));
  return one(s);
}

OutShapes permute_shape(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> dims, attr_ints(a.op.attrs, "dims", x.size(), a.where));
  SymShape s;
  std::vector<bool> used(x.size(), false);
  for (int64_t d : dims) {
    VINCI_ASSIGN_OR_RETURN(size_t i, checked_dim(d, x.size(), a.where, "dims"));
    if (used[i]) return invalid_argument(a.where + ": key 'dims': dimension " + std::to_string(d) + " appears twice");
    used[i] = true;
    s.push_back(x[i]);
  }
  return one(s);
}

OutShapes transpose_shape(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  VINCI_ASSIGN_OR_RETURN(size_t d0, checked_dim(attr_int_or(a.op.attrs, "dim0", 0), x.size(), a.where, "dim0"));
  VINCI_ASSIGN_OR_RETURN(size_t d1, checked_dim(attr_int_or(a.op.attrs, "dim1", 1), x.size(), a.where, "dim1"));
  SymShape s = x;
  std::swap(s[d0], s[d1]);
  return one(s);
}

OutShapes split_shape(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  VINCI_ASSIGN_OR_RETURN(int64_t d, a.dim(x, 0));
  std::vector<SymShape> outs;
  for (size_t i = 0; i < a.op.outputs.size(); ++i) {
    SymShape s = x;
    s[static_cast<size_t>(d)] = expr_div(x[static_cast<size_t>(d)], std::to_string(a.op.outputs.size()));
    outs.push_back(s);
  }
  return outs;
}

// torch.cat: every input has the first one's shape but on dim, where the sizes add.
OutShapes concat_shape(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  VINCI_ASSIGN_OR_RETURN(int64_t d, a.dim(x, 0));
  SymShape s = x;
  for (size_t i = 1; i < a.ins.size(); ++i) {
    if (a.ins[i].size() != x.size())
      return invalid_argument(a.where + ": key 'in': '" + a.op.inputs[i] + "' has rank " +
                              std::to_string(a.ins[i].size()) + ", expected " + std::to_string(x.size()));
    s[static_cast<size_t>(d)] = expr_add(s[static_cast<size_t>(d)], a.ins[i][static_cast<size_t>(d)]);
  }
  return one(s);
}

// Python's x[..., start:end] and x[..., index]; a negative integer counts from the end.
OutShapes slice_shape(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  const auto& attrs = a.op.attrs;
  VINCI_ASSIGN_OR_RETURN(int64_t d, a.dim(x, 0));
  const std::string& len = x[static_cast<size_t>(d)];
  auto bound = [&](const char* key, const std::string& dflt) -> Result<std::string> {
    if (!attrs.contains(key)) return dflt;
    VINCI_ASSIGN_OR_RETURN(std::string e, attr_expr(attrs, key, a.where));
    if (attrs[key].is_number_integer() && attrs[key].get<int64_t>() < 0) return expr_add(len, e);
    return e;
  };
  SymShape s = x;
  if (a.op.code() == OpCode::kSelect) {
    VINCI_RETURN_IF_ERROR(bound("index", "0").status());
    s.erase(s.begin() + d);
    return one(s);
  }
  VINCI_ASSIGN_OR_RETURN(std::string start, bound("start", "0"));
  VINCI_ASSIGN_OR_RETURN(std::string end, bound("end", len));
  bool neg_start = attrs.contains("start") && attrs["start"].is_number_integer() && attrs["start"].get<int64_t>() < 0;
  if (neg_start && !attrs.contains("end"))  // x[..., -n:]: n long
    s[static_cast<size_t>(d)] = std::to_string(-attrs["start"].get<int64_t>());
  else if (start == "0")
    s[static_cast<size_t>(d)] = end;
  else
    s[static_cast<size_t>(d)] = expr_sub(end, start);
  return one(s);
}

// "bij,bjk->bik": every output letter takes its size from the first operand that has it.
OutShapes einsum_shape(const OpShapeArgs& a) {
  const std::string& where = a.where;
  std::string eq = a.op.attrs.value("equation", std::string());
  size_t arrow = eq.find("->");
  if (arrow == std::string::npos || eq.find("...") != std::string::npos)
    return invalid_argument(where + ": key 'equation': expected 'ab,bc->ac' (explicit output, no '...'), found '" + eq +
                            "'");
  std::map<char, std::string> size_of;
  std::string lhs = eq.substr(0, arrow);
  size_t operand = 0, pos = 0;
  for (size_t i = 0; i <= lhs.size(); ++i) {
    if (i < lhs.size() && lhs[i] != ',') continue;
    std::string sub = lhs.substr(pos, i - pos);
    pos = i + 1;
    if (operand >= a.ins.size() || sub.size() != a.ins[operand].size())
      return invalid_argument(where + ": key 'equation': operand " + std::to_string(operand) + " subscripts '" + sub +
                              "' do not match the inputs");
    for (size_t k = 0; k < sub.size(); ++k) size_of.emplace(sub[k], a.ins[operand][k]);
    ++operand;
  }
  if (operand != a.ins.size())
    return invalid_argument(where + ": key 'equation': " + std::to_string(operand) + " operands for " +
                            std::to_string(a.ins.size()) + " inputs");
  SymShape s;
  for (char c : eq.substr(arrow + 2)) {
    auto it = size_of.find(c);
    if (it == size_of.end())
      return invalid_argument(where + ": key 'equation': output letter '" + std::string(1, c) + "' not in any operand");
    s.push_back(it->second);
  }
  return one(s);
}

// nn.LSTM / nn.GRU: the output, h_n (and c_n for an LSTM).
OutShapes rnn_shape(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  const auto& m = a.mod->attrs;
  if (x.size() != 3) return invalid_argument(a.where + ": expected an input of rank 3");
  VINCI_ASSIGN_OR_RETURN(std::string h, attr_expr(m, "hidden", a.where));
  int64_t dirs = attr_bool_or(m, "bidirectional", false) ? 2 : 1;
  std::string ld = expr_mul(std::to_string(attr_int_or(m, "layers", 1)), std::to_string(dirs));
  std::string batch = attr_bool_or(m, "batch_first", false) ? x[0] : x[1];
  SymShape o = x;
  o[2] = expr_mul(std::to_string(dirs), h);
  std::vector<SymShape> outs = {o, {ld, batch, h}};
  if (a.op.code() == OpCode::kLstm) outs.push_back({ld, batch, h});
  return outs;
}

OutShapes elman_rnn_shape(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  if (x.size() != 3) return invalid_argument(a.where + ": expected an input of rank 3 [T, B, In]");
  VINCI_ASSIGN_OR_RETURN(std::string o, attr_expr(a.mod->attrs, "out", a.where));
  return one({x[0], x[1], o});
}

// F.pad(x, pad) in constant mode: (before, after) pairs, the last dim first.
OutShapes pad_shape(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  const auto& attrs = a.op.attrs;
  if (!attrs.contains("pad") || !attrs["pad"].is_array() || attrs["pad"].size() % 2 != 0 ||
      attrs["pad"].size() / 2 > x.size())
    return invalid_argument(a.where + ": key 'pad' must be an even list of at most 2 * rank integers");
  SymShape s = x;
  for (size_t i = 0; i < attrs["pad"].size() / 2; ++i) {
    int64_t grow = attrs["pad"][2 * i].get<int64_t>() + attrs["pad"][2 * i + 1].get<int64_t>();
    std::string& d = s[x.size() - 1 - i];
    d = expr_add(d, std::to_string(grow));
  }
  return one(s);
}

// torch.roll(x, shifts, dims): one shift per dim, the shape unchanged.
OutShapes roll_shape(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  auto ints = [&](const char* key) -> Result<std::vector<int64_t>> {
    if (!a.op.attrs.contains(key) || !a.op.attrs[key].is_array() || a.op.attrs[key].empty())
      return invalid_argument(a.where + ": key '" + key + "': expected a non-empty list of integers");
    std::vector<int64_t> v;
    for (const auto& e : a.op.attrs[key]) {
      if (!e.is_number_integer())
        return invalid_argument(a.where + ": key '" + key + "': expected integers, found " + e.dump());
      v.push_back(e.get<int64_t>());
    }
    return v;
  };
  VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> shifts, ints("shifts"));
  VINCI_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ints("dims"));
  if (shifts.size() != dims.size())
    return invalid_argument(a.where + ": keys 'shifts' and 'dims': expected lists of the same length, found " +
                            std::to_string(shifts.size()) + " and " + std::to_string(dims.size()));
  for (int64_t d : dims)
    if (d < -static_cast<int64_t>(x.size()) || d >= static_cast<int64_t>(x.size()))
      return invalid_argument(a.where + ": key 'dims': " + std::to_string(d) + " is not a dim of a rank-" +
                              std::to_string(x.size()) + " input");
  return one(x);
}

// Swin's table of one bias per relative offset and head, [(2W-1)^2, H], gathered for every
// (query, key) pair of a W x W window: [H, W*W, W*W].
OutShapes relative_position_bias_shape(const OpShapeArgs& a) {
  VINCI_ASSIGN_OR_RETURN(std::string w, attr_expr(a.op.attrs, "window", a.where));
  if (a.x().size() != 2) return invalid_argument(a.where + ": expected a table of rank 2 [(2W-1)^2, heads]");
  std::string area = expr_mul(w, w);
  return one({a.x()[1], area, area});
}

// Q [..., L, E], K [..., S, E], V [..., S, Ev] -> [..., L, Ev]
OutShapes sdpa_shape(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  const SymShape& v = a.ins[2];
  if (x.size() < 2 || a.ins[1].size() != x.size() || v.size() != x.size())
    return invalid_argument(a.where + ": expected Q, K and V of the same rank >= 2");
  SymShape s = x;
  s.back() = v.back();
  return one(s);
}

// The shapes of one op's outputs: one case per op (the compiler names an op without a rule).
OutShapes op_out_shapes(const OpShapeArgs& a) {
  const SymShape& x = a.x();
  switch (a.op.code()) {
    case OpCode::kAdd:
    case OpCode::kSub:
    case OpCode::kMul:
    case OpCode::kDiv: return one(broadcast_shape(x, a.ins[1]));  // bias [1, C, 1, 1] + x [B, 1] is [1, C, B, 1]
    case OpCode::kRelu:
    case OpCode::kLeakyRelu:
    case OpCode::kSigmoid:
    case OpCode::kTanh:
    case OpCode::kGelu:
    case OpCode::kSilu:
    case OpCode::kElu:
    case OpCode::kSelu:
    case OpCode::kSoftplus:
    case OpCode::kSoftsign:
    case OpCode::kHardsigmoid:
    case OpCode::kHardswish:
    case OpCode::kHardtanh:
    case OpCode::kMish:
    case OpCode::kExp:
    case OpCode::kLog:
    case OpCode::kAbs:
    case OpCode::kSquare:
    case OpCode::kSqrt:
    case OpCode::kClamp:
    case OpCode::kMulScalar:
    case OpCode::kAddScalar:
    case OpCode::kDivScalar:
    case OpCode::kSoftmax:
    case OpCode::kLogSoftmax:
    case OpCode::kRmsNorm:
    case OpCode::kLayerNorm:
    case OpCode::kBatchNorm:
    case OpCode::kGroupNorm:
    case OpCode::kCumsum:
    case OpCode::kCumprod:
    case OpCode::kCausalMask:
    case OpCode::kSelfAttention: return one(x);
    case OpCode::kMatmul: return matmul_shape(a);
    case OpCode::kLinear: return linear_shape(a);
    case OpCode::kSum:
    case OpCode::kMean:
    case OpCode::kAmax:
    case OpCode::kAmin:
    case OpCode::kLogsumexp:
    case OpCode::kNormL2:
    case OpCode::kArgmax:
    case OpCode::kArgmin: return reduce_shape(a);
    case OpCode::kConv1d:
    case OpCode::kConv2d:
    case OpCode::kConv3d:
    case OpCode::kConvTranspose1d:
    case OpCode::kConvTranspose2d:
    case OpCode::kConvTranspose3d: return conv_shape(a);
    case OpCode::kMaxPool1d:
    case OpCode::kMaxPool2d:
    case OpCode::kMaxPool3d:
    case OpCode::kAvgPool2d: return pool_shape(a);
    case OpCode::kAvgPool1d:
    case OpCode::kAvgPool3d: return avg_pool_shape(a);
    case OpCode::kAdaptiveAvgPool2d: return adaptive_pool_shape(a, 2);
    case OpCode::kAdaptiveAvgPool3d: return adaptive_pool_shape(a, 3);
    case OpCode::kReshape:
    case OpCode::kExpand: return reshape_shape(a);
    case OpCode::kFlatten: return flatten_shape(a);
    case OpCode::kPermute: return permute_shape(a);
    case OpCode::kTranspose: return transpose_shape(a);
    case OpCode::kSplit: return split_shape(a);
    case OpCode::kConcat: return concat_shape(a);
    case OpCode::kMseLoss:
    case OpCode::kCrossEntropy:
    case OpCode::kSmoothL1Loss:
    case OpCode::kKlDiv:
    case OpCode::kHingeLoss:
    case OpCode::kCosineSimilarityLoss:
    case OpCode::kFrobeniusNorm:
    case OpCode::kTripletMarginLoss: return one({});
    case OpCode::kTriu:
    case OpCode::kTril:
      if (x.size() < 2) return invalid_argument(a.where + ": expected an input of rank >= 2");
      return one(x);
    case OpCode::kCumsumReverse:
    case OpCode::kCumsumExclusive:
    case OpCode::kNormalize: VINCI_RETURN_IF_ERROR(a.dim(x, -1).status()); return one(x);
    case OpCode::kInstanceNorm:
      if (x.size() < 3) return invalid_argument(a.where + ": expected an input of rank 3 to 5 ([N, C, ...])");
      return one(x);
    case OpCode::kSlice:
    case OpCode::kSelect: return slice_shape(a);
    case OpCode::kEinsum: return einsum_shape(a);
    case OpCode::kLstm:
    case OpCode::kGru: return rnn_shape(a);
    case OpCode::kElmanRnn: return elman_rnn_shape(a);
    case OpCode::kPad: return pad_shape(a);
    case OpCode::kRoll: return roll_shape(a);
    case OpCode::kRelativePositionBias: return relative_position_bias_shape(a);
    case OpCode::kScaledDotProductAttention: return sdpa_shape(a);
    case OpCode::kUnknown: break;
  }
  return invalid_argument(a.where + ": no shape rule");
}

}  // namespace

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
    const ModuleSpec* mod = op.module.empty() ? nullptr : find_module(task, op.module);
    if (info->module[0] && !mod) return invalid_argument(where + ": module '" + op.module + "' not defined");
    VINCI_ASSIGN_OR_RETURN(std::vector<SymShape> outs, op_out_shapes(OpShapeArgs{op, ins, mod, where}));
    if (outs.size() != op.outputs.size())
      return invalid_argument(where + ": key 'out': expected " + std::to_string(outs.size()) + " names, found " +
                              std::to_string(op.outputs.size()));
    for (size_t i = 0; i < outs.size(); ++i) shapes[op.outputs[i]] = outs[i];
  }
  return shapes;
}

}  // namespace vinci
