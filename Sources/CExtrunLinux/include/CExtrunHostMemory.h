#ifndef CEXTRUN_HOST_MEMORY_H
#define CEXTRUN_HOST_MEMORY_H

#include <malloc.h>

/// Blocks of `bytes` and more are mapped, and unmapped when freed: with a fixed
/// threshold glibc no longer raises it after a large free (its default), which
/// would keep what a plugin's large messages cost in the host's heap.
static inline void extrun_set_mmap_threshold(int bytes) { (void)mallopt(M_MMAP_THRESHOLD, bytes); }

#endif
