// Addresses and digests in records: 16-byte Data fields, high word first (Digest::to_bytes).
#ifndef VINCI_RECORDER_ADDRESS_H_
#define VINCI_RECORDER_ADDRESS_H_

#include <capnp/blob.h>

#include <cstdint>

#include "core/hash.h"

namespace vinci {

// The 16 bytes of a digest, alive as long as this object, for a Data field's setter.
class AddressBytes {
 public:
  explicit AddressBytes(const Digest& d) { d.to_bytes(bytes_); }
  capnp::Data::Reader data() const { return capnp::Data::Reader(bytes_, 16); }

 private:
  uint8_t bytes_[16];
};

// The digest a Data field holds; the zero digest for an unset field or one that is not 16 bytes.
inline Digest address_of(capnp::Data::Reader d) { return d.size() == 16 ? Digest::from_bytes(d.begin()) : Digest(); }

}  // namespace vinci

#endif  // VINCI_RECORDER_ADDRESS_H_
