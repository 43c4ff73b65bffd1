/* gpu.c - the real CUDA backend of gpu.h, on the driver API only
 * (libcuda.so.1 through dlopen): the probe, and per device, created on
 * first use, a primary context with the one stream ckptd's copies use
 * (ckptd never makes a stream wait: gates are the trainers', gpu_sess.c). */
#define CUDA_DRIVER_LOADER
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "gpu.h"
#include "hex.h"
#include "log.h"

static struct cuda_driver cu;

/* A device's context is made on first use, never at start: a context costs
 * GPU memory, and in EXCLUSIVE_PROCESS mode it would lock trainers out. */
struct gpu_dev {
	int         usable;              /* UUID read, not PROHIBITED */
	int         no_ipc_event, no_host_reg, no_posix_fd;   /* probe: lacks */
	uint8_t     uuid[GPU_UUID_BYTES];
	pthread_mutex_t lock;            /* bringing it up; see the lock order */
	atomic_int  up;                  /* context and stream exist (set once) */
	CUcontext   ctx;
	CUstream    copy;                /* every copy of ckptd */
	/* A sticky error (the context is unusable until reset, e.g. after a
	 * trainer killed mid-copy): the copy that saw it sets fault; the
	 * next dev_enter() resets the context under use's write lock (copies
	 * hold it for reading), gen counts resets so mappings and events of
	 * the old context are made again (gpu_mem.c). */
	atomic_int  fault;
	atomic_uint gen;
	pthread_rwlock_t use;
	int         last_fault;          /* under lock */
	time_t      last_at;
};

static int gpu_ok, gpu_ndev, gpu_nfailed;
static char gpu_why[256];
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static struct gpu_dev devs[GPU_MAX_DEVICES];
static const struct gpu_ops *ops_now;
extern const struct gpu_ops gpu_cuda_ops;

/* Lock order: a device's lock, then pin_lock; never the other way round.
 * Everything but dev_enter() takes pin_lock alone, so host memory is
 * pinned and unpinned with no device lock held (dev_enter() is called
 * first, not inside pin_lock). */
static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;
static void  *pin_p;
static size_t pin_n, pin_piece;
static int    any_ctx;

/* The staging pool is pinned by its own thread, started by the first
 * context (pinning needs one): at 1-2 GB/s a large pool takes a minute,
 * which the loop thread (it makes contexts) must not wait.  It pins piece
 * by piece (whole pool chunks, so no copy spans two registrations) for
 * progress and for a stop between pieces. */
#define PIN_PIECE_MAX (1ull << 30)
static atomic_int      pin_state;        /* enum gpu_pin_state */
static atomic_int      pin_stop;
static _Atomic uint64_t pin_done_bytes, pin_t0_ns, pin_ms;
static pthread_t       pin_thread;
static int             pin_thread_on;    /* joinable; under pin_lock */
static CUcontext       pin_ctx;

/* Other pinned buffers (restore scratch).  Pinning synchronises with
 * ckptd's own streams only, whose work always finishes: ckptd's streams
 * never wait on anything a trainer controls. */
#define MAX_PINNED 64
static void *pinned[MAX_PINNED];      /* under pin_lock */

static const char *cu_err(CUresult e)
{
	const char *s = NULL;
	if (cu.cuGetErrorString)
		cu.cuGetErrorString(e, &s);
	return s ? s : "unknown CUDA driver error";
}

/* 0, or -ENXIO (a GPU or driver failure: not -EIO, which says the
 * storage failed) with the driver's own error, and its number, in msg. */
static int cu_check(CUresult e, const char *what, char *msg, size_t msglen)
{
	if (e == CUDA_SUCCESS)
		return 0;
	snprintf(msg, msglen, "%s: %s (CUDA error %d)", what, cu_err(e), e);
	return -ENXIO;
}

/* Errors after which a context is unusable until it is reset (cuda.h:
 * "the context cannot be used, so it must be destroyed"). */
static int cu_sticky(CUresult e)
{
	switch (e) {
	case 214:  /* ECC_UNCORRECTABLE */
	case 700:  /* ILLEGAL_ADDRESS */
	case 714: case 715: case 716: case 717: case 718:   /* HARDWARE_STACK_ERROR,
		ILLEGAL_INSTRUCTION, MISALIGNED_ADDRESS, INVALID_ADDRESS_SPACE, INVALID_PC */
	case 719:  /* LAUNCH_FAILED */
		return 1;
	}
	return 0;
}

/* cu_check() for a call on device d: a sticky error marks d's context
 * for a reset (the next call on d makes it), and msg says so. */
static int dev_check(int d, CUresult e, const char *what, char *msg, size_t msglen)
{
	int r = cu_check(e, what, msg, msglen), none = 0;
	size_t l;

	if (r == 0 || !cu_sticky(e))
		return r;
	if (atomic_compare_exchange_strong(&devs[d].fault, &none, (int)e))
		log_warnx("CUDA device %d: %s: the context is faulted, ckptd resets it; "
			  "the saves and restores in flight on it fail", d, msg);
	l = strlen(msg);
	snprintf(msg + l, msglen - l, "; the context of CUDA device %d is faulted: ckptd "
		 "resets it, retry the save", d);
	return r;
}

/* Device d's context after a sticky error: its stream and everything in
 * it are gone; reset it (keeping our retain), make a new stream.  Called
 * with d's lock held and use write-locked (no copy on d in flight). */
static void dev_reset_locked(int d)
{
	struct gpu_dev *g = &devs[d];
	CUdevice dv;
	CUresult e;
	int f = atomic_load(&g->fault);

	cu.cuCtxSetCurrent(g->ctx);
	cu.cuStreamDestroy_v2(g->copy);        /* fails while faulted: reset frees it */
	if ((e = cu.cuDeviceGet(&dv, d)) || (e = cu.cuDevicePrimaryCtxReset_v2(dv)) ||
	    (e = cu.cuCtxSetCurrent(g->ctx)) ||
	    (e = cu.cuStreamCreate(&g->copy, CU_STREAM_NON_BLOCKING))) {
		log_warnx("CUDA device %d: resetting the faulted context failed: %s "
			  "(CUDA error %d); its copies keep failing until ckptd restarts",
			  d, cu_err(e), e);
		return;
	}
	pthread_mutex_lock(&pin_lock);          /* d's lock, then pin_lock */
	if (pin_ctx == g->ctx && atomic_load(&pin_state) == GPU_PIN_DONE) {
		atomic_store(&pin_state, GPU_PIN_FAILED);
		log_warnx("CUDA device %d: the reset unpinned the staging pool (pinned "
			  "through its context): GPU copies are slower until ckptd restarts", d);
	}
	pthread_mutex_unlock(&pin_lock);
	g->last_fault = f;
	g->last_at = time(NULL);
	atomic_fetch_add(&g->gen, 1);
	atomic_store(&g->fault, 0);
	log_info("CUDA device %d: context reset after %s (CUDA error %d), %u reset(s)",
		 d, cu_err(f), f, atomic_load(&g->gen));
}

/* What ckptd needs of a device, asked once: a missing capability is said
 * at start, and the calls that need it are refused with that message.  An
 * attribute the driver does not know counts as present. */
static int cap_lacks(CUdevice dv, int attr)
{
	int v = 1;
	return cu.cuDeviceGetAttribute(&v, attr, dv) == CUDA_SUCCESS && v == 0;
}

static void probe_caps(int d, CUdevice dv)
{
	struct gpu_dev *g = &devs[d];

	if ((g->no_ipc_event = cap_lacks(dv, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED)))
		log_warnx("CUDA device %d does not support interprocess events "
			  "(IPC_EVENT_SUPPORTED is 0): ckpt_save_stream() on it is refused, "
			  "ckpt_save() works", d);
	if ((g->no_host_reg = cap_lacks(dv, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED)))
		log_warnx("CUDA device %d cannot pin host memory (HOST_REGISTER_SUPPORTED is 0): "
			  "copies to and from it go through unpinned memory, slower", d);
	if ((g->no_posix_fd = cap_lacks(dv,
				CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)))
		log_warnx("CUDA device %d cannot share VMM memory as POSIX fds "
			  "(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0): VMM (expandable "
			  "segments) tensors on it are refused, cudaMalloc memory works", d);
}

static void gpu_probe(void)
{
	void *h;
	const char *miss;
	CUresult e;
	int n = 0, good = 0;

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
		pthread_rwlock_init(&devs[d].use, NULL);
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
		probe_caps(d, dv);
		devs[d].usable = 1;
		good++;
	}
	gpu_nfailed = n - good;
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
			hex_gpu_uuid_str(devs[d].uuid, us);
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

int gpu_failed_devices(void)
{
	pthread_once(&gpu_once, gpu_probe);
	return gpu_nfailed;
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

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *pin_main(void *arg)
{
	size_t at = 0;
	CUresult e = 0;

	(void)arg;
	if ((e = cu.cuCtxSetCurrent(pin_ctx)) == CUDA_SUCCESS)
		for (; at < pin_n && !atomic_load(&pin_stop); at += pin_piece) {
			size_t n = pin_n - at < pin_piece ? pin_n - at : pin_piece;
			if ((e = cu.cuMemHostRegister_v2((uint8_t *)pin_p + at, n,
							 CU_MEMHOSTREGISTER_PORTABLE)))
				break;
			atomic_store(&pin_done_bytes, at + n);
		}
	atomic_store(&pin_ms, (mono_ns() - atomic_load(&pin_t0_ns)) / 1000000);
	if (e || at < pin_n) {
		for (size_t u = 0; u < at; u += pin_piece)   /* all or nothing */
			cu.cuMemHostUnregister((uint8_t *)pin_p + u);
		atomic_store(&pin_done_bytes, 0);
		if (e)
			log_warnx("cannot pin the staging pool (%zu bytes): %s (CUDA error %d); "
				  "GPU copies go through unpinned memory, slower", pin_n,
				  cu_err(e), e);
		atomic_store(&pin_state, GPU_PIN_FAILED);
		return NULL;
	}
	/* tests/gpu/run.sh reports this time */
	log_info("CUDA: staging pool pinned (%zu MiB) in %llu ms, off the loop", pin_n >> 20,
		 (unsigned long long)atomic_load(&pin_ms));
	atomic_store(&pin_state, GPU_PIN_DONE);
	return NULL;
}

/* The first context is up: pin the pool on a thread of its own (pin_lock
 * held).  If no thread can be made, say so: copies still work, slower. */
static void pin_start(CUcontext ctx)
{
	pin_ctx = ctx;
	atomic_store(&pin_t0_ns, mono_ns());
	atomic_store(&pin_state, GPU_PIN_RUNNING);
	if (pthread_create(&pin_thread, NULL, pin_main, NULL) != 0) {
		log_warnx("cannot start the thread that pins the staging pool: GPU copies "
			  "go through unpinned memory, slower");
		atomic_store(&pin_state, GPU_PIN_FAILED);
		return;
	}
	pin_thread_on = 1;
	log_info("CUDA: pinning the staging pool (%zu MiB) off the loop", pin_n >> 20);
}

/* Make device d's context current in this thread, creating it (and its
 * copy stream) on first use.  The first context starts the pinning of the
 * staging pool (pinning needs one).  Takes d's lock, then pin_lock: never
 * call it with pin_lock held. */
static int dev_enter(int d, char *msg, size_t msglen)
{
	struct gpu_dev *g = &devs[d];
	CUresult e = 0;
	const char *what = "";

	if (d < 0 || d >= gpu_ndev || !g->usable) {
		snprintf(msg, msglen, "CUDA device %d is not usable by ckptd", d);
		return -ENODEV;
	}
	if (atomic_load(&g->up) && atomic_load(&g->fault)) {
		pthread_rwlock_wrlock(&g->use);
		pthread_mutex_lock(&g->lock);
		if (atomic_load(&g->fault))
			dev_reset_locked(d);
		pthread_mutex_unlock(&g->lock);
		pthread_rwlock_unlock(&g->use);
	}
	pthread_mutex_lock(&g->lock);
	if (!g->up) {
		CUdevice dv;
		int held = 0;
		if ((e = cu.cuDeviceGet(&dv, d)) ||
		    (what = "cuDevicePrimaryCtxRetain", e = cu.cuDevicePrimaryCtxRetain(&g->ctx, dv)) ||
		    (held = 1, what = "cuCtxSetCurrent", e = cu.cuCtxSetCurrent(g->ctx)) ||
		    (what = "cuStreamCreate", e = cu.cuStreamCreate(&g->copy, CU_STREAM_NON_BLOCKING))) {
			/* an EXCLUSIVE_PROCESS GPU stays locked while we hold it */
			if (held)
				cu.cuDevicePrimaryCtxRelease_v2(dv);
			pthread_mutex_unlock(&g->lock);
			snprintf(msg, msglen, "cannot set up CUDA device %d: %s: %s (CUDA error %d)",
				 d, what, cu_err(e), e);
			return -ENXIO;
		}
		atomic_store(&g->up, 1);
		pthread_mutex_lock(&pin_lock);
		if (!any_ctx && pin_p && g->no_host_reg)
			atomic_store(&pin_state, GPU_PIN_FAILED);    /* said at probe */
		else if (!any_ctx && pin_p)
			pin_start(g->ctx);
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

	if (dev >= 0 && dev < gpu_ndev && devs[dev].no_posix_fd) {
		snprintf(msg, msglen, "CUDA device %d cannot share VMM memory as POSIX fds "
			 "(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0): register "
			 "cudaMalloc memory (no expandable segments) on this GPU", dev);
		return -EOPNOTSUPP;
	}
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

/* One completion event per (thread, device): threads share the stream;
 * made again after a reset of the device's context (gen). */
static __thread CUevent  t_done[GPU_MAX_DEVICES];
static __thread unsigned t_done_gen[GPU_MAX_DEVICES];

static int c_pool_wait(const void *p, size_t n, const atomic_int *cancel,
		       char *msg, size_t msglen);

/* Every copy of the batch queued back to back, one record and one host
 * wait behind the last: a round trip per piece cost more than the copy of
 * a small tensor. */
static int c_copy_many(int dev, const struct gpu_xfer *x, size_t n, int kind,
		       char *msg, size_t msglen)
{
	struct gpu_dev *g = &devs[dev];
	int r;

	if ((r = dev_enter(dev, msg, msglen)) < 0)
		return r;
	for (size_t i = 0; i < n && r == 0; i++)
		r = c_pool_wait(kind == 1 ? x[i].src : x[i].dst, x[i].n, NULL, msg, msglen);
	if (r < 0)
		return r;
	pthread_rwlock_rdlock(&g->use);        /* no reset of the stream meanwhile */
	if (t_done_gen[dev] != atomic_load(&g->gen))
		t_done[dev] = NULL;                /* went with the old context */
	if ((r = dev_check(dev, cu.cuCtxSetCurrent(g->ctx), "cuCtxSetCurrent", msg, msglen)) < 0 ||
	    (!t_done[dev] &&
	     (r = dev_check(dev, cu.cuEventCreate(&t_done[dev], CU_EVENT_DISABLE_TIMING),
			    "cuEventCreate", msg, msglen)) < 0))
		goto out_unlock;
	t_done_gen[dev] = atomic_load(&g->gen);
	for (size_t i = 0; i < n && r == 0; i++) {
		if (kind == 1)
			r = dev_check(dev, cu.cuMemcpyHtoDAsync_v2((CUdeviceptr)(uintptr_t)x[i].dst,
								   x[i].src, x[i].n, g->copy),
				      "cuMemcpyHtoDAsync", msg, msglen);
		else
			r = dev_check(dev, cu.cuMemcpyDtoHAsync_v2(x[i].dst,
								   (CUdeviceptr)(uintptr_t)x[i].src,
								   x[i].n, g->copy),
				      "cuMemcpyDtoHAsync", msg, msglen);
	}
	/* even after a failed enqueue: the ones queued must land before the
	 * caller reuses dst */
	if (cu.cuEventRecord(t_done[dev], g->copy) == CUDA_SUCCESS) {
		CUresult e = cu.cuEventSynchronize(t_done[dev]);
		if (r == 0)
			r = dev_check(dev, e, "copy", msg, msglen);
	} else if (r == 0) {
		r = dev_check(dev, cu.cuStreamSynchronize(g->copy), "copy", msg, msglen);
	}
out_unlock:
	pthread_rwlock_unlock(&g->use);
	return r;
}

static int c_copy(int dev, void *dst, const void *src, size_t n, int kind,
		  void *ev, char *msg, size_t msglen)
{
	struct gpu_xfer x = { dst, src, n };

	(void)ev;
	return c_copy_many(dev, &x, 1, kind, msg, msglen);
}

static unsigned c_dev_gen(int dev)
{
	return dev >= 0 && dev < gpu_ndev ? atomic_load(&devs[dev].gen) : 0;
}

static void c_dev_state(int dev, struct gpu_dev_state *out)
{
	struct gpu_dev *g = &devs[dev];

	memset(out, 0, sizeof(*out));
	if (dev < 0 || dev >= gpu_ndev)
		return;
	pthread_mutex_lock(&g->lock);
	out->resets = atomic_load(&g->gen);
	out->faulted = atomic_load(&g->fault);
	out->last_fault = g->last_fault;
	out->last_at = g->last_at;
	if (g->last_fault)
		snprintf(out->last_name, sizeof(out->last_name), "%s", cu_err(g->last_fault));
	pthread_mutex_unlock(&g->lock);
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

/* The staging pool (the first buffer, given before any context) is pinned
 * by pin_main() once the first device context is made; later buffers
 * (restore scratch) at once, through a context that is up.  The slot is taken under pin_lock, the pinning
 * done outside it (the lock order: dev_enter() takes a device's lock). */
static int c_host_register(void *p, size_t n)
{
	int r = -EBUSY, slot = -1;
	char m[160];

	pthread_mutex_lock(&pin_lock);
	if (!any_ctx) {
		if (!pin_p) {
			pin_p = p;
			pin_n = n;
			if (!pin_piece)
				pin_piece = n;
			atomic_store(&pin_state, GPU_PIN_WAITING);
			r = 0;
		}
		pthread_mutex_unlock(&pin_lock);
		return r;
	}
	for (int i = 0; i < MAX_PINNED && slot < 0; i++)
		if (!pinned[i])
			slot = i;
	if (slot >= 0)
		pinned[slot] = p;               /* ours; freed again on failure */
	pthread_mutex_unlock(&pin_lock);
	if (slot < 0)
		return r;
	for (int d = 0; d < gpu_ndev && r < 0; d++)
		if (atomic_load(&devs[d].up) && !devs[d].no_host_reg && dev_enter(d, m, sizeof(m)) == 0)
			r = cu.cuMemHostRegister_v2(p, n, CU_MEMHOSTREGISTER_PORTABLE) ? -ENXIO : 0;
	if (r < 0) {
		pthread_mutex_lock(&pin_lock);
		pinned[slot] = NULL;
		pthread_mutex_unlock(&pin_lock);
	}
	return r;
}

/* Stop the pinning thread between two pieces and wait for it (pin_lock
 * held: it takes none). */
static void pin_join_locked(void)
{
	if (!pin_thread_on)
		return;
	atomic_store(&pin_stop, 1);
	pthread_join(pin_thread, NULL);
	pin_thread_on = 0;
}

static int c_pool_register(void *p, size_t n, size_t piece)
{
	size_t k = piece ? PIN_PIECE_MAX / piece : 0;

	pthread_mutex_lock(&pin_lock);
	pin_piece = k ? k * piece : piece;       /* whole chunks, about 1 GiB */
	pthread_mutex_unlock(&pin_lock);
	return c_host_register(p, n);
}

static void c_pin_info(struct gpu_pin_info *out)
{
	int st = atomic_load(&pin_state);

	pthread_mutex_lock(&pin_lock);
	out->state = st;
	out->bytes = pin_p ? pin_n : 0;
	pthread_mutex_unlock(&pin_lock);
	out->done = atomic_load(&pin_done_bytes);
	out->ms = st == GPU_PIN_RUNNING ? (mono_ns() - atomic_load(&pin_t0_ns)) / 1000000 :
		  atomic_load(&pin_ms);
}

/* Copies into or out of the pool wait while it is being pinned: a range
 * is never copied while the driver registers it, and a copy never takes
 * the slow unpinned path for memory about to be pinned.  Polls; gives up
 * with -ECANCELED when *cancel is set. */
static int c_pool_wait(const void *p, size_t n, const atomic_int *cancel,
		       char *msg, size_t msglen)
{
	struct timespec ts = { 0, 1000000 };
	int said = 0;

	if (atomic_load(&pin_state) != GPU_PIN_RUNNING ||
	    (p && ((const uint8_t *)p + n <= (uint8_t *)pin_p ||
		   (const uint8_t *)p >= (uint8_t *)pin_p + pin_n)))
		return 0;
	while (atomic_load(&pin_state) == GPU_PIN_RUNNING) {
		if (cancel && *cancel) {
			snprintf(msg, msglen, "the save was cancelled while the staging pool "
				 "was being pinned");
			return -ECANCELED;
		}
		if (!said++)
			log_debug("CUDA: a copy waits for the staging pool to be pinned");
		nanosleep(&ts, NULL);
	}
	return 0;
}

static void c_host_unregister(void *p)
{
	char m[160];

	for (int d = 0; d < gpu_ndev; d++)      /* a context for the call */
		if (atomic_load(&devs[d].up) && dev_enter(d, m, sizeof(m)) == 0)
			break;
	pthread_mutex_lock(&pin_lock);
	if (p == pin_p) {
		pin_join_locked();
		if (atomic_load(&pin_state) == GPU_PIN_DONE)
			for (size_t u = 0; u < pin_n; u += pin_piece)
				cu.cuMemHostUnregister((uint8_t *)pin_p + u);
		pin_p = NULL;
		atomic_store(&pin_state, GPU_PIN_NONE);
	}
	for (int i = 0; i < MAX_PINNED; i++)
		if (pinned[i] == p) {
			cu.cuMemHostUnregister(p);
			pinned[i] = NULL;
		}
	pthread_mutex_unlock(&pin_lock);
}

/* ckptd exits: stop pinning, unpin the pool, let every GPU go (a primary
 * context held keeps an EXCLUSIVE_PROCESS GPU from the next process). */
static void c_shutdown(void *pool)
{
	if (pool)
		c_host_unregister(pool);
	for (int d = 0; d < gpu_ndev; d++) {
		struct gpu_dev *g = &devs[d];
		pthread_mutex_lock(&g->lock);
		if (atomic_load(&g->up)) {
			CUdevice dv;
			cu.cuCtxSetCurrent(g->ctx);
			cu.cuStreamSynchronize(g->copy);
			cu.cuStreamDestroy_v2(g->copy);
			if (cu.cuDeviceGet(&dv, d) == CUDA_SUCCESS)
				cu.cuDevicePrimaryCtxRelease_v2(dv);
			atomic_store(&g->up, 0);
		}
		pthread_mutex_unlock(&g->lock);
	}
	cu.cuCtxSetCurrent(NULL);
}

static int c_event_open(int dev, const uint8_t h[GPU_HANDLE_BYTES], void **ev,
			char *msg, size_t msglen)
{
	CUipcEventHandle eh;
	CUevent e;
	int r;

	if (dev >= 0 && dev < gpu_ndev && devs[dev].no_ipc_event) {
		snprintf(msg, msglen, "CUDA device %d does not support interprocess events "
			 "(IPC_EVENT_SUPPORTED is 0): use ckpt_save() on this GPU, not "
			 "ckpt_save_stream()", dev);
		return -EOPNOTSUPP;
	}
	if ((r = dev_enter(dev, msg, msglen)) < 0)
		return r;
	memcpy(eh.reserved, h, sizeof(eh.reserved));
	if ((r = cu_check(cu.cuIpcOpenEventHandle(&e, eh), "cuIpcOpenEventHandle",
			  msg, msglen)) < 0)
		return r;
	*ev = e;
	return 0;
}

static void c_event_close(void *ev)
{
	if (ev)
		cu.cuEventDestroy_v2(ev);
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
	.copy_many = c_copy_many,
	.pool_register = c_pool_register,
	.pool_wait = c_pool_wait,
	.pin_info = c_pin_info,
	.shutdown = c_shutdown,
	.dev_gen = c_dev_gen,
	.dev_state = c_dev_state,
	.event_ready = c_event_ready,
	.event_wait = c_event_wait,
	.host_register = c_host_register,
	.host_unregister = c_host_unregister,
	.event_open = c_event_open,
	.event_close = c_event_close,
};
