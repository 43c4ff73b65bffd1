/* gpu.c - the real CUDA backend of gpu.h, on the driver API only
 * (libcuda.so.1 through dlopen): the probe, and per device, created on
 * first use, a primary context with its streams (copies, gate writes, and
 * gate streams: one per remaining hardware queue) and a pool of gate words
 * in device memory. */
#define CUDA_DRIVER_LOADER
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "gpu.h"
#include "log.h"

#define GATE_WORDS 4096      /* gates armed at once per device */
#define MAX_LANES  29        /* gate streams: 32 connections less 3 */

static struct cuda_driver cu;

/* A device's context is made on first use, never at start: a context costs
 * GPU memory, and in EXCLUSIVE_PROCESS mode it would lock trainers out. */
struct gpu_dev {
	int         usable;              /* UUID read, not PROHIBITED */
	uint8_t     uuid[GPU_UUID_BYTES];
	pthread_mutex_t lock;
	int         up;                  /* context and streams exist */
	CUcontext   ctx;
	CUstream    copy;                /* every copy of ckptd */
	CUstream    lane[MAX_LANES];     /* gate streams: a session's gates wait on
	                                    one, in arm order */
	CUstream    rel;                 /* the writes that open gates */
	CUdeviceptr words;               /* GATE_WORDS x uint32, device memory */
	uint32_t    last[GATE_WORDS];    /* value last armed per word */
	uint8_t     used[GATE_WORDS];
};

static int gpu_ok, gpu_ndev, nlanes = 1;
static char gpu_why[256];
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static struct gpu_dev devs[GPU_MAX_DEVICES];
static const struct gpu_ops *ops_now;
extern const struct gpu_ops gpu_cuda_ops;

/* pinning the staging pool: when the first context is made */
static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;
static void  *pin_p;
static size_t pin_n;
static int    pin_done, any_ctx;

/* Gates waiting for their word, and other pinned buffers (restore
 * scratch): pinning synchronises with every stream, so it happens only
 * while no gate waits, with arm_lock held so that none is armed meanwhile
 * (lock order: arm_lock, then a device's lock, then pin_lock). */
#define MAX_PINNED 64
static pthread_mutex_t arm_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  arm_cond = PTHREAD_COND_INITIALIZER;
static int   n_waiting;
static void *pinned[MAX_PINNED];

static const char *cu_err(CUresult e)
{
	const char *s = NULL;
	if (cu.cuGetErrorString)
		cu.cuGetErrorString(e, &s);
	return s ? s : "unknown CUDA driver error";
}

/* 0, or -EIO with the driver's own error, and its number, in msg. */
static int cu_check(CUresult e, const char *what, char *msg, size_t msglen)
{
	if (e == CUDA_SUCCESS)
		return 0;
	snprintf(msg, msglen, "%s: %s (CUDA error %d)", what, cu_err(e), e);
	return -EIO;
}

static void gpu_probe(void)
{
	void *h;
	const char *miss;
	CUresult e;
	int n = 0, good = 0;

	/* ckptd's three streams per device must not share hardware queues
	 * (a gate's wait would hold up the copies that open it) */
	const char *mc = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	if (!mc)
		setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);   /* the most there is */
	else if (atoi(mc) < 4) {
		log_warnx("CUDA_DEVICE_MAX_CONNECTIONS=%s is too few for ckptd's streams; "
			  "using 4", mc);
		setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4", 1);
	}
	/* the legacy stream, copies and gate writes take 3 queues; each
	 * gate stream (lane) gets one of the rest, so sessions on different
	 * lanes never wait for each other */
	nlanes = atoi(getenv("CUDA_DEVICE_MAX_CONNECTIONS")) - 3;
	if (nlanes > MAX_LANES)
		nlanes = MAX_LANES;
	if (!(h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL))) {
		snprintf(gpu_why, sizeof(gpu_why), "the NVIDIA driver (libcuda.so.1) is not "
			 "installed");
		log_info("no GPU (%s): host memory only", gpu_why);
		return;
	}
	if ((miss = cuda_driver_load(h, &cu))) {
		snprintf(gpu_why, sizeof(gpu_why), "the NVIDIA driver is too old: libcuda.so.1 "
			 "lacks %s (CUDA 12 or newer needed)", miss);
		goto fail;
	}
	if ((e = cu.cuInit(0)) || (e = cu.cuDeviceGetCount(&n))) {
		snprintf(gpu_why, sizeof(gpu_why), "cuInit: %s (CUDA error %d)", cu_err(e), e);
		goto fail;
	}
	if (n > GPU_MAX_DEVICES)
		n = GPU_MAX_DEVICES;
	for (int d = 0; d < n; d++) {
		CUdevice dv;
		CUuuid u;
		int mode = CU_COMPUTEMODE_DEFAULT;
		pthread_mutex_init(&devs[d].lock, NULL);
		if ((e = cu.cuDeviceGet(&dv, d)) || (e = cu.cuDeviceGetUuid_v2(&u, dv))) {
			log_warnx("CUDA device %d: %s (CUDA error %d): not used", d, cu_err(e), e);
			continue;
		}
		cu.cuDeviceGetAttribute(&mode, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, dv);
		memcpy(devs[d].uuid, u.bytes, GPU_UUID_BYTES);
		if (mode == CU_COMPUTEMODE_PROHIBITED) {
			log_warnx("CUDA device %d is in PROHIBITED compute mode: not used", d);
			continue;
		}
		if (mode == CU_COMPUTEMODE_EXCLUSIVE_PROCESS)
			log_warnx("CUDA device %d is in EXCLUSIVE_PROCESS mode: ckptd and the "
				  "trainer both need a context on it (run MPS, or use host "
				  "memory for this GPU)", d);
		devs[d].usable = 1;
		good++;
	}
	if (!good) {
		snprintf(gpu_why, sizeof(gpu_why), "%s", n ? "no usable CUDA device"
			 : "no CUDA device");
		goto fail;
	}
	gpu_ndev = n;
	gpu_ok = 1;
	ops_now = &gpu_cuda_ops;
	for (int d = 0; d < n; d++)
		if (devs[d].usable) {
			char us[41];
			gpu_uuid_str(devs[d].uuid, us);
			log_info("CUDA: device %d %s", d, us);
		}
	log_info("CUDA: %d of %d device(s) usable (driver API, contexts made on first use)",
		 good, n);
	return;
fail:
	memset(&cu, 0, sizeof(cu));
	dlclose(h);
	log_info("no GPU (%s): host memory only", gpu_why);
}

int gpu_available(void)
{
	pthread_once(&gpu_once, gpu_probe);
	return ops_now != NULL;
}

const char *gpu_reason(void)
{
	pthread_once(&gpu_once, gpu_probe);
	return ops_now ? "" : gpu_why;
}

const struct gpu_ops *gpu_ops(void)
{
	pthread_once(&gpu_once, gpu_probe);
	return ops_now;
}

void gpu_set_ops(const struct gpu_ops *ops)
{
	pthread_once(&gpu_once, gpu_probe);
	ops_now = ops;
}

/* Created right after the copy and release streams, in order: hardware
 * queues are handed out round robin, so each lane gets its own. */
static CUresult lanes_new(struct gpu_dev *g)
{
	CUresult e = 0;
	for (int i = 0; i < nlanes && !e; i++)
		e = cu.cuStreamCreate(&g->lane[i], CU_STREAM_NON_BLOCKING);
	return e;
}

/* Make device d's context current in this thread, creating it (and its
 * streams and gate words) on first use.  The staging pool is pinned right
 * after the first context is made: before any gate can be armed, since
 * pinning synchronises with everything in flight. */
static int dev_enter(int d, char *msg, size_t msglen)
{
	struct gpu_dev *g = &devs[d];
	CUresult e = 0;
	const char *what = "";

	if (d < 0 || d >= gpu_ndev || !g->usable) {
		snprintf(msg, msglen, "CUDA device %d is not usable by ckptd", d);
		return -ENODEV;
	}
	pthread_mutex_lock(&g->lock);
	if (!g->up) {
		CUdevice dv;
		if ((e = cu.cuDeviceGet(&dv, d)) ||
		    (what = "cuDevicePrimaryCtxRetain", e = cu.cuDevicePrimaryCtxRetain(&g->ctx, dv)) ||
		    (what = "cuCtxSetCurrent", e = cu.cuCtxSetCurrent(g->ctx)) ||
		    (what = "cuStreamCreate", e = cu.cuStreamCreate(&g->copy, CU_STREAM_NON_BLOCKING)) ||
		    (e = cu.cuStreamCreate(&g->rel, CU_STREAM_NON_BLOCKING)) ||
		    (e = lanes_new(g)) ||
		    (what = "cuMemAlloc (gate words)",
		     e = cu.cuMemAlloc_v2(&g->words, GATE_WORDS * sizeof(uint32_t))) ||
		    (what = "clearing the gate words",
		     e = cu.cuMemsetD32Async(g->words, 0, GATE_WORDS, g->rel)) ||
		    (e = cu.cuStreamSynchronize(g->rel))) {
			pthread_mutex_unlock(&g->lock);
			snprintf(msg, msglen, "cannot set up CUDA device %d: %s: %s (CUDA error %d)",
				 d, what, cu_err(e), e);
			return -EIO;
		}
		g->up = 1;
		pthread_mutex_lock(&pin_lock);
		if (!any_ctx && pin_p) {
			if ((e = cu.cuMemHostRegister_v2(pin_p, pin_n, CU_MEMHOSTREGISTER_PORTABLE)))
				log_warnx("cannot pin the staging pool (%zu bytes): %s (CUDA error "
					  "%d); copies will be slower", pin_n, cu_err(e), e);
			else
				pin_done = 1;
		}
		any_ctx = 1;
		pthread_mutex_unlock(&pin_lock);
	}
	pthread_mutex_unlock(&g->lock);
	return cu_check(cu.cuCtxSetCurrent(g->ctx), "cuCtxSetCurrent", msg, msglen);
}

/* --- the table ------------------------------------------------------------ */

static int c_device_of(const uint8_t uuid[GPU_UUID_BYTES])
{
	for (int d = 0; d < gpu_ndev; d++)
		if (devs[d].usable && !memcmp(devs[d].uuid, uuid, GPU_UUID_BYTES))
			return d;
	return -ENODEV;
}

static int c_ipc_open(int dev, const uint8_t h[GPU_HANDLE_BYTES], void **dptr,
		      char *msg, size_t msglen)
{
	CUipcMemHandle mh;
	CUdeviceptr p;
	int r;

	if ((r = dev_enter(dev, msg, msglen)) < 0)
		return r;
	memcpy(mh.reserved, h, sizeof(mh.reserved));
	if ((r = cu_check(cu.cuIpcOpenMemHandle_v2(&p, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
			  "cuIpcOpenMemHandle (trainer and ckptd must share a PID namespace "
			  "for cudaMalloc memory; in containers use VMM memory)",
			  msg, msglen)) < 0)
		return r;
	*dptr = (void *)(uintptr_t)p;
	return 0;
}

static void c_ipc_close(int dev, void *dptr)
{
	char m[8];
	if (dev_enter(dev, m, sizeof(m)) == 0)
		cu.cuIpcCloseMemHandle((CUdeviceptr)(uintptr_t)dptr);
}

static int c_vmm_reserve(int dev, size_t size, void **va, char *msg, size_t msglen)
{
	CUdeviceptr p = 0;
	int r;

	if ((r = dev_enter(dev, msg, msglen)) < 0)
		return r;
	if ((r = cu_check(cu.cuMemAddressReserve(&p, size, 0, 0, 0), "cuMemAddressReserve",
			  msg, msglen)) < 0)
		return r;
	*va = (void *)(uintptr_t)p;
	return 0;
}

static int c_vmm_map(int dev, void *va, size_t off, size_t len, int fd,
		     char *msg, size_t msglen)
{
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, dev },
				CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)va + off;
	CUresult e;
	int r;

	if ((r = dev_enter(dev, msg, msglen)) < 0) {
		close(fd);
		return r;
	}
	e = cu.cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
					      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	close(fd);
	if (e)
		return cu_check(e, "cuMemImportFromShareableHandle", msg, msglen);
	e = cu.cuMemMap(p, len, 0, h, 0);
	cu.cuMemRelease(h);     /* the mapping keeps the memory */
	if (e)
		return cu_check(e, "cuMemMap", msg, msglen);
	e = cu.cuMemSetAccess(p, len, &acc, 1);
	if (e) {
		cu.cuMemUnmap(p, len);
		return cu_check(e, "cuMemSetAccess", msg, msglen);
	}
	return 0;
}

static void c_vmm_free(int dev, void *va, size_t mapped, size_t size)
{
	char m[8];
	if (dev_enter(dev, m, sizeof(m)) < 0)
		return;
	if (mapped)
		cu.cuMemUnmap((CUdeviceptr)(uintptr_t)va, mapped);
	cu.cuMemAddressFree((CUdeviceptr)(uintptr_t)va, size);
}

/* One completion event per (thread, device): threads share the stream. */
static __thread CUevent t_done[GPU_MAX_DEVICES];

static int c_copy(int dev, void *dst, const void *src, size_t n, int kind,
		  void *ev, char *msg, size_t msglen)
{
	struct gpu_dev *g = &devs[dev];
	int r;

	(void)ev;
	if ((r = dev_enter(dev, msg, msglen)) < 0)
		return r;
	if (!t_done[dev] &&
	    (r = cu_check(cu.cuEventCreate(&t_done[dev], CU_EVENT_DISABLE_TIMING),
			  "cuEventCreate", msg, msglen)) < 0)
		return r;
	if (kind == 1)
		r = cu_check(cu.cuMemcpyHtoDAsync_v2((CUdeviceptr)(uintptr_t)dst, src, n, g->copy),
			     "cuMemcpyHtoDAsync", msg, msglen);
	else
		r = cu_check(cu.cuMemcpyDtoHAsync_v2(dst, (CUdeviceptr)(uintptr_t)src, n, g->copy),
			     "cuMemcpyDtoHAsync", msg, msglen);
	if (r < 0 ||
	    (r = cu_check(cu.cuEventRecord(t_done[dev], g->copy), "cuEventRecord",
			  msg, msglen)) < 0)
		return r;
	return cu_check(cu.cuEventSynchronize(t_done[dev]), "copy", msg, msglen);
}

static int c_event_ready(void *ev, char *msg, size_t msglen)
{
	CUresult e = cu.cuEventQuery(ev);
	if (e == CUDA_ERROR_NOT_READY)
		return 0;
	if (e)
		return cu_check(e, "waiting for the trainer's ready event", msg, msglen);
	return 1;
}

static int c_event_wait(void *ev, const atomic_int *cancel, char *msg, size_t msglen)
{
	struct timespec ts = { 0, 20000 };
	int r;

	while ((r = c_event_ready(ev, msg, msglen)) == 0) {
		if (cancel && *cancel) {
			snprintf(msg, msglen, "the save was cancelled before the trainer's "
				 "stream reached it");
			return -ECANCELED;
		}
		nanosleep(&ts, NULL);
		if (ts.tv_nsec < 1000000)
			ts.tv_nsec *= 2;
	}
	return r < 0 ? r : 0;
}

/* With arm_lock held and no gate waiting: let every gate stream drain (the
 * writes that opened them are queued), so that an implicitly synchronising
 * call finds nothing blocked.  Returns a device to make the call on. */
static int quiesce(void)
{
	char m[160];
	int any = -1;

	for (int d = 0; d < gpu_ndev; d++) {
		if (!devs[d].up || dev_enter(d, m, sizeof(m)) < 0)
			continue;
		cu.cuStreamSynchronize(devs[d].rel);
		for (int i = 0; i < nlanes; i++)
			cu.cuStreamSynchronize(devs[d].lane[i]);
		any = d;
	}
	if (any >= 0)
		dev_enter(any, m, sizeof(m));
	return any;
}

/* Pinning synchronises with all work in flight (cuda.h: cuMemHostRegister).
 * The staging pool is pinned when the first device context is made,
 * before any gate can be armed.  Later buffers (restore scratch) are
 * pinned only while no gate waits (else -EBUSY: they stay pageable). */
static int c_host_register(void *p, size_t n)
{
	int r = -EBUSY, slot = -1;
	CUresult e;

	pthread_mutex_lock(&pin_lock);
	if (!any_ctx) {
		if (!pin_p) {
			pin_p = p;
			pin_n = n;
			r = 0;
		}
		pthread_mutex_unlock(&pin_lock);
		return r;
	}
	pthread_mutex_unlock(&pin_lock);
	pthread_mutex_lock(&arm_lock);
	for (int i = 0; i < MAX_PINNED && slot < 0; i++)
		if (!pinned[i])
			slot = i;
	if (!n_waiting && slot >= 0 && quiesce() >= 0) {
		if ((e = cu.cuMemHostRegister_v2(p, n, CU_MEMHOSTREGISTER_PORTABLE)) == 0) {
			pinned[slot] = p;
			r = 0;
		} else {
			r = -EIO;
		}
	}
	pthread_mutex_unlock(&arm_lock);
	return r;
}

/* Unpinning synchronises too: it waits until no gate waits (gates are
 * opened by stagers and the loop, never by the caller). */
static void c_host_unregister(void *p)
{
	int slot = -1;

	pthread_mutex_lock(&pin_lock);
	if (p == pin_p) {
		if (pin_done)
			cu.cuMemHostUnregister(p);
		pin_p = NULL;
		pin_done = 0;
		pthread_mutex_unlock(&pin_lock);
		return;
	}
	pthread_mutex_unlock(&pin_lock);
	pthread_mutex_lock(&arm_lock);
	for (int i = 0; i < MAX_PINNED && slot < 0; i++)
		if (pinned[i] == p)
			slot = i;
	if (slot >= 0) {
		while (n_waiting)
			pthread_cond_wait(&arm_cond, &arm_lock);
		if (quiesce() >= 0)
			cu.cuMemHostUnregister(p);
		pinned[slot] = NULL;
	}
	pthread_mutex_unlock(&arm_lock);
}

static int c_event_open(int dev, const uint8_t h[GPU_HANDLE_BYTES], void **ev,
			char *msg, size_t msglen)
{
	CUipcEventHandle eh;
	CUevent e;
	int r;

	if ((r = dev_enter(dev, msg, msglen)) < 0)
		return r;
	memcpy(eh.reserved, h, sizeof(eh.reserved));
	if ((r = cu_check(cu.cuIpcOpenEventHandle(&e, eh), "cuIpcOpenEventHandle",
			  msg, msglen)) < 0)
		return r;
	*ev = e;
	return 0;
}

static int c_event_new(int dev, void **ev, uint8_t h[GPU_HANDLE_BYTES],
		       char *msg, size_t msglen)
{
	CUipcEventHandle eh;
	CUevent e;
	CUresult x;
	int r;

	if ((r = dev_enter(dev, msg, msglen)) < 0)
		return r;
	if ((r = cu_check(cu.cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING),
			  "cuEventCreate", msg, msglen)) < 0)
		return r;
	if ((x = cu.cuIpcGetEventHandle(&eh, e))) {
		cu.cuEventDestroy_v2(e);
		return cu_check(x, "cuIpcGetEventHandle", msg, msglen);
	}
	memcpy(h, eh.reserved, GPU_HANDLE_BYTES);
	*ev = e;
	return 0;
}

static void c_event_close(void *ev)
{
	if (ev)
		cu.cuEventDestroy_v2(ev);
}

/* A gate: one word of the device's pool.  Its waits queue on the device's
 * gate stream; opening writes the armed value on the release stream. */
struct c_gate {
	int      dev;
	unsigned idx;
	CUstream lane;
	uint32_t armed;          /* under arm_lock */
	int      waiting;        /* armed, not yet opened (arm_lock) */
};

static int c_gate_new(int dev, unsigned lane, void **gate, char *msg, size_t msglen)
{
	struct gpu_dev *g = &devs[dev];
	struct c_gate *x;
	int r;

	if ((r = dev_enter(dev, msg, msglen)) < 0)
		return r;
	if (!(x = calloc(1, sizeof(*x))))
		return -ENOMEM;
	x->dev = dev;
	x->lane = g->lane[lane % (unsigned)nlanes];
	pthread_mutex_lock(&g->lock);
	for (x->idx = 0; x->idx < GATE_WORDS && g->used[x->idx]; x->idx++)
		;
	if (x->idx < GATE_WORDS)
		g->used[x->idx] = 1;
	pthread_mutex_unlock(&g->lock);
	if (x->idx == GATE_WORDS) {
		free(x);
		snprintf(msg, msglen, "all %d gates of CUDA device %d are in use", GATE_WORDS, dev);
		return -EBUSY;
	}
	*gate = x;
	return 0;
}

static CUdeviceptr word_of(const struct c_gate *x)
{
	return devs[x->dev].words + x->idx * sizeof(uint32_t);
}

/* Arm: the gate stream waits until the word reaches the next value
 * (cyclic GEQ), then records ev.  *value gets that value. */
static int c_gate_arm(void *gate, uint32_t *value, void *ev, char *msg, size_t msglen)
{
	struct c_gate *x = gate;
	struct gpu_dev *g = &devs[x->dev];
	uint32_t v;
	CUresult e;
	int r;

	if ((r = dev_enter(x->dev, msg, msglen)) < 0)
		return r;
	pthread_mutex_lock(&arm_lock);
	pthread_mutex_lock(&g->lock);
	v = g->last[x->idx] + 1;
	pthread_mutex_unlock(&g->lock);
	if ((e = cu.cuStreamWaitValue32_v2(x->lane, word_of(x), v, CU_STREAM_WAIT_VALUE_GEQ)) ||
	    (e = cu.cuEventRecord(ev, x->lane))) {
		pthread_mutex_unlock(&arm_lock);
		return cu_check(e, "arming the gate (cuStreamWaitValue32, cuEventRecord)",
				msg, msglen);
	}
	pthread_mutex_lock(&g->lock);
	g->last[x->idx] = v;
	pthread_mutex_unlock(&g->lock);
	x->armed = v;
	if (!x->waiting)
		n_waiting++;
	x->waiting = 1;
	pthread_mutex_unlock(&arm_lock);
	*value = v;
	return 0;
}

/* Open the gate armed with value: write exactly that value (GEQ is cyclic:
 * a larger "release everything" number may compare as smaller). */
static void c_gate_open(void *gate, uint32_t value)
{
	struct c_gate *x = gate;
	char m[160];
	CUresult e;

	if (dev_enter(x->dev, m, sizeof(m)) < 0)
		return;
	if ((e = cu.cuStreamWriteValue32_v2(devs[x->dev].rel, word_of(x), value, 0)))
		log_warnx("CUDA device %d: cannot open a gate: %s (CUDA error %d)", x->dev,
			  cu_err(e), e);
	pthread_mutex_lock(&arm_lock);
	if (x->waiting && value == x->armed) {
		x->waiting = 0;
		if (--n_waiting == 0)
			pthread_cond_broadcast(&arm_cond);
	}
	pthread_mutex_unlock(&arm_lock);
}

/* Freed once opened at its last armed value: the word goes back to the
 * pool; a later gate on it arms at the next value. */
static void c_gate_free(void *gate)
{
	struct c_gate *x = gate;
	struct gpu_dev *g;
	uint32_t last;

	if (!x)
		return;
	g = &devs[x->dev];
	pthread_mutex_lock(&g->lock);
	last = g->last[x->idx];
	pthread_mutex_unlock(&g->lock);
	c_gate_open(x, last);
	pthread_mutex_lock(&g->lock);
	g->used[x->idx] = 0;
	pthread_mutex_unlock(&g->lock);
	free(x);
}

const struct gpu_ops gpu_cuda_ops = {
	.name = "cuda",
	.device_of = c_device_of,
	.ipc_open = c_ipc_open,
	.ipc_close = c_ipc_close,
	.vmm_reserve = c_vmm_reserve,
	.vmm_map = c_vmm_map,
	.vmm_free = c_vmm_free,
	.copy = c_copy,
	.event_ready = c_event_ready,
	.event_wait = c_event_wait,
	.host_register = c_host_register,
	.host_unregister = c_host_unregister,
	.event_open = c_event_open,
	.event_new = c_event_new,
	.event_close = c_event_close,
	.gate_new = c_gate_new,
	.gate_arm = c_gate_arm,
	.gate_open = c_gate_open,
	.gate_free = c_gate_free,
};
