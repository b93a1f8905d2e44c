#include "backend/vulkan/pipelines.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "backend/vulkan/program_kernel.h"
#include "graph/op_table.h"

namespace meganeura::vk {
namespace {

constexpr char kMagic[4] = {'M', 'N', 'P', 'C'};
constexpr uint32_t kFormat = 1;

struct FileHeader {
  char magic[4];
  uint32_t format;
  uint64_t payload_bytes;
  uint64_t payload_hash;
};

std::string hex(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

uint64_t hash_bytes(const std::vector<char>& v) { return fnv1a(std::string_view(v.data(), v.size())); }

}  // namespace

std::string default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/meganeura";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/meganeura";
  return "";
}

PipelineCache::PipelineCache(const Device& d, std::string dir) : d_(d) {
  VkPhysicalDeviceProperties props{};
  d.api.vkGetPhysicalDeviceProperties(d.physical, &props);
  std::vector<char> payload;
  if (!dir.empty()) {
    char ids[32];
    std::snprintf(ids, sizeof ids, "%04x-%04x-", props.vendorID, props.deviceID);
    path_ = dir + "/pipelines-" + ids + hex(props.pipelineCacheUUID, VK_UUID_SIZE) + ".bin";
    std::ifstream f(path_, std::ios::binary);
    if (!f) {
      status_ = "missing";
    } else {
      std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      FileHeader h{};
      status_ = "corrupt";
      if (bytes.size() >= sizeof h) {
        std::memcpy(&h, bytes.data(), sizeof h);
        if (std::memcmp(h.magic, kMagic, 4) == 0 && h.format == kFormat && h.payload_bytes == bytes.size() - sizeof h) {
          payload.assign(bytes.begin() + sizeof h, bytes.end());
          if (hash_bytes(payload) != h.payload_hash) payload.clear();
        }
      }
      // The driver's own header: version one, this vendor, device and cache UUID.
      if (payload.size() >= 16 + VK_UUID_SIZE) {
        uint32_t w[4];
        std::memcpy(w, payload.data(), 16);
        bool same = w[0] >= 16 + VK_UUID_SIZE && w[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE &&
                    w[2] == props.vendorID && w[3] == props.deviceID &&
                    std::memcmp(payload.data() + 16, props.pipelineCacheUUID, VK_UUID_SIZE) == 0;
        status_ = same ? "loaded" : "stale";
        if (!same) payload.clear();
      } else {
        payload.clear();
      }
    }
  }
  auto ci = make<VkPipelineCacheCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
  ci.initialDataSize = payload.size();
  ci.pInitialData = payload.empty() ? nullptr : payload.data();
  if (d.api.vkCreatePipelineCache(d.device, &ci, nullptr, &cache_) != VK_SUCCESS) {
    // A driver that rejects the blob: a miss, not an error.
    ci.initialDataSize = 0;
    ci.pInitialData = nullptr;
    status_ = "corrupt";
    VK_CHECK(d.api.vkCreatePipelineCache(d.device, &ci, nullptr, &cache_));
  }
}

PipelineCache::~PipelineCache() {
  try {
    save();
  } catch (...) {  // a cache that cannot be written is only a slower next start
  }
  d_.api.vkDestroyPipelineCache(d_.device, cache_, nullptr);
}

void PipelineCache::save() {
  if (path_.empty()) return;
  size_t n = 0;
  if (d_.api.vkGetPipelineCacheData(d_.device, cache_, &n, nullptr) != VK_SUCCESS || n == 0) return;
  std::vector<char> payload(n);
  if (d_.api.vkGetPipelineCacheData(d_.device, cache_, &n, payload.data()) != VK_SUCCESS) return;
  payload.resize(n);
  FileHeader h{};
  std::memcpy(h.magic, kMagic, 4);
  h.format = kFormat;
  h.payload_bytes = payload.size();
  h.payload_hash = hash_bytes(payload);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  // Write beside and rename: a reader never sees half a file.
  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return;
    f.write(reinterpret_cast<const char*>(&h), sizeof h);
    f.write(payload.data(), std::streamsize(payload.size()));
    if (!f) {
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path_, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

Pipelines::Pipelines(const Device& d, PipelineCache* cache, bool wide_layout) : d_(d), cache_(cache) {
  for (int w = 0; w < (wide_layout ? 2 : 1); ++w) {
    const uint32_t n = w ? kWideBindings : kBindings;
    VkDescriptorSetLayoutBinding b[kWideBindings];
    for (uint32_t i = 0; i < n; ++i) {
      b[i] =
          VkDescriptorSetLayoutBinding{i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    }
    auto dl = make<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
    dl.bindingCount = n;
    dl.pBindings = b;
    VK_CHECK(d.api.vkCreateDescriptorSetLayout(d.device, &dl, nullptr, &set_layout_[w]));
    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
    auto pl = make<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
    pl.setLayoutCount = 1;
    pl.pSetLayouts = &set_layout_[w];
    pl.pushConstantRangeCount = 1;
    pl.pPushConstantRanges = &range;
    VK_CHECK(d.api.vkCreatePipelineLayout(d.device, &pl, nullptr, &layout_[w]));
  }
}

Pipelines::~Pipelines() {
  for (auto& [k, p] : pipelines_) d_.api.vkDestroyPipeline(d_.device, p, nullptr);
  for (VkShaderModule m : modules_) {
    if (m) d_.api.vkDestroyShaderModule(d_.device, m, nullptr);
  }
  for (int w = 0; w < 2; ++w) {
    if (layout_[w]) d_.api.vkDestroyPipelineLayout(d_.device, layout_[w], nullptr);
    if (set_layout_[w]) d_.api.vkDestroyDescriptorSetLayout(d_.device, set_layout_[w], nullptr);
  }
}

void Pipelines::prepare(Kernel k) {
  if (!layout_[wide(k)]) throw std::logic_error("[vulkan] no pipeline layout for the fused kernels on this device");
  VkShaderModule& m = modules_[size_t(k)];
  if (!m) {
    auto code = kernel_spirv(k);
    auto si = make<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
    si.codeSize = code.size_bytes();
    si.pCode = code.data();
    VK_CHECK(d_.api.vkCreateShaderModule(d_.device, &si, nullptr, &m));
  }
}

// Thread-safe once prepare() has run for the key's kernel: the pipeline
// cache synchronises itself (it is not created with
// VK_PIPELINE_CACHE_CREATE_EXTERNALLY_SYNCHRONIZED_BIT).
VkResult Pipelines::build(const Key& key, VkPipeline* out) const {
  const auto& [k, spec] = key;
  const bool program = runs_program(k) && spec.size() > kProgramSpecBase;
  const size_t own = program ? kProgramSpecBase : spec.size();
  std::vector<VkSpecializationMapEntry> entries;
  for (uint32_t i = 0; i < own; ++i) entries.push_back({i, i * 4, 4});
  VkSpecializationInfo sp{uint32_t(entries.size()), entries.data(), own * 4, spec.data()};
  VkShaderModule module = modules_[size_t(k)];
  if (program) {
    const std::vector<uint32_t> words =
        program_kernel_spirv(k, std::span<const uint32_t>(spec).subspan(kProgramSpecBase + 1));
    auto mi = make<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
    mi.codeSize = words.size() * 4;
    mi.pCode = words.data();
    if (VkResult r = d_.api.vkCreateShaderModule(d_.device, &mi, nullptr, &module); r < 0) return r;
  }
  auto ci = make<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  ci.stage = make<VkPipelineShaderStageCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO);
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = &sp;
  ci.layout = layout_[wide(k)];
  const VkResult r =
      d_.api.vkCreateComputePipelines(d_.device, cache_ ? cache_->handle() : VK_NULL_HANDLE, 1, &ci, nullptr, out);
  if (program) d_.api.vkDestroyShaderModule(d_.device, module, nullptr);
  return r;
}

VkPipeline Pipelines::get(Kernel k, const std::vector<uint32_t>& spec) {
  Key key(k, spec);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;
  prepare(k);
  VkPipeline p = VK_NULL_HANDLE;
  VK_CHECK(build(key, &p));
  pipelines_.emplace(std::move(key), p);
  return p;
}

void Pipelines::create(const std::vector<Key>& keys, unsigned threads) {
  std::vector<Key> missing;
  for (const Key& k : keys) {
    if (!pipelines_.count(k)) missing.push_back(k);
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  for (const Key& k : missing) prepare(k.first);  // on this thread: it may throw
  std::vector<VkPipeline> made(missing.size(), VK_NULL_HANDLE);
  std::vector<VkResult> result(missing.size(), VK_SUCCESS);
  std::vector<std::exception_ptr> error(missing.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < missing.size();) {
      try {
        result[i] = build(missing[i], &made[i]);
      } catch (...) {
        error[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  const size_t n = std::min<size_t>(std::max(threads, 1u), missing.size());
  try {
    for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
  } catch (const std::system_error&) {  // fewer threads than asked for: the others share the work
  }
  work();
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < missing.size(); ++i) {
    if (made[i] != VK_NULL_HANDLE) pipelines_.emplace(missing[i], made[i]);
  }
  for (size_t i = 0; i < missing.size(); ++i) {
    if (error[i]) std::rethrow_exception(error[i]);
    if (result[i] < 0) {
      const std::string what = std::string("vkCreateComputePipelines (") + kernel_name(missing[i].first) + " kernel)";
      fail(result[i], what.c_str(), __FILE__, __LINE__);
    }
  }
}

}  // namespace meganeura::vk
