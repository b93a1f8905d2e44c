// Preloaded into every test of the sanitized stage by scripts/test.sh. It opens each library
// named in MEGANEURA_HOLD_LIBRARIES (colon-separated paths) once, privately and for good:
// RTLD_LOCAL, so none of the library's exported entry points interposes on another library's
// (the Khronos validation layer exports vkGetInstanceProcAddr and
// vkEnumerateInstanceExtensionProperties, and preloading it outright makes the loader's own
// calls reach the layer), and RTLD_NODELETE, so the Vulkan loader's dlclose when an instance is
// destroyed leaves it mapped. LeakSanitizer then still sees the state the library keeps in its
// globals instead of reporting it as leaked from "<unknown module>".
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((constructor)) static void hold_libraries(void) {
  const char* list = getenv("MEGANEURA_HOLD_LIBRARIES");
  if (list == NULL) return;
  char path[4096];
  while (*list != '\0') {
    size_t n = strcspn(list, ":");
    if (n > 0 && n < sizeof path) {
      memcpy(path, list, n);
      path[n] = '\0';
      if (dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) == NULL)
        fprintf(stderr, "hold_libraries: cannot open %s: %s\n", path, dlerror());
    }
    list += n;
    if (*list == ':') ++list;
  }
}
