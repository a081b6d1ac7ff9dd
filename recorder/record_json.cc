#include "recorder/record_json.h"

#include <capnp/compat/json.h>
#include <capnp/dynamic.h>
#include <capnp/message.h>
#include <capnp/serialize-packed.h>
#include <kj/io.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/text.h"
#include "recorder/vinci.capnp.h"

namespace vinci {
namespace {

// The 16-byte Data fields of recorder/vinci.capnp that are digests, not addresses of objects: a
// sample's RngKey digest, parameter and run digests. Every other 16-byte field names an object.
// A new digest field must be added here, or `replay cat --objects` reports it missing.
bool is_digest_field(const std::string& name) {
  static const std::set<std::string> kDigests = {"key",       "digest",      "paramDigest",
                                                 "runDigest", "digestSoFar", "sourceRunDigest"};
  return kDigests.count(name) > 0;
}

// Collects every object address (a 16-byte Data field that is not a digest) reachable from a
// struct.
void collect_addresses(capnp::DynamicStruct::Reader s, std::set<Digest>* out);

void collect_value(capnp::DynamicValue::Reader v, std::set<Digest>* out) {
  switch (v.getType()) {
    case capnp::DynamicValue::DATA: {
      auto d = v.as<capnp::Data>();
      if (d.size() == 16) {
        Digest dg = Digest::from_bytes(d.begin());
        if (!dg.is_zero()) out->insert(dg);
      }
      break;
    }
    case capnp::DynamicValue::STRUCT: collect_addresses(v.as<capnp::DynamicStruct>(), out); break;
    case capnp::DynamicValue::LIST:
      for (auto e : v.as<capnp::DynamicList>()) collect_value(e, out);
      break;
    default: break;
  }
}

void collect_addresses(capnp::DynamicStruct::Reader s, std::set<Digest>* out) {
  for (auto field : s.getSchema().getFields()) {
    if (!s.has(field)) continue;
    if (is_digest_field(std::string(field.getProto().getName().cStr()))) continue;
    collect_value(s.get(field), out);
  }
}

bool is_utf8(const std::string& s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t extra = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 4;
    if (extra == 4 || extra > n - i - 1) return false;
    for (size_t k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    }
    i += extra + 1;
  }
  return true;
}

capnp::JsonCodec& codec() {
  thread_local std::unique_ptr<capnp::JsonCodec> c;
  if (!c) {
    c = std::make_unique<capnp::JsonCodec>();
    c->handleByAnnotation<schema::Record>();
    c->handleByAnnotation<schema::Manifest>();
  }
  return *c;
}

}  // namespace

std::string record_to_json(RecordView& record, const ObjectStore* store, std::map<Digest, std::string>* corrupt,
                           std::set<Digest>* missing) {
  auto root = record.message().getRoot<schema::Record>();
  kj::String text = codec().encode(root);
  std::string out(text.cStr());
  if (!store) return out;
  std::set<Digest> addresses;
  collect_addresses(capnp::DynamicStruct::Reader(root), &addresses);
  nlohmann::json objects = nlohmann::json::object();
  for (const Digest& d : addresses) {
    auto obj = store->get(d);
    nlohmann::json entry;
    if (!obj.ok() && obj.status().code() == StatusCode::kNotFound) {
      entry["missing"] = true;
      if (missing) missing->insert(d);
    } else if (!obj.ok()) {
      entry["corrupt"] = obj.status().message();
      if (corrupt) (*corrupt)[d] = obj.status().message();
    } else {
      entry["kind"] = obj->kind;
      if (is_utf8(obj->bytes)) {
        entry["text"] = obj->bytes;
      } else {
        entry["hex"] = hex_encode(obj->bytes);
      }
    }
    objects[d.hex()] = std::move(entry);
  }
  if (out.size() >= 2 && out.back() == '}') {
    out.pop_back();
    out += ",\"objects\":" + objects.dump() + "}";
  }
  return out;
}

std::string manifest_to_json(const ManifestInfo& manifest) {
  std::string bytes = encode_manifest(manifest);
  kj::ArrayInputStream in(kj::ArrayPtr<const kj::byte>(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
  capnp::PackedMessageReader reader(in);
  kj::String text = codec().encode(reader.getRoot<schema::Manifest>());
  return std::string("{\"manifest\":") + text.cStr() + "}";
}

}  // namespace vinci
