/* gpu_client.h - libckpt's seam for CUDA device memory: tells whether a
 * pointer the trainer registers is CUDA device memory.  The CUDA runtime is
 * found with dlopen() at run time (never linked), so libckpt works the same
 * on machines without CUDA.  Exporting the memory to ckptd (IPC handles,
 * events) is a later step and will live here too. */
#ifndef CKPT_GPU_CLIENT_H
#define CKPT_GPU_CLIENT_H

#include <stddef.h>

struct gpu_client_mem {
	const void *dptr;       /* device pointer, as given */
	size_t      nbytes;
	int         device;     /* CUDA ordinal here (not for the wire) */
};

/* Describe [ptr, ptr + nbytes).  Returns 0 and fills *out when ptr is CUDA
 * device memory; -ENOTSUP when no CUDA runtime can be loaded, CUDA has no
 * usable device or driver here, or ptr is not device memory (host, managed,
 * unregistered).  *out is untouched on failure.  Thread-safe; the runtime
 * is looked up once per process.
 *
 * Note: on Linux ENOTSUP and EOPNOTSUPP are the same number, so "this is
 * device memory but we cannot use it" cannot be a different return code;
 * the caller decides that after a 0 return. */
int gpu_client_describe(const void *ptr, size_t nbytes,
			struct gpu_client_mem *out);

#endif
