/* sim_dev.c - cudasim's configuration (environment), devices and their
 * numbering (CUDA_VISIBLE_DEVICES), primary contexts and the current-context
 * stack, and its log and clock.  A TEST DOUBLE of libcuda.so.1, written
 * from cuda.h's documentation; never a driver. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"

struct sim_config sim;
pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;

static struct CUctx_st *prim[SIM_MAX_GPUS];
static __thread struct CUctx_st *cur_stack[8];
static __thread int cur_depth;       /* cur_stack[cur_depth] is current */
uint64_t sim_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void sim_log(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n = snprintf(buf, sizeof(buf), "cudasim[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", buf);
}

uint64_t sim_nonce(void)
{
	static _Atomic uint64_t ctr;
	return ((uint64_t)getpid() << 32) ^ (sim_now_ms() << 16) ^ ++ctr;
}

static unsigned env_uint(const char *name, unsigned def, unsigned lo, unsigned hi)
{
	const char *s = getenv(name);
	char *end;
	unsigned long v;
	if (!s || !*s)
		return def;
	v = strtoul(s, &end, 10);
	if (*end || v < lo || v > hi)
		return def;
	return (unsigned)v;
}

static void uuid_of(int phys, uint8_t u[16])
{
	static const uint8_t pre[12] = { 0xc0, 0xda, 0x51, 0x77, 0, 0, 0x4c, 0x4b,
					 0x80, 0x00, 0x00, 0x00 };
	memcpy(u, pre, 12);
	u[12] = 0; u[13] = 0; u[14] = 0xa0; u[15] = (uint8_t)phys;
}

/* CUDA_VISIBLE_DEVICES as the driver reads it: indices or UUID prefixes
 * ("GPU-..."), comma-separated; the list ends at the first invalid entry. */
static void parse_visible(void)
{
	const char *s = getenv("CUDA_VISIBLE_DEVICES");
	char buf[512], *tok, *save = NULL;
	int used[SIM_MAX_GPUS] = { 0 };

	sim.nvisible = 0;
	if (!s) {
		for (int i = 0; i < sim.ngpus; i++)
			sim.phys_of[sim.nvisible++] = i;
		return;
	}
	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int phys = -1;
		while (*tok == ' ')
			tok++;
		if (!strncmp(tok, "GPU-", 4)) {
			for (int i = 0; i < sim.ngpus && phys < 0; i++) {
				uint8_t u[16];
				char us[64];
				uuid_of(i, u);
				snprintf(us, sizeof(us), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-"
					 "%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
					 u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
					 u[13], u[14], u[15]);
				if (strlen(tok) >= 5 && !strncmp(us, tok, strlen(tok)))
					phys = i;
			}
		} else {
			char *end;
			long v = strtol(tok, &end, 10);
			if (end != tok && !*end && v >= 0 && v < sim.ngpus)
				phys = (int)v;
		}
		if (phys < 0 || used[phys])
			break;
		used[phys] = 1;
		sim.phys_of[sim.nvisible++] = phys;
	}
}


API CUresult cuInit(unsigned int flags)
{
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	if (!sim.initialised) {
		sim.init_error = (int)env_uint("CKPT_CUDASIM_INIT_ERROR", 0, 0, 100000);
		sim.ngpus = (int)env_uint("CKPT_CUDASIM_GPUS", 2, 0, SIM_MAX_GPUS);
		sim.nq = (int)env_uint("CUDA_DEVICE_MAX_CONNECTIONS", 8, 1, SIM_MAX_QUEUES);
		sim.hang_ms = env_uint("CKPT_CUDASIM_HANG_MS", 10000, 1, 3600000);
		sim.op_us = env_uint("CKPT_CUDASIM_OP_US", 200, 0, 10000000);
		sim.bytes_per_us = env_uint("CKPT_CUDASIM_MBPS", 4000, 1, 1000000);
		sim.compute_mode = getenv("CKPT_CUDASIM_EXCLUSIVE") &&
				   *getenv("CKPT_CUDASIM_EXCLUSIVE") == '1' ?
				   CU_COMPUTEMODE_EXCLUSIVE_PROCESS : CU_COMPUTEMODE_DEFAULT;
		sim.sticky_copy = env_uint("CKPT_CUDASIM_STICKY_COPY", 0, 0, 1000000000);
		sim.sticky_dev = getenv("CKPT_CUDASIM_STICKY_DEV") ?
			(int)env_uint("CKPT_CUDASIM_STICKY_DEV", 0, 0, SIM_MAX_GPUS) : -1;
		sim.bad_phys = getenv("CKPT_CUDASIM_BAD_GPU") ?
			       (int)env_uint("CKPT_CUDASIM_BAD_GPU", 0, 0, SIM_MAX_GPUS) : -1;
		parse_visible();
		if (!sim.init_error)
			sim.initialised = 1;
	}
	pthread_mutex_unlock(&sim_lock);
	if (sim.init_error)
		return sim.init_error;
	return sim.nvisible ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

API CUresult cuDriverGetVersion(int *v)
{
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	*v = 13000;
	return CUDA_SUCCESS;
}

API CUresult cuGetErrorString(CUresult e, const char **s)
{
	static const struct { int e; const char *s; } t[] = {
		{ 0, "no error" }, { 1, "invalid argument" }, { 2, "out of memory" },
		{ 3, "initialization error" }, { 100, "no CUDA-capable device is detected" },
		{ 101, "invalid device ordinal" }, { 201, "invalid device context" },
		{ 205, "mapping of buffer object failed" }, { 400, "invalid resource handle" },
		{ 500, "named symbol not found" }, { 600, "device not ready" },
		{ 712, "part or all of the requested memory range is already mapped" },
		{ 713, "pointer does not correspond to a registered memory region" },
		{ 800, "operation not permitted" }, { 801, "operation not supported" },
		{ 803, "system has unsupported display driver / cuda driver combination" },
		{ 46, "CUDA-capable device(s) is/are busy or unavailable" },
		{ 214, "uncorrectable ECC error encountered" },
		{ 700, "an illegal memory access was encountered" },
		{ 999, "unknown error" },
	};
	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (t[i].e == e) {
			*s = t[i].s;
			return CUDA_SUCCESS;
		}
	*s = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuDeviceGetCount(int *n)
{
	NEED_INIT();
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	*n = sim.nvisible;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	NEED_INIT();
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal < 0 || ordinal >= sim.nvisible)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d)
{
	NEED_INIT();
	if (!u)
		return CUDA_ERROR_INVALID_VALUE;
	if (d < 0 || d >= sim.nvisible)
		return CUDA_ERROR_INVALID_DEVICE;
	if (sim.phys_of[d] == sim.bad_phys)
		return 214;          /* CUDA_ERROR_ECC_UNCORRECTABLE: a broken GPU */
	uuid_of(sim.phys_of[d], (uint8_t *)u->bytes);
	return CUDA_SUCCESS;
}

/* CKPT_CUDASIM_NO_ATTR=99,125,...: these capability attributes read 0 (a
 * GPU or platform without host registration, IPC events, POSIX-fd VMM
 * handles).  Only the answer changes, not what the calls do. */
static int attr_off(int attr)
{
	const char *s = getenv("CKPT_CUDASIM_NO_ATTR");
	char *end;

	while (s && *s) {
		long a = strtol(s, &end, 10);
		if (end == s)
			break;
		if (a == attr)
			return 1;
		s = *end == ',' ? end + 1 : end;
	}
	return 0;
}

API CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
	NEED_INIT();
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	if (d < 0 || d >= sim.nvisible)
		return CUDA_ERROR_INVALID_DEVICE;
	switch (attr) {
	case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *v = sim.compute_mode; break;
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: *v = !attr_off(attr); break;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* EXCLUSIVE_PROCESS: one process at a time holds a context on a device,
 * machine-wide (a lock file per physical GPU under CKPT_CUDASIM_LOCKDIR). */
static int exclusive_take(int phys)
{
	const char *dir = getenv("CKPT_CUDASIM_LOCKDIR");
	char path[512];
	int fd;

	if (sim.compute_mode != CU_COMPUTEMODE_EXCLUSIVE_PROCESS || !dir)
		return 0;
	snprintf(path, sizeof(path), "%s/gpu%d.lock", dir, phys);
	if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
		return -1;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		return -1;
	}
	return 0;        /* held (fd kept open) for the life of the process */
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	CUresult r = CUDA_SUCCESS;

	NEED_INIT();
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	if (d < 0 || d >= sim.nvisible)
		return CUDA_ERROR_INVALID_DEVICE;
	if (sim.phys_of[d] == sim.bad_phys)
		return 214;
	pthread_mutex_lock(&sim_lock);
	if (!prim[d]) {
		struct CUctx_st *x = calloc(1, sizeof(*x));
		if (!x) {
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else if (exclusive_take(sim.phys_of[d]) < 0) {
			free(x);
			r = 46;      /* CUDA_ERROR_DEVICE_UNAVAILABLE */
		} else {
			x->ordinal = d;
			x->phys = sim.phys_of[d];
			x->nq = sim.nq;
			if (sim_ctx_start(x) < 0) {
				free(x);
				r = CUDA_ERROR_OUT_OF_MEMORY;
			} else {
				prim[d] = x;
			}
		}
	}
	if (!r) {
		prim[d]->refs++;
		*c = prim[d];
	}
	pthread_mutex_unlock(&sim_lock);
	return r;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	NEED_INIT();
	if (d < 0 || d >= sim.nvisible)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&sim_lock);
	if (prim[d] && prim[d]->refs > 0)
		prim[d]->refs--;      /* the simulator keeps its queues */
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

/* The driver's way out of a sticky error: the context's state is
 * destroyed (here: the error cleared, its streams made stale). */
API CUresult cuDevicePrimaryCtxReset_v2(CUdevice d)
{
	NEED_INIT();
	if (d < 0 || d >= sim.nvisible)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&sim_lock);
	if (prim[d]) {
		struct CUctx_st *c = prim[d];
		pthread_mutex_lock(&c->lock);
		c->legacy->epoch = ++c->epoch;
		atomic_store(&c->sticky, 0);
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

struct CUctx_st *sim_current(void)
{
	return cur_stack[cur_depth];
}

API CUresult cuCtxSetCurrent(CUcontext c)
{
	NEED_INIT();
	cur_stack[cur_depth] = c;
	return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(CUcontext *c)
{
	NEED_INIT();
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	*c = sim_current();
	return CUDA_SUCCESS;
}

API CUresult cuCtxPushCurrent_v2(CUcontext c)
{
	NEED_INIT();
	if (!c || cur_depth == 7)
		return CUDA_ERROR_INVALID_VALUE;
	cur_stack[++cur_depth] = c;
	return CUDA_SUCCESS;
}

API CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
	NEED_INIT();
	if (cur_depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (c)
		*c = cur_stack[cur_depth];
	cur_stack[cur_depth--] = NULL;
	return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice(CUdevice *d)
{
	struct CUctx_st *c;
	NEED_CTX(c);
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	*d = c->ordinal;
	return CUDA_SUCCESS;
}
