/* gpu_double.c - a test double of the CUDA backend (gpu.h's table) for
 * integration tests on machines without a GPU: "device memory" is VMM-style
 * memfd chunks a test client sends with CUDA_REGION_ADD, mapped back to back
 * into a reserved range; copies are memcpy; events and gates do nothing
 * (there is no stream to order).  Enabled only by CKPTD_GPU_TEST_DOUBLE=1
 * in ckptd's environment, which it logs as a warning.  Never for
 * production: it proves the daemon's bookkeeping and data path
 * (CUDA_REGION_ADD, plan, stager, restore), not CUDA. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu.h"

static int d_device_of(const uint8_t uuid[GPU_UUID_BYTES])
{
	(void)uuid;
	return 0;
}

static int d_ipc_open(int dev, const uint8_t h[GPU_HANDLE_BYTES], void **dptr,
		      char *msg, size_t msglen)
{
	(void)dev; (void)h; (void)dptr;
	snprintf(msg, msglen, "the GPU test double only takes \"vmm\" regions");
	return -EOPNOTSUPP;
}

static void d_ipc_close(int dev, void *dptr) { (void)dev; (void)dptr; }

static int d_vmm_reserve(int dev, size_t size, void **va, char *msg, size_t msglen)
{
	void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	(void)dev;
	if (p == MAP_FAILED) {
		snprintf(msg, msglen, "test double: reserve %zu bytes: %s", size, strerror(errno));
		return -ENOMEM;
	}
	*va = p;
	return 0;
}

static int d_vmm_map(int dev, void *va, size_t off, size_t len, int fd,
		     char *msg, size_t msglen)
{
	void *p = mmap((char *)va + off, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		       fd, 0);
	int e = errno;
	(void)dev;
	close(fd);
	if (p == MAP_FAILED) {
		snprintf(msg, msglen, "test double: map chunk: %s", strerror(e));
		return -e;
	}
	return 0;
}

static void d_vmm_free(int dev, void *va, size_t mapped, size_t size)
{
	(void)dev; (void)mapped;
	munmap(va, size);
}

static int d_copy(int dev, void *dst, const void *src, size_t n, int kind, void *ev,
		  char *msg, size_t msglen)
{
	(void)dev; (void)kind; (void)ev; (void)msg; (void)msglen;
	memcpy(dst, src, n);
	return 0;
}

static int d_event_wait(void *ev, const volatile int *cancel, char *msg, size_t msglen)
{
	(void)ev; (void)cancel; (void)msg; (void)msglen;
	return 0;
}

static int d_host_register(void *p, size_t n) { (void)p; (void)n; return 0; }
static void d_host_unregister(void *p) { (void)p; }

static int d_event_open(int dev, const uint8_t h[GPU_HANDLE_BYTES], void **ev,
			char *msg, size_t msglen)
{
	(void)dev; (void)h; (void)msg; (void)msglen;
	return (*ev = malloc(1)) ? 0 : -ENOMEM;
}

static int d_event_new(int dev, void **ev, uint8_t h[GPU_HANDLE_BYTES],
		       char *msg, size_t msglen)
{
	(void)dev; (void)msg; (void)msglen;
	memset(h, 0xd0, GPU_HANDLE_BYTES);
	return (*ev = malloc(1)) ? 0 : -ENOMEM;
}

static void d_event_close(void *ev) { free(ev); }

static int d_gate_new(int dev, void **gate, char *msg, size_t msglen)
{
	uint32_t *w = calloc(1, sizeof(*w));
	(void)dev; (void)msg; (void)msglen;
	if (!w)
		return -ENOMEM;
	*gate = w;
	return 0;
}

static int d_gate_arm(void *gate, uint32_t *value, void *ev, char *msg, size_t msglen)
{
	(void)ev; (void)msg; (void)msglen;
	*value = ++*(uint32_t *)gate;
	return 0;
}

static void d_gate_open(void *gate, uint32_t value) { (void)gate; (void)value; }
static int d_event_ready(void *ev, char *msg, size_t msglen)
{
	(void)ev; (void)msg; (void)msglen;
	return 1;
}

static void d_gate_free(void *gate) { free(gate); }

const struct gpu_ops gpu_double_ops = {
	.name = "test-double",
	.device_of = d_device_of,
	.ipc_open = d_ipc_open,
	.ipc_close = d_ipc_close,
	.vmm_reserve = d_vmm_reserve,
	.vmm_map = d_vmm_map,
	.vmm_free = d_vmm_free,
	.copy = d_copy,
	.event_ready = d_event_ready,
	.event_wait = d_event_wait,
	.host_register = d_host_register,
	.host_unregister = d_host_unregister,
	.event_open = d_event_open,
	.event_new = d_event_new,
	.event_close = d_event_close,
	.gate_new = d_gate_new,
	.gate_arm = d_gate_arm,
	.gate_open = d_gate_open,
	.gate_free = d_gate_free,
};
