// The object store's file format (every object a run names: kernels, plans, replies, skills,
// checkpoints): the bytes are one object file. A decoded object re-encodes to a file that decodes
// to the same kind and bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "recorder/object_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view file(reinterpret_cast<const char*>(data), size);
  vinci::Result<vinci::StoredObject> object = vinci::decode_object_file(file, "fuzz/object");
  if (!object.ok()) return 0;
  vinci::Result<vinci::StoredObject> again =
      vinci::decode_object_file(vinci::encode_object_file(object->kind, object->bytes), "again");
  VINCI_FUZZ_CHECK(again.ok(), again.status().to_string());
  VINCI_FUZZ_CHECK(again->kind == object->kind && again->bytes == object->bytes, "re-encoded object differs");
  return 0;
}
