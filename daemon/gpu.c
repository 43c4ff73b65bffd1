/* gpu.c - the real CUDA backend of gpu.h: libcudart + libcuda through
 * dlopen, one copy stream per device, the probe that decides host-only. */
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

/* The functions we use, looked up once.  rt = runtime, cu = driver. */
static struct {
	cudaError_t (*GetDeviceCount)(int *);
	const char *(*GetErrorString)(cudaError_t);
	cudaError_t (*GetLastError)(void);
	cudaError_t (*SetDevice)(int);
	cudaError_t (*IpcOpenMemHandle)(void **, cudaIpcMemHandle_t, unsigned);
	cudaError_t (*IpcCloseMemHandle)(void *);
	cudaError_t (*IpcOpenEventHandle)(cudaEvent_t *, cudaIpcEventHandle_t);
	cudaError_t (*IpcGetEventHandle)(cudaIpcEventHandle_t *, cudaEvent_t);
	cudaError_t (*EventCreateWithFlags)(cudaEvent_t *, unsigned);
	cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t);
	cudaError_t (*EventSynchronize)(cudaEvent_t);
	cudaError_t (*EventQuery)(cudaEvent_t);
	cudaError_t (*EventDestroy)(cudaEvent_t);
	cudaError_t (*StreamCreateWithFlags)(cudaStream_t *, unsigned);
	cudaError_t (*StreamWaitEvent)(cudaStream_t, cudaEvent_t, unsigned);
	cudaError_t (*StreamDestroy)(cudaStream_t);
	cudaError_t (*MemcpyAsync)(void *, const void *, size_t, int, cudaStream_t);
	cudaError_t (*HostRegister)(void *, size_t, unsigned);
	cudaError_t (*HostUnregister)(void *);
	cudaError_t (*HostAlloc)(void **, size_t, unsigned);
	cudaError_t (*HostGetDevicePointer)(void **, void *, unsigned);
	cudaError_t (*FreeHost)(void *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice);
	CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *,
						   void *, int);
	CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
					unsigned long long);
	CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
	CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			     unsigned long long);
	CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
	CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*cuStreamWaitValue32)(cudaStream_t, CUdeviceptr, uint32_t, unsigned);
	CUresult (*cuGetErrorString)(CUresult, const char **);
} rt;

static int gpu_ok, gpu_ndev, gpu_waitvalue;
static char gpu_why[256];
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static uint8_t dev_uuid[GPU_MAX_DEVICES][GPU_UUID_BYTES];
static cudaStream_t dev_stream[GPU_MAX_DEVICES];   /* the copy stream */
static const struct gpu_ops *ops_now;
extern const struct gpu_ops gpu_cuda_ops;

static const char *rt_err(cudaError_t e)
{
	return rt.GetErrorString ? rt.GetErrorString(e) : "CUDA error";
}

static const char *cu_err(CUresult e)
{
	const char *s = NULL;
	if (rt.cuGetErrorString)
		rt.cuGetErrorString(e, &s);
	return s ? s : "CUDA driver error";
}

#define RT_FAIL(call, what) do { cudaError_t _e = (call); if (_e) { \
	if (rt.GetLastError) rt.GetLastError(); \
	snprintf(msg, msglen, "%s: %s", what, rt_err(_e)); return -EIO; } } while (0)
#define CU_FAIL(call, what) do { CUresult _e = (call); if (_e) { \
	snprintf(msg, msglen, "%s: %s", what, cu_err(_e)); return -EIO; } } while (0)

static void *sym(void *h, const char *name)
{
	return h ? dlsym(h, name) : NULL;
}

#define LOAD(h, field, name) (*(void **)&rt.field = sym(h, name))

static void gpu_probe(void)
{
	static const char *const rtlibs[] = {
		"libcudart.so", "libcudart.so.13", "libcudart.so.12",
		"/usr/local/cuda/lib64/libcudart.so",
	};
	void *h = NULL, *cu = NULL;
	int n = 0, r;

	for (size_t i = 0; i < sizeof(rtlibs) / sizeof(rtlibs[0]) && !h; i++)
		h = dlopen(rtlibs[i], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(gpu_why, sizeof(gpu_why), "no CUDA runtime (libcudart) found");
		goto out;
	}
	LOAD(h, GetDeviceCount, "cudaGetDeviceCount");
	LOAD(h, GetErrorString, "cudaGetErrorString");
	if (!rt.GetDeviceCount) {
		snprintf(gpu_why, sizeof(gpu_why), "libcudart lacks cudaGetDeviceCount");
		goto out;
	}
	r = rt.GetDeviceCount(&n);
	if (r != 0 || n == 0) {
		/* cudaErrorInsufficientDriver (35), cudaErrorNoDevice (100), ... */
		snprintf(gpu_why, sizeof(gpu_why), "%s",
			 r && rt.GetErrorString ? rt.GetErrorString(r) : "no CUDA device");
		goto out;
	}
	cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!cu) {
		snprintf(gpu_why, sizeof(gpu_why), "libcuda.so.1 (the driver API) not found");
		goto out;
	}
	LOAD(h, GetLastError, "cudaGetLastError");
	LOAD(h, SetDevice, "cudaSetDevice");
	LOAD(h, IpcOpenMemHandle, "cudaIpcOpenMemHandle");
	LOAD(h, IpcCloseMemHandle, "cudaIpcCloseMemHandle");
	LOAD(h, IpcOpenEventHandle, "cudaIpcOpenEventHandle");
	LOAD(h, IpcGetEventHandle, "cudaIpcGetEventHandle");
	LOAD(h, EventCreateWithFlags, "cudaEventCreateWithFlags");
	LOAD(h, EventRecord, "cudaEventRecord");
	LOAD(h, EventSynchronize, "cudaEventSynchronize");
	LOAD(h, EventQuery, "cudaEventQuery");
	LOAD(h, EventDestroy, "cudaEventDestroy");
	LOAD(h, StreamCreateWithFlags, "cudaStreamCreateWithFlags");
	LOAD(h, StreamWaitEvent, "cudaStreamWaitEvent");
	LOAD(h, StreamDestroy, "cudaStreamDestroy");
	LOAD(h, MemcpyAsync, "cudaMemcpyAsync");
	LOAD(h, HostRegister, "cudaHostRegister");
	LOAD(h, HostUnregister, "cudaHostUnregister");
	LOAD(h, HostAlloc, "cudaHostAlloc");
	LOAD(h, HostGetDevicePointer, "cudaHostGetDevicePointer");
	LOAD(h, FreeHost, "cudaFreeHost");
	LOAD(cu, cuDeviceGet, "cuDeviceGet");
	LOAD(cu, cuDeviceGetUuid, "cuDeviceGetUuid_v2");
	if (!rt.cuDeviceGetUuid)
		LOAD(cu, cuDeviceGetUuid, "cuDeviceGetUuid");
	LOAD(cu, cuDeviceGetAttribute, "cuDeviceGetAttribute");
	LOAD(cu, cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle");
	LOAD(cu, cuMemAddressReserve, "cuMemAddressReserve");
	LOAD(cu, cuMemAddressFree, "cuMemAddressFree");
	LOAD(cu, cuMemMap, "cuMemMap");
	LOAD(cu, cuMemUnmap, "cuMemUnmap");
	LOAD(cu, cuMemRelease, "cuMemRelease");
	LOAD(cu, cuMemSetAccess, "cuMemSetAccess");
	LOAD(cu, cuStreamWaitValue32, "cuStreamWaitValue32_v2");
	if (!rt.cuStreamWaitValue32)
		LOAD(cu, cuStreamWaitValue32, "cuStreamWaitValue32");
	LOAD(cu, cuGetErrorString, "cuGetErrorString");
	if (!rt.SetDevice || !rt.IpcOpenMemHandle || !rt.MemcpyAsync ||
	    !rt.StreamCreateWithFlags || !rt.EventCreateWithFlags || !rt.EventQuery ||
	    !rt.cuDeviceGet || !rt.cuDeviceGetUuid || !rt.HostRegister) {
		snprintf(gpu_why, sizeof(gpu_why), "the CUDA runtime or driver lacks "
			 "functions ckptd needs (too old?)");
		goto out;
	}
	if (n > GPU_MAX_DEVICES)
		n = GPU_MAX_DEVICES;
	gpu_waitvalue = 1;
	for (int d = 0; d < n; d++) {
		CUdevice dv;
		CUuuid u;
		if ((r = rt.SetDevice(d)) != 0 ||
		    (r = rt.StreamCreateWithFlags(&dev_stream[d], CUDA_STREAM_NON_BLOCKING)) != 0) {
			snprintf(gpu_why, sizeof(gpu_why), "device %d: %s", d, rt_err(r));
			goto out;
		}
		if (rt.cuDeviceGet(&dv, d) || rt.cuDeviceGetUuid(&u, dv)) {
			snprintf(gpu_why, sizeof(gpu_why), "device %d: no UUID", d);
			goto out;
		}
		memcpy(dev_uuid[d], u.bytes, GPU_UUID_BYTES);
	}
	/* CUDA >= 12 supports stream memory operations (GEQ waits) on every
	 * device; only the NOR flavour has a capability attribute */
	if (!rt.cuStreamWaitValue32)
		gpu_waitvalue = 0;
	gpu_ndev = n;
	gpu_ok = 1;
	ops_now = &gpu_cuda_ops;
out:
	/* handles stay loaded for the process lifetime on success */
	if (!gpu_ok && cu)
		dlclose(cu);
	if (!gpu_ok && h)
		dlclose(h);
	if (!gpu_ok)
		memset(&rt, 0, sizeof(rt));
	if (gpu_ok) {
		char us[41];
		gpu_uuid_str(dev_uuid[0], us);
		log_info("CUDA: %d device(s) available (device 0 %s)%s", n, us,
			 gpu_waitvalue ? "" : "; no stream memory operations: "
			 "ckpt_save_stream() is refused, ckpt_save() works");
	} else {
		log_info("no GPU (%s): host memory only", gpu_why);
	}
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

/* --- the table ------------------------------------------------------------ */

static int c_device_of(const uint8_t uuid[GPU_UUID_BYTES])
{
	for (int d = 0; d < gpu_ndev; d++)
		if (!memcmp(dev_uuid[d], uuid, GPU_UUID_BYTES))
			return d;
	return -ENODEV;
}

static int c_ipc_open(int dev, const uint8_t h[GPU_HANDLE_BYTES], void **dptr,
		      char *msg, size_t msglen)
{
	cudaIpcMemHandle_t mh;

	memcpy(mh.reserved, h, sizeof(mh.reserved));
	RT_FAIL(rt.SetDevice(dev), "cudaSetDevice");
	RT_FAIL(rt.IpcOpenMemHandle(dptr, mh, CUDA_IPC_LAZY_ENABLE_PEER),
		"cudaIpcOpenMemHandle");
	return 0;
}

static void c_ipc_close(int dev, void *dptr)
{
	rt.SetDevice(dev);
	if (rt.IpcCloseMemHandle(dptr))
		rt.GetLastError();
}

static int c_vmm_reserve(int dev, size_t size, void **va, char *msg, size_t msglen)
{
	CUdeviceptr p = 0;

	if (!rt.cuMemAddressReserve || !rt.cuMemMap || !rt.cuMemImportFromShareableHandle) {
		snprintf(msg, msglen, "the CUDA driver has no VMM API");
		return -EOPNOTSUPP;
	}
	RT_FAIL(rt.SetDevice(dev), "cudaSetDevice");
	CU_FAIL(rt.cuMemAddressReserve(&p, size, 0, 0, 0), "cuMemAddressReserve");
	*va = (void *)(uintptr_t)p;
	return 0;
}

static int c_vmm_map(int dev, void *va, size_t off, size_t len, int fd,
		     char *msg, size_t msglen)
{
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_RW };
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)va + off;
	CUresult e;

	e = rt.cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
					      CU_MEM_HANDLE_TYPE_POSIX_FD);
	close(fd);
	CU_FAIL(e, "cuMemImportFromShareableHandle");
	e = rt.cuMemMap(p, len, 0, h, 0);
	rt.cuMemRelease(h);     /* the mapping keeps the memory */
	CU_FAIL(e, "cuMemMap");
	e = rt.cuMemSetAccess(p, len, &acc, 1);
	if (e) {
		rt.cuMemUnmap(p, len);
		CU_FAIL(e, "cuMemSetAccess");
	}
	return 0;
}

static void c_vmm_free(int dev, void *va, size_t mapped, size_t size)
{
	rt.SetDevice(dev);
	if (mapped)
		rt.cuMemUnmap((CUdeviceptr)(uintptr_t)va, mapped);
	rt.cuMemAddressFree((CUdeviceptr)(uintptr_t)va, size);
}

/* One completion event per (thread, device): threads share the stream. */
static __thread cudaEvent_t t_done[GPU_MAX_DEVICES];

static int c_copy(int dev, void *dst, const void *src, size_t n, int kind,
		  void *ev, char *msg, size_t msglen)
{
	cudaStream_t st = dev_stream[dev];

	RT_FAIL(rt.SetDevice(dev), "cudaSetDevice");
	if (!t_done[dev])
		RT_FAIL(rt.EventCreateWithFlags(&t_done[dev], CUDA_EVENT_DISABLE_TIMING),
			"cudaEventCreate");
	if (ev)
		RT_FAIL(rt.StreamWaitEvent(st, ev, 0), "cudaStreamWaitEvent(ready)");
	RT_FAIL(rt.MemcpyAsync(dst, src, n, kind, st), "cudaMemcpyAsync");
	RT_FAIL(rt.EventRecord(t_done[dev], st), "cudaEventRecord");
	RT_FAIL(rt.EventSynchronize(t_done[dev]), "copy");
	return 0;
}

static int c_event_wait(void *ev, const volatile int *cancel, char *msg, size_t msglen)
{
	struct timespec ts = { 0, 20000 };
	cudaError_t e;

	while ((e = rt.EventQuery(ev)) == CUDA_ERR_NOT_READY) {
		if (cancel && *cancel) {
			snprintf(msg, msglen, "the save was cancelled before the trainer's "
				 "stream reached it");
			return -ECANCELED;
		}
		nanosleep(&ts, NULL);
	}
	if (e) {
		rt.GetLastError();
		snprintf(msg, msglen, "waiting for the trainer's ready event: %s", rt_err(e));
		return -EIO;
	}
	return 0;
}

static int c_host_register(void *p, size_t n)
{
	if (rt.HostRegister(p, n, CUDA_HOST_REGISTER_PORTABLE)) {
		rt.GetLastError();
		return -EIO;
	}
	return 0;
}

static void c_host_unregister(void *p)
{
	if (rt.HostUnregister(p))
		rt.GetLastError();
}

static int c_event_open(int dev, const uint8_t h[GPU_HANDLE_BYTES], void **ev,
			char *msg, size_t msglen)
{
	cudaIpcEventHandle_t eh;

	memcpy(eh.reserved, h, sizeof(eh.reserved));
	RT_FAIL(rt.SetDevice(dev), "cudaSetDevice");
	RT_FAIL(rt.IpcOpenEventHandle(ev, eh), "cudaIpcOpenEventHandle");
	return 0;
}

static int c_event_new(int dev, void **ev, uint8_t h[GPU_HANDLE_BYTES],
		       char *msg, size_t msglen)
{
	cudaIpcEventHandle_t eh;

	RT_FAIL(rt.SetDevice(dev), "cudaSetDevice");
	RT_FAIL(rt.EventCreateWithFlags(ev, CUDA_EVENT_INTERPROCESS |
					CUDA_EVENT_DISABLE_TIMING), "cudaEventCreate");
	if (rt.IpcGetEventHandle(&eh, *ev)) {
		rt.EventDestroy(*ev);
		*ev = NULL;
		RT_FAIL(1, "cudaIpcGetEventHandle");
	}
	memcpy(h, eh.reserved, GPU_HANDLE_BYTES);
	return 0;
}

static void c_event_close(void *ev)
{
	if (ev && rt.EventDestroy(ev))
		rt.GetLastError();
}

struct c_gate {
	int           dev;
	cudaStream_t  st;
	uint32_t     *word;      /* cudaHostAlloc'd, mapped */
	CUdeviceptr   dword;
};

static int c_gate_new(int dev, void **gate, volatile uint32_t **word,
		      char *msg, size_t msglen)
{
	struct c_gate *g;
	void *dp = NULL;

	if (!gpu_waitvalue) {
		snprintf(msg, msglen, "this GPU/driver has no stream memory operations "
			 "(cuStreamWaitValue32): use ckpt_save() and wait for STAGED");
		return -EOPNOTSUPP;
	}
	if (!(g = calloc(1, sizeof(*g))))
		return -ENOMEM;
	g->dev = dev;
	if (rt.SetDevice(dev) ||
	    rt.HostAlloc((void **)&g->word, 64, CUDA_HOST_ALLOC_MAPPED | CUDA_HOST_ALLOC_PORTABLE) ||
	    rt.HostGetDevicePointer(&dp, g->word, 0) ||
	    rt.StreamCreateWithFlags(&g->st, CUDA_STREAM_NON_BLOCKING)) {
		rt.GetLastError();
		if (g->word)
			rt.FreeHost(g->word);
		free(g);
		snprintf(msg, msglen, "cannot create the gate stream on device %d", dev);
		return -EIO;
	}
	*g->word = 0;
	g->dword = (CUdeviceptr)(uintptr_t)dp;
	*gate = g;
	*word = g->word;
	return 0;
}

static int c_gate_arm(void *gate, uint32_t value, void *ev, char *msg, size_t msglen)
{
	struct c_gate *g = gate;

	RT_FAIL(rt.SetDevice(g->dev), "cudaSetDevice");
	CU_FAIL(rt.cuStreamWaitValue32(g->st, g->dword, value, CU_STREAM_WAIT_VALUE_GEQ),
		"cuStreamWaitValue32");
	RT_FAIL(rt.EventRecord(ev, g->st), "cudaEventRecord(done)");
	return 0;
}

static void c_gate_free(void *gate)
{
	struct c_gate *g = gate;

	if (!g)
		return;
	*(volatile uint32_t *)g->word = UINT32_MAX;   /* nothing stays blocked */
	rt.SetDevice(g->dev);
	rt.StreamDestroy(g->st);   /* returns at once; resources go when idle */
	/* the word may still be polled until the stream drains: keep it */
	free(g);
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
	.event_wait = c_event_wait,
	.host_register = c_host_register,
	.host_unregister = c_host_unregister,
	.event_open = c_event_open,
	.event_new = c_event_new,
	.event_close = c_event_close,
	.gate_new = c_gate_new,
	.gate_arm = c_gate_arm,
	.gate_free = c_gate_free,
};
