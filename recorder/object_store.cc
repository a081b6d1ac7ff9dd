#include "recorder/object_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "core/atomic_file.h"
#include "core/bytes.h"

namespace vinci {
namespace {

constexpr char kMagic[4] = {'V', 'O', 'B', '1'};
constexpr size_t kHeaderSize = 16;
// The most one zstd frame can expand: a block makes at most 128 KiB and takes at least 4 bytes.
constexpr uint64_t kMaxZstdExpansion = (128u << 10) / 4;
// Seed of the second hash kept for known addresses; any constant other than 0 will do.
constexpr uint64_t kCheckSeed = 0x76696e6369636b31ull;  // "vincick1"

uint64_t check_hash(std::string_view kind, std::string_view bytes) {
  uint64_t h = hash64(kind.data(), kind.size(), kCheckSeed);
  return hash64(bytes.data(), bytes.size(), h);
}

}  // namespace

std::string encode_object_file(std::string_view kind, std::string_view bytes) {
  VINCI_REQUIRE(!kind.empty() && kind.size() < 256, "object kind must be 1..255 bytes: " << kind);
  std::string compressed;
  uint8_t encoding = 0;
  if (bytes.size() >= ObjectStore::kCompressMin) {
    // One context per thread: ZSTD_compress() would set up and tear down a context (about a
    // megabyte of tables) on every call, which costs more than compressing a kernel source.
    thread_local std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
    compressed.resize(ZSTD_compressBound(bytes.size()));
    size_t n = ZSTD_compressCCtx(cctx.get(), compressed.data(), compressed.size(), bytes.data(), bytes.size(),
                                 ObjectStore::kZstdLevel);
    VINCI_ASSERT_MSG(!ZSTD_isError(n), ZSTD_getErrorName(n));
    if (n < bytes.size()) {
      compressed.resize(n);
      encoding = 1;
    }
  }
  std::string_view payload = encoding ? std::string_view(compressed) : bytes;
  std::string out;
  out.reserve(kHeaderSize + kind.size() + payload.size());
  out.append(kMagic, 4);
  out.push_back(static_cast<char>(encoding));
  out.push_back(static_cast<char>(kind.size()));
  out.push_back(0);
  out.push_back(0);
  put_le(&out, bytes.size(), 8);
  out.append(kind);
  out.append(payload);
  return out;
}

Result<StoredObject> decode_object_file(std::string_view file, const std::string& path) {
  if (file.size() < kHeaderSize || std::memcmp(file.data(), kMagic, 4) != 0) {
    return corruption("object file " + path + ": expected magic VOB1 and a 16-byte header");
  }
  uint8_t encoding = static_cast<uint8_t>(file[4]);
  size_t kind_len = static_cast<uint8_t>(file[5]);
  uint64_t raw_size = load_u64(file.data() + 8);
  if (encoding > 1 || kind_len == 0 || file[6] != 0 || file[7] != 0 || kHeaderSize + kind_len > file.size()) {
    return corruption("object file " + path + ": bad header (encoding " + std::to_string(encoding) + ", kind length " +
                      std::to_string(kind_len) + ")");
  }
  StoredObject obj;
  obj.kind.assign(file.data() + kHeaderSize, kind_len);
  std::string_view payload = file.substr(kHeaderSize + kind_len);
  if (encoding == 0) {
    if (payload.size() != raw_size) {
      return corruption("object file " + path + ": expected " + std::to_string(raw_size) + " bytes, found " +
                        std::to_string(payload.size()));
    }
    obj.bytes.assign(payload);
  } else {
    unsigned long long content = ZSTD_getFrameContentSize(payload.data(), payload.size());
    if (content == ZSTD_CONTENTSIZE_UNKNOWN || content == ZSTD_CONTENTSIZE_ERROR || content != raw_size) {
      return corruption("object file " + path + ": zstd frame does not hold " + std::to_string(raw_size) + " bytes");
    }
    // No zstd frame expands more than kMaxZstdExpansion times (a 4-byte RLE block makes at most
    // 128 KiB): a header claiming more is damage, refused before the output is allocated.
    if (raw_size / kMaxZstdExpansion > payload.size()) {
      return corruption("object file " + path + ": zstd frame of " + std::to_string(payload.size()) +
                        " bytes cannot hold " + std::to_string(raw_size) + " bytes");
    }
    thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
    obj.bytes.resize(raw_size);
    size_t n = ZSTD_decompressDCtx(dctx.get(), obj.bytes.data(), obj.bytes.size(), payload.data(), payload.size());
    if (ZSTD_isError(n) || n != raw_size) {
      return corruption("object file " + path +
                        ": zstd: " + std::string(ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short frame"));
    }
  }
  return obj;
}

ObjectStore::ObjectStore(std::string root, bool durable) : root_(std::move(root)), durable_(durable) {}

std::string ObjectStore::path_of(const Digest& address) const {
  std::string hex = address.hex();
  return root_ + "/" + hex.substr(0, 2) + "/" + hex.substr(2);
}

Result<Digest> ObjectStore::put(std::string_view kind, std::string_view bytes) {
  Digest address = hash_tagged(kind, bytes);
  uint64_t check = check_hash(kind, bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.puts++;
    auto it = known_.find(address);
    if (it != known_.end()) {
      if (it->second != check) {
        return mismatch("object " + address.hex() + " of kind '" + std::string(kind) +
                        "': different bytes hash to an address already stored");
      }
      return address;
    }
  }
  std::string path = path_of(address);
  struct stat sb;
  if (::stat(path.c_str(), &sb) == 0) {
    VINCI_ASSIGN_OR_RETURN(StoredObject stored, get(address));
    if (stored.kind != kind || stored.bytes != bytes) {
      return mismatch("object " + address.hex() + " at " + path + " holds " + std::to_string(stored.bytes.size()) +
                      " bytes of kind '" + stored.kind + "', not the " + std::to_string(bytes.size()) +
                      " bytes of kind '" + std::string(kind) + "' being stored");
    }
  } else {
    std::string file = encode_object_file(kind, bytes);
    VINCI_RETURN_IF_ERROR(write_file_atomic(path, file, durable_));
    std::lock_guard<std::mutex> lock(mu_);
    stats_.written++;
    stats_.bytes_raw += bytes.size();
    stats_.bytes_disk += file.size();
  }
  std::lock_guard<std::mutex> lock(mu_);
  known_[address] = check;
  return address;
}

Result<StoredObject> ObjectStore::get(const Digest& address) const {
  std::string path = path_of(address);
  auto file = read_file(path, kObjectFile);
  if (!file.ok()) {
    if (file.status().code() == StatusCode::kNotFound) {
      return not_found("object " + address.hex() + " is not in the store at " + root_);
    }
    return file.status();
  }
  VINCI_ASSIGN_OR_RETURN(StoredObject obj, decode_object_file(*file, path));
  Digest actual = hash_tagged(obj.kind, obj.bytes);
  if (actual != address) {
    return corruption("object file " + path + " hashes to " + actual.hex() + ", not its address");
  }
  return obj;
}

bool ObjectStore::contains(const Digest& address) const {
  struct stat sb;
  return ::stat(path_of(address).c_str(), &sb) == 0;
}

Result<std::vector<Digest>> ObjectStore::list() const {
  std::vector<Digest> out;
  DIR* root = ::opendir(root_.c_str());
  if (!root) {
    if (errno == ENOENT) return out;
    return io_error("cannot list the object store at " + root_ + ": " + std::strerror(errno));
  }
  std::vector<std::string> prefixes;
  while (dirent* e = ::readdir(root)) {
    if (std::strlen(e->d_name) == 2) prefixes.push_back(e->d_name);
  }
  ::closedir(root);
  for (const auto& prefix : prefixes) {
    DIR* d = ::opendir((root_ + "/" + prefix).c_str());
    if (!d) continue;
    while (dirent* e = ::readdir(d)) {
      Digest address;
      if (std::strlen(e->d_name) == 30 && Digest::parse_hex(prefix + e->d_name, &address)) {
        out.push_back(address);
      }
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status ObjectStore::sync() const {
  int fd = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status();  // nothing written yet
  int rc = ::syncfs(fd);
  ::close(fd);
  if (rc != 0) return io_error("cannot sync the object store at " + root_);
  return Status();
}

ObjectStoreStats ObjectStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace vinci
