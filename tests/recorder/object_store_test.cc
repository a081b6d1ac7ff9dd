#include "recorder/object_store.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/atomic_file.h"
#include "tests/recorder/test_util.h"

namespace vinci {
namespace {

TEST(ObjectStore, PutGetAndAddressIsTaggedHash) {
  ObjectStore store(make_temp_dir("store") + "/objects");
  auto a = store.put("kernel-source", "__global__ void k() {}");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(*a, hash_tagged("kernel-source", "__global__ void k() {}"));
  auto obj = store.get(*a);
  ASSERT_TRUE(obj.ok());
  EXPECT_EQ(obj->kind, "kernel-source");
  EXPECT_EQ(obj->bytes, "__global__ void k() {}");
  // Same bytes, another kind: another address, another file.
  auto b = store.put("prompt", "__global__ void k() {}");
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*a, *b);
}

TEST(ObjectStore, EqualObjectsAreStoredOnce) {
  std::string root = make_temp_dir("store") + "/objects";
  ObjectStore s1(root), s2(root);  // two runs sharing one store
  std::string src(5000, 'x');
  ASSERT_TRUE(s1.put("kernel-source", src).ok());
  ASSERT_TRUE(s1.put("kernel-source", src).ok());
  ASSERT_TRUE(s2.put("kernel-source", src).ok());
  EXPECT_EQ(s1.stats().written, 1u);
  EXPECT_EQ(s2.stats().written, 0u);
  size_t files = 0;
  for (const auto& d : list_dir(root)) files += list_dir(root + "/" + d).size();
  EXPECT_EQ(files, 1u);
}

TEST(ObjectStore, LargeTextIsCompressedAndRoundTrips) {
  ObjectStore store(make_temp_dir("store") + "/objects");
  std::string src;
  for (int i = 0; i < 200; ++i) src += "float v = x[i] * scale + bias; // line " + std::to_string(i) + "\n";
  auto a = store.put("kernel-source", src);
  ASSERT_TRUE(a.ok());
  EXPECT_LT(store.stats().bytes_disk, src.size() / 3);
  EXPECT_EQ(store.get(*a)->bytes, src);
}

TEST(ObjectStore, TakenAddressWithOtherBytesFailsLoudly) {
  std::string root = make_temp_dir("store") + "/objects";
  ObjectStore writer(root);
  auto a = writer.put("skill", "use float4 loads");
  ASSERT_TRUE(a.ok());
  // Put other bytes at that address, as a bug or a disk fault would.
  ASSERT_TRUE(write_file_atomic(writer.path_of(*a), encode_object_file("skill", "something else")).ok());
  ObjectStore fresh(root);  // a process that has not seen the object yet
  auto again = fresh.put("skill", "use float4 loads");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kCorruption) << again.status().to_string();
  auto got = fresh.get(*a);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kCorruption);
  EXPECT_NE(got.status().message().find(writer.path_of(*a)), std::string::npos);
}

TEST(ObjectStore, GarbageFileIsCorruptionNotCrash) {
  std::string root = make_temp_dir("store") + "/objects";
  ObjectStore store(root);
  auto a = store.put("reply", std::string(300, 'r'));
  ASSERT_TRUE(a.ok());
  std::string file = read_file(store.path_of(*a)).value();
  for (size_t cut = 0; cut < file.size(); ++cut) {
    auto r = decode_object_file(file.substr(0, cut), "f");
    if (r.ok()) {
      EXPECT_NE(hash_tagged(r->kind, r->bytes), *a) << "cut at " << cut;
    }
  }
  for (size_t i = 0; i < file.size(); ++i) {
    std::string bad = file;
    bad[i] ^= 0x5a;
    auto r = decode_object_file(bad, "f");
    if (r.ok()) {
      EXPECT_NE(hash_tagged(r->kind, r->bytes), *a) << "flip at " << i;
    }
  }
}

// A zstd object's header and frame that claim a size no frame of that length can hold (the frame
// header's "unknown" or "error" size, or more than 32768 bytes per compressed byte) are damage,
// refused before any output is allocated.
TEST(ObjectStore, ImpossibleZstdSizeIsCorruptionNotAllocation) {
  auto file = [](uint64_t raw_size, std::string frame) {
    std::string f = std::string("VOB1") + '\x01' + '\x05' + std::string(2, '\0');
    for (int i = 0; i < 8; ++i) f.push_back(static_cast<char>(raw_size >> (8 * i)));
    return f + "reply" + frame;
  };
  // A frame header without a content size (ZSTD_CONTENTSIZE_UNKNOWN), and bytes that are no frame
  // (ZSTD_CONTENTSIZE_ERROR), each with the raw size that equals that marker.
  const std::string no_size("\x28\xb5\x2f\xfd\x00\x00\x01\x00\x00", 9);
  for (auto [raw, frame] :
       {std::pair<uint64_t, std::string>{~0ull, no_size}, std::pair<uint64_t, std::string>{~0ull - 1, "not zstd"}}) {
    auto r = decode_object_file(file(raw, frame), "f");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().to_string();
  }
  // A single-segment frame header claiming 2^40 bytes (frame content size field of 8 bytes).
  std::string huge("\x28\xb5\x2f\xfd\xe0", 5);
  for (int i = 0; i < 8; ++i) huge.push_back(static_cast<char>((1ull << 40) >> (8 * i)));
  huge += std::string("\x01\x00\x00", 3);
  auto r = decode_object_file(file(1ull << 40, huge), "f");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("cannot hold 1099511627776 bytes"), std::string::npos) << r.status().to_string();
}

TEST(ObjectStore, MissingObjectIsNotFound) {
  ObjectStore store(make_temp_dir("store") + "/objects");
  auto r = store.get(hash_tagged("plan", "never stored"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

TEST(ObjectStore, ConcurrentPutsOfOneObject) {
  std::string root = make_temp_dir("store") + "/objects";
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&root] {
      ObjectStore s(root);
      for (int i = 0; i < 50; ++i) {
        ASSERT_TRUE(s.put("plan", "plan " + std::to_string(i)).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  ObjectStore s(root);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(s.get(hash_tagged("plan", "plan " + std::to_string(i)))->bytes, "plan " + std::to_string(i));
  }
}

}  // namespace
}  // namespace vinci
