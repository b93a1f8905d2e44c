// The persisted pipeline cache: a missing, stale, truncated or corrupt file is a miss (the
// program still builds and computes the right values) and is replaced by a valid one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "graph/op_table.h"
#include "meganeura/vulkan.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

namespace fs = std::filesystem;

Program small_program() {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  Tensor w = g.input("w", {8, 3});
  g.output("y", softmax(matmul(x, w)) + sum(x, {1}, true));
  return plan(g);
}

// Builds a backend on `dir`, runs the program, checks one value against a host computation,
// and returns the cache status it saw on creation.
std::string build_and_run(const fs::path& dir, std::string* file = nullptr) {
  VulkanOptions o;
  o.validation = true;
  o.cache_dir = dir.string();
  auto b = make_vulkan_backend(o);
  b->add_program(small_program());
  std::vector<float> x(32, 0.5f), w(24, 0.0f), y(12);
  b->write("x", x.data(), x.size() * 4);
  b->write("w", w.data(), w.size() * 4);
  b->run(0);
  b->read("y", y.data(), y.size() * 4);
  // Zero weights: softmax of equal logits is 1/3; each row of x sums to 8 * 0.5 = 4.
  for (float v : y) EXPECT_NEAR(v, 4.0f + 1.0f / 3.0f, 1e-6f);
  return vulkan_cache_status(*b, file);
}

std::vector<char> slurp(const std::string& f) {
  std::ifstream in(f, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void spit(const std::string& f, const std::vector<char>& bytes) {
  std::ofstream out(f, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

TEST(VulkanPipelineCache, BadFilesAreMissesAndGetReplaced) {
  MEGANEURA_REQUIRE_VULKAN();
  const fs::path dir = fs::temp_directory_path() / ("meganeura_vkcache_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::string file;
  EXPECT_EQ(build_and_run(dir, &file), "missing");
  ASSERT_TRUE(fs::exists(file)) << "the cache was not written on shutdown";
  EXPECT_EQ(build_and_run(dir), "loaded");
  const std::vector<char> good = slurp(file);
  const size_t header = 24;             // magic, format, payload size, payload hash
  ASSERT_GE(good.size(), header + 32);  // at least the driver header (lavapipe stores only that)

  auto bad = good;  // one flipped payload byte: our hash no longer matches
  bad[header + 20] ^= 0x5a;
  spit(file, bad);
  EXPECT_EQ(build_and_run(dir), "corrupt");
  EXPECT_EQ(build_and_run(dir), "loaded") << "the corrupt file was not replaced";

  spit(file, std::vector<char>(good.begin(), good.begin() + long(good.size() / 2)));  // truncated
  EXPECT_EQ(build_and_run(dir), "corrupt");

  spit(file, std::vector<char>(100, 'x'));  // garbage
  EXPECT_EQ(build_and_run(dir), "corrupt");

  // Another driver's blob (cache UUID changed), with a correct hash of our own: stale.
  auto stale = good;
  stale[header + 16] ^= 0x01;
  uint64_t hash = fnv1a(std::string_view(stale.data() + header, stale.size() - header));
  std::memcpy(stale.data() + 16, &hash, 8);
  spit(file, stale);
  EXPECT_EQ(build_and_run(dir), "stale");
  EXPECT_EQ(build_and_run(dir), "loaded");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace meganeura
