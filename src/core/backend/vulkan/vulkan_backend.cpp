#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <thread>

#include "backend/vulkan/context.h"
#include "backend/vulkan/lowering.h"
#include "backend/vulkan/memory.h"
#include "backend/vulkan/pipelines.h"
#include "graph/op_table.h"
#include "meganeura/session.h"
#include "meganeura/vulkan.h"

namespace meganeura {
namespace {

// Buffers hold whole 32-bit words: a block-format weight (34 or 18 bytes per block) may end
// half-way through one, which the kernels read as words.
uint64_t whole_words(uint64_t bytes) { return (bytes + 3) & ~uint64_t(3); }

using namespace vk;

// Buffers up to this size keep a copy of what was last written to them (position checks).
constexpr size_t kRememberedBytes = 16384;

struct External {
  std::unique_ptr<Buffer> buffer;
  uint32_t id = 0;
  // Pre-recorded copies through the staging buffer, made on first use.
  VkCommandBuffer upload = VK_NULL_HANDLE, download = VK_NULL_HANDLE;
  std::vector<int32_t> last_words;  // a small buffer's last written words (cache positions), zeroed at first
};

// A key/value cache op whose position is an input: checked on the host before each run, as a
// shader cannot fail (kv_cache.comp writes nothing for a position outside the cache).
struct PositionCheck {
  Op op;
  std::string buffer;
  int64_t rows = 0, capacity = 0;
};

std::vector<PositionCheck> position_checks(const Program& p) {
  std::vector<PositionCheck> out;
  for (const Dispatch& d : p.dispatches) {
    if (d.op != Op::kv_cache_write && d.op != Op::cached_attention) continue;
    const ProgramTensor& pos = p.tensors[d.reads.back()];
    if (pos.role != Role::input) continue;
    const bool write = d.op == Op::kv_cache_write;
    const Shape &rows = p.tensors[d.reads[write ? 1 : 0]].type.shape,
                &cache = p.tensors[d.reads[write ? 0 : 1]].type.shape;
    out.push_back(PositionCheck{d.op, pos.binding, rows.at(2), cache.at(2)});
  }
  return out;
}

struct Prepared {
  Program program;
  std::vector<std::unique_ptr<Buffer>> arenas;  // one per arena buffer of the plan
  std::vector<uint32_t> arena_ids;
  std::unique_ptr<Buffer> workspace;  // the launches' scratch (kWorkspaceBinding), when any needs it
  uint32_t workspace_id = 0;
  std::vector<Launch> launches;
  std::vector<PositionCheck> positions;
  VkDescriptorPool descriptors = VK_NULL_HANDLE;
  std::vector<VkCommandBuffer> chunks;
  VkQueryPool queries = VK_NULL_HANDLE;
  uint64_t dispatches = 0, barriers = 0;
  VulkanProgramProfile profile;
};

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(const VulkanOptions& o) : options_(o) {
    if (o.external) {
      instance_ =
          std::make_shared<Instance>(static_cast<VkInstance>(o.external->instance),
                                     reinterpret_cast<PFN_vkGetInstanceProcAddr>(o.external->get_instance_proc_addr));
      dev_ = adopt_device(instance_, *o.external);
    } else {
      instance_ = std::make_shared<Instance>(o.validation);
      dev_ = open_device(instance_, o.device);
    }
    dc_ = device_class(dev_->info, o.kernel_class, o.kernels);
    dc_.byte_storage = dc_.byte_storage && o.byte_storage;
    if (o.pipeline_cache)
      cache_ = std::make_unique<PipelineCache>(*dev_, o.cache_dir.empty() ? default_cache_dir() : o.cache_dir);
    wide_ = dev_->info.max_storage_buffers_per_stage >= kWideBindings;
    pipelines_ = std::make_unique<Pipelines>(*dev_, cache_.get(), wide_);
    auto pi = make<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
    pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = dev_->queue_family;
    VK_CHECK(api().vkCreateCommandPool(dev_->device, &pi, nullptr, &pool_));
    auto fi = make<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
    VK_CHECK(api().vkCreateFence(dev_->device, &fi, nullptr, &fence_));
    check_messages();
  }

  ~VulkanBackend() override {
    if (!dev_) return;
    api().vkDeviceWaitIdle(dev_->device);
    for (auto& p : programs_) {
      if (p->queries) api().vkDestroyQueryPool(dev_->device, p->queries, nullptr);
      if (p->descriptors) api().vkDestroyDescriptorPool(dev_->device, p->descriptors, nullptr);
    }
    programs_.clear();
    buffers_.clear();
    staging_.reset();
    api().vkDestroyFence(dev_->device, fence_, nullptr);
    api().vkDestroyCommandPool(dev_->device, pool_, nullptr);
    pipelines_.reset();
    cache_.reset();
  }

  std::string device_name() const override { return "vulkan: " + dev_->info.name + " (" + dev_->info.type + ")"; }

  // The planner keeps every tensor within one binding and one allocation, aligned for binding.
  DeviceLimits limits() const override {
    const auto& info = dev_->info;
    DeviceLimits l;
    l.max_binding_bytes = info.max_storage_buffer_range;
    l.max_allocation_bytes = info.max_memory_allocation_size;
    l.offset_alignment = std::max<uint64_t>(info.min_storage_buffer_offset_alignment, 16);
    return l;
  }

  size_t add_program(const Program& p) override {
    settle("adding a program");
    auto prep = std::make_unique<Prepared>();
    prep->program = p;
    const Program& q = prep->program;
    if (q.float_dtype != DType::f32)
      throw std::invalid_argument("[vulkan] programs must compute in f32 (the f64 oracle runs on the CPU backend)");
    check_images(q);
    std::vector<Buffer*> fresh;
    for (const ExternalBuffer& e : q.externals) {
      const uint64_t bytes = whole_words(storage_bytes(e.stored, e.type.numel()));
      auto it = buffers_.find(e.name);
      if (it == buffers_.end()) {
        External x;
        x.buffer = allocate(*dev_, bytes, Residence::device, std::string(role_name(e.role)) + " '" + e.name + "'");
        x.id = next_id_++;
        fresh.push_back(x.buffer.get());
        buffers_.emplace(e.name, std::move(x));
      } else if (it->second.buffer->bytes != bytes && (it->second.buffer->owned || it->second.buffer->bytes < bytes)) {
        throw std::invalid_argument("[vulkan] buffer '" + e.name + "' is " + std::to_string(it->second.buffer->bytes) +
                                    " bytes in one program and " + std::to_string(bytes) + " in another");
      }
    }
    for (size_t i = 0; i < q.arena_buffers.size(); ++i) {
      prep->arenas.push_back(
          allocate(*dev_, q.arena_buffers[i], Residence::device,
                   "arena buffer " + std::to_string(i) + " of program " + std::to_string(programs_.size())));
      prep->arena_ids.push_back(next_id_++);
      fresh.push_back(prep->arenas.back().get());
    }
    prep->launches = lower_program(q, dc_);
    prep->positions = position_checks(q);
    uint64_t scratch = 0;
    for (const Launch& l : prep->launches) scratch = std::max(scratch, l.workspace_bytes);
    if (scratch) {
      prep->workspace =
          allocate(*dev_, scratch, Residence::device, "workspace of program " + std::to_string(programs_.size()));
      prep->workspace_id = next_id_++;
    }
    zero(fresh);
    prepare_descriptors(*prep);
    record(*prep);
    programs_.push_back(std::move(prep));
    check_messages();
    return programs_.size() - 1;
  }

  void write(const std::string& name, const void* data, size_t bytes) override {
    settle("writing '" + name + "'");
    External& x = external(name);
    if (whole_words(bytes) != x.buffer->bytes)
      throw std::invalid_argument("[vulkan] writing " + std::to_string(bytes) + " bytes into '" + name + "' of " +
                                  std::to_string(x.buffer->bytes));
    if (!ensure_staging(bytes) || !x.upload) x.upload = record_copy(staging_->buffer, x.buffer->buffer, bytes, true);
    std::memcpy(staging_->mapped, data, bytes);
    submit({x.upload});
    if (bytes <= kRememberedBytes) {
      x.last_words.resize(bytes / sizeof(int32_t));
      std::memcpy(x.last_words.data(), data, x.last_words.size() * sizeof(int32_t));
    }
  }

  void read(const std::string& name, void* data, size_t bytes) const override {
    auto* self = const_cast<VulkanBackend*>(this);  // staging and pre-recorded copies are caches
    self->settle("reading '" + name + "'");
    External& x = self->external(name);
    if (whole_words(bytes) != x.buffer->bytes)
      throw std::invalid_argument("[vulkan] reading " + std::to_string(bytes) + " bytes from '" + name + "' of " +
                                  std::to_string(x.buffer->bytes));
    if (!self->ensure_staging(bytes) || !x.download)
      x.download = self->record_copy(x.buffer->buffer, staging_->buffer, bytes, false);
    self->submit({x.download});
    std::memcpy(data, staging_->mapped, bytes);
  }

  void run(size_t index) override {
    settle("running program " + std::to_string(index));
    Prepared& p = *programs_.at(index);
    for (const PositionCheck& c : p.positions) check_positions(c);
    submit(p.chunks);
    stats_.dispatches = p.dispatches;
    stats_.barriers = p.barriers;
    if (p.queries) collect_profile(p);
  }

  Stats stats() const override { return stats_; }

  // The GEMM kernels read f16 and bf16 operands (gemm_params.glsl's HALF); the first one does not.
  bool half_operands() const override { return dc_.gemm != GemmFamily::naive; }

  // Every pass (fused reductions over contiguous axes only), where the device allows the wide kernels' twelve bindings
  // per stage; otherwise graphs keep their primitive ops, and the fused cross-entropy and where (whose kernels use the
  // wide layout) are decomposed into them.
  PassOptions passes() const override {
    PassOptions o;
    o.strided_reductions = false;  // the fused reduction kernel takes [outer, len, inner] only
    if (!wide_) {
      o.softmax = o.norms = o.pointwise = o.matmul_epilogue = false;
      o.decompose = true;
    }
    if (dc_.gemm == GemmFamily::naive) o.matmul_epilogue = false;  // the first GEMM kernel has no epilogue
    // CPU-emulated devices (the direct GEMM family): a GEMM with an epilogue program takes
    // llvmpipe over ten seconds to compile, per program, and runs no faster than the GEMM and
    // the program as a separate elementwise kernel (chargpt's step: docs/vulkan.md).
    if (dc_.gemm == GemmFamily::direct) o.matmul_epilogue = false;
    return o;
  }

  const VulkanProgramProfile* profile(size_t i) const { return options_.profile ? &programs_.at(i)->profile : nullptr; }
  std::string cache_status(std::string* path) const {
    if (!cache_) return "disabled";
    if (path) *path = cache_->path();
    return cache_->load_status();
  }
  size_t pipeline_count() const { return pipelines_->created(); }

  size_t chunk_count(size_t index) const { return programs_.at(index)->chunks.size(); }

  // Queues chunks of a run without waiting (vulkan_submit). The fence goes with the run's last
  // chunk; the application's semaphores with the first and last chunks of this range.
  void submit_async(size_t index, const VulkanSubmit& s) {
    if (index >= programs_.size()) throw std::invalid_argument("[vulkan] no program " + std::to_string(index));
    Prepared& p = *programs_[index];
    const size_t n = p.chunks.size(), first = s.first_chunk, count = s.chunk_count ? s.chunk_count : n - first;
    if (first >= n || count > n - first)
      throw std::invalid_argument("[vulkan] chunks " + std::to_string(first) + ".." +
                                  std::to_string(first + count - 1) + " of program " + std::to_string(index) +
                                  ", which has " + std::to_string(n));
    if (partial_) {
      if (partial_->program != index || partial_->next != first) {
        throw std::logic_error("[vulkan] chunk " + std::to_string(first) + " of program " + std::to_string(index) +
                               " submitted while program " + std::to_string(partial_->program) +
                               "'s run waits for its chunk " + std::to_string(partial_->next));
      }
    } else {
      if (first != 0)
        throw std::logic_error("[vulkan] a run of program " + std::to_string(index) + " starts at chunk 0, not chunk " +
                               std::to_string(first));
      finish();  // the previous run's fence, before the fence is used again
    }
    const bool last = first + count == n;
    submit_range(std::span(p.chunks).subspan(first, count), s, last ? fence_ : VK_NULL_HANDLE);
    if (last) {
      partial_.reset();
      pending_ = index;
      stats_.dispatches = p.dispatches;
      stats_.barriers = p.barriers;
    } else {
      partial_ = Partial{index, first + count};
    }
  }

  bool run_done() const {
    if (!pending_) return true;
    const VkResult r = api().vkGetFenceStatus(dev_->device, fence_);
    if (r != VK_SUCCESS && r != VK_NOT_READY) VK_CHECK(r);
    return r == VK_SUCCESS;
  }

  // Waits for the pending run (if any), then collects its profile and validation messages.
  void finish() {
    if (!pending_) return;
    const size_t index = *pending_;
    pending_.reset();
    VK_CHECK(api().vkWaitForFences(dev_->device, 1, &fence_, VK_TRUE, UINT64_MAX));
    VK_CHECK(api().vkResetFences(dev_->device, 1, &fence_));
    Prepared& p = *programs_.at(index);
    if (p.queries) collect_profile(p);
    check_messages();
  }

  void bind_image(const std::string& name, const VulkanImage& im) {
    if (buffers_.count(name))
      throw std::invalid_argument("[vulkan] buffer '" + name +
                                  "' already exists; bind application images before adding programs");
    if (!im.image) throw std::invalid_argument("[vulkan] image for '" + name + "' is VK_NULL_HANDLE");
    if (!image_channels(im.format))
      throw std::invalid_argument("[vulkan] image for '" + name + "': format " + std::to_string(im.format) +
                                  " (expected R32_SFLOAT, R32G32_SFLOAT or R32G32B32A32_SFLOAT)");
    if (!im.width || !im.height) throw std::invalid_argument("[vulkan] image for '" + name + "' has no pixels");
    images_[name] = im;
  }

  void bind_external(const std::string& name, VkBuffer buffer, uint64_t bytes) {
    if (buffers_.count(name))
      throw std::invalid_argument("[vulkan] buffer '" + name +
                                  "' already exists; bind application buffers before adding programs");
    External x;
    x.buffer = std::make_unique<Buffer>();
    x.buffer->device = dev_.get();
    x.buffer->buffer = buffer;
    x.buffer->bytes = bytes;
    x.buffer->owned = false;
    x.id = next_id_++;
    buffers_.emplace(name, std::move(x));
  }

 private:
  const Api& api() const { return dev_->api; }

  static uint32_t image_channels(uint32_t format) {
    switch (format) {
      case VK_FORMAT_R32_SFLOAT: return 1;
      case VK_FORMAT_R32G32_SFLOAT: return 2;
      case VK_FORMAT_R32G32B32A32_SFLOAT: return 4;
      default: return 0;
    }
  }

  void check_images(const Program& q) const {
    for (const ExternalBuffer& e : q.externals) {
      auto it = images_.find(e.name);
      if (it == images_.end()) continue;
      const VulkanImage& im = it->second;
      const int64_t pixels = int64_t(im.width) * im.height * image_channels(im.format);
      if ((e.role != Role::input && e.role != Role::output) || e.stored != DType::f32 || e.type.numel() != pixels) {
        throw std::invalid_argument("[vulkan] image '" + e.name + "' (" + std::to_string(im.width) + "x" +
                                    std::to_string(im.height) + ", " + std::to_string(image_channels(im.format)) +
                                    " channels) is bound to the " + std::string(role_name(e.role)) + " " +
                                    shape_str(e.type.shape) + " " + std::string(dtype_name(e.stored)) +
                                    "; an image is an f32 input or output of as many elements");
      }
    }
  }

  // The image copies of the program's inputs (at the start of its first chunk) or outputs (at
  // the end of its last): layout `layout` -> transfer -> `final_layout`, ordered against all
  // commands on both sides.
  void record_images(const Prepared& p, VkCommandBuffer cmd, Role role) {
    for (const ExternalBuffer& e : p.program.externals) {
      auto it = images_.find(e.name);
      if (it == images_.end() || e.role != role) continue;
      const VulkanImage& im = it->second;
      const bool in = role == Role::input;
      const auto image = reinterpret_cast<VkImage>(uintptr_t(im.image));
      const VkImageLayout transfer = in ? VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL : VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL;
      const VkAccessFlags access = in ? VK_ACCESS_TRANSFER_READ_BIT : VK_ACCESS_TRANSFER_WRITE_BIT;
      constexpr VkAccessFlags kMemory = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;
      image_barrier(cmd, image, VkImageLayout(im.layout), transfer, kMemory, access);
      VkBufferImageCopy region{};
      region.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1};
      region.imageExtent = {im.width, im.height, 1};
      const VkBuffer buffer = external(e.name).buffer->buffer;
      if (in) {
        api().vkCmdCopyImageToBuffer(cmd, image, transfer, buffer, 1, &region);
        barrier(cmd, kTransfer, VK_ACCESS_TRANSFER_WRITE_BIT, kCompute | kTransfer, kRW | kTRW);
      } else {
        api().vkCmdCopyBufferToImage(cmd, buffer, image, transfer, 1, &region);
      }
      image_barrier(cmd, image, transfer, VkImageLayout(im.final_layout), access, kMemory);
    }
  }

  void image_barrier(VkCommandBuffer cmd, VkImage image, VkImageLayout from, VkImageLayout to, VkAccessFlags src,
                     VkAccessFlags dst) {
    auto ib = make<VkImageMemoryBarrier>(VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER);
    ib.srcAccessMask = src;
    ib.dstAccessMask = dst;
    ib.oldLayout = from;
    ib.newLayout = to;
    ib.srcQueueFamilyIndex = ib.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
    ib.image = image;
    ib.subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1};
    constexpr VkPipelineStageFlags kAll = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
    api().vkCmdPipelineBarrier(cmd, kAll, kAll, 0, 0, nullptr, 0, nullptr, 1, &ib);
  }

  // Before a call that uses the queue and waits: no run may be partly submitted, and the
  // pending one completes first.
  void settle(const std::string& what) {
    if (partial_) {
      throw std::logic_error("[vulkan] " + what + " while program " + std::to_string(partial_->program) +
                             "'s run is partly submitted (chunk " + std::to_string(partial_->next) + " of " +
                             std::to_string(programs_.at(partial_->program)->chunks.size()) + " is next)");
    }
    finish();
  }

  void submit_range(std::span<const VkCommandBuffer> cmds, const VulkanSubmit& s, VkFence fence) {
    std::vector<VkSemaphore> waits, signals;
    std::vector<uint64_t> wait_values, signal_values;
    std::vector<VkPipelineStageFlags> stages;
    bool timeline = false;
    for (const VulkanSemaphore& w : s.wait) {
      waits.push_back(reinterpret_cast<VkSemaphore>(uintptr_t(w.semaphore)));
      wait_values.push_back(w.value);
      stages.push_back(w.stages);
      timeline = timeline || w.value;
    }
    for (const VulkanSemaphore& g : s.signal) {
      signals.push_back(reinterpret_cast<VkSemaphore>(uintptr_t(g.semaphore)));
      signal_values.push_back(g.value);
      timeline = timeline || g.value;
    }
    for (size_t i = 0; i < cmds.size(); ++i) {
      const bool first = i == 0, last = i + 1 == cmds.size();
      auto ti = make<VkTimelineSemaphoreSubmitInfo>(VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO);
      auto si = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
      si.commandBufferCount = 1;
      si.pCommandBuffers = &cmds[i];
      if (first) {
        si.waitSemaphoreCount = ti.waitSemaphoreValueCount = uint32_t(waits.size());
        si.pWaitSemaphores = waits.data();
        si.pWaitDstStageMask = stages.data();
        ti.pWaitSemaphoreValues = wait_values.data();
      }
      if (last) {
        si.signalSemaphoreCount = ti.signalSemaphoreValueCount = uint32_t(signals.size());
        si.pSignalSemaphores = signals.data();
        ti.pSignalSemaphoreValues = signal_values.data();
      }
      if (timeline) si.pNext = &ti;
      VK_CHECK(api().vkQueueSubmit(dev_->queue, 1, &si, last ? fence : VK_NULL_HANDLE));
      stats_.submissions++;
    }
    check_messages();
  }

  void check_messages() {
    auto m = instance_->take_messages();
    if (m.empty()) return;
    std::string text = "[vulkan] validation reported " + std::to_string(m.size()) + " message(s); first: " + m.front();
    throw std::runtime_error(text);
  }

  External& external(const std::string& name) {
    auto it = buffers_.find(name);
    if (it == buffers_.end()) throw std::invalid_argument("[vulkan] no buffer named '" + name + "'");
    return it->second;
  }

  // The positions last written to the op's position input (zero before any write), as the CPU
  // kernels check them: -1 (an idle sequence) or room for the new rows.
  void check_positions(const PositionCheck& c) {
    const std::vector<int32_t>& words = external(c.buffer).last_words;
    for (size_t b = 0; b < std::max<size_t>(words.size(), 1); ++b) {
      const int64_t at = words.empty() ? 0 : words[b];
      if (at != -1 && (at < 0 || at + c.rows > c.capacity)) {
        throw std::runtime_error("[vulkan:" + std::string(op_name(c.op)) + "] " +
                                 (words.size() > 1 ? "sequence " + std::to_string(b) + ": " : std::string()) +
                                 "position " + std::to_string(at) + " with " + std::to_string(c.rows) +
                                 " new rows is outside the cache of " + std::to_string(c.capacity) + " positions");
      }
    }
  }

  // Returns false when the staging buffer was (re)created, invalidating recorded copies.
  // Called after settle(): every submission of ours has completed (each blocking one waited on
  // the fence), so nothing waits on the queue, which may be the application's.
  bool ensure_staging(uint64_t bytes) {
    if (staging_ && staging_->bytes >= bytes) return true;
    uint64_t size = std::max<uint64_t>(bytes, staging_ ? staging_->bytes * 2 : 1 << 16);
    for (auto& [n, x] : buffers_) {
      for (VkCommandBuffer* c : {&x.upload, &x.download}) {
        if (*c) api().vkFreeCommandBuffers(dev_->device, pool_, 1, c);
        *c = VK_NULL_HANDLE;
      }
    }
    staging_.reset();
    staging_ = allocate(*dev_, size, Residence::staging, "staging");
    return false;
  }

  VkCommandBuffer begin() {
    auto ai = make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkCommandBuffer c;
    VK_CHECK(api().vkAllocateCommandBuffers(dev_->device, &ai, &c));
    auto bi = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    VK_CHECK(api().vkBeginCommandBuffer(c, &bi));
    stats_.recordings++;
    return c;
  }

  void barrier(VkCommandBuffer c, VkPipelineStageFlags src, VkAccessFlags src_access, VkPipelineStageFlags dst,
               VkAccessFlags dst_access) {
    auto mb = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    mb.srcAccessMask = src_access;
    mb.dstAccessMask = dst_access;
    api().vkCmdPipelineBarrier(c, src, dst, 0, 1, &mb, 0, nullptr, 0, nullptr);
  }

  static constexpr VkPipelineStageFlags kCompute = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
  static constexpr VkPipelineStageFlags kTransfer = VK_PIPELINE_STAGE_TRANSFER_BIT;
  static constexpr VkAccessFlags kRW = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  static constexpr VkAccessFlags kTRW = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;

  // A copy between staging and a device buffer, ordered against compute on both sides (the
  // barriers' scopes reach across submissions on the queue).
  VkCommandBuffer record_copy(VkBuffer src, VkBuffer dst, uint64_t bytes, bool upload) {
    VkCommandBuffer c = begin();
    barrier(c, kCompute | kTransfer, kRW | kTRW, kTransfer, kTRW);
    VkBufferCopy region{0, 0, std::max<uint64_t>(bytes, 1)};
    if (bytes) api().vkCmdCopyBuffer(c, src, dst, 1, &region);
    barrier(c, kTransfer, VK_ACCESS_TRANSFER_WRITE_BIT, kCompute | kTransfer | VK_PIPELINE_STAGE_HOST_BIT,
            kRW | kTRW | (upload ? 0 : VK_ACCESS_HOST_READ_BIT));
    VK_CHECK(api().vkEndCommandBuffer(c));
    return c;
  }

  void zero(const std::vector<Buffer*>& bufs) {
    VkCommandBuffer c = begin();
    barrier(c, kCompute | kTransfer, kRW | kTRW, kTransfer, kTRW);
    for (Buffer* b : bufs) api().vkCmdFillBuffer(c, b->buffer, 0, VK_WHOLE_SIZE, 0);
    barrier(c, kTransfer, VK_ACCESS_TRANSFER_WRITE_BIT, kCompute | kTransfer, kRW | kTRW);
    VK_CHECK(api().vkEndCommandBuffer(c));
    submit({c});
    api().vkFreeCommandBuffers(dev_->device, pool_, 1, &c);
  }

  void submit(const std::vector<VkCommandBuffer>& cmds) {
    // One submission per chunk, so other queue work (rendering) can interleave between them.
    for (size_t i = 0; i < cmds.size(); ++i) {
      auto si = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
      si.commandBufferCount = 1;
      si.pCommandBuffers = &cmds[i];
      VK_CHECK(api().vkQueueSubmit(dev_->queue, 1, &si, i + 1 == cmds.size() ? fence_ : VK_NULL_HANDLE));
      stats_.submissions++;
    }
    VK_CHECK(api().vkWaitForFences(dev_->device, 1, &fence_, VK_TRUE, UINT64_MAX));
    VK_CHECK(api().vkResetFences(dev_->device, 1, &fence_));
    check_messages();
  }

  struct Resolved {
    Buffer* buffer;
    uint32_t id;
    uint64_t offset, bytes;
  };
  Resolved resolve(const Prepared& p, uint32_t t) {
    if (t == kWorkspaceBinding) return {p.workspace.get(), p.workspace_id, 0, p.workspace->bytes};
    const ProgramTensor& pt = p.program.tensors.at(t);
    uint64_t bytes = std::max<uint64_t>(whole_words(pt.bytes), 4);
    if (pt.external()) {
      External& x = external(pt.binding);
      return {x.buffer.get(), x.id, 0, std::min<uint64_t>(bytes, std::max<uint64_t>(x.buffer->bytes, 4))};
    }
    return {p.arenas.at(pt.buffer).get(), p.arena_ids.at(pt.buffer), pt.offset, bytes};
  }

  void prepare_descriptors(Prepared& p) {
    const uint32_t sets = uint32_t(std::max<size_t>(p.launches.size(), 1));
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, sets * kWideBindings};
    auto ci = make<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
    ci.maxSets = sets;
    ci.poolSizeCount = 1;
    ci.pPoolSizes = &size;
    VK_CHECK(api().vkCreateDescriptorPool(dev_->device, &ci, nullptr, &p.descriptors));
  }

  // Records the program's command buffers once: pipelines, one descriptor set per launch,
  // the profile's timestamp queries, then the launches with the plan's barriers.
  void record(Prepared& p) {
    std::vector<Pipelines::Key> keys;
    for (const Launch& l : p.launches) keys.emplace_back(l.kernel, l.spec);
    pipelines_->create(keys, std::thread::hardware_concurrency());  // 0 (unknown): one thread
    const std::vector<VkDescriptorSet> sets = descriptor_sets(p);
    const bool profiling = options_.profile && dev_->timestamps;
    if (profiling) prepare_profile(p);
    const size_t chunks = size_t(std::clamp<int>(options_.chunks, 1, int(std::max<size_t>(p.launches.size(), 1))));
    p.barriers = 0;
    Cursor at;
    for (size_t c = 0; c < chunks; ++c) {
      VkCommandBuffer cmd = begin();
      if (c == 0 && profiling) {
        api().vkCmdResetQueryPool(cmd, p.queries, 0, uint32_t(p.launches.size() + 1));
        api().vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, p.queries, 0);
      }
      if (c == 0) record_images(p, cmd, Role::input);
      record_launches(p, sets, cmd, (p.launches.size() * (c + 1)) / chunks, profiling, at);
      if (c + 1 == chunks) {
        // The step's results become visible to the next step and to read-back copies.
        barrier(cmd, kCompute, VK_ACCESS_SHADER_WRITE_BIT, kCompute | kTransfer, kRW | kTRW);
        p.barriers++;
        record_images(p, cmd, Role::output);
      }
      VK_CHECK(api().vkEndCommandBuffer(cmd));
      p.chunks.push_back(cmd);
    }
    p.dispatches = p.launches.size();
    p.profile.dispatches = p.dispatches;
    p.profile.barriers = p.barriers;
  }

  // One descriptor set per launch; each tensor gets its own descriptor range, so no binding
  // spans more than the tensor.
  std::vector<VkDescriptorSet> descriptor_sets(Prepared& p) {
    std::vector<VkDescriptorSetLayout> layouts;
    for (const Launch& l : p.launches) layouts.push_back(pipelines_->set_layout(l.kernel));
    std::vector<VkDescriptorSet> sets(p.launches.size());
    if (!sets.empty()) {
      auto ai = make<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
      ai.descriptorPool = p.descriptors;
      ai.descriptorSetCount = uint32_t(sets.size());
      ai.pSetLayouts = layouts.data();
      VK_CHECK(api().vkAllocateDescriptorSets(dev_->device, &ai, sets.data()));
    }
    for (size_t i = 0; i < p.launches.size(); ++i) {
      VkDescriptorBufferInfo bi[kWideBindings];
      VkWriteDescriptorSet w[kWideBindings];
      const uint32_t n = binding_count(p.launches[i].kernel);
      for (uint32_t b = 0; b < n; ++b) {
        bi[b] = checked_range(p, p.launches[i].bindings[b]);
        w[b] = make<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
        w[b].dstSet = sets[i];
        w[b].dstBinding = b;
        w[b].descriptorCount = 1;
        w[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        w[b].pBufferInfo = &bi[b];
      }
      api().vkUpdateDescriptorSets(dev_->device, n, w, 0, nullptr);
    }
    return sets;
  }

  // The buffer range bound for tensor `t`, within the device's alignment and range limits.
  VkDescriptorBufferInfo checked_range(Prepared& p, uint32_t t) {
    const auto& info = dev_->info;
    const Resolved r = resolve(p, t);
    if (r.offset % info.min_storage_buffer_offset_alignment) {
      throw std::invalid_argument(
          "[vulkan] tensor at arena offset " + std::to_string(r.offset) + " is not aligned to the device's " +
          std::to_string(info.min_storage_buffer_offset_alignment) + "-byte storage-buffer offset alignment");
    }
    if (r.bytes > info.max_storage_buffer_range) {
      const Shape none;
      const Shape& shape = t == kWorkspaceBinding ? none : p.program.tensors[t].type.shape;
      throw std::invalid_argument("[vulkan] a " + shape_str(shape) + " tensor of " + std::to_string(r.bytes) +
                                  " bytes exceeds the device's storage-buffer range of " +
                                  std::to_string(info.max_storage_buffer_range));
    }
    return VkDescriptorBufferInfo{r.buffer->buffer, r.offset, r.bytes};
  }

  // A timestamp after every launch; a dispatch's work is counted once, on its first launch.
  void prepare_profile(Prepared& p) {
    auto qi = make<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = uint32_t(p.launches.size() + 1);
    VK_CHECK(api().vkCreateQueryPool(dev_->device, &qi, nullptr, &p.queries));
    for (size_t i = 0; i < p.launches.size(); ++i) {
      const Launch& l = p.launches[i];
      const Dispatch& d = p.program.dispatches[l.dispatch];
      const bool first = i == 0 || p.launches[i - 1].dispatch != l.dispatch;
      std::string operands = "f32";
      for (uint32_t r : d.reads) {
        const DType s = p.program.tensors[r].stored;
        if (s == DType::f16 || s == DType::bf16) operands = dtype_name(s);
      }
      p.profile.launches.push_back({kernel_name(l.kernel), std::string(op_name(d.op)), l.dispatch, 0,
                                    first ? d.flops : 0, first ? d.bytes : 0, first ? p.program.weight_bytes(d) : 0,
                                    operands});
    }
  }

  // Where recording stands across command buffers.
  struct Cursor {
    size_t next = 0;       // the next launch to record
    bool pending = false;  // a barrier is owed before the next launch
    uint32_t seen = 0;     // dispatches whose barrier flag was taken into account
  };

  // Records launches up to `end` into `cmd`. The plan's barriers go before the first launch
  // of a dispatch that waits for one since the previous barrier; a dispatch lowered to no
  // launch (a copy onto itself) passes its barrier on to the next launch.
  void record_launches(Prepared& p, const std::vector<VkDescriptorSet>& sets, VkCommandBuffer cmd, size_t end,
                       bool profiling, Cursor& at) {
    VkPipeline bound = VK_NULL_HANDLE;
    for (; at.next < end; ++at.next) {
      const Launch& l = p.launches[at.next];
      for (; at.seen <= l.dispatch; ++at.seen) at.pending = at.pending || p.program.dispatches[at.seen].barrier;
      if (at.pending || l.barrier_before) {
        barrier(cmd, kCompute, VK_ACCESS_SHADER_WRITE_BIT, kCompute, kRW);
        p.barriers++;
        at.pending = false;
      }
      VkPipeline pipe = pipelines_->get(l.kernel, l.spec);
      if (pipe != bound) api().vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
      bound = pipe;
      api().vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines_->layout(l.kernel), 0, 1,
                                    &sets[at.next], 0, nullptr);
      api().vkCmdPushConstants(cmd, pipelines_->layout(l.kernel), VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes, l.push);
      api().vkCmdDispatch(cmd, l.groups[0], l.groups[1], l.groups[2]);
      if (profiling)
        api().vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, p.queries, uint32_t(at.next + 1));
    }
  }

  void collect_profile(Prepared& p) {
    std::vector<uint64_t> t(p.launches.size() + 1);
    VK_CHECK(api().vkGetQueryPoolResults(dev_->device, p.queries, 0, uint32_t(t.size()), t.size() * 8, t.data(), 8,
                                         VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
    const double ns = dev_->info.timestamp_period_ns;
    for (size_t i = 0; i < p.launches.size(); ++i) {
      p.profile.launches[i].ms += double(t[i + 1] - std::min(t[i + 1], t[i])) * ns * 1e-6;
    }
    p.profile.step_ms += double(t.back() - std::min(t.back(), t.front())) * ns * 1e-6;
    p.profile.runs++;
  }

  VulkanOptions options_;
  std::shared_ptr<Instance> instance_;
  std::unique_ptr<vk::Device> dev_;
  DeviceClass dc_;
  bool wide_ = false;  // the fused kernels' layout fits the device
  std::unique_ptr<PipelineCache> cache_;
  std::unique_ptr<Pipelines> pipelines_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  // vulkan_submit: the run whose last chunk is queued and not yet waited for, and the run
  // whose chunks are partly queued.
  std::optional<size_t> pending_;
  struct Partial {
    size_t program, next;
  };
  std::optional<Partial> partial_;
  std::map<std::string, External> buffers_;
  std::map<std::string, VulkanImage> images_;  // the application's images, by tensor name
  std::unique_ptr<Buffer> staging_;
  std::vector<std::unique_ptr<Prepared>> programs_;
  uint32_t next_id_ = 1;
  Stats stats_;
};

const VulkanBackend* as_vulkan(const Backend& b) { return dynamic_cast<const VulkanBackend*>(&b); }

}  // namespace

std::unique_ptr<Backend> make_vulkan_backend(const VulkanOptions& options) {
  try {
    return std::make_unique<VulkanBackend>(options);
  } catch (const Unavailable& e) {
    throw std::runtime_error(e.what());
  }
}

std::vector<VulkanDeviceInfo> vulkan_devices() {
  try {
    Instance instance(false);
    std::vector<VulkanDeviceInfo> out;
    auto pds = instance.physical_devices();
    for (size_t i = 0; i < pds.size(); ++i) out.push_back(instance.describe(pds[i], int(i)));
    return out;
  } catch (const Unavailable& e) {
    throw std::runtime_error(e.what());
  }
}

bool vulkan_gpu_available(std::string* why) {
  std::vector<VulkanDeviceInfo> devices;
  try {
    devices = vulkan_devices();
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
  std::string found;
  for (const auto& d : devices) {
    if ((d.type == "discrete" || d.type == "integrated") && d.api_version >= VK_API_VERSION_1_1) return true;
    found += (found.empty() ? "" : ", ") + d.name + " (" + d.type + ")";
  }
  if (why)
    *why = devices.empty() ? "[vulkan] no Vulkan device found"
                           : "[vulkan] no discrete or integrated GPU among the Vulkan devices (" + found + ")";
  return false;
}

const VulkanProgramProfile* vulkan_profile(const Backend& b, size_t program) {
  const VulkanBackend* v = as_vulkan(b);
  return v ? v->profile(program) : nullptr;
}

std::string vulkan_cache_status(const Backend& b, std::string* path) {
  const VulkanBackend* v = as_vulkan(b);
  return v ? v->cache_status(path) : "disabled";
}

size_t vulkan_pipeline_count(const Backend& b) {
  const VulkanBackend* v = as_vulkan(b);
  return v ? v->pipeline_count() : 0;
}

void vulkan_bind_buffer(Backend& b, const std::string& name, void* vk_buffer, uint64_t bytes) {
  auto* v = dynamic_cast<VulkanBackend*>(&b);
  if (!v) throw std::invalid_argument("[vulkan] application buffers bind only to a Vulkan backend");
  v->bind_external(name, static_cast<VkBuffer>(vk_buffer), bytes);
}

void vulkan_bind_image(Backend& b, const std::string& name, const VulkanImage& image) {
  auto* v = dynamic_cast<VulkanBackend*>(&b);
  if (!v) throw std::invalid_argument("[vulkan] application images bind only to a Vulkan backend");
  v->bind_image(name, image);
}

VulkanBackend& vulkan_of(Backend& b) {
  auto* v = dynamic_cast<VulkanBackend*>(&b);
  if (!v) throw std::invalid_argument("[vulkan] the session does not run on Vulkan (" + b.device_name() + ")");
  return *v;
}

void vulkan_submit(Session& s, size_t program, const VulkanSubmit& submit) {
  VulkanBackend& v = vulkan_of(s.backend());
  if (submit.first_chunk == 0) s.initialise();  // parameters waiting for their values get them first
  v.submit_async(program, submit);
}

size_t vulkan_chunk_count(const Backend& b, size_t program) {
  const VulkanBackend* v = as_vulkan(b);
  if (!v) throw std::invalid_argument("[vulkan] the session does not run on Vulkan (" + b.device_name() + ")");
  return v->chunk_count(program);
}

bool vulkan_run_done(const Backend& b) {
  const VulkanBackend* v = as_vulkan(b);
  return !v || v->run_done();
}

void vulkan_wait(Backend& b) {
  if (auto* v = dynamic_cast<VulkanBackend*>(&b)) v->finish();
}

}  // namespace meganeura
