/* gpu_client.c - CUDA device memory for libckpt: detect it, export it to
 * ckptd, and keep the ckpt_save_stream() event ring.  The runtime and the
 * driver are reached through dlopen(), preferring copies the trainer has
 * already loaded; nothing here links CUDA. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cuda_api.h"
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

static const char *const gpu__cudart_names[] = {
	"libcudart.so", "libcudart.so.13", "libcudart.so.12",
};

static pthread_once_t gpu__once = PTHREAD_ONCE_INIT;
static char gpu__why[160];
static struct {
	cudaError_t (*GetAttrs)(struct gpu__ptr_attrs *, const void *);
	cudaError_t (*GetLastError)(void);
	const char *(*GetErrorString)(cudaError_t);
	cudaError_t (*IpcGetMemHandle)(cudaIpcMemHandle_t *, void *);
	cudaError_t (*IpcGetEventHandle)(cudaIpcEventHandle_t *, cudaEvent_t);
	cudaError_t (*IpcOpenEventHandle)(cudaEvent_t *, cudaIpcEventHandle_t);
	cudaError_t (*EventCreateWithFlags)(cudaEvent_t *, unsigned);
	cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t);
	cudaError_t (*EventDestroy)(cudaEvent_t);
	cudaError_t (*StreamWaitEvent)(cudaStream_t, cudaEvent_t, unsigned);
	cudaError_t (*GetDevice)(int *);
	cudaError_t (*SetDevice)(int);
	CUresult (*cuMemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle *, void *);
	CUresult (*cuMemExportToShareableHandle)(void *, CUmemGenericAllocationHandle,
						 int, unsigned long long);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice);
	CUresult (*cuGetErrorString)(CUresult, const char **);
} cu;

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

#define LOAD(h, field, name) (*(void **)&cu.field = dlsym(h, name))

/* Runs once.  A runtime the process already uses is the one that knows its
 * allocations, so look for that first; load one only if none is there.
 * The handles are kept for the life of the process (never dlclose'd). */
static void gpu__load(void)
{
	void *h = gpu__open_runtime(RTLD_NOLOAD), *d;

	if (!h)
		h = gpu__open_runtime(0);
	if (!h) {
		snprintf(gpu__why, sizeof(gpu__why), "no CUDA runtime (libcudart) found");
		return;
	}
	LOAD(h, GetAttrs, "cudaPointerGetAttributes");
	LOAD(h, GetLastError, "cudaGetLastError");
	LOAD(h, GetErrorString, "cudaGetErrorString");
	LOAD(h, IpcGetMemHandle, "cudaIpcGetMemHandle");
	LOAD(h, IpcGetEventHandle, "cudaIpcGetEventHandle");
	LOAD(h, IpcOpenEventHandle, "cudaIpcOpenEventHandle");
	LOAD(h, EventCreateWithFlags, "cudaEventCreateWithFlags");
	LOAD(h, EventRecord, "cudaEventRecord");
	LOAD(h, EventDestroy, "cudaEventDestroy");
	LOAD(h, StreamWaitEvent, "cudaStreamWaitEvent");
	LOAD(h, GetDevice, "cudaGetDevice");
	LOAD(h, SetDevice, "cudaSetDevice");
	d = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (!d)
		d = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (d) {
		LOAD(d, cuMemGetAddressRange, "cuMemGetAddressRange_v2");
		LOAD(d, cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle");
		LOAD(d, cuMemExportToShareableHandle, "cuMemExportToShareableHandle");
		LOAD(d, cuMemRelease, "cuMemRelease");
		LOAD(d, cuDeviceGet, "cuDeviceGet");
		LOAD(d, cuDeviceGetUuid, "cuDeviceGetUuid_v2");
		if (!cu.cuDeviceGetUuid)
			LOAD(d, cuDeviceGetUuid, "cuDeviceGetUuid");
		LOAD(d, cuGetErrorString, "cuGetErrorString");
	}
	if (!cu.GetAttrs)
		snprintf(gpu__why, sizeof(gpu__why), "libcudart lacks cudaPointerGetAttributes");
	else if (!d)
		snprintf(gpu__why, sizeof(gpu__why), "libcuda.so.1 (the driver) not found");
}

const char *gpu_client_reason(void)
{
	return gpu__why;
}

static const char *rt_err(cudaError_t e)
{
	return cu.GetErrorString ? cu.GetErrorString(e) : "CUDA error";
}

static const char *cu_err(CUresult e)
{
	const char *s = NULL;
	if (cu.cuGetErrorString)
		cu.cuGetErrorString(e, &s);
	return s ? s : "CUDA driver error";
}

/* Clear the runtime's last-error slot so that the trainer's own next
 * cudaGetLastError() does not report one of our calls. */
static void rt_clear(void)
{
	if (cu.GetLastError)
		cu.GetLastError();
}

int gpu_client_describe(const void *ptr, size_t nbytes,
			struct gpu_client_mem *out)
{
	struct gpu__ptr_attrs a;

	if (!ptr || !out)
		return -ENOTSUP;
	pthread_once(&gpu__once, gpu__load);
	if (!cu.GetAttrs)
		return -ENOTSUP;

	memset(&a, 0, sizeof(a));
	/* Fails without a driver or device (cudaErrorInsufficientDriver,
	 * cudaErrorNoDevice): then nothing here can be device memory. */
	if (cu.GetAttrs(&a, ptr) != 0) {
		rt_clear();
		return -ENOTSUP;
	}
	if (a.type != GPU__MEM_DEVICE)
		return -ENOTSUP;

	out->dptr = ptr;
	out->nbytes = nbytes;
	out->device = a.device;
	return 0;
}

static int device_uuid(int dev, uint8_t uuid[16], char *err, size_t errlen)
{
	CUdevice d;
	CUuuid u;
	CUresult e;

	if (!cu.cuDeviceGet || !cu.cuDeviceGetUuid) {
		snprintf(err, errlen, "the CUDA driver (libcuda.so.1) is not usable: %s",
			 gpu__why[0] ? gpu__why : "missing functions");
		return -EOPNOTSUPP;
	}
	if ((e = cu.cuDeviceGet(&d, dev)) || (e = cu.cuDeviceGetUuid(&u, d))) {
		snprintf(err, errlen, "cannot read the UUID of GPU %d: %s", dev, cu_err(e));
		return -EIO;
	}
	memcpy(uuid, u.bytes, 16);
	return 0;
}

void gpu_client_export_release(struct gpu_client_export *ex)
{
	if (!ex)
		return;
	for (unsigned i = 0; i < ex->nchunks; i++)
		if (ex->fds[i] >= 0)
			close(ex->fds[i]);
	ex->nchunks = 0;
}

/* VMM (cuMemCreate, PyTorch expandable_segments): one fd per physical
 * chunk mapped under [ptr, ptr+n), contiguous in the address space. */
static int export_vmm(const struct gpu_client_mem *m, struct gpu_client_export *ex,
		      char *err, size_t errlen)
{
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)m->dptr, end = p + (m->nbytes ? m->nbytes : 1);
	uint64_t *ids = (uint64_t *)ex->key;
	CUresult e;

	ex->kind = GPU_CLIENT_VMM;
	while (p < end) {
		CUmemGenericAllocationHandle h;
		CUdeviceptr b;
		size_t sz;
		int fd = -1;

		if (ex->nchunks == GPU_CLIENT_MAX_CHUNKS) {
			snprintf(err, errlen, "the tensor spans more than %d VMM chunks",
				 GPU_CLIENT_MAX_CHUNKS);
			goto fail;
		}
		if ((e = cu.cuMemGetAddressRange(&b, &sz, p))) {
			snprintf(err, errlen, "cuMemGetAddressRange: %s", cu_err(e));
			goto fail;
		}
		if (ex->nchunks == 0)
			ex->base = b;
		else if (b != ex->base + ex->size) {
			snprintf(err, errlen, "the tensor's VMM chunks are not contiguous");
			goto fail;
		}
		if ((e = cu.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)b))) {
			snprintf(err, errlen, "cuMemRetainAllocationHandle: %s", cu_err(e));
			goto fail;
		}
		e = cu.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FD, 0);
		cu.cuMemRelease(h);
		if (e) {
			snprintf(err, errlen, "this VMM memory cannot be exported as a POSIX "
				 "file descriptor (cuMemExportToShareableHandle: %s): create it "
				 "with CUmemAllocationProp.requestedHandleTypes = "
				 "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (PyTorch: "
				 "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)", cu_err(e));
			goto fail;
		}
		if (ex->nchunks < GPU_CLIENT_HANDLE / 8)
			ids[ex->nchunks] = (uint64_t)h;
		ex->chunk[ex->nchunks] = sz;
		ex->fds[ex->nchunks++] = fd;
		ex->size += sz;
		p = b + sz;
	}
	ex->offset = (uint64_t)(uintptr_t)m->dptr - ex->base;
	return 0;
fail:
	gpu_client_export_release(ex);
	return -EOPNOTSUPP;
}

int gpu_client_export(const struct gpu_client_mem *m, struct gpu_client_export *ex,
		      char *err, size_t errlen)
{
	CUmemGenericAllocationHandle h;
	cudaIpcMemHandle_t ih;
	CUdeviceptr base;
	size_t size;
	cudaError_t re;
	CUresult e;
	char vmm_err[320] = "";
	int r;

	pthread_once(&gpu__once, gpu__load);
	memset(ex, 0, sizeof(*ex));
	if (!cu.cuMemGetAddressRange || !cu.cuMemRetainAllocationHandle ||
	    !cu.IpcGetMemHandle) {
		snprintf(err, errlen, "the CUDA driver (libcuda.so.1) is not usable here: %s",
			 gpu__why[0] ? gpu__why : "missing functions");
		return -EOPNOTSUPP;
	}
	if ((r = device_uuid(m->device, ex->uuid, err, errlen)) < 0)
		return r;
	/* VMM memory has a retainable allocation handle; cudaMalloc memory
	 * has not */
	if (cu.cuMemRetainAllocationHandle(&h, (void *)m->dptr) == 0) {
		uint8_t uuid[16];
		cu.cuMemRelease(h);
		if (export_vmm(m, ex, vmm_err, sizeof(vmm_err)) == 0)
			return 0;
		/* not exportable as VMM: maybe the runtime's own allocation,
		 * which CUDA IPC handles can still share */
		memcpy(uuid, ex->uuid, sizeof(uuid));
		memset(ex, 0, sizeof(*ex));
		memcpy(ex->uuid, uuid, sizeof(uuid));
	}
	if ((e = cu.cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)m->dptr))) {
		snprintf(err, errlen, "cuMemGetAddressRange: %s", cu_err(e));
		return -EIO;
	}
	if ((uint64_t)(uintptr_t)m->dptr + m->nbytes > base + size) {
		snprintf(err, errlen, "the tensor runs past the end of its CUDA allocation");
		return -ERANGE;
	}
	if ((re = cu.IpcGetMemHandle(&ih, (void *)(uintptr_t)base))) {
		rt_clear();
		snprintf(err, errlen, "this CUDA memory cannot be shared with ckptd "
			 "(cudaIpcGetMemHandle: %s%s%s): allocate it with cudaMalloc, or "
			 "cuMemCreate with POSIX fd handles (PyTorch: "
			 "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); memory "
			 "from cudaMallocAsync pools or cudaMallocManaged cannot be "
			 "registered", rt_err(re), vmm_err[0] ? "; as VMM memory: " : "",
			 vmm_err);
		return -EOPNOTSUPP;
	}
	ex->kind = GPU_CLIENT_IPC;
	ex->base = base;
	ex->size = size;
	ex->offset = (uint64_t)(uintptr_t)m->dptr - base;
	memcpy(ex->key, ih.reserved, GPU_CLIENT_HANDLE);
	return 0;
}

/* --- wire ------------------------------------------------------------------- */

void gpu_client_hex(const uint8_t *b, size_t n, char *out)
{
	static const char hx[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hx[b[i] >> 4];
		out[2 * i + 1] = hx[b[i] & 15];
	}
	out[2 * n] = '\0';
}

static int nib(char c)
{
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

int gpu_client_unhex(const char *s, uint8_t *b, size_t n)
{
	if (!s || strlen(s) != 2 * n)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		int hi = nib(s[2 * i]), lo = nib(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		b[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

void gpu_client_uuid_str(const uint8_t u[16], char out[41])
{
	char h[33];
	gpu_client_hex(u, 16, h);
	snprintf(out, 41, "GPU-%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12, h + 16, h + 20);
}

json_t *gpu_client_region_json(const struct gpu_client_export *ex,
			       uint64_t region, unsigned first, unsigned n)
{
	char uuid[41], key[2 * GPU_CLIENT_HANDLE + 1];
	json_t *o, *chunks;
	uint64_t at = 0;

	gpu_client_uuid_str(ex->uuid, uuid);
	gpu_client_hex(ex->key, GPU_CLIENT_HANDLE, key);
	o = json_pack("{s:I, s:I, s:s, s:I, s:s, s:s}", "region", (json_int_t)region,
		      "size", (json_int_t)ex->size, "gpu", uuid,
		      "base", (json_int_t)ex->base,
		      "kind", ex->kind == GPU_CLIENT_VMM ? "vmm" : "ipc", "key", key);
	if (!o || ex->kind != GPU_CLIENT_VMM)
		return o;
	chunks = json_array();
	for (unsigned i = 0; i < first; i++)
		at += ex->chunk[i];
	for (unsigned i = first; chunks && i < first + n && i < ex->nchunks; i++)
		json_array_append_new(chunks, json_integer((json_int_t)ex->chunk[i]));
	if (!chunks || json_object_set_new(o, "at", json_integer((json_int_t)at)) ||
	    json_object_set_new(o, "chunks", chunks)) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* --- the event ring ------------------------------------------------------------ */

void gpu_ring_init(struct gpu_ring *r)
{
	memset(r, 0, sizeof(*r));
	r->dev = -1;
}

int gpu_ring_acquire(struct gpu_ring *r)
{
	for (unsigned k = 0; k < GPU_CLIENT_RING; k++) {
		unsigned i = (r->next + k) % GPU_CLIENT_RING;
		if (!r->busy[i]) {
			r->busy[i] = 1;
			r->ticket[i] = 0;
			r->next = (i + 1) % GPU_CLIENT_RING;
			return (int)i;
		}
	}
	return -EBUSY;
}

void gpu_ring_bind(struct gpu_ring *r, unsigned slot, uint64_t ticket)
{
	if (slot < GPU_CLIENT_RING)
		r->ticket[slot] = ticket;
}

void gpu_ring_release(struct gpu_ring *r, unsigned slot)
{
	if (slot < GPU_CLIENT_RING) {
		r->busy[slot] = 0;
		r->ticket[slot] = 0;
	}
}

int gpu_ring_busy(const struct gpu_ring *r)
{
	int n = 0;
	for (unsigned i = 0; i < GPU_CLIENT_RING; i++)
		n += r->busy[i] != 0;
	return n;
}

void gpu_ring_destroy(struct gpu_ring *r)
{
	for (unsigned i = 0; i < GPU_CLIENT_RING; i++) {
		if (cu.EventDestroy && r->ready[i])
			cu.EventDestroy(r->ready[i]);
		if (cu.EventDestroy && r->done[i])
			cu.EventDestroy(r->done[i]);
		r->ready[i] = r->done[i] = NULL;
	}
	rt_clear();
}

int gpu_ring_record(struct gpu_ring *r, unsigned slot, void *stream,
		    uint8_t uuid[16], uint8_t ready_h[GPU_CLIENT_HANDLE],
		    char *err, size_t errlen)
{
	cudaIpcEventHandle_t eh;
	cudaError_t e;
	int dev, rc;

	pthread_once(&gpu__once, gpu__load);
	if (!cu.EventCreateWithFlags || !cu.IpcGetEventHandle || !cu.EventRecord ||
	    !cu.GetDevice || !cu.StreamWaitEvent || !cu.IpcOpenEventHandle) {
		snprintf(err, errlen, "no usable CUDA runtime in this process%s%s",
			 gpu__why[0] ? ": " : "", gpu__why);
		return -EOPNOTSUPP;
	}
	if ((e = cu.GetDevice(&dev))) {
		rt_clear();
		snprintf(err, errlen, "cudaGetDevice: %s", rt_err(e));
		return -EIO;
	}
	if (r->dev >= 0 && r->dev != dev) {
		snprintf(err, errlen, "ckpt_save_stream() on GPU %d, earlier on GPU %d: "
			 "one handle saves from one GPU", dev, r->dev);
		return -EINVAL;
	}
	if ((rc = device_uuid(dev, uuid, err, errlen)) < 0)
		return rc;
	if (!r->ready[slot]) {
		if ((e = cu.EventCreateWithFlags(&r->ready[slot], CUDA_EVENT_INTERPROCESS |
						 CUDA_EVENT_DISABLE_TIMING))) {
			rt_clear();
			r->ready[slot] = NULL;
			snprintf(err, errlen, "cudaEventCreateWithFlags: %s", rt_err(e));
			return -EIO;
		}
		r->dev = dev;
	}
	if ((e = cu.IpcGetEventHandle(&eh, r->ready[slot])) ||
	    (e = cu.EventRecord(r->ready[slot], stream))) {
		rt_clear();
		snprintf(err, errlen, "recording the ready event: %s", rt_err(e));
		return -EIO;
	}
	memcpy(ready_h, eh.reserved, GPU_CLIENT_HANDLE);
	return 0;
}

int gpu_ring_wait(struct gpu_ring *r, unsigned slot, void *stream,
		  const uint8_t done_h[GPU_CLIENT_HANDLE], char *err, size_t errlen)
{
	cudaIpcEventHandle_t eh;
	cudaError_t e;

	if (!r->done[slot] || memcmp(r->done_h[slot], done_h, GPU_CLIENT_HANDLE)) {
		if (r->done[slot])
			cu.EventDestroy(r->done[slot]);
		r->done[slot] = NULL;
		memcpy(eh.reserved, done_h, GPU_CLIENT_HANDLE);
		if ((e = cu.IpcOpenEventHandle(&r->done[slot], eh))) {
			rt_clear();
			r->done[slot] = NULL;
			snprintf(err, errlen, "cudaIpcOpenEventHandle(done): %s", rt_err(e));
			return -EIO;
		}
		memcpy(r->done_h[slot], done_h, GPU_CLIENT_HANDLE);
	}
	if ((e = cu.StreamWaitEvent(stream, r->done[slot], 0))) {
		rt_clear();
		snprintf(err, errlen, "cudaStreamWaitEvent(done): %s", rt_err(e));
		return -EIO;
	}
	return 0;
}
