// A Vulkan application that renders a scene every frame and, on the same device and queue,
// runs a decoder trained by `meganeura train --model decoder` through the C API, compositing
// the network's output image into the frame. Headless and offscreen, so it runs on lavapipe.
//
// Each frame: the network's run is submitted in chunks (meganeura_session_submit) with the
// frame's render pass queued after the first chunk; a composite pass waits on the run's
// timeline value, blits the network's image (bound with meganeura_session_bind_image) into the
// frame and copies the frame to host memory; the host then waits on its own semaphore. No
// blocking call of the library is on the frame's path.
//
// Reports the frame time (p50, p99) and the network's GPU time per run with chunks 1, 2, 4, 16
// and without the network. With --cpu-program, checks the composited pixels of the last frame
// against the CPU backend's output of the same checkpoint (relative L2 <= 1e-3).
//
// usage: embed_example --program decoder.json --checkpoint decoder.safetensors
//          [--cpu-program decoder_cpu.json] [--frames 30] [--chunks 1,2,4,16] [--json]
//          [--no-validation]   (timings: the validation layer is on by default where installed)
#include <meganeura/meganeura.h>
#include <vulkan/vulkan.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

const uint32_t kVert[] =
#include "scene.vert.inc"
    ;
const uint32_t kFrag[] =
#include "scene.frag.inc"
    ;

constexpr uint32_t kSize = 128;  // the frame, square
constexpr uint32_t kNet = 16;    // the network's image, square, RGBA
constexpr uint32_t kInset = 64;  // where the network's image lands: [0, kInset)^2, scaled 4x
constexpr int kFeatures = 6;

void vk_check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw std::runtime_error(std::string(what) + " failed: VkResult " + std::to_string(int(r)));
}

void mn_check(meganeura_status s, const char* what) {
  if (s != MEGANEURA_OK)
    throw std::runtime_error(std::string(what) + ": " + meganeura_status_name(s) + ": " + meganeura_last_error());
}

// No Vulkan 1.2 device here: the example exits 77 (skipped).
struct NoDevice : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int g_messages = 0;
VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT, VkDebugUtilsMessageTypeFlagsEXT,
                                          const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
  ++g_messages;
  std::fprintf(stderr, "validation: %s\n", data && data->pMessage ? data->pMessage : "");
  return VK_FALSE;
}

bool has_layer(const char* name) {
  uint32_t n = 0;
  vkEnumerateInstanceLayerProperties(&n, nullptr);
  std::vector<VkLayerProperties> layers(n);
  vkEnumerateInstanceLayerProperties(&n, layers.data());
  for (const auto& l : layers)
    if (std::strcmp(l.layerName, name) == 0) return true;
  return false;
}

// The application's device: Vulkan 1.2 with timeline semaphores, a graphics+compute queue, and
// the validation layer with synchronization validation when it is installed.
struct App {
  VkInstance instance = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  uint32_t family = 0;
  bool validation = false;
  std::string name;

  explicit App(bool want_validation) {
    VkApplicationInfo ai{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    ai.pApplicationName = "embed_example";
    ai.apiVersion = VK_API_VERSION_1_2;
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME};
    validation = want_validation && has_layer(layer);
    VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
    features.enabledValidationFeatureCount = 1;
    features.pEnabledValidationFeatures = &sync;
    VkDebugUtilsMessengerCreateInfoEXT dm{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    dm.messageSeverity =
        VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    dm.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
    dm.pfnUserCallback = on_message;
    VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.pApplicationInfo = &ai;
    if (validation) {
      features.pNext = &dm;
      ci.pNext = &features;
      ci.enabledLayerCount = 1;
      ci.ppEnabledLayerNames = &layer;
      ci.enabledExtensionCount = 2;
      ci.ppEnabledExtensionNames = exts;
    }
    if (vkCreateInstance(&ci, nullptr, &instance) != VK_SUCCESS) throw NoDevice("no Vulkan instance");
    if (validation) {
      auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
          vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
      dm.pNext = nullptr;
      if (create) vk_check(create(instance, &dm, nullptr, &messenger), "messenger");
    }
    pick_device();
  }

  void pick_device() {
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(instance, &n, nullptr);
    std::vector<VkPhysicalDevice> pds(n);
    vkEnumeratePhysicalDevices(instance, &n, pds.data());
    for (VkPhysicalDevice pd : pds) {
      VkPhysicalDeviceProperties p;
      vkGetPhysicalDeviceProperties(pd, &p);
      if (p.apiVersion < VK_API_VERSION_1_2) continue;
      uint32_t qn = 0;
      vkGetPhysicalDeviceQueueFamilyProperties(pd, &qn, nullptr);
      std::vector<VkQueueFamilyProperties> qf(qn);
      vkGetPhysicalDeviceQueueFamilyProperties(pd, &qn, qf.data());
      for (uint32_t f = 0; f < qn; ++f) {
        const VkQueueFlags want = VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT;
        if ((qf[f].queueFlags & want) != want) continue;
        physical = pd, family = f, name = p.deviceName;
        break;
      }
      if (physical) break;
    }
    if (!physical) throw NoDevice("no Vulkan 1.2 device with a graphics and compute queue");
    const float priority = 1.0f;
    VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qci.queueFamilyIndex = family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &priority;
    VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    v12.timelineSemaphore = VK_TRUE;
    VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    dci.pNext = &v12;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    vk_check(vkCreateDevice(physical, &dci, nullptr, &device), "vkCreateDevice");
    vkGetDeviceQueue(device, family, 0, &queue);
  }

  ~App() {
    if (device) vkDestroyDevice(device, nullptr);
    if (messenger) {
      auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
          vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
      if (destroy) destroy(instance, messenger, nullptr);
    }
    if (instance) vkDestroyInstance(instance, nullptr);
  }

  VkDeviceMemory allocate(VkMemoryRequirements req, VkMemoryPropertyFlags want) const {
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(physical, &mp);
    for (uint32_t t = 0; t < mp.memoryTypeCount; ++t) {
      if (!(req.memoryTypeBits & (1u << t)) || (mp.memoryTypes[t].propertyFlags & want) != want) continue;
      VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
      ai.allocationSize = req.size;
      ai.memoryTypeIndex = t;
      VkDeviceMemory m;
      vk_check(vkAllocateMemory(device, &ai, nullptr, &m), "vkAllocateMemory");
      return m;
    }
    throw std::runtime_error("no suitable memory type");
  }

  VkImage image(uint32_t w, uint32_t h, VkImageUsageFlags usage, VkDeviceMemory& memory) const {
    VkImageCreateInfo ci{VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO};
    ci.imageType = VK_IMAGE_TYPE_2D;
    ci.format = VK_FORMAT_R32G32B32A32_SFLOAT;
    ci.extent = {w, h, 1};
    ci.mipLevels = ci.arrayLayers = 1;
    ci.samples = VK_SAMPLE_COUNT_1_BIT;
    ci.tiling = VK_IMAGE_TILING_OPTIMAL;
    ci.usage = usage;
    VkImage im;
    vk_check(vkCreateImage(device, &ci, nullptr, &im), "vkCreateImage");
    VkMemoryRequirements req;
    vkGetImageMemoryRequirements(device, im, &req);
    memory = allocate(req, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    vk_check(vkBindImageMemory(device, im, memory, 0), "vkBindImageMemory");
    return im;
  }
};

VkShaderModule shader(VkDevice d, const uint32_t* code, size_t bytes) {
  VkShaderModuleCreateInfo ci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  ci.codeSize = bytes;
  ci.pCode = code;
  VkShaderModule m;
  vk_check(vkCreateShaderModule(d, &ci, nullptr, &m), "vkCreateShaderModule");
  return m;
}

// The renderer: a colour target, the triangle's pipeline, the network's image, a read-back
// buffer and the frame's command buffers.
struct Renderer {
  const App& app;
  VkDeviceMemory color_mem = VK_NULL_HANDLE, net_mem = VK_NULL_HANDLE, readback_mem = VK_NULL_HANDLE;
  VkImage color = VK_NULL_HANDLE, net = VK_NULL_HANDLE;
  VkImageView view = VK_NULL_HANDLE;
  VkRenderPass pass = VK_NULL_HANDLE;
  VkFramebuffer framebuffer = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkBuffer readback = VK_NULL_HANDLE;
  float* pixels = nullptr;
  VkCommandPool pool = VK_NULL_HANDLE;
  VkCommandBuffer render_cmd = VK_NULL_HANDLE, composite_cmd = VK_NULL_HANDLE;
  VkSemaphore timeline = VK_NULL_HANDLE;
  uint64_t value = 0;

  explicit Renderer(const App& a) : app(a) {
    VkDevice d = app.device;
    color = app.image(
        kSize, kSize,
        VK_IMAGE_USAGE_COLOR_ATTACHMENT_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT | VK_IMAGE_USAGE_TRANSFER_SRC_BIT,
        color_mem);
    net = app.image(kNet, kNet, VK_IMAGE_USAGE_TRANSFER_DST_BIT | VK_IMAGE_USAGE_TRANSFER_SRC_BIT, net_mem);
    VkImageViewCreateInfo vi{VK_STRUCTURE_TYPE_IMAGE_VIEW_CREATE_INFO};
    vi.image = color;
    vi.viewType = VK_IMAGE_VIEW_TYPE_2D;
    vi.format = VK_FORMAT_R32G32B32A32_SFLOAT;
    vi.subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1};
    vk_check(vkCreateImageView(d, &vi, nullptr, &view), "vkCreateImageView");
    make_pass();
    make_pipeline();
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = VkDeviceSize(kSize) * kSize * 16;
    bi.usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    vk_check(vkCreateBuffer(d, &bi, nullptr, &readback), "vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(d, readback, &req);
    readback_mem = app.allocate(req, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    vk_check(vkBindBufferMemory(d, readback, readback_mem, 0), "bind");
    vk_check(vkMapMemory(d, readback_mem, 0, bi.size, 0, reinterpret_cast<void**>(&pixels)), "map");
    VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = app.family;
    vk_check(vkCreateCommandPool(d, &pi, nullptr, &pool), "pool");
    VkCommandBufferAllocateInfo ca{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ca.commandPool = pool;
    ca.commandBufferCount = 1;
    vk_check(vkAllocateCommandBuffers(d, &ca, &render_cmd), "command buffer");
    vk_check(vkAllocateCommandBuffers(d, &ca, &composite_cmd), "command buffer");
    VkSemaphoreTypeCreateInfo ti{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
    ti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    VkSemaphoreCreateInfo si{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
    si.pNext = &ti;
    vk_check(vkCreateSemaphore(d, &si, nullptr, &timeline), "semaphore");
  }

  ~Renderer() {
    VkDevice d = app.device;
    vkDeviceWaitIdle(d);
    vkDestroySemaphore(d, timeline, nullptr);
    vkDestroyCommandPool(d, pool, nullptr);
    vkDestroyBuffer(d, readback, nullptr);
    vkFreeMemory(d, readback_mem, nullptr);
    vkDestroyPipeline(d, pipeline, nullptr);
    vkDestroyPipelineLayout(d, layout, nullptr);
    vkDestroyFramebuffer(d, framebuffer, nullptr);
    vkDestroyRenderPass(d, pass, nullptr);
    vkDestroyImageView(d, view, nullptr);
    vkDestroyImage(d, color, nullptr);
    vkDestroyImage(d, net, nullptr);
    vkFreeMemory(d, color_mem, nullptr);
    vkFreeMemory(d, net_mem, nullptr);
  }

  // Cleared each frame; left in TRANSFER_DST_OPTIMAL for the composite. The dependencies order
  // the pass after the previous frame's read-back and before this frame's blit.
  void make_pass() {
    VkAttachmentDescription at{};
    at.format = VK_FORMAT_R32G32B32A32_SFLOAT;
    at.samples = VK_SAMPLE_COUNT_1_BIT;
    at.loadOp = VK_ATTACHMENT_LOAD_OP_CLEAR;
    at.storeOp = VK_ATTACHMENT_STORE_OP_STORE;
    at.stencilLoadOp = VK_ATTACHMENT_LOAD_OP_DONT_CARE;
    at.stencilStoreOp = VK_ATTACHMENT_STORE_OP_DONT_CARE;
    at.initialLayout = VK_IMAGE_LAYOUT_UNDEFINED;
    at.finalLayout = VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL;
    VkAttachmentReference ref{0, VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL};
    VkSubpassDescription sub{};
    sub.pipelineBindPoint = VK_PIPELINE_BIND_POINT_GRAPHICS;
    sub.colorAttachmentCount = 1;
    sub.pColorAttachments = &ref;
    VkSubpassDependency deps[2] = {};
    deps[0].srcSubpass = VK_SUBPASS_EXTERNAL;
    deps[0].dstSubpass = 0;
    deps[0].srcStageMask = VK_PIPELINE_STAGE_TRANSFER_BIT;
    deps[0].srcAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    deps[0].dstStageMask = VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT;
    deps[0].dstAccessMask = VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT;
    deps[1].srcSubpass = 0;
    deps[1].dstSubpass = VK_SUBPASS_EXTERNAL;
    deps[1].srcStageMask = VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT;
    deps[1].srcAccessMask = VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT;
    deps[1].dstStageMask = VK_PIPELINE_STAGE_TRANSFER_BIT;
    deps[1].dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    VkRenderPassCreateInfo rp{VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO};
    rp.attachmentCount = 1;
    rp.pAttachments = &at;
    rp.subpassCount = 1;
    rp.pSubpasses = &sub;
    rp.dependencyCount = 2;
    rp.pDependencies = deps;
    vk_check(vkCreateRenderPass(app.device, &rp, nullptr, &pass), "vkCreateRenderPass");
    VkFramebufferCreateInfo fb{VK_STRUCTURE_TYPE_FRAMEBUFFER_CREATE_INFO};
    fb.renderPass = pass;
    fb.attachmentCount = 1;
    fb.pAttachments = &view;
    fb.width = fb.height = kSize;
    fb.layers = 1;
    vk_check(vkCreateFramebuffer(app.device, &fb, nullptr, &framebuffer), "vkCreateFramebuffer");
  }

  void make_pipeline() {
    VkDevice d = app.device;
    VkPushConstantRange range{VK_SHADER_STAGE_VERTEX_BIT, 0, sizeof(float)};
    VkPipelineLayoutCreateInfo li{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    li.pushConstantRangeCount = 1;
    li.pPushConstantRanges = &range;
    vk_check(vkCreatePipelineLayout(d, &li, nullptr, &layout), "vkCreatePipelineLayout");
    VkShaderModule vs = shader(d, kVert, sizeof kVert), fs = shader(d, kFrag, sizeof kFrag);
    VkPipelineShaderStageCreateInfo stages[2] = {{VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO},
                                                 {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO}};
    stages[0].stage = VK_SHADER_STAGE_VERTEX_BIT, stages[0].module = vs, stages[0].pName = "main";
    stages[1].stage = VK_SHADER_STAGE_FRAGMENT_BIT, stages[1].module = fs, stages[1].pName = "main";
    VkPipelineVertexInputStateCreateInfo vin{VK_STRUCTURE_TYPE_PIPELINE_VERTEX_INPUT_STATE_CREATE_INFO};
    VkPipelineInputAssemblyStateCreateInfo ia{VK_STRUCTURE_TYPE_PIPELINE_INPUT_ASSEMBLY_STATE_CREATE_INFO};
    ia.topology = VK_PRIMITIVE_TOPOLOGY_TRIANGLE_LIST;
    VkViewport vp{0, 0, float(kSize), float(kSize), 0, 1};
    VkRect2D scissor{{0, 0}, {kSize, kSize}};
    VkPipelineViewportStateCreateInfo vps{VK_STRUCTURE_TYPE_PIPELINE_VIEWPORT_STATE_CREATE_INFO};
    vps.viewportCount = vps.scissorCount = 1;
    vps.pViewports = &vp;
    vps.pScissors = &scissor;
    VkPipelineRasterizationStateCreateInfo rs{VK_STRUCTURE_TYPE_PIPELINE_RASTERIZATION_STATE_CREATE_INFO};
    rs.polygonMode = VK_POLYGON_MODE_FILL;
    rs.cullMode = VK_CULL_MODE_NONE;
    rs.lineWidth = 1;
    VkPipelineMultisampleStateCreateInfo ms{VK_STRUCTURE_TYPE_PIPELINE_MULTISAMPLE_STATE_CREATE_INFO};
    ms.rasterizationSamples = VK_SAMPLE_COUNT_1_BIT;
    VkPipelineColorBlendAttachmentState blend{};
    blend.colorWriteMask = 0xF;
    VkPipelineColorBlendStateCreateInfo cb{VK_STRUCTURE_TYPE_PIPELINE_COLOR_BLEND_STATE_CREATE_INFO};
    cb.attachmentCount = 1;
    cb.pAttachments = &blend;
    VkGraphicsPipelineCreateInfo gi{VK_STRUCTURE_TYPE_GRAPHICS_PIPELINE_CREATE_INFO};
    gi.stageCount = 2;
    gi.pStages = stages;
    gi.pVertexInputState = &vin;
    gi.pInputAssemblyState = &ia;
    gi.pViewportState = &vps;
    gi.pRasterizationState = &rs;
    gi.pMultisampleState = &ms;
    gi.pColorBlendState = &cb;
    gi.layout = layout;
    gi.renderPass = pass;
    vk_check(vkCreateGraphicsPipelines(d, VK_NULL_HANDLE, 1, &gi, nullptr, &pipeline), "pipeline");
    vkDestroyShaderModule(d, vs, nullptr);
    vkDestroyShaderModule(d, fs, nullptr);
  }

  void record_render(float angle) {
    vk_check(vkResetCommandBuffer(render_cmd, 0), "reset");
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vk_check(vkBeginCommandBuffer(render_cmd, &bi), "begin");
    VkClearValue clear{};
    clear.color = {{0.05f, 0.05f, 0.08f, 1.0f}};
    VkRenderPassBeginInfo rb{VK_STRUCTURE_TYPE_RENDER_PASS_BEGIN_INFO};
    rb.renderPass = pass;
    rb.framebuffer = framebuffer;
    rb.renderArea = {{0, 0}, {kSize, kSize}};
    rb.clearValueCount = 1;
    rb.pClearValues = &clear;
    vkCmdBeginRenderPass(render_cmd, &rb, VK_SUBPASS_CONTENTS_INLINE);
    vkCmdBindPipeline(render_cmd, VK_PIPELINE_BIND_POINT_GRAPHICS, pipeline);
    vkCmdPushConstants(render_cmd, layout, VK_SHADER_STAGE_VERTEX_BIT, 0, sizeof angle, &angle);
    vkCmdDraw(render_cmd, 3, 1, 0, 0);
    vkCmdEndRenderPass(render_cmd);
    vk_check(vkEndCommandBuffer(render_cmd), "end");
  }

  // The network's image (TRANSFER_SRC_OPTIMAL, as the run leaves it) scaled into the frame's
  // corner, then the frame to the read-back buffer.
  void record_composite(bool network) {
    vk_check(vkResetCommandBuffer(composite_cmd, 0), "reset");
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vk_check(vkBeginCommandBuffer(composite_cmd, &bi), "begin");
    if (network) {
      VkImageBlit blit{};
      blit.srcSubresource = blit.dstSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1};
      blit.srcOffsets[1] = {int32_t(kNet), int32_t(kNet), 1};
      blit.dstOffsets[1] = {int32_t(kInset), int32_t(kInset), 1};
      vkCmdBlitImage(composite_cmd, net, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, color,
                     VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 1, &blit, VK_FILTER_NEAREST);
    }
    VkImageMemoryBarrier ib{VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER};
    ib.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    ib.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
    ib.oldLayout = VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL;
    ib.newLayout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL;
    ib.srcQueueFamilyIndex = ib.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
    ib.image = color;
    ib.subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1};
    vkCmdPipelineBarrier(composite_cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 0, nullptr,
                         0, nullptr, 1, &ib);
    VkBufferImageCopy region{};
    region.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1};
    region.imageExtent = {kSize, kSize, 1};
    vkCmdCopyImageToBuffer(composite_cmd, color, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, readback, 1, &region);
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(composite_cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0,
                         nullptr, 0, nullptr);
    vk_check(vkEndCommandBuffer(composite_cmd), "end");
  }

  void submit(VkCommandBuffer cmd, uint64_t wait, uint64_t signal) {
    VkTimelineSemaphoreSubmitInfo ti{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
    ti.waitSemaphoreValueCount = wait ? 1 : 0;
    ti.pWaitSemaphoreValues = &wait;
    ti.signalSemaphoreValueCount = signal ? 1 : 0;
    ti.pSignalSemaphoreValues = &signal;
    const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_TRANSFER_BIT;
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.pNext = &ti;
    si.waitSemaphoreCount = wait ? 1 : 0;
    si.pWaitSemaphores = &timeline;
    si.pWaitDstStageMask = &stage;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cmd;
    si.signalSemaphoreCount = signal ? 1 : 0;
    si.pSignalSemaphores = &timeline;
    vk_check(vkQueueSubmit(app.queue, 1, &si, VK_NULL_HANDLE), "vkQueueSubmit");
  }

  void wait(uint64_t v) {
    VkSemaphoreWaitInfo wi{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
    wi.semaphoreCount = 1;
    wi.pSemaphores = &timeline;
    wi.pValues = &v;
    vk_check(vkWaitSemaphores(app.device, &wi, 60'000'000'000ull), "vkWaitSemaphores");
  }
};

// The decoder's input for frame `f`: a disc circling the centre, its colour drifting.
void features(int f, float* x) {
  const double t = 0.3 * f;
  x[0] = float(0.5 + 0.2 * std::cos(t)), x[1] = float(0.5 + 0.2 * std::sin(t)), x[2] = 0.2f;
  x[3] = float(0.5 + 0.4 * std::sin(0.7 * t)), x[4] = 0.6f, x[5] = float(0.5 + 0.4 * std::cos(0.5 * t));
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[size_t(std::min<double>(double(v.size() - 1), std::ceil(q * double(v.size())) - 1))];
}

struct Options {
  std::string program, cpu_program, checkpoint;
  int frames = 30;
  std::vector<int> chunks = {1, 2, 4, 16};
  bool json = false;
  bool validation = true;  // the layer with synchronization validation, when installed
};

struct Result {
  int chunks = 0;  // 0: no network
  size_t chunks_used = 0;
  std::vector<double> frame_ms, network_ms;
  std::vector<float> inset;  // the last frame's composited corner, RGBA
  float last_features[kFeatures] = {};
};

meganeura_session* session_on(const App& app, const meganeura_vulkan_device& d, int chunks, const Renderer& r,
                              const Options& o) {
  meganeura_session_options so;
  mn_check(meganeura_session_options_init(&so, MEGANEURA_C_API_VERSION_MAJOR), "options");
  so.vulkan_device = &d;
  so.vulkan_chunks = chunks;
  so.vulkan_profile = 1;
  meganeura_session* s = nullptr;
  mn_check(meganeura_session_create(&so, &s), "session");
  const meganeura_vulkan_image image = {uint64_t(uintptr_t(r.net)), VK_FORMAT_R32G32B32A32_SFLOAT,       kNet, kNet,
                                        VK_IMAGE_LAYOUT_UNDEFINED,  VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL};
  mn_check(meganeura_session_bind_image(s, "image", &image), "bind the network's image");
  mn_check(meganeura_session_add_program_file(s, o.program.c_str(), nullptr), "program");
  mn_check(meganeura_session_load_checkpoint(s, o.checkpoint.c_str(), 1), "checkpoint");
  (void)app;
  return s;
}

Result run_frames(const App& app, Renderer& r, int chunks, const Options& o) {
  Result res;
  res.chunks = chunks;
  const meganeura_vulkan_device d = {app.instance, app.physical,
                                     app.device,   app.queue,
                                     app.family,   reinterpret_cast<void (*)(void)>(vkGetInstanceProcAddr)};
  meganeura_session* s = chunks ? session_on(app, d, chunks, r, o) : nullptr;
  if (s) mn_check(meganeura_session_chunk_count(s, 0, &res.chunks_used), "chunk count");
  double profiled = 0;
  const int64_t shape[2] = {1, kFeatures};
  for (int f = 0; f < o.frames + 2; ++f) {  // two frames of warm-up
    const auto t0 = std::chrono::steady_clock::now();
    float x[kFeatures];
    features(f, x);
    r.record_render(0.05f * float(f));
    r.record_composite(s != nullptr);
    const uint64_t base = r.value;
    if (s) {
      mn_check(meganeura_session_set(s, "features", MEGANEURA_DTYPE_F32, shape, 2, x, sizeof x), "features");
      for (size_t k = 0; k < res.chunks_used; ++k) {
        const bool last = k + 1 == res.chunks_used;
        const meganeura_vulkan_semaphore done = {uint64_t(uintptr_t(r.timeline)), base + 1, 0};
        mn_check(meganeura_session_submit(s, 0, k, 1, nullptr, 0, last ? &done : nullptr, last ? 1 : 0), "submit");
        if (k == 0) r.submit(r.render_cmd, 0, 0);  // the frame's rendering right after the first chunk
      }
      r.submit(r.composite_cmd, base + 1, base + 2);
    } else {
      r.submit(r.render_cmd, 0, 0);
      r.submit(r.composite_cmd, 0, base + 2);
    }
    r.value = base + 2;
    r.wait(r.value);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s) {
      mn_check(meganeura_session_wait(s), "wait");  // already done: collects the run's profile
      meganeura_profile p;
      mn_check(meganeura_session_profile(s, 0, &p), "profile");
      if (f >= 2) res.network_ms.push_back(p.step_ms - profiled);
      profiled = p.step_ms;
    }
    if (f >= 2) res.frame_ms.push_back(ms);
    std::copy(x, x + kFeatures, res.last_features);
  }
  res.inset.resize(size_t(kInset) * kInset * 4);
  for (uint32_t y = 0; y < kInset; ++y)
    std::copy_n(r.pixels + size_t(y) * kSize * 4, kInset * 4, res.inset.data() + size_t(y) * kInset * 4);
  meganeura_session_destroy(s);
  return res;
}

// The composited corner against the CPU backend's image for the same features, each network
// pixel covering 4x4 frame pixels (nearest blit): relative L2 over the corner.
double check_against_cpu(const Options& o, const Result& r) {
  meganeura_session_options so;
  mn_check(meganeura_session_options_init(&so, MEGANEURA_C_API_VERSION_MAJOR), "options");
  meganeura_session* s = nullptr;
  mn_check(meganeura_session_create(&so, &s), "cpu session");
  mn_check(meganeura_session_add_program_file(s, o.cpu_program.c_str(), nullptr), "cpu program");
  mn_check(meganeura_session_load_checkpoint(s, o.checkpoint.c_str(), 1), "checkpoint");
  const int64_t shape[2] = {1, kFeatures};
  mn_check(meganeura_session_set(s, "features", MEGANEURA_DTYPE_F32, shape, 2, r.last_features, sizeof r.last_features),
           "features");
  mn_check(meganeura_session_run(s, 0), "cpu run");
  std::vector<float> image(size_t(kNet) * kNet * 4);
  mn_check(meganeura_session_get(s, "image", MEGANEURA_DTYPE_F32, image.data(), image.size() * 4, nullptr), "image");
  meganeura_session_destroy(s);
  double diff = 0, norm = 0;
  const uint32_t scale = kInset / kNet;
  for (uint32_t y = 0; y < kInset; ++y) {
    for (uint32_t x = 0; x < kInset; ++x) {
      for (int c = 0; c < 4; ++c) {
        const double want = image[(size_t(y / scale) * kNet + x / scale) * 4 + size_t(c)];
        const double got = r.inset[(size_t(y) * kInset + x) * 4 + size_t(c)];
        diff += (got - want) * (got - want);
        norm += want * want;
      }
    }
  }
  return std::sqrt(diff / norm);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--program") {
      o.program = value();
    } else if (a == "--cpu-program") {
      o.cpu_program = value();
    } else if (a == "--checkpoint") {
      o.checkpoint = value();
    } else if (a == "--frames") {
      o.frames = std::stoi(value());
      if (o.frames < 1) throw std::invalid_argument("--frames must be at least 1");
    } else if (a == "--chunks") {
      o.chunks.clear();
      const std::string list = value();
      for (size_t p = 0; p < list.size();) {
        const size_t q = std::min(list.find(',', p), list.size());
        o.chunks.push_back(std::stoi(list.substr(p, q - p)));
        if (o.chunks.back() < 1) throw std::invalid_argument("--chunks: each count must be at least 1");
        p = q + 1;
      }
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--no-validation") {
      o.validation = false;
    } else {
      throw std::invalid_argument("unknown option " + a);
    }
  }
  if (o.program.empty() || o.checkpoint.empty()) throw std::invalid_argument("--program and --checkpoint are required");
  return o;
}

int run(const Options& o) {
  App app(o.validation);
  Renderer renderer(app);
  std::vector<Result> results;
  results.push_back(run_frames(app, renderer, 0, o));
  for (int c : o.chunks) results.push_back(run_frames(app, renderer, c, o));
  bool ok = g_messages == 0;
  std::string out = "{\"device\": \"" + app.name + "\", \"validation\": " + (app.validation ? "true" : "false") +
                    ", \"frames\": " + std::to_string(o.frames) + ", \"configs\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s{\"network\": %s, \"chunks\": %d, \"chunks_used\": %zu, \"frame_ms_p50\": %.3f, "
                  "\"frame_ms_p99\": %.3f, \"network_ms_p50\": %.3f, \"network_ms_p99\": %.3f",
                  i ? ", " : "", r.chunks ? "true" : "false", r.chunks, r.chunks_used, percentile(r.frame_ms, 0.5),
                  percentile(r.frame_ms, 0.99), percentile(r.network_ms, 0.5), percentile(r.network_ms, 0.99));
    out += line;
    if (r.chunks && !o.cpu_program.empty()) {
      const double e = check_against_cpu(o, r);
      std::snprintf(line, sizeof line, ", \"relative_l2_vs_cpu\": %.3g", e);
      out += line;
      ok = ok && e <= 1e-3;
    }
    out += "}";
    if (!o.json) {
      std::printf("%-12s frame p50 %8.3f ms  p99 %8.3f ms   network p50 %8.3f ms\n",
                  r.chunks ? ("chunks " + std::to_string(r.chunks)).c_str() : "no network", percentile(r.frame_ms, 0.5),
                  percentile(r.frame_ms, 0.99), percentile(r.network_ms, 0.5));
    }
  }
  out += "], \"validation_messages\": " + std::to_string(g_messages) + "}";
  if (o.json) std::printf("%s\n", out.c_str());
  if (!ok) std::fprintf(stderr, "embed_example: FAILED (validation messages or composited pixels off)\n");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const NoDevice& e) {
    std::printf("skipped: %s\n", e.what());
    return 77;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embed_example: %s\n", e.what());
    return 2;
  }
}
