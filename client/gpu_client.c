/* gpu_client.c - CUDA device memory for libckpt: detect it, export it to
 * ckptd, and keep the ckpt_save_stream() event ring, on the CUDA driver API
 * (libcuda.so.1 through dlopen, the copy the process already has if any);
 * nothing here links CUDA. */
#define CUDA_DRIVER_LOADER
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cuda_api.h"
#include "gpu_client.h"
#include "gpu_gates.h"
#include "hex.h"

static pthread_once_t gpu__once = PTHREAD_ONCE_INIT;
static char gpu__why[160];
static struct cuda_driver cu;
static int gpu__ok;

/* Runs once.  A driver the process already has loaded is used as is; the
 * handle is kept for the life of the process (never dlclose'd).  Only
 * libcuda.so.1: whatever CUDA runtime the trainer uses, if any, shares it. */
static void gpu__load(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	const char *miss;
	CUresult e;

	if (!h)
		h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(gpu__why, sizeof(gpu__why), "the NVIDIA driver (libcuda.so.1) "
			 "is not installed");
		return;
	}
	if ((miss = cuda_driver_load(h, &cu))) {
		snprintf(gpu__why, sizeof(gpu__why), "the NVIDIA driver is too old "
			 "(libcuda.so.1 lacks %s)", miss);
		return;
	}
	if ((e = cu.cuInit(0))) {
		const char *s = NULL;
		cu.cuGetErrorString(e, &s);
		snprintf(gpu__why, sizeof(gpu__why), "cuInit: %s (CUDA error %d)",
			 s ? s : "unknown error", e);
		return;
	}
	gpu__ok = 1;
}

const char *gpu_client_reason(void)
{
	return gpu__why;
}

static const char *cu_err(CUresult e)
{
	const char *s = NULL;
	if (gpu__ok)
		cu.cuGetErrorString(e, &s);
	return s ? s : "CUDA driver error";
}

int gpu_client_describe(const void *ptr, size_t nbytes,
			struct gpu_client_mem *out)
{
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
	unsigned type = 0;
	int dev = 0, managed = 0;

	if (!ptr || !out)
		return -ENOTSUP;
	pthread_once(&gpu__once, gpu__load);
	if (!gpu__ok)
		return -ENOTSUP;
	/* pageable host memory: CUDA_ERROR_INVALID_VALUE */
	if (cu.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) ||
	    type != CU_MEMORYTYPE_DEVICE ||
	    cu.cuPointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p))
		return -ENOTSUP;
	cu.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
	out->dptr = ptr;
	out->nbytes = nbytes;
	out->device = dev;
	out->managed = managed;
	return 0;
}

static int device_uuid(int dev, uint8_t uuid[16], char *err, size_t errlen)
{
	CUdevice d;
	CUuuid u;
	CUresult e;

	if (!gpu__ok) {
		snprintf(err, errlen, "the CUDA driver (libcuda.so.1) is not usable: %s",
			 gpu__why[0] ? gpu__why : "missing functions");
		return -EOPNOTSUPP;
	}
	if ((e = cu.cuDeviceGet(&d, dev)) || (e = cu.cuDeviceGetUuid_v2(&u, d))) {
		snprintf(err, errlen, "cannot read the UUID of GPU %d: %s", dev, cu_err(e));
		return -ENXIO;
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

/* -EOPNOTSUPP, naming the handle types, for VMM memory created without
 * POSIX_FILE_DESCRIPTOR among them (PyTorch can make FABRIC-only
 * segments): ckptd can map only what comes as an fd.  Said at
 * registration, before any save relies on it. */
static int vmm_refuse_types(CUmemGenericAllocationHandle h, char *err, size_t errlen)
{
	CUmemAllocationProp prop;
	int t;

	if (cu.cuMemGetAllocationPropertiesFromHandle(&prop, h) != CUDA_SUCCESS)
		return 0;       /* cuMemExportToShareableHandle says why, if it fails */
	t = prop.requestedHandleTypes;
	if (!t || (t & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return 0;       /* none asked (not cuMemCreate memory): try IPC */
	snprintf(err, errlen, "VMM memory with handle types 0x%x (%s) cannot be shared "
		 "with ckptd: it needs CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (PyTorch: "
		 "expandable_segments without fabric handles, or plain cudaMalloc)",
		 (unsigned)t, t & CU_MEM_HANDLE_TYPE_FABRIC ? "FABRIC" : "not a POSIX fd");
	return -EOPNOTSUPP;
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
		if ((e = cu.cuMemGetAddressRange_v2(&b, &sz, p))) {
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
		e = cu.cuMemExportToShareableHandle(&fd, h,
						    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
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
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)m->dptr, base;
	CUmemGenericAllocationHandle h;
	CUipcMemHandle ih;
	size_t size;
	CUresult e;
	char vmm_err[320] = "";
	int r, legacy = 0;

	pthread_once(&gpu__once, gpu__load);
	memset(ex, 0, sizeof(*ex));
	if (!gpu__ok) {
		snprintf(err, errlen, "the CUDA driver (libcuda.so.1) is not usable here: %s",
			 gpu__why);
		return -EOPNOTSUPP;
	}
	if (m->managed) {
		snprintf(err, errlen, "this is CUDA managed memory (cudaMallocManaged), which "
			 "cannot be shared with another process: allocate the tensor with "
			 "cudaMalloc or the VMM API, or in host memory with ckpt_alloc()");
		return -EOPNOTSUPP;
	}
	if ((r = device_uuid(m->device, ex->uuid, err, errlen)) < 0)
		return r;
	/* VMM memory has a retainable allocation handle; cudaMalloc memory
	 * has not */
	if (cu.cuMemRetainAllocationHandle(&h, (void *)m->dptr) == 0) {
		uint8_t uuid[16];
		r = vmm_refuse_types(h, err, errlen);
		cu.cuMemRelease(h);
		if (r < 0)
			return r;
		if (export_vmm(m, ex, vmm_err, sizeof(vmm_err)) == 0)
			return 0;
		memcpy(uuid, ex->uuid, sizeof(uuid));
		memset(ex, 0, sizeof(*ex));
		memcpy(ex->uuid, uuid, sizeof(uuid));
	}
	if ((e = cu.cuMemGetAddressRange_v2(&base, &size, p))) {
		snprintf(err, errlen, "cuMemGetAddressRange: %s", cu_err(e));
		return -ENXIO;
	}
	if ((uint64_t)p + m->nbytes > base + size) {
		snprintf(err, errlen, "the tensor runs past the end of its CUDA allocation");
		return -ERANGE;
	}
	cu.cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p);
	if (!legacy || (e = cu.cuIpcGetMemHandle(&ih, base))) {
		snprintf(err, errlen, "this CUDA memory cannot be shared with ckptd "
			 "(cuIpcGetMemHandle: %s%s%s): allocate it with cudaMalloc, or "
			 "cuMemCreate with POSIX fd handles (PyTorch: "
			 "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); memory "
			 "from cudaMallocAsync pools cannot be registered",
			 legacy ? cu_err(e) : "not a cudaMalloc allocation",
			 vmm_err[0] ? "; as VMM memory: " : "", vmm_err);
		return -EOPNOTSUPP;
	}
	ex->kind = GPU_CLIENT_IPC;
	ex->base = base;
	ex->size = size;
	ex->offset = (uint64_t)p - base;
	memcpy(ex->key, ih.reserved, GPU_CLIENT_HANDLE);
	return 0;
}

/* --- wire ------------------------------------------------------------------- */

json_t *gpu_client_region_json(const struct gpu_client_export *ex,
			       uint64_t region, unsigned first, unsigned n)
{
	char uuid[41], key[2 * GPU_CLIENT_HANDLE + 1];
	json_t *o, *chunks;
	uint64_t at = 0;

	hex_gpu_uuid_str(ex->uuid, uuid);
	hex_encode(ex->key, GPU_CLIENT_HANDLE, key);
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
	r->sock = -1;
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
		if (gpu__ok && r->ready[i])
			cu.cuEventDestroy_v2(r->ready[i]);
		r->ready[i] = NULL;
	}
	gpu_gates_close(r->gates);
	r->gates = NULL;
}

/* Make the stream's context current for our calls (the trainer's thread
 * may have another one, or none); undone by stream_ctx_leave. */
static int stream_ctx_enter(void *stream, char *err, size_t errlen)
{
	CUcontext c = NULL;
	CUresult e;

	if (stream && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD)
		e = cu.cuStreamGetCtx(stream, &c);
	else
		e = cu.cuCtxGetCurrent(&c);
	if (e || !c) {
		snprintf(err, errlen, "cannot find the CUDA context of the stream: %s",
			 e ? cu_err(e) : "no current context");
		return -EINVAL;
	}
	if ((e = cu.cuCtxPushCurrent_v2(c))) {
		snprintf(err, errlen, "cuCtxPushCurrent: %s", cu_err(e));
		return -ENXIO;
	}
	return 0;
}

static void stream_ctx_leave(void)
{
	CUcontext c;
	cu.cuCtxPopCurrent_v2(&c);
}

/* Called when CUDA memory is registered (usually before training starts):
 * make the gate page now in the current context, if there is one, since
 * pinning it synchronises with the device; ckpt_save_stream() makes it
 * otherwise.  Best effort. */
void gpu_ring_prepare(struct gpu_ring *r)
{
	CUcontext ctx = NULL;
	char err[8];

	pthread_once(&gpu__once, gpu__load);
	if (!gpu__ok || r->gates || cu.cuCtxGetCurrent(&ctx) || !ctx)
		return;
	(void)gpu_gates_new(&cu, r->sock, &r->gates, err, sizeof(err));
}

int gpu_ring_record(struct gpu_ring *r, unsigned slot, void *stream,
		    struct gpu_ring_save *out, char *err, size_t errlen)
{
	CUipcEventHandle eh;
	CUdevice dev;
	CUresult e;
	int rc;

	pthread_once(&gpu__once, gpu__load);
	if (!gpu__ok) {
		snprintf(err, errlen, "no usable CUDA driver in this process: %s", gpu__why);
		return -EOPNOTSUPP;
	}
	if (slot >= GPU_CLIENT_RING)
		return -EINVAL;
	if ((rc = stream_ctx_enter(stream, err, errlen)) < 0)
		return rc;
	if ((e = cu.cuCtxGetDevice(&dev))) {
		snprintf(err, errlen, "cuCtxGetDevice: %s", cu_err(e));
		rc = -ENXIO;
		goto out;
	}
	if (r->dev >= 0 && r->dev != dev) {
		snprintf(err, errlen, "ckpt_save_stream() on GPU %d, earlier on GPU %d: "
			 "one handle saves from one GPU", dev, r->dev);
		rc = -EINVAL;
		goto out;
	}
	if ((rc = device_uuid(dev, out->uuid, err, errlen)) < 0)
		goto out;
	if (!r->gates && (rc = gpu_gates_new(&cu, r->sock, &r->gates, err, errlen)) < 0)
		goto out;
	if (!r->ready[slot]) {
		CUevent ev;
		if ((e = cu.cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING))) {
			snprintf(err, errlen, "cuEventCreate (the ready event): %s", cu_err(e));
			rc = -ENXIO;
			goto out;
		}
		r->ready[slot] = ev;
	}
	r->dev = dev;
	if ((e = cu.cuIpcGetEventHandle(&eh, r->ready[slot]))) {
		snprintf(err, errlen, "cuIpcGetEventHandle (the ready event): %s", cu_err(e));
		rc = -ENXIO;
		goto out;
	}
	if ((e = cu.cuEventRecord(r->ready[slot], stream))) {
		snprintf(err, errlen, "recording the ready event: %s", cu_err(e));
		rc = -ENXIO;
		goto out;
	}
	memcpy(out->ready, eh.reserved, GPU_CLIENT_HANDLE);
	/* a new number per save (0 is never used: a fresh word holds it) */
	if (++r->seq[slot] == 0)
		r->seq[slot] = 1;
	out->seq = r->seq[slot];
	out->page_fd = r->page_sent ? -1 : gpu_gates_fd(r->gates);
	gpu_gates_arm(r->gates, slot, out->seq);
out:
	stream_ctx_leave();
	return rc;
}

int gpu_ring_wait(struct gpu_ring *r, unsigned slot, uint32_t seq, void *stream,
		  char *err, size_t errlen)
{
	CUresult e;
	int rc;

	if (!gpu__ok || !r->gates) {
		snprintf(err, errlen, "no usable CUDA driver in this process");
		return -EOPNOTSUPP;
	}
	if (slot >= GPU_CLIENT_RING) {
		snprintf(err, errlen, "gate slot %u is outside the ring", slot);
		return -EINVAL;
	}
	if ((rc = stream_ctx_enter(stream, err, errlen)) < 0)
		return rc;
	if ((e = cu.cuStreamWaitValue32_v2(stream, gpu_gates_word(r->gates, slot),
					   seq, CU_STREAM_WAIT_VALUE_GEQ))) {
		snprintf(err, errlen, "cuStreamWaitValue32 (the gate): %s", cu_err(e));
		rc = -ENXIO;
	}
	stream_ctx_leave();
	return rc;
}
