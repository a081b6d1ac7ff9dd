#include "gpu/reference_dump.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/bytes.h"
#include "gpu/expr.h"

namespace vinci {

std::string npy_bytes(const std::string& dtype, const std::vector<int64_t>& shape, const void* data, size_t nbytes) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";  // Python's one-element tuple: (5,)
  std::string header = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic (6) + version (2) + header length (2) + header + padding + '\n' is a multiple of 64.
  size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  put_le(&out, header.size(), 2);
  out += header;
  out.append(static_cast<const char*>(data), nbytes);
  return out;
}

namespace {

Result<nlohmann::json> write_array(const std::string& dir, const std::string& file, const std::string& name,
                                   const at::Tensor& value) {
  torch::Tensor t = value.detach().to(torch::kCPU).contiguous();
  std::string dtype;
  if (t.scalar_type() == torch::kFloat32)
    dtype = "<f4";
  else if (t.scalar_type() == torch::kInt64)
    dtype = "<i8";
  else if (t.scalar_type() == torch::kBool) {
    t = t.to(torch::kInt64);
    dtype = "<i8";
  } else {
    return invalid_argument("reference dump: '" + name + "' has dtype " + std::string(c10::toString(t.scalar_type())) +
                            ", expected float32 or int64");
  }
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  std::string bytes = npy_bytes(dtype, shape, t.data_ptr(), t.numel() * t.element_size());
  VINCI_RETURN_IF_ERROR(write_file_atomic(dir + "/" + file, bytes, /*durable=*/false));
  return nlohmann::json{{"name", name}, {"file", file}, {"dtype", dtype}, {"shape", shape}};
}

}  // namespace

Status dump_reference(const Task& task, SizeName size, InputDistribution dist, uint64_t seed, const std::string& dir) {
  if (dir.empty()) return invalid_argument("reference dump: --out: expected a folder, found ''");
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
    return io_error("reference dump: cannot create '" + dir + "': " + std::strerror(errno));
  VINCI_ASSIGN_OR_RETURN(TaskInstance inst, TaskInstance::create(task, size, "cpu"));
  VINCI_ASSIGN_OR_RETURN(std::vector<at::Tensor> inputs, inst.make_inputs(dist, seed));
  VINCI_ASSIGN_OR_RETURN(at::Tensor output, inst.run(inputs));
  nlohmann::json meta{{"task", task.id},
                      {"size", size_name(size)},
                      {"sizes", inst.sizes()},
                      {"seed", seed},
                      {"weight_seed", kWeightSeed},
                      {"distribution", distribution_name(dist)},
                      {"kernelbench", task.kernelbench_problem},
                      {"kernelbench_globals", nlohmann::json::object()}};
  ExprEnv env;
  env.symbols = inst.sizes();
  for (const auto& [name, g] : task.kernelbench_globals) {
    nlohmann::json values = nlohmann::json::array();
    for (const auto& e : g.values) {
      VINCI_ASSIGN_OR_RETURN(int64_t v, eval_expr(e, env));
      values.push_back(v);
    }
    meta["kernelbench_globals"][name] = g.list ? values : values[0];
  }
  nlohmann::json ins = nlohmann::json::array();
  for (size_t i = 0; i < inputs.size(); ++i) {
    VINCI_ASSIGN_OR_RETURN(nlohmann::json a,
                           write_array(dir, "input_" + std::to_string(i) + ".npy", task.inputs[i].name, inputs[i]));
    ins.push_back(a);
  }
  meta["inputs"] = ins;
  VINCI_ASSIGN_OR_RETURN(meta["output"], write_array(dir, "output.npy", task.output, output));
  return write_file_atomic(dir + "/meta.json", meta.dump(2) + "\n", /*durable=*/false);
}

}  // namespace vinci
