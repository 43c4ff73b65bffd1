/* gpu_client.c - is this pointer CUDA device memory?  Asks the CUDA runtime
 * through dlopen(), preferring a copy the trainer has already loaded. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "gpu_client.h"

/* Our own copy of the runtime's ABI (driver_types.h), so that building
 * needs no CUDA headers.  CUDA 12 has the first four fields; CUDA 13 adds
 * reserved[8] that must be zero.  Zero-filling the larger struct suits
 * both. */
enum { GPU__MEM_UNREGISTERED = 0, GPU__MEM_HOST = 1, GPU__MEM_DEVICE = 2,
       GPU__MEM_MANAGED = 3 };

struct gpu__ptr_attrs {
	int   type;             /* enum cudaMemoryType */
	int   device;
	void *device_pointer;
	void *host_pointer;
	long  reserved[8];
};

typedef int (*gpu__get_attrs_fn)(struct gpu__ptr_attrs *, const void *);
typedef int (*gpu__get_last_error_fn)(void);

static const char *const gpu__cudart_names[] = {
	"libcudart.so", "libcudart.so.13", "libcudart.so.12",
};

static pthread_once_t gpu__once = PTHREAD_ONCE_INIT;
static gpu__get_attrs_fn gpu__get_attrs;    /* NULL: no usable runtime */
static gpu__get_last_error_fn gpu__get_last_error;

static void *gpu__open_runtime(int extra_flags)
{
	size_t n = sizeof(gpu__cudart_names) / sizeof(gpu__cudart_names[0]);

	for (size_t i = 0; i < n; i++) {
		void *h = dlopen(gpu__cudart_names[i],
				 RTLD_NOW | RTLD_LOCAL | extra_flags);
		if (h)
			return h;
	}
	return NULL;
}

/* Runs once.  A runtime the process already uses is the one that knows its
 * allocations, so look for that first; load one only if none is there.
 * The handle is kept for the life of the process (never dlclose'd). */
static void gpu__load(void)
{
	void *h = gpu__open_runtime(RTLD_NOLOAD);

	if (!h)
		h = gpu__open_runtime(0);
	if (!h)
		return;
	gpu__get_attrs = (gpu__get_attrs_fn)dlsym(h, "cudaPointerGetAttributes");
	gpu__get_last_error =
		(gpu__get_last_error_fn)dlsym(h, "cudaGetLastError");
}

int gpu_client_describe(const void *ptr, size_t nbytes,
			struct gpu_client_mem *out)
{
	struct gpu__ptr_attrs a;

	if (!ptr || !out)
		return -ENOTSUP;
	pthread_once(&gpu__once, gpu__load);
	if (!gpu__get_attrs)
		return -ENOTSUP;

	memset(&a, 0, sizeof(a));
	/* Fails without a driver or device (cudaErrorInsufficientDriver,
	 * cudaErrorNoDevice): then nothing here can be device memory. */
	if (gpu__get_attrs(&a, ptr) != 0) {
		/* Clear the runtime's last-error slot so that the trainer's
		 * own next cudaGetLastError() does not report our probe. */
		if (gpu__get_last_error)
			gpu__get_last_error();
		return -ENOTSUP;
	}
	if (a.type != GPU__MEM_DEVICE)
		return -ENOTSUP;

	out->dptr = ptr;
	out->nbytes = nbytes;
	out->device = a.device;
	return 0;
}
