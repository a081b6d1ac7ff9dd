#include "tests/recorder/record_samples.h"

#include <capnp/dynamic.h>
#include <capnp/schema.h>

#include "core/rng.h"
#include "recorder/run.h"
#include "recorder/vinci.capnp.h"

namespace vinci {
namespace {

std::string random_text(Stream& s) {
  static const char* kWords[] = {"tile", "warp",   "float4",    "softmax", "fusion",
                                 "smem", "unroll", "occupancy", "reduce",  "épilogue"};
  std::string out;
  uint64_t n = 1 + s.below(6);
  for (uint64_t i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += kWords[s.below(10)];
  }
  return out;
}

void fill_struct(capnp::DynamicStruct::Builder b, Stream& s, int depth);

void fill_field(capnp::DynamicStruct::Builder b, capnp::StructSchema::Field field, Stream& s, int depth) {
  auto type = field.getType();
  switch (type.which()) {
    case capnp::schema::Type::VOID: b.set(field, capnp::VOID); break;
    case capnp::schema::Type::BOOL: b.set(field, s.below(2) == 1); break;
    case capnp::schema::Type::INT8: b.set(field, static_cast<int8_t>(s.below(200)) - 100); break;
    case capnp::schema::Type::INT16: b.set(field, static_cast<int16_t>(s.below(60000)) - 30000); break;
    case capnp::schema::Type::INT32: b.set(field, static_cast<int32_t>(s.below(2000)) - 1); break;
    case capnp::schema::Type::INT64: b.set(field, static_cast<int64_t>(s.next_u64() >> 2)); break;
    case capnp::schema::Type::UINT8: b.set(field, static_cast<uint8_t>(s.below(256))); break;
    case capnp::schema::Type::UINT16: b.set(field, static_cast<uint16_t>(s.below(65536))); break;
    case capnp::schema::Type::UINT32: b.set(field, static_cast<uint32_t>(s.below(1u << 31))); break;
    case capnp::schema::Type::UINT64: b.set(field, s.next_u64()); break;
    case capnp::schema::Type::FLOAT32: b.set(field, static_cast<float>(s.normal())); break;
    case capnp::schema::Type::FLOAT64: b.set(field, s.normal() * 100); break;
    case capnp::schema::Type::TEXT: b.set(field, capnp::Text::Reader(random_text(s))); break;
    case capnp::schema::Type::DATA: {
      uint8_t bytes[16];
      for (auto& x : bytes) x = static_cast<uint8_t>(s.below(256));
      b.set(field, capnp::Data::Reader(bytes, 16));
      break;
    }
    case capnp::schema::Type::ENUM: {
      auto enumerants = type.asEnum().getEnumerants();
      b.set(field, capnp::DynamicEnum(enumerants[s.below(enumerants.size())]));
      break;
    }
    case capnp::schema::Type::STRUCT: fill_struct(b.init(field).as<capnp::DynamicStruct>(), s, depth + 1); break;
    case capnp::schema::Type::LIST: {
      auto elem = type.asList().getElementType();
      unsigned n = 1 + static_cast<unsigned>(s.below(3));
      auto list = b.init(field, n).as<capnp::DynamicList>();
      for (unsigned i = 0; i < n; ++i) {
        switch (elem.which()) {
          case capnp::schema::Type::STRUCT: fill_struct(list[i].as<capnp::DynamicStruct>(), s, depth + 1); break;
          case capnp::schema::Type::TEXT: list.set(i, capnp::Text::Reader(random_text(s))); break;
          case capnp::schema::Type::FLOAT64: list.set(i, s.uniform() * 1000); break;
          case capnp::schema::Type::UINT32: list.set(i, static_cast<uint32_t>(s.below(64))); break;
          case capnp::schema::Type::BOOL: list.set(i, s.below(2) == 1); break;
          case capnp::schema::Type::ENUM: {
            auto enumerants = elem.asEnum().getEnumerants();
            list.set(i, capnp::DynamicEnum(enumerants[s.below(enumerants.size())]));
            break;
          }
          default:
            VINCI_ASSERT_MSG(false,
                             "sample filler: add a case for list element type " << static_cast<int>(elem.which()));
        }
      }
      break;
    }
    default: VINCI_ASSERT_MSG(false, "sample filler: unhandled type " << static_cast<int>(type.which()));
  }
}

void fill_struct(capnp::DynamicStruct::Builder b, Stream& s, int depth) {
  VINCI_ASSERT(depth < 8);
  // Non-union fields first, then (if the struct has a union) one member picked at random.
  for (auto field : b.getSchema().getNonUnionFields()) fill_field(b, field, s, depth);
  auto members = b.getSchema().getUnionFields();
  if (members.size() > 0) fill_field(b, members[s.below(members.size())], s, depth);
}

}  // namespace

std::vector<std::string> record_kinds() {
  std::vector<std::string> out;
  for (auto f : capnp::Schema::from<schema::Record>().getUnionFields()) {
    out.push_back(f.getProto().getName());
  }
  return out;
}

void fill_sample_record(capnp::MallocMessageBuilder* message, const std::string& kind, uint64_t seed, uint64_t index) {
  Stream s(RngKey::root(seed).with("sample-record", static_cast<int64_t>(index)));
  auto root = capnp::DynamicStruct::Builder(message->initRoot<schema::Record>());
  for (auto field : root.getSchema().getNonUnionFields()) fill_field(root, field, s, 0);
  fill_field(root, root.getSchema().getFieldByName(kind), s, 0);
}

std::string sample_payload(uint64_t seed, uint64_t i) {
  static const std::vector<std::string> kinds = record_kinds();
  capnp::MallocMessageBuilder msg;
  fill_sample_record(&msg, kinds[i % kinds.size()], seed, i);
  msg.getRoot<schema::Record>().setSeq(i);
  return encode_message(msg);
}

}  // namespace vinci
