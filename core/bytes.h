// The one byte codec of vinci's binary formats: fixed-width little-endian integers and IEEE-754
// floats by their bit patterns, written the same on every machine.
//
// Every binary format vinci writes is built from these (docs/log_format.md describes each): the
// log's segment headers and frame headers (recorder/run_log.cc), object files
// (recorder/object_store.cc), the sim backbone's checkpoints (agents/sim_backbone.cc), the frames
// between the harness and its GPU worker (gpu/live/cuda_evaluator.cc), .npy headers
// (gpu/reference_dump.cc) and the integers a digest hashes (core/hash.cc).
//
// ByteWriter appends to a string. ByteReader reads from a view and never reads past its end: each
// read returns false when too few bytes are left (and then leaves its position where it was), so a
// decoder names what it was reading and reports a short or damaged input as an error.
#ifndef VINCI_CORE_BYTES_H_
#define VINCI_CORE_BYTES_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace vinci {

// The low n bytes of v, least significant first, appended to out (n <= 8).
inline void put_le(std::string* out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// The low n bytes of v, least significant first, at p (n <= 8).
inline void store_le(void* p, uint64_t v, int n) {
  auto* b = static_cast<unsigned char*>(p);
  for (int i = 0; i < n; ++i) b[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xff);
}

// The n-byte little-endian integer at p (n <= 8).
inline uint64_t load_le(const void* p, int n) {
  const auto* b = static_cast<const unsigned char*>(p);
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

inline uint32_t load_u32(const void* p) { return static_cast<uint32_t>(load_le(p, 4)); }
inline uint64_t load_u64(const void* p) { return load_le(p, 8); }

inline uint32_t f32_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline float f32_from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint64_t f64_bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

class ByteWriter {
 public:
  ByteWriter() = default;
  explicit ByteWriter(std::string start) : out_(std::move(start)) {}

  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u16(uint16_t v) { put_le(&out_, v, 2); }
  void u32(uint32_t v) { put_le(&out_, v, 4); }
  void u64(uint64_t v) { put_le(&out_, v, 8); }
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f32(float v) { u32(f32_bits(v)); }
  void f64(double v) { u64(f64_bits(v)); }
  // n floats, each by its bit pattern.
  void f32s(const float* p, size_t n) {
    out_.reserve(out_.size() + 4 * n);
    for (size_t i = 0; i < n; ++i) f32(p[i]);
  }
  // A u32 length, then the bytes.
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s);
  }
  void raw(std::string_view s) { out_.append(s.data(), s.size()); }
  void reserve(size_t n) { out_.reserve(n); }

  size_t size() const { return out_.size(); }
  const std::string& bytes() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}

  bool u8(uint8_t* v) { return fixed(1, v); }
  bool u16(uint16_t* v) { return fixed(2, v); }
  bool u32(uint32_t* v) { return fixed(4, v); }
  bool u64(uint64_t* v) { return fixed(8, v); }
  bool i32(int32_t* v) { return fixed(4, v); }
  bool i64(int64_t* v) { return fixed(8, v); }
  bool f32(float* v) {
    uint32_t b;
    if (!u32(&b)) return false;
    *v = f32_from_bits(b);
    return true;
  }
  // n floats into out (which has room for them).
  bool f32s(float* out, size_t n) {
    if (n > remaining() / 4) return false;
    for (size_t i = 0; i < n; ++i) out[i] = f32_from_bits(load_u32(in_.data() + pos_ + 4 * i));
    pos_ += 4 * n;
    return true;
  }
  // The next n bytes, as a view into the input.
  bool bytes(size_t n, std::string_view* out) {
    if (n > remaining()) return false;
    *out = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  // A u32 length, then the bytes.
  bool str(std::string* out) {
    size_t start = pos_;
    uint32_t n;
    std::string_view s;
    if (!u32(&n) || !bytes(n, &s)) {
      pos_ = start;
      return false;
    }
    out->assign(s.data(), s.size());
    return true;
  }
  bool skip(size_t n) {
    if (n > remaining()) return false;
    pos_ += n;
    return true;
  }

  size_t offset() const { return pos_; }
  size_t remaining() const { return in_.size() - pos_; }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  template <typename T>
  bool fixed(int n, T* v) {
    if (static_cast<size_t>(n) > remaining()) return false;
    *v = static_cast<T>(load_le(in_.data() + pos_, n));
    pos_ += static_cast<size_t>(n);
    return true;
  }

  std::string_view in_;
  size_t pos_ = 0;
};

}  // namespace vinci

#endif  // VINCI_CORE_BYTES_H_
