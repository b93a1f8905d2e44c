/* The C API on the application's own Vulkan device: the test creates the instance (with the
 * validation layer and a messenger of its own when the layer is installed), picks a device,
 * creates the logical device and a compute queue as docs/embedding.md says a host must, hands
 * them to meganeura_session_create, runs y = relu(x W + b) and compares y with the f64
 * reference. Afterwards the device is still the application's and usable; any validation
 * message fails the test. Exits 77 (skipped) when there is no Vulkan device.
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
} App;

/* The application's instance: Vulkan 1.1, validation when installed. 0: no Vulkan here. */
static int create_instance(App* app) {
  VkApplicationInfo ai = {VK_STRUCTURE_TYPE_APPLICATION_INFO};
  ai.pApplicationName = "capi_vulkan_device_test";
  ai.apiVersion = VK_API_VERSION_1_1;
  VkDebugUtilsMessengerCreateInfoEXT dm = {VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  dm.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  dm.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
  dm.pfnUserCallback = on_message;
  const char* layer = "VK_LAYER_KHRONOS_validation";
  const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
  const int validation = has_layer(layer);
  VkInstanceCreateInfo ci = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &ai;
  if (validation) {
    ci.pNext = &dm;
    ci.enabledLayerCount = 1;
    ci.ppEnabledLayerNames = &layer;
    ci.enabledExtensionCount = 1;
    ci.ppEnabledExtensionNames = &ext;
  }
  if (vkCreateInstance(&ci, NULL, &app->instance) != VK_SUCCESS) return 0;
  printf("  validation layer: %s\n", validation ? "on" : "not installed");
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
 * says: one compute queue, VK_KHR_portability_subset where the device has it, no features. */
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
  if (vkCreateDevice(app->physical, &dci, NULL, &app->device) != VK_SUCCESS) return 0;
  vkGetDeviceQueue(app->device, app->family, 0, &app->queue);
  return 1;
}

static void destroy_app(App* app) {
  if (app->device) vkDestroyDevice(app->device, NULL);
  if (app->messenger) app->destroy_messenger(app->instance, app->messenger, NULL);
  if (app->instance) vkDestroyInstance(app->instance, NULL);
}

static void run_on(const App* app, const char* program) {
  meganeura_vulkan_device d = {0};
  d.instance = app->instance;
  d.physical_device = app->physical;
  d.device = app->device;
  d.queue = app->queue;
  d.queue_family = app->family;
  d.get_instance_proc_addr = (void (*)(void))vkGetInstanceProcAddr;
  meganeura_session_options o;
  MUST(meganeura_session_options_init(&o, MEGANEURA_C_API_VERSION_MAJOR));
  o.vulkan_device = &d;
  o.vulkan_cache_dir = "-";
  meganeura_session* s = NULL;
  MUST(meganeura_session_create(&o, &s));
  const char* name = NULL;
  MUST(meganeura_session_device_name(s, &name));
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
  const meganeura_status st = meganeura_session_create(&o, &s);
  CHECK(st == MEGANEURA_ERROR_INVALID_ARGUMENT && s == NULL && strstr(meganeura_last_error(), "queue"),
        "a device without a queue: %s: %s", meganeura_status_name(st), meganeura_last_error());
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
  destroy_app(&app);
  failures += messages;
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("the application's Vulkan device ran the program\n");
  return 0;
}
