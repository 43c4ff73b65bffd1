/* gpu.c - probe for a usable CUDA runtime through dlopen. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "gpu.h"
#include "log.h"

static int gpu_ok;
static char gpu_why[256];
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;

static void gpu_probe(void)
{
	static const char *const libs[] = {
		"libcudart.so", "libcudart.so.13", "libcudart.so.12",
		"/usr/local/cuda/lib64/libcudart.so",
	};
	int (*get_count)(int *) = NULL;
	const char *(*err_str)(int) = NULL;
	void *h = NULL;
	int n = 0, r;

	for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]) && !h; i++)
		h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(gpu_why, sizeof(gpu_why), "no CUDA runtime (libcudart) found");
		goto out;
	}
	get_count = (int (*)(int *))dlsym(h, "cudaGetDeviceCount");
	err_str = (const char *(*)(int))dlsym(h, "cudaGetErrorString");
	if (!get_count) {
		snprintf(gpu_why, sizeof(gpu_why), "libcudart lacks cudaGetDeviceCount");
		goto out;
	}
	r = get_count(&n);
	if (r != 0 || n == 0) {
		/* cudaErrorInsufficientDriver (35), cudaErrorNoDevice (100), ... */
		snprintf(gpu_why, sizeof(gpu_why), "%s",
			 r && err_str ? err_str(r) : "no CUDA device");
		goto out;
	}
	gpu_ok = 1;
out:
	/* the handle stays loaded for the process lifetime on success */
	if (!gpu_ok && h)
		dlclose(h);
	if (gpu_ok)
		log_info("CUDA: %d device(s) available", n);
	else
		log_info("no GPU (%s): host memory only", gpu_why);
}

int gpu_available(void)
{
	pthread_once(&gpu_once, gpu_probe);
	return gpu_ok;
}

const char *gpu_reason(void)
{
	pthread_once(&gpu_once, gpu_probe);
	return gpu_why;
}
