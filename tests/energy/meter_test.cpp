#include "energy/meter.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "energy/nvml.h"
#include "energy/rapl.h"

namespace meganeura::energy {
namespace {
namespace fs = std::filesystem;

constexpr uint64_t kMaxRange = 262143328850;  // a real package's max_energy_range_uj

void write(const fs::path& p, const std::string& text) {
  // Write beside and rename, as the sampler thread may read at any moment.
  const fs::path tmp = p.string() + ".tmp";
  std::ofstream(tmp) << text << "\n";
  fs::rename(tmp, p);
}

void zone(const fs::path& dir, const std::string& name, uint64_t energy) {
  fs::create_directories(dir);
  write(dir / "name", name);
  write(dir / "energy_uj", std::to_string(energy));
  write(dir / "max_energy_range_uj", std::to_string(kMaxRange));
}

// A powercap tree shaped like a two-socket server's: packages with core and dram
// subzones, the top-level links sysfs adds for subzones, psys, and the MMIO duplicate.
class PowercapFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("mg_powercap_" + std::to_string(getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    zone(root_ / "intel-rapl:0", "package-0", kMaxRange - 1000000);
    zone(root_ / "intel-rapl:0" / "intel-rapl:0:0", "core", 5);
    zone(root_ / "intel-rapl:0" / "intel-rapl:0:1", "dram", 2000000);
    zone(root_ / "intel-rapl:1", "package-1", 7000000);
    zone(root_ / "intel-rapl:1" / "intel-rapl:1:0", "dram", 100);
    zone(root_ / "intel-rapl:2", "psys", 9000000);
    zone(root_ / "intel-rapl-mmio:0", "package-0", 1);
    fs::create_directory_symlink(root_ / "intel-rapl:0" / "intel-rapl:0:1", root_ / "intel-rapl:0:1");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(PowercapFixture, DiscoversPackageAndDramDomainsOnce) {
  std::vector<std::string> notes;
  const auto domains = discover_rapl(root_.string(), &notes);
  ASSERT_EQ(domains.size(), 5u);
  EXPECT_EQ(domains[0].name, "dram-0");
  EXPECT_EQ(domains[1].name, "dram-1");
  EXPECT_EQ(domains[2].name, "package-0");
  EXPECT_EQ(domains[3].name, "package-1");
  EXPECT_EQ(domains[4].name, "psys");
  EXPECT_FALSE(domains[4].in_total);
  EXPECT_TRUE(domains[2].in_total);
  EXPECT_EQ(domains[2].max_range_uj, kMaxRange);
  EXPECT_TRUE(notes.empty());
}

TEST(Rapl, DeltaAcrossWrapAround) {
  EXPECT_EQ(rapl_delta_uj(100, 250, 1000), 150u);
  EXPECT_EQ(rapl_delta_uj(900, 50, 1000), 150u);
  EXPECT_EQ(rapl_delta_uj(0, 0, 1000), 0u);
}

TEST_F(PowercapFixture, MeterSumsPackagesAndDramButNotPsys) {
  MeterOptions o;  // no NVML opener: RAPL only
  o.powercap_root = root_.string();
  EnergyMeter m(o);
  m.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  write(root_ / "intel-rapl:0" / "energy_uj", "3000000");                     // wrapped: 1 J + 3 J
  write(root_ / "intel-rapl:0" / "intel-rapl:0:1" / "energy_uj", "2500000");  // 0.5 J
  write(root_ / "intel-rapl:1" / "energy_uj", "9000000");                     // 2 J
  write(root_ / "intel-rapl:1" / "intel-rapl:1:0" / "energy_uj", "250100");   // 0.25 J
  write(root_ / "intel-rapl:2" / "energy_uj", "99000000");                    // 90 J, contains the packages
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const EnergyReading r = m.stop();
  ASSERT_EQ(r.devices.size(), 5u);
  std::map<std::string, DeviceEnergy> by;
  for (const DeviceEnergy& d : r.devices) by[d.name] = d;
  EXPECT_NEAR(by["package-0"].joules, 4.0, 1e-9);
  EXPECT_NEAR(by["dram-0"].joules, 0.5, 1e-9);
  EXPECT_NEAR(by["package-1"].joules, 2.0, 1e-9);
  EXPECT_NEAR(by["dram-1"].joules, 0.25, 1e-9);
  EXPECT_NEAR(by["psys"].joules, 90.0, 1e-9);
  EXPECT_EQ(by["package-0"].source, "rapl");
  EXPECT_NEAR(r.total_joules, 6.75, 1e-9);
  EXPECT_GE(r.duration_s, 0.29);
  EXPECT_GT(by["package-0"].peak_watts, by["package-0"].avg_watts);  // all of it in one poll
}

TEST_F(PowercapFixture, RootOnlyCountersAreExplained) {
  for (const char* z : {"intel-rapl:0", "intel-rapl:1", "intel-rapl:2"}) {
    fs::permissions(root_ / z / "energy_uj", fs::perms::owner_read | fs::perms::owner_write);
  }
  fs::permissions(root_ / "intel-rapl:0" / "intel-rapl:0:1" / "energy_uj", fs::perms::owner_read);
  fs::permissions(root_ / "intel-rapl:1" / "intel-rapl:1:0" / "energy_uj", fs::perms::owner_read);
  // Root reads anything; check as an unprivileged user, as the kernel's 0400 files behave.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    std::vector<std::string> notes;
    const auto domains = discover_rapl(root_.string(), &notes);
    const bool explained = notes.size() == 1 && notes[0].find("root-only") != std::string::npos;
    _exit(domains.empty() && explained ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "unprivileged discovery did not report root-only counters";
}

TEST(Meter, WallClockOnlyWithoutSources) {
  MeterOptions o;
  o.open_nvml = &Nvml::open;
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  o.powercap_root = "/nonexistent/powercap";
  EnergyMeter m(o);
  m.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const EnergyReading r = m.stop();
  EXPECT_GE(r.duration_s, 0.019);
  EXPECT_TRUE(r.devices.empty());
  EXPECT_EQ(r.total_joules, 0);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.back().find("wall clock only"), std::string::npos);
  EXPECT_NE(r.notes.front().find("NVML not available"), std::string::npos);
}

class FakeNvml : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"FAKE_NVML_NO_ENERGY", "FAKE_NVML_NO_POWER", "FAKE_NVML_INIT_FAIL", "FAKE_NVML_XID",
                          "FAKE_NVML_STATE", "FAKE_NVML_DEVICES", "FAKE_NVML_POWER_MW"}) {
      unsetenv(v);
    }
  }
  static MeterOptions options() {
    MeterOptions o;
    o.open_nvml = &Nvml::open;
    o.nvml_library = FAKE_NVML_PATH;
    o.use_rapl = false;
    o.sample_hz = 50;
    return o;
  }
};

TEST_F(FakeNvml, EnergyCounterOnEveryDevice) {
  setenv("FAKE_NVML_DEVICES", "2", 1);
  setenv("FAKE_NVML_POWER_MW", "200000", 1);
  EnergyMeter m(options());
  m.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const EnergyReading r = m.stop();
  ASSERT_EQ(r.devices.size(), 2u);
  for (const DeviceEnergy& d : r.devices) {
    EXPECT_EQ(d.source, "nvml-energy");
    EXPECT_NEAR(d.joules, 200 * r.duration_s, 0.1 * 200 * r.duration_s);
    EXPECT_NEAR(d.peak_watts, 200, 2.0);  // the average can edge past a poll
  }
  EXPECT_EQ(r.devices[0].name, "gpu0 NVIDIA H100 80GB HBM3");
  EXPECT_NEAR(r.total_joules, r.devices[0].joules + r.devices[1].joules, 1e-9);
}

TEST_F(FakeNvml, IntegratesPowerWithoutCounter) {
  setenv("FAKE_NVML_NO_ENERGY", "1", 1);
  const fs::path state = fs::temp_directory_path() / ("mg_nvml_state_" + std::to_string(getpid()));
  write(state, "power_mw=100000");
  setenv("FAKE_NVML_STATE", state.c_str(), 1);
  EnergyMeter m(options());
  m.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  write(state, "power_mw=300000");
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  const EnergyReading r = m.stop();
  fs::remove(state);
  ASSERT_EQ(r.devices.size(), 1u);
  const DeviceEnergy& d = r.devices[0];
  EXPECT_EQ(d.source, "nvml-power");
  // 100 W then 300 W for about a quarter second each; polls every 20 ms blur the step.
  EXPECT_NEAR(d.joules, 100 * 0.25 + 300 * (r.duration_s - 0.25), 8.0);
  EXPECT_NEAR(d.peak_watts, 300, 1e-9);
  EXPECT_NEAR(d.avg_watts, d.joules / r.duration_s, 1e-9);
}

TEST_F(FakeNvml, InitFailureIsANote) {
  setenv("FAKE_NVML_INIT_FAIL", "1", 1);
  EnergyMeter m(options());
  m.start();
  const EnergyReading r = m.stop();
  EXPECT_TRUE(r.devices.empty());
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.front().find("nvmlInit_v2 failed"), std::string::npos) << r.notes.front();
}

TEST_F(FakeNvml, SamplesAndEvents) {
  setenv("FAKE_NVML_XID", "79", 1);
  std::string why;
  auto nvml = Nvml::open(FAKE_NVML_PATH, &why);
  ASSERT_TRUE(nvml) << why;
  ASSERT_EQ(nvml->device_count(), 1u);
  const NvmlSample s = nvml->sample(0);
  EXPECT_EQ(s.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(s.util_gpu_pct.value_or(0), 50u);
  EXPECT_EQ(s.temperature_c.value_or(0), 45u);
  EXPECT_DOUBLE_EQ(s.power_w.value_or(0), 250.0);
  EXPECT_TRUE(s.total_energy_mj.has_value());
  ASSERT_TRUE(nvml->watch_events());
  const auto e = nvml->wait_event(10);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->description, "Xid 79");
  EXPECT_FALSE(nvml->wait_event(10).has_value());
}

}  // namespace
}  // namespace meganeura::energy
