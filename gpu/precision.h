// Precisions, closed settings typed where they are read: a kernel's or a library step's matrix
// products ("precision" in plan JSON, docs/plan_format.md) and the reference's policy on a GPU
// (device.reference_precision, --reference-precision). The names exist only at the edges.
#ifndef VINCI_GPU_PRECISION_H_
#define VINCI_GPU_PRECISION_H_

#include "core/enum_names.h"

namespace vinci {

// Operands rounded so for the products, FP32 accumulation: fp32 (none), tf32 (tensor cores with a
// 10-bit mantissa), bf16 and fp16 (16-bit operands).
enum class Precision { kFp32, kTf32, kBf16, kFp16 };
inline constexpr EnumNames<Precision, 4> kPrecisions = {"precision", {"fp32", "tf32", "bf16", "fp16"}};

// bf16 or fp16: products on 16-bit operands (wmma m16n16k16; a library step casts to and from them).
constexpr bool is_16bit_precision(Precision p) { return p == Precision::kBf16 || p == Precision::kFp16; }

// The reference's precision policy on a GPU (gpu/eval_result.h, parse_reference_precision):
// kernelbench (PyTorch's defaults: cuDNN may use TF32, matrix products FP32) or fp32 (TF32 off).
enum class ReferencePrecision { kKernelbench, kFp32 };
inline constexpr EnumNames<ReferencePrecision, 2> kReferencePrecisions = {"reference precision",
                                                                          {"kernelbench", "fp32"}};

}  // namespace vinci

#endif  // VINCI_GPU_PRECISION_H_
