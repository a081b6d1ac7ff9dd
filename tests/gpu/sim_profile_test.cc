// Device profiles: the H200 file, error messages that name file and key, and the writer.
#include "gpu/sim/calibration.h"
#include "gpu/sim/device_profile.h"

#include <gtest/gtest.h>

#include "tests/gpu/sim_test_util.h"

namespace vinci {
namespace {

TEST(DeviceProfile, H200HasTheMeasuredAndDatasheetFigures) {
  const DeviceProfile& p = simtest::h200();
  EXPECT_EQ(p.name, "h200-datasheet");
  EXPECT_EQ(p.sms, 132);
  EXPECT_EQ(p.warp_size, 32);
  EXPECT_EQ(p.max_threads_per_sm, 2048);
  EXPECT_EQ(p.registers_per_sm, 65536);
  EXPECT_DOUBLE_EQ(p.hbm_bytes_per_s, 4.3e12);
  EXPECT_DOUBLE_EQ(p.hbm_peak_bytes_per_s, 4.8e12);
  EXPECT_DOUBLE_EQ(p.fp32_peak_flops, 67e12);
  // The fp32 peak is the SM count x 128 lanes x an FMA x the clock.
  EXPECT_NEAR(static_cast<double>(p.sms) * 128 * 2 * p.clock_hz / p.fp32_peak_flops, 1.0, 0.01);
  // The measured libtorch rate: 4096^3 in 2.72 ms.
  EXPECT_NEAR(2.0 * 4096 * 4096 * 4096 / p.fp32_library_flops * 1e3, 2.72, 0.01);
}

// The default profile is the datasheet's with only the figures calibration fits changed: a fit
// never moves a fact about the hardware.
TEST(DeviceProfile, TheDefaultDiffersFromTheDatasheetOnlyInFittedFigures) {
  Result<DeviceProfile> def = load_device_profile(profile_path("h200"));
  ASSERT_TRUE(def.ok()) << def.status().to_string();
  EXPECT_EQ(def->name, "h200");
  DeviceProfile fitted_back = simtest::h200();
  for (const auto& c : calibration_parameters()) fitted_back.*(c.field) = (*def).*(c.field);
  fitted_back.name = def->name;
  fitted_back.source_file = def->source_file;
  EXPECT_EQ(device_profile_to_toml(fitted_back), device_profile_to_toml(*def));
  int moved = 0;
  for (const auto& c : calibration_parameters()) moved += (*def).*(c.field) != simtest::h200().*(c.field);
  EXPECT_GE(moved, 5);
}

TEST(DeviceProfile, WritesAndReadsBackTheSameValues) {
  const DeviceProfile& p = simtest::h200();
  std::string text = device_profile_to_toml(p);
  Result<DeviceProfile> back = parse_device_profile("written.toml", text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(device_profile_to_toml(*back), text);
  for (const auto& term : efficiency_terms()) EXPECT_EQ(back.value().*term.field, p.*term.field) << term.name;
}

TEST(DeviceProfile, ErrorsNameTheFileAndTheKey) {
  std::string good = device_profile_to_toml(simtest::h200());
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  struct Case {
    std::string text, expect;
  } cases[] = {
      {replace("count = 132", "count = \"many\""), "my.toml: key 'sm.count': expected an integer, found a string"},
      {replace("count = 132\n", ""), "my.toml: key 'sm.count': expected an integer, found nothing"},
      {replace("count = 132", "count = 132.5"), "key 'sm.count': expected an integer, found a float"},
      {replace("l2_usable_fraction = 0.75", "l2_usable_fraction = 1.5"),
       "key 'memory.l2_usable_fraction': expected a value in [0.01, 1], found 1.5"},
      {replace("[launch]\n", "[launch]\nkernel_ms = 4\n"), "key 'launch.kernel_ms': not a device profile key"},
      {replace("hbm_bytes_per_s = 4300000000000", "hbm_bytes_per_s = 5300000000000"), "measured bandwidth"},
      {"[sm\n", "my.toml:1:"},
  };
  for (const auto& c : cases) {
    Result<DeviceProfile> r = parse_device_profile("my.toml", c.text);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
  Result<DeviceProfile> missing = load_device_profile("/nonexistent/x.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/x.toml"), std::string::npos);
}

}  // namespace
}  // namespace vinci
