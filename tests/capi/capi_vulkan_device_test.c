/* The C API on the application's own Vulkan device: the test creates the instance (with the
 * validation layer and a messenger of its own when the layer is installed), picks a device,
 * creates the logical device and a compute queue as docs/embedding.md says a host must, hands
 * them to meganeura_session_create, runs y = relu(x W + b) and compares y with the f64
 * reference. Then the same without blocking: a run queued behind the application's timeline
 * semaphore, held until the application signals it, and a run split into chunks with the
 * application's own queue work between them (needs Vulkan 1.2's timelineSemaphore; skipped
 * with a printed reason without it). Afterwards the device is still the application's and
 * usable; any validation message (synchronization validation on where the layer has it) fails
 * the test. Exits 77 (skipped) when there is no Vulkan device.
 *
 * usage: capi_vulkan_device_test PROGRAM.json
 */
#include <string.h>
#include <vulkan/vulkan.h>

#include "capi_test_util.h"

enum { kSkip = 77 };

static int messages = 0;

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  (void)severity, (void)type, (void)user;
  ++messages;
  fprintf(stderr, "FAIL: validation: %s\n", data && data->pMessage ? data->pMessage : "");
  return VK_FALSE;
}

static int has_layer(const char* name) {
  uint32_t n = 0;
  if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return 0;
  VkLayerProperties* layers = calloc(n, sizeof *layers);
  int found = 0;
  if (layers && vkEnumerateInstanceLayerProperties(&n, layers) == VK_SUCCESS) {
    for (uint32_t i = 0; i < n; ++i) found |= strcmp(layers[i].layerName, name) == 0;
  }
  free(layers);
  return found;
}

static int has_layer_extension(const char* layer, const char* name) {
  uint32_t n = 0;
  if (vkEnumerateInstanceExtensionProperties(layer, &n, NULL) != VK_SUCCESS || n == 0) return 0;
  VkExtensionProperties* exts = calloc(n, sizeof *exts);
  int found = 0;
  if (exts && vkEnumerateInstanceExtensionProperties(layer, &n, exts) == VK_SUCCESS) {
    for (uint32_t i = 0; i < n; ++i) found |= strcmp(exts[i].extensionName, name) == 0;
  }
  free(exts);
  return found;
}

static int has_device_extension(VkPhysicalDevice pd, const char* name) {
  uint32_t n = 0;
  if (vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) != VK_SUCCESS || n == 0) return 0;
  VkExtensionProperties* exts = calloc(n, sizeof *exts);
  int found = 0;
  if (exts && vkEnumerateDeviceExtensionProperties(pd, NULL, &n, exts) == VK_SUCCESS) {
    for (uint32_t i = 0; i < n; ++i) found |= strcmp(exts[i].extensionName, name) == 0;
  }
  free(exts);
  return found;
}

typedef struct {
  VkInstance instance;
  VkDebugUtilsMessengerEXT messenger;
  PFN_vkDestroyDebugUtilsMessengerEXT destroy_messenger;
  VkPhysicalDevice physical;
  VkDevice device;
  VkQueue queue;
  uint32_t family;
  int timeline; /* the device's timelineSemaphore feature is enabled */
} App;

/* The application's instance: Vulkan 1.2 where the loader has it, validation when installed,
 * with synchronization validation. 0: no Vulkan here. */
static int create_instance(App* app) {
  VkApplicationInfo ai = {VK_STRUCTURE_TYPE_APPLICATION_INFO};
  ai.pApplicationName = "capi_vulkan_device_test";
  uint32_t loader = VK_API_VERSION_1_0;
  vkEnumerateInstanceVersion(&loader);
  ai.apiVersion = loader >= VK_API_VERSION_1_2 ? VK_API_VERSION_1_2 : VK_API_VERSION_1_1;
  VkDebugUtilsMessengerCreateInfoEXT dm = {VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  dm.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  dm.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
  dm.pfnUserCallback = on_message;
  const char* layer = "VK_LAYER_KHRONOS_validation";
  const char* exts[2] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME};
  const int validation = has_layer(layer);
  const int sync = validation && has_layer_extension(layer, exts[1]);
  VkValidationFeatureEnableEXT enable = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
  VkValidationFeaturesEXT features = {VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = &enable;
  VkInstanceCreateInfo ci = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &ai;
  if (validation) {
    ci.pNext = &dm;
    if (sync) dm.pNext = &features;
    ci.enabledLayerCount = 1;
    ci.ppEnabledLayerNames = &layer;
    ci.enabledExtensionCount = sync ? 2 : 1;
    ci.ppEnabledExtensionNames = exts;
  }
  if (vkCreateInstance(&ci, NULL, &app->instance) != VK_SUCCESS) return 0;
  dm.pNext = NULL;
  printf("  validation layer: %s\n",
         validation ? sync ? "on, with synchronization validation" : "on" : "not installed");
  if (validation) {
    PFN_vkCreateDebugUtilsMessengerEXT create =
        (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(app->instance, "vkCreateDebugUtilsMessengerEXT");
    app->destroy_messenger =
        (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(app->instance, "vkDestroyDebugUtilsMessengerEXT");
    CHECK(create && app->destroy_messenger, "no debug utils functions");
    if (create) CHECK(create(app->instance, &dm, NULL, &app->messenger) == VK_SUCCESS, "messenger");
  }
  return 1;
}

/* The first Vulkan 1.1 device with a compute queue; its logical device as the embedding guide
 * says: one compute queue, VK_KHR_portability_subset where the device has it, and the
 * timelineSemaphore feature of Vulkan 1.2 where the device has it (for the runs that do not
 * block). */
static int create_device(App* app) {
  uint32_t n = 0;
  if (vkEnumeratePhysicalDevices(app->instance, &n, NULL) != VK_SUCCESS || n == 0) return 0;
  VkPhysicalDevice* pds = calloc(n, sizeof *pds);
  MUST(pds ? MEGANEURA_OK : MEGANEURA_ERROR_OUT_OF_MEMORY);
  CHECK(vkEnumeratePhysicalDevices(app->instance, &n, pds) == VK_SUCCESS, "enumerate");
  int found = 0;
  for (uint32_t i = 0; i < n && !found; ++i) {
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(pds[i], &p);
    if (p.apiVersion < VK_API_VERSION_1_1) continue;
    uint32_t qn = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pds[i], &qn, NULL);
    VkQueueFamilyProperties qf[16];
    if (qn > 16) qn = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(pds[i], &qn, qf);
    for (uint32_t f = 0; f < qn && !found; ++f) {
      if (!(qf[f].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
      app->physical = pds[i];
      app->family = f;
      found = 1;
      printf("  device: %s, queue family %u\n", p.deviceName, f);
    }
  }
  free(pds);
  if (!found) return 0;
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = app->family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  const char* portability = "VK_KHR_portability_subset";
  VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  if (has_device_extension(app->physical, portability)) {
    dci.enabledExtensionCount = 1;
    dci.ppEnabledExtensionNames = &portability;
  }
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(app->physical, &props);
  VkPhysicalDeviceVulkan12Features v12 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  if (props.apiVersion >= VK_API_VERSION_1_2) {
    VkPhysicalDeviceFeatures2 f2 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &v12;
    vkGetPhysicalDeviceFeatures2(app->physical, &f2);
  }
  app->timeline = v12.timelineSemaphore == VK_TRUE;
  VkPhysicalDeviceVulkan12Features enable12 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  enable12.timelineSemaphore = VK_TRUE;
  if (app->timeline) dci.pNext = &enable12;
  if (vkCreateDevice(app->physical, &dci, NULL, &app->device) != VK_SUCCESS) return 0;
  vkGetDeviceQueue(app->device, app->family, 0, &app->queue);
  return 1;
}

static void destroy_app(App* app) {
  if (app->device) vkDestroyDevice(app->device, NULL);
  if (app->messenger) app->destroy_messenger(app->instance, app->messenger, NULL);
  if (app->instance) vkDestroyInstance(app->instance, NULL);
}

/* A session on the application's device (as `d` describes it, which must outlive it). */
static meganeura_session* app_session(const meganeura_vulkan_device* d, int chunks, const char** name) {
  meganeura_session_options o;
  MUST(meganeura_session_options_init(&o, MEGANEURA_C_API_VERSION_MAJOR));
  o.vulkan_device = d;
  o.vulkan_cache_dir = "-";
  o.vulkan_chunks = chunks;
  meganeura_session* s = NULL;
  MUST(meganeura_session_create(&o, &s));
  MUST(meganeura_session_device_name(s, name));
  return s;
}

static void run_on(const App* app, const char* program) {
  meganeura_vulkan_device d = {0};
  d.instance = app->instance;
  d.physical_device = app->physical;
  d.device = app->device;
  d.queue = app->queue;
  d.queue_family = app->family;
  d.get_instance_proc_addr = (void (*)(void))vkGetInstanceProcAddr;
  const char* name = NULL;
  meganeura_session* s = app_session(&d, 1, &name);
  MUST(meganeura_session_add_program_file(s, program, NULL));
  set_all(s);
  float y[N * M];
  for (int r = 0; r < 3; ++r) {
    run_and_get(s, y);
    compare(name, y);
  }
  meganeura_session_destroy(s);
  /* The device and queue are still the application's. */
  CHECK(vkQueueWaitIdle(app->queue) == VK_SUCCESS, "the queue after the session");
  CHECK(vkDeviceWaitIdle(app->device) == VK_SUCCESS, "the device after the session");

  /* A device without its queue is refused with a message, not a crash. */
  d.queue = NULL;
  meganeura_session_options o;
  MUST(meganeura_session_options_init(&o, MEGANEURA_C_API_VERSION_MAJOR));
  o.vulkan_device = &d;
  const meganeura_status st = meganeura_session_create(&o, &s);
  CHECK(st == MEGANEURA_ERROR_INVALID_ARGUMENT && s == NULL && strstr(meganeura_last_error(), "queue"),
        "a device without a queue: %s: %s", meganeura_status_name(st), meganeura_last_error());
}

/* ---- runs that do not block ---- */

static VkSemaphore timeline_semaphore(const App* app) {
  VkSemaphoreTypeCreateInfo ti = {VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
  ti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  VkSemaphoreCreateInfo ci = {VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
  ci.pNext = &ti;
  VkSemaphore sem = VK_NULL_HANDLE;
  CHECK(vkCreateSemaphore(app->device, &ci, NULL, &sem) == VK_SUCCESS, "timeline semaphore");
  return sem;
}

static uint64_t timeline_value(const App* app, VkSemaphore sem) {
  uint64_t v = 0;
  CHECK(vkGetSemaphoreCounterValue(app->device, sem, &v) == VK_SUCCESS, "semaphore value");
  return v;
}

/* The application waits on its own semaphore (10 s at most), never on the session. */
static int wait_for(const App* app, VkSemaphore sem, uint64_t value) {
  VkSemaphoreWaitInfo wi = {VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
  wi.semaphoreCount = 1;
  wi.pSemaphores = &sem;
  wi.pValues = &value;
  return vkWaitSemaphores(app->device, &wi, 10000000000ull) == VK_SUCCESS;
}

/* The application's own work: fills a buffer of its own with `pattern`, after its timeline
 * reaches `wait`, then sets it to `signal` (a stand-in for a frame's rendering). */
typedef struct {
  VkBuffer buffer;
  VkDeviceMemory memory;
  uint32_t* mapped;
  VkCommandPool pool;
  uint32_t pattern;
} AppWork;

static VkDeviceMemory allocate_for(const App* app, VkMemoryRequirements req, VkMemoryPropertyFlags want) {
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(app->physical, &mp);
  VkMemoryAllocateInfo ai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = UINT32_MAX;
  for (uint32_t t = 0; t < mp.memoryTypeCount && ai.memoryTypeIndex == UINT32_MAX; ++t) {
    if ((req.memoryTypeBits & (1u << t)) && (mp.memoryTypes[t].propertyFlags & want) == want) ai.memoryTypeIndex = t;
  }
  MUST(ai.memoryTypeIndex != UINT32_MAX ? MEGANEURA_OK : MEGANEURA_ERROR_UNAVAILABLE);
  VkDeviceMemory memory = VK_NULL_HANDLE;
  CHECK(vkAllocateMemory(app->device, &ai, NULL, &memory) == VK_SUCCESS, "memory");
  return memory;
}

static void app_work_create(const App* app, AppWork* work, uint32_t pattern) {
  VkBufferCreateInfo bi = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = 4096;
  bi.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  CHECK(vkCreateBuffer(app->device, &bi, NULL, &work->buffer) == VK_SUCCESS, "app buffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(app->device, work->buffer, &req);
  work->memory = allocate_for(app, req, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
  CHECK(vkBindBufferMemory(app->device, work->buffer, work->memory, 0) == VK_SUCCESS, "bind");
  CHECK(vkMapMemory(app->device, work->memory, 0, 4096, 0, (void**)&work->mapped) == VK_SUCCESS, "map");
  memset(work->mapped, 0, 4096);
  VkCommandPoolCreateInfo pi = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pi.queueFamilyIndex = app->family;
  CHECK(vkCreateCommandPool(app->device, &pi, NULL, &work->pool) == VK_SUCCESS, "app pool");
  work->pattern = pattern;
}

/* A command buffer of its own for each submission (one still pending cannot be submitted again). */
static VkCommandBuffer app_command(const App* app, const AppWork* work) {
  VkCommandBufferAllocateInfo ca = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ca.commandPool = work->pool;
  ca.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ca.commandBufferCount = 1;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  CHECK(vkAllocateCommandBuffers(app->device, &ca, &cmd) == VK_SUCCESS, "app command buffer");
  return cmd;
}

static VkCommandBuffer app_work_record(const App* app, const AppWork* work) {
  VkCommandBuffer cmd = app_command(app, work);
  VkCommandBufferBeginInfo begin = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  vkBeginCommandBuffer(cmd, &begin);
  vkCmdFillBuffer(cmd, work->buffer, 0, 256, work->pattern);
  VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
  CHECK(vkEndCommandBuffer(cmd) == VK_SUCCESS, "app recording");
  return cmd;
}

/* Submits `cmd` waiting for timeline value `wait` and signalling `signal`. */
static void submit_on(const App* app, VkCommandBuffer cmd, VkSemaphore sem, uint64_t wait, uint64_t signal) {
  VkTimelineSemaphoreSubmitInfo ti = {VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
  ti.waitSemaphoreValueCount = 1;
  ti.pWaitSemaphoreValues = &wait;
  ti.signalSemaphoreValueCount = 1;
  ti.pSignalSemaphoreValues = &signal;
  const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
  VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.pNext = &ti;
  si.waitSemaphoreCount = 1;
  si.pWaitSemaphores = &sem;
  si.pWaitDstStageMask = &stage;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd;
  si.signalSemaphoreCount = 1;
  si.pSignalSemaphores = &sem;
  CHECK(vkQueueSubmit(app->queue, 1, &si, VK_NULL_HANDLE) == VK_SUCCESS, "submission");
}

static void app_work_submit(const App* app, const AppWork* work, VkSemaphore sem, uint64_t wait, uint64_t signal) {
  submit_on(app, app_work_record(app, work), sem, wait, signal);
}

static void app_work_destroy(const App* app, AppWork* work) {
  vkDestroyCommandPool(app->device, work->pool, NULL);
  vkDestroyBuffer(app->device, work->buffer, NULL);
  vkFreeMemory(app->device, work->memory, NULL);
}

static meganeura_vulkan_semaphore on(VkSemaphore sem, uint64_t value) {
  meganeura_vulkan_semaphore s = {(uint64_t)(uintptr_t)sem, value, 0};
  return s;
}

static void get_y(meganeura_session* s, float* y) {
  size_t written = 0;
  MUST(meganeura_session_get(s, "y", MEGANEURA_DTYPE_F32, y, N * M * sizeof(float), &written));
  CHECK(written == N * M * sizeof(float), "%zu bytes written", written);
}

/* A whole run queued behind the application's semaphore: it does not start before the
 * application signals, and signals the application when done. */
static void run_held(const App* app, meganeura_session* s, const char* name, VkSemaphore sem) {
  meganeura_vulkan_semaphore wait = on(sem, 1), done = on(sem, 2);
  MUST(meganeura_session_submit(s, 0, 0, 0, &wait, 1, &done, 1));
  int finished = -1;
  MUST(meganeura_session_poll(s, &finished));
  CHECK(finished == 0, "the run finished before the semaphore it waits on was signalled");
  CHECK(timeline_value(app, sem) == 0, "semaphore at %llu before the application signalled",
        (unsigned long long)timeline_value(app, sem));
  VkSemaphoreSignalInfo si = {VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO};
  si.semaphore = sem;
  si.value = 1;
  CHECK(vkSignalSemaphore(app->device, &si) == VK_SUCCESS, "host signal");
  CHECK(wait_for(app, sem, 2), "the run never signalled its semaphore");
  for (int i = 0; i < 10000 && finished != 1; ++i) MUST(meganeura_session_poll(s, &finished));
  MUST(meganeura_session_wait(s));
  MUST(meganeura_session_poll(s, &finished));
  CHECK(finished == 1, "the session still has a run pending after waiting");
  float y[N * M];
  get_y(s, y);
  compare(name, y);
  printf("  ok: a run held behind the application's timeline semaphore, then signalled it\n");
}

/* A run in chunks, one per call, with the application's own work queued between them. */
static void run_interleaved(const App* app, meganeura_session* s, const char* name, VkSemaphore sem) {
  size_t chunks = 0;
  MUST(meganeura_session_chunk_count(s, 0, &chunks));
  CHECK(chunks >= 2, "the run is one chunk (vulkan_chunks asked for 4)");
  AppWork work;
  app_work_create(app, &work, 0x5eed5eedu);
  uint64_t t = timeline_value(app, sem);
  /* Out of turn: a run starts at chunk 0. */
  meganeura_status st = meganeura_session_submit(s, 0, 1, 1, NULL, 0, NULL, 0);
  CHECK(st == MEGANEURA_ERROR_BUSY && strstr(meganeura_last_error(), "chunk 0"), "%s: %s", meganeura_status_name(st),
        meganeura_last_error());
  st = meganeura_session_submit(s, 0, chunks, 1, NULL, 0, NULL, 0);
  CHECK(st == MEGANEURA_ERROR_INVALID_ARGUMENT, "chunk past the end: %s", meganeura_status_name(st));
  for (size_t c = 0; c < chunks; ++c) {
    meganeura_vulkan_semaphore wait = on(sem, t), done = on(sem, t + 1);
    MUST(meganeura_session_submit(s, 0, c, 1, &wait, 1, &done, 1));
    t += 1;
    if (c + 1 < chunks) {
      /* Between chunks the session refuses what needs the queue; the application's queue is its own. */
      float y[N * M];
      st = meganeura_session_get(s, "y", MEGANEURA_DTYPE_F32, y, sizeof y, NULL);
      CHECK(st == MEGANEURA_ERROR_BUSY, "get between chunks: %s", meganeura_status_name(st));
      st = meganeura_session_run(s, 0);
      CHECK(st == MEGANEURA_ERROR_BUSY && strstr(meganeura_last_error(), "partly submitted"), "run: %s: %s",
            meganeura_status_name(st), meganeura_last_error());
      app_work_submit(app, &work, sem, t, t + 1);
      t += 1;
    }
  }
  CHECK(wait_for(app, sem, t), "the last chunk never signalled");
  CHECK(work.mapped[0] == 0x5eed5eedu && work.mapped[63] == 0x5eed5eedu, "the application's work did not run");
  float y[N * M];
  get_y(s, y);
  compare(name, y);
  app_work_destroy(app, &work);
  printf("  ok: %zu chunks, the application's work queued between them\n", chunks);
}

/* ---- the application's images as the program's input and output ---- */

typedef struct {
  VkImage image;
  VkDeviceMemory memory;
} Image;

static Image make_image(const App* app, uint32_t width, uint32_t height) {
  VkImageCreateInfo ci = {VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO};
  ci.imageType = VK_IMAGE_TYPE_2D;
  ci.format = VK_FORMAT_R32_SFLOAT;
  ci.extent.width = width;
  ci.extent.height = height;
  ci.extent.depth = 1;
  ci.mipLevels = ci.arrayLayers = 1;
  ci.samples = VK_SAMPLE_COUNT_1_BIT;
  ci.tiling = VK_IMAGE_TILING_OPTIMAL;
  ci.usage = VK_IMAGE_USAGE_TRANSFER_SRC_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT | VK_IMAGE_USAGE_SAMPLED_BIT;
  ci.initialLayout = VK_IMAGE_LAYOUT_UNDEFINED;
  Image im = {VK_NULL_HANDLE, VK_NULL_HANDLE};
  CHECK(vkCreateImage(app->device, &ci, NULL, &im.image) == VK_SUCCESS, "image");
  VkMemoryRequirements req;
  vkGetImageMemoryRequirements(app->device, im.image, &req);
  im.memory = allocate_for(app, req, 0);
  CHECK(vkBindImageMemory(app->device, im.image, im.memory, 0) == VK_SUCCESS, "bind image");
  return im;
}

static void layout(VkCommandBuffer cmd, VkImage image, VkImageLayout from, VkImageLayout to, VkAccessFlags src,
                   VkAccessFlags dst, VkPipelineStageFlags src_stage, VkPipelineStageFlags dst_stage) {
  VkImageMemoryBarrier ib = {VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER};
  ib.srcAccessMask = src;
  ib.dstAccessMask = dst;
  ib.oldLayout = from;
  ib.newLayout = to;
  ib.srcQueueFamilyIndex = ib.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
  ib.image = image;
  ib.subresourceRange.aspectMask = VK_IMAGE_ASPECT_COLOR_BIT;
  ib.subresourceRange.levelCount = ib.subresourceRange.layerCount = 1;
  vkCmdPipelineBarrier(cmd, src_stage, dst_stage, 0, 0, NULL, 0, NULL, 1, &ib);
}

/* x from the application's sampled image (the session's own x is zeros), y into its image,
 * which the application then reads back itself. */
static void run_images_on(const App* app, const char* program) {
  AppWork staging; /* a host-visible buffer: x at 0, y read back at 2048 */
  app_work_create(app, &staging, 0);
  Image xi = make_image(app, K, N), yi = make_image(app, M, N);
  VkSemaphore sem = timeline_semaphore(app);
  float* host = (float*)staging.mapped;
  memcpy(host, x, sizeof x);
  VkCommandBuffer up = app_command(app, &staging), down = app_command(app, &staging);
  VkCommandBufferBeginInfo begin = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  VkBufferImageCopy region = {0};
  region.imageSubresource.aspectMask = VK_IMAGE_ASPECT_COLOR_BIT;
  region.imageSubresource.layerCount = 1;
  region.imageExtent.width = K;
  region.imageExtent.height = N;
  region.imageExtent.depth = 1;
  CHECK(vkBeginCommandBuffer(up, &begin) == VK_SUCCESS, "begin");
  layout(up, xi.image, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 0, VK_ACCESS_TRANSFER_WRITE_BIT,
         VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT);
  vkCmdCopyBufferToImage(up, staging.buffer, xi.image, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 1, &region);
  layout(up, xi.image, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL,
         VK_ACCESS_TRANSFER_WRITE_BIT, VK_ACCESS_SHADER_READ_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
         VK_PIPELINE_STAGE_FRAGMENT_SHADER_BIT);
  CHECK(vkEndCommandBuffer(up) == VK_SUCCESS, "end");
  region.imageExtent.width = M;
  region.bufferOffset = 2048;
  CHECK(vkBeginCommandBuffer(down, &begin) == VK_SUCCESS, "begin");
  vkCmdCopyImageToBuffer(down, yi.image, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, staging.buffer, 1, &region);
  VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(down, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
  CHECK(vkEndCommandBuffer(down) == VK_SUCCESS, "end");

  meganeura_vulkan_device d = {app->instance, app->physical, app->device,
                               app->queue,    app->family,   (void (*)(void))vkGetInstanceProcAddr};
  const char* name = NULL;
  meganeura_session* s = app_session(&d, 1, &name);
  const meganeura_vulkan_image x_image = {
      (uint64_t)(uintptr_t)xi.image,           VK_FORMAT_R32_SFLOAT, K, N, VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL,
      VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL};
  const meganeura_vulkan_image y_image = {
      (uint64_t)(uintptr_t)yi.image,       VK_FORMAT_R32_SFLOAT, M, N, VK_IMAGE_LAYOUT_UNDEFINED,
      VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL};
  MUST(meganeura_session_bind_image(s, "x", &x_image));
  MUST(meganeura_session_bind_image(s, "y", &y_image));
  MUST(meganeura_session_add_program_file(s, program, NULL));
  static const float zeros[N * K];
  MUST(meganeura_session_set(s, "x", MEGANEURA_DTYPE_F32, x_shape, 2, zeros, sizeof zeros));
  MUST(meganeura_session_set(s, "w", MEGANEURA_DTYPE_F32, w_shape, 2, w, sizeof w));
  MUST(meganeura_session_set(s, "b", MEGANEURA_DTYPE_F32, b_shape, 1, b, sizeof b));
  for (uint64_t frame = 0; frame < 2; ++frame) {
    const uint64_t t = frame * 3;
    memset(host + 2048 / sizeof(float), 0, N * M * sizeof(float));
    submit_on(app, up, sem, t, t + 1);
    meganeura_vulkan_semaphore wait = on(sem, t + 1), done = on(sem, t + 2);
    MUST(meganeura_session_submit(s, 0, 0, 0, &wait, 1, &done, 1));
    submit_on(app, down, sem, t + 2, t + 3);
    CHECK(wait_for(app, sem, t + 3), "frame %llu never finished", (unsigned long long)frame);
    compare(name, host + 2048 / sizeof(float));
  }
  /* The tensor holds what the run copied from the image, too. */
  float y[N * M];
  get_y(s, y);
  compare(name, y);
  meganeura_session_destroy(s);
  printf("  ok: x from the application's sampled image, y into its image, two frames\n");

  /* An image that does not fit its tensor is refused when the program is added. */
  s = app_session(&d, 1, &name);
  meganeura_vulkan_image wrong = x_image;
  wrong.width = K + 1;
  MUST(meganeura_session_bind_image(s, "x", &wrong));
  meganeura_status st = meganeura_session_add_program_file(s, program, NULL);
  CHECK(st == MEGANEURA_ERROR_INVALID_ARGUMENT && strstr(meganeura_last_error(), "image 'x' (17x8"), "%s: %s",
        meganeura_status_name(st), meganeura_last_error());
  wrong.format = 12345;
  st = meganeura_session_bind_image(s, "y", &wrong);
  CHECK(st == MEGANEURA_ERROR_INVALID_ARGUMENT && strstr(meganeura_last_error(), "format 12345"), "%s: %s",
        meganeura_status_name(st), meganeura_last_error());
  meganeura_session_destroy(s);

  vkDestroySemaphore(app->device, sem, NULL);
  vkDestroyImage(app->device, xi.image, NULL);
  vkFreeMemory(app->device, xi.memory, NULL);
  vkDestroyImage(app->device, yi.image, NULL);
  vkFreeMemory(app->device, yi.memory, NULL);
  app_work_destroy(app, &staging);
}

static void run_async_on(const App* app, const char* program) {
  if (!app->timeline) {
    printf("  skipped the runs that do not block: the device has no timelineSemaphore (Vulkan 1.2)\n");
    return;
  }
  meganeura_vulkan_device d = {app->instance, app->physical, app->device,
                               app->queue,    app->family,   (void (*)(void))vkGetInstanceProcAddr};
  const char* name = NULL;
  meganeura_session* s = app_session(&d, 4, &name);
  MUST(meganeura_session_add_program_file(s, program, NULL));
  set_all(s);
  VkSemaphore held = timeline_semaphore(app), paced = timeline_semaphore(app);
  run_held(app, s, name, held);
  run_interleaved(app, s, name, paced);
  run_interleaved(app, s, name, paced); /* the same recorded chunks, replayed */
  meganeura_session_destroy(s);
  vkDestroySemaphore(app->device, held, NULL);
  vkDestroySemaphore(app->device, paced, NULL);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PROGRAM.json\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  fill_inputs();
  reference();
  App app = {0};
  if (!create_instance(&app) || !create_device(&app)) {
    printf("skipped: no Vulkan 1.1 device with a compute queue\n");
    destroy_app(&app);
    return kSkip;
  }
  run_on(&app, argv[1]);
  run_async_on(&app, argv[1]);
  if (app.timeline) {
    run_images_on(&app, argv[1]);
  } else {
    printf("  skipped the images: the test paces them with a timeline semaphore (Vulkan 1.2)\n");
  }
  destroy_app(&app);
  failures += messages;
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("the application's Vulkan device ran the program\n");
  return 0;
}
