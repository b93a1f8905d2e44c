// The two OpenMP runtime calls the CPU backend makes, to set oneDNN's per-thread team size.
// Declared here rather than through <omp.h>: that header belongs to the compiler (gcc's is not
// on clang's path), while the runtime is the libgomp that Debian's oneDNN is built against,
// whichever compiler builds us. Both are part of OpenMP's C API.
#pragma once

extern "C" {
int omp_get_max_threads(void);
void omp_set_num_threads(int threads);
}
