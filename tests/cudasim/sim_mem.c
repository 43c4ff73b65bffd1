/* sim_mem.c - cudasim's address space: device memory in memfds (so other
 * processes can map it), CUDA IPC memory handles across processes, VMM memory exported and imported as POSIX fds,
 * pinned host memory, pointer attributes.  A TEST DOUBLE of libcuda.so.1,
 * written from cuda.h's documentation; never a driver. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"

#define GRANULARITY (2u << 20)

enum rkind { R_DEV = 1, R_IPC, R_RESERVED, R_VMMMAP, R_HOST, R_MANAGED };

struct vmm_handle {
	uint64_t magic;
	int      fd, phys, ordinal, refs, types;
	size_t   size;
};

struct range {
	struct range *next;
	enum rkind kind;
	CUdeviceptr base;
	size_t   size;
	uint8_t *host;            /* backing mapping (host == base for R_HOST) */
	int      ordinal, fd, refs, access, hostalloc;
	uint64_t nonce;
	struct vmm_handle *h;     /* R_VMMMAP */
};


static struct range *ranges;

/* --- the address space ---------------------------------------------------- */

/* A device address range nobody can dereference on the host (as on a GPU,
 * a device pointer used as a host pointer faults). */
static CUdeviceptr va_new(size_t n)
{
	void *p = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? 0 : (CUdeviceptr)(uintptr_t)p;
}

static struct range *find(CUdeviceptr p, int want_reserved)
{
	for (struct range *r = ranges; r; r = r->next) {
		if (p < r->base || p - r->base >= r->size)
			continue;
		if ((r->kind == R_RESERVED) == !!want_reserved)
			return r;
	}
	return NULL;
}

void *sim_xlate_seg(CUdeviceptr p, size_t n, size_t *seg)
{
	struct range *r;
	void *out = NULL;
	size_t left;

	pthread_mutex_lock(&sim_lock);
	r = find(p, 0);
	if (r && (r->kind != R_VMMMAP || r->access)) {
		left = r->size - (p - r->base);
		*seg = n < left ? n : left;
		/* VMM mappings back to back continue in the next one */
		if (r->kind != R_VMMMAP && *seg < n)
			out = NULL;
		else
			out = r->host + (p - r->base);
	}
	pthread_mutex_unlock(&sim_lock);
	return out;
}

void *sim_xlate(CUdeviceptr p, size_t n, CUresult *err)
{
	struct range *r;
	void *out = NULL;

	pthread_mutex_lock(&sim_lock);
	r = find(p, 0);
	if (!r || n > r->size - (p - r->base)) {
		*err = CUDA_ERROR_INVALID_VALUE;
	} else if (r->kind == R_VMMMAP && !r->access) {
		*err = CUDA_ERROR_INVALID_VALUE;     /* mapped without cuMemSetAccess */
	} else {
		out = r->host + (p - r->base);
		*err = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&sim_lock);
	return out;
}

static int memfd_sized(const char *what, uint64_t nonce, size_t n)
{
	char name[64];
	int fd;
	snprintf(name, sizeof(name), "cudasim-%s-%016llx", what, (unsigned long long)nonce);
	if ((fd = memfd_create(name, MFD_CLOEXEC)) < 0)
		return -1;
	if (ftruncate(fd, (off_t)n) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static struct range *range_add(enum rkind k, CUdeviceptr base, size_t size, void *host,
			       int ordinal, int fd, uint64_t nonce)
{
	struct range *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->kind = k; r->base = base; r->size = size; r->host = host;
	r->ordinal = ordinal; r->fd = fd; r->nonce = nonce; r->refs = 1;
	r->access = 1;
	pthread_mutex_lock(&sim_lock);
	r->next = ranges;
	ranges = r;
	pthread_mutex_unlock(&sim_lock);
	return r;
}

static void range_unlink_locked(struct range *r)
{
	for (struct range **pp = &ranges; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			return;
		}
}

static CUresult dev_alloc(CUdeviceptr *p, size_t n, enum rkind k)
{
	struct CUctx_st *c;
	uint64_t nonce = sim_nonce();
	size_t sz = (n + 4095) & ~(size_t)4095;
	CUdeviceptr va;
	void *host;
	int fd;

	NEED_CTX(c);
	if (!p || !n)
		return CUDA_ERROR_INVALID_VALUE;
	if ((fd = memfd_sized("mem", nonce, sz)) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	host = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	va = k == R_MANAGED ? (CUdeviceptr)(uintptr_t)host : va_new(sz);
	if (host == MAP_FAILED || !va || !range_add(k, va, n, host, c->ordinal, fd, nonce)) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*p = va;
	return CUDA_SUCCESS;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	return dev_alloc(p, n, R_DEV);
}

/* Managed memory is host-accessible by design: its pointer is the mapping. */
API CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags)
{
	(void)flags;
	return dev_alloc(p, n, R_MANAGED);
}

static void range_free(struct range *r)
{
	size_t sz = (r->size + 4095) & ~(size_t)4095;
	if (r->host && r->kind != R_HOST)
		munmap(r->host, sz);
	if (r->kind != R_MANAGED && r->kind != R_HOST && r->kind != R_VMMMAP)
		munmap((void *)(uintptr_t)r->base, sz);
	if (r->fd >= 0)
		close(r->fd);
	free(r);
}

API CUresult cuMemFree_v2(CUdeviceptr p)
{
	struct range *r;

	NEED_INIT();
	sim_sync_all("cuMemFree");    /* documented: may synchronise the device */
	pthread_mutex_lock(&sim_lock);
	r = find(p, 0);
	if (!r || r->base != p || (r->kind != R_DEV && r->kind != R_MANAGED)) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	range_unlink_locked(r);
	pthread_mutex_unlock(&sim_lock);
	range_free(r);
	return CUDA_SUCCESS;
}

API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	struct range *r;
	CUresult e = CUDA_ERROR_NOT_FOUND;

	NEED_INIT();
	pthread_mutex_lock(&sim_lock);
	if ((r = find(p, 0)) && r->kind != R_HOST) {
		if (base)
			*base = r->base;
		if (size)
			*size = r->size;
		e = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&sim_lock);
	return e;
}

API CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
	struct range *r;
	CUresult e = CUDA_SUCCESS;

	NEED_INIT();
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	r = find(p, 0);
	if (!r) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_INVALID_VALUE;   /* pageable host memory */
	}
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = r->kind == R_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		break;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(int *)data = r->kind == R_MANAGED;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = r->ordinal;
		break;
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
		*(int *)data = r->kind == R_DEV;
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = r->base;
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = r->size;
		break;
	default:
		e = CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&sim_lock);
	return e;
}

/* --- CUDA IPC: memory ------------------------------------------------------- */

API CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
	struct ipc_handle ih = { 0 };
	struct range *r;

	NEED_INIT();
	if (!h)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	r = find(p, 0);
	if (!r || r->base != p || r->kind != R_DEV) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_INVALID_VALUE;  /* only cuMemAlloc bases */
	}
	ih.magic = SIM_MAGIC; ih.kind = 1; ih.pid = getpid(); ih.fd = r->fd;
	ih.phys = sim.phys_of[r->ordinal]; ih.size = r->size; ih.nonce = r->nonce;
	pthread_mutex_unlock(&sim_lock);
	memcpy(h->reserved, &ih, sizeof(ih));
	return CUDA_SUCCESS;
}

/* Open another process's memfd through /proc, checking it is still the
 * object the handle names (the fd number may have been reused). */
int sim_open_peer(const struct ipc_handle *ih, const char *what)
{
	char path[64], link[256], want[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", ih->pid, ih->fd);
	snprintf(want, sizeof(want), "/memfd:cudasim-%s-%016llx", what,
		 (unsigned long long)ih->nonce);
	if ((n = readlink(path, link, sizeof(link) - 1)) < 0)
		return -1;
	link[n] = '\0';
	if (strncmp(link, want, strlen(want)))
		return -1;
	if ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
		return -1;
	return fd;
}

API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags)
{
	struct ipc_handle ih;
	struct CUctx_st *c;
	struct range *r;
	CUdeviceptr va;
	void *host;
	size_t sz;
	int fd;

	NEED_CTX(c);
	memcpy(&ih, h.reserved, sizeof(ih));
	if (!p || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS || ih.magic != SIM_MAGIC ||
	    ih.kind != 1)
		return CUDA_ERROR_INVALID_VALUE;
	if (ih.pid == getpid())
		return CUDA_ERROR_INVALID_CONTEXT;   /* not in the exporting process */
	pthread_mutex_lock(&sim_lock);
	for (r = ranges; r; r = r->next)
		if (r->kind == R_IPC && r->nonce == ih.nonce) {
			r->refs++;
			*p = r->base;
			pthread_mutex_unlock(&sim_lock);
			return CUDA_SUCCESS;
		}
	pthread_mutex_unlock(&sim_lock);
	if ((fd = sim_open_peer(&ih, "mem")) < 0)
		return CUDA_ERROR_INVALID_HANDLE;     /* exporter gone or freed it */
	sz = ((size_t)ih.size + 4095) & ~(size_t)4095;
	host = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (host == MAP_FAILED || !(va = va_new(sz)) ||
	    !range_add(R_IPC, va, (size_t)ih.size, host, c->ordinal, fd, ih.nonce)) {
		close(fd);
		return CUDA_ERROR_MAP_FAILED;
	}
	*p = va;
	return CUDA_SUCCESS;
}

API CUresult cuIpcCloseMemHandle(CUdeviceptr p)
{
	struct range *r;

	NEED_INIT();
	pthread_mutex_lock(&sim_lock);
	r = find(p, 0);
	if (!r || r->base != p || r->kind != R_IPC) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (--r->refs > 0) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_SUCCESS;
	}
	range_unlink_locked(r);
	pthread_mutex_unlock(&sim_lock);
	range_free(r);
	return CUDA_SUCCESS;
}

/* --- VMM ---------------------------------------------------------------------- */

static struct vmm_handle *vh(CUmemGenericAllocationHandle h)
{
	struct vmm_handle *v = (struct vmm_handle *)(uintptr_t)h;
	return v && v->magic == SIM_MAGIC ? v : NULL;
}

API CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
					   int option)
{
	NEED_INIT();
	(void)option;
	if (!g || !prop)
		return CUDA_ERROR_INVALID_VALUE;
	*g = GRANULARITY;
	return CUDA_SUCCESS;
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n,
			 const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct vmm_handle *v;
	int fd;

	NEED_INIT();
	if (!h || !prop || flags || !n || n % GRANULARITY ||
	    prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    prop->location.id < 0 || prop->location.id >= sim.nvisible)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(v = calloc(1, sizeof(*v))) || (fd = memfd_sized("vmm", sim_nonce(), n)) < 0) {
		free(v);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	v->magic = SIM_MAGIC; v->fd = fd; v->size = n; v->refs = 1;
	v->ordinal = prop->location.id; v->phys = sim.phys_of[v->ordinal];
	v->types = prop->requestedHandleTypes;
	*h = (CUmemGenericAllocationHandle)(uintptr_t)v;
	return CUDA_SUCCESS;
}

static void vmm_put(struct vmm_handle *v)
{
	if (--v->refs == 0) {
		close(v->fd);
		v->magic = 0;
		free(v);
	}
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	struct vmm_handle *v;
	NEED_INIT();
	pthread_mutex_lock(&sim_lock);
	if (!(v = vh(h))) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	vmm_put(v);          /* mappings hold their own reference */
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

API CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr,
				 unsigned long long flags)
{
	CUdeviceptr va;
	NEED_INIT();
	(void)align; (void)addr;
	if (!p || !n || flags || n % GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(va = va_new(n)) || !range_add(R_RESERVED, va, n, NULL, -1, -1, 0))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = va;
	return CUDA_SUCCESS;
}

API CUresult cuMemAddressFree(CUdeviceptr p, size_t n)
{
	struct range *r;
	NEED_INIT();
	pthread_mutex_lock(&sim_lock);
	r = find(p, 1);
	if (!r || r->base != p || r->size != n) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (struct range *m = ranges; m; m = m->next)
		if (m->kind == R_VMMMAP && m->base >= p && m->base - p < n) {
			pthread_mutex_unlock(&sim_lock);
			return CUDA_ERROR_INVALID_VALUE;    /* still mapped */
		}
	range_unlink_locked(r);
	pthread_mutex_unlock(&sim_lock);
	range_free(r);
	return CUDA_SUCCESS;
}

API CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h,
		      unsigned long long flags)
{
	struct vmm_handle *v;
	struct range *res, *m;
	void *host;

	NEED_INIT();
	pthread_mutex_lock(&sim_lock);
	v = vh(h);
	res = find(p, 1);
	if (!v || !res || flags || off || n != v->size || n > res->size - (p - res->base) ||
	    find(p, 0) || find(p + n - 1, 0)) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	v->refs++;
	pthread_mutex_unlock(&sim_lock);
	host = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, v->fd, 0);
	if (host == MAP_FAILED ||
	    !(m = range_add(R_VMMMAP, p, n, host, v->ordinal, -1, 0))) {
		pthread_mutex_lock(&sim_lock);
		vmm_put(v);
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&sim_lock);
	m->h = v;
	m->access = 0;        /* until cuMemSetAccess */
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

API CUresult cuMemUnmap(CUdeviceptr p, size_t n)
{
	NEED_INIT();
	pthread_mutex_lock(&sim_lock);
	for (CUdeviceptr at = p; at < p + n;) {
		struct range *m = find(at, 0);
		if (!m || m->kind != R_VMMMAP || m->base != at) {
			pthread_mutex_unlock(&sim_lock);
			return CUDA_ERROR_INVALID_VALUE;
		}
		at += m->size;
		range_unlink_locked(m);
		munmap(m->host, m->size);
		vmm_put(m->h);
		free(m);
	}
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

API CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t count)
{
	NEED_INIT();
	if (!d || !count)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	for (CUdeviceptr at = p; at < p + n;) {
		struct range *m = find(at, 0);
		if (!m || m->kind != R_VMMMAP) {
			pthread_mutex_unlock(&sim_lock);
			return CUDA_ERROR_INVALID_VALUE;
		}
		m->access = d[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		at = m->base + m->size;
	}
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

API CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
					  int type, unsigned long long flags)
{
	struct vmm_handle *v;
	int fd;

	NEED_INIT();
	pthread_mutex_lock(&sim_lock);
	v = vh(h);
	if (!out || flags || !v || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
	    !(v->types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	fd = fcntl(v->fd, F_DUPFD_CLOEXEC, 0);
	pthread_mutex_unlock(&sim_lock);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)out = fd;
	return CUDA_SUCCESS;
}

API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os, int type)
{
	int fd = (int)(intptr_t)os, nfd;
	char path[64], link[256];
	struct vmm_handle *v;
	struct stat st;
	ssize_t n;

	NEED_INIT();
	if (!h || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if ((n = readlink(path, link, sizeof(link) - 1)) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	link[n] = '\0';
	if (strncmp(link, "/memfd:cudasim-vmm-", 19) || fstat(fd, &st) < 0)
		return CUDA_ERROR_INVALID_VALUE;    /* not a (simulated) GPU's memory */
	if ((nfd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0 || !(v = calloc(1, sizeof(*v)))) {
		if (nfd >= 0)
			close(nfd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	v->magic = SIM_MAGIC; v->fd = nfd; v->size = (size_t)st.st_size; v->refs = 1;
	v->ordinal = sim_current() ? sim_current()->ordinal : 0; v->phys = -1; v->types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	*h = (CUmemGenericAllocationHandle)(uintptr_t)v;
	return CUDA_SUCCESS;
}

API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
	struct range *m;
	NEED_INIT();
	if (!h)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	m = find((CUdeviceptr)(uintptr_t)addr, 0);
	if (!m || m->kind != R_VMMMAP) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	m->h->refs++;
	*h = (CUmemGenericAllocationHandle)(uintptr_t)m->h;
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

/* What cuMemCreate was asked for: the handle types decide what the
 * allocation can be exported as (PyTorch may ask for FABRIC only). */
API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
						    CUmemGenericAllocationHandle h)
{
	struct vmm_handle *v;

	NEED_INIT();
	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	if (!(v = vh(h))) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->requestedHandleTypes = v->types;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = v->ordinal;
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

/* --- pinned host memory ------------------------------------------------------ */

API CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags)
{
	struct CUctx_st *c;
	struct range *r;
	void *m;

	NEED_CTX(c);
	(void)flags;
	if (!p || !n)
		return CUDA_ERROR_INVALID_VALUE;
	sim_sync_all("cuMemHostAlloc");     /* implicitly synchronising */
	m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED || !(r = range_add(R_HOST, (CUdeviceptr)(uintptr_t)m, n, m,
					       c->ordinal, -1, 0)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	r->hostalloc = 1;
	*p = m;
	return CUDA_SUCCESS;
}

static CUresult host_drop(void *p, int hostalloc)
{
	struct range *r;
	pthread_mutex_lock(&sim_lock);
	r = find((CUdeviceptr)(uintptr_t)p, 0);
	if (!r || r->kind != R_HOST || r->base != (CUdeviceptr)(uintptr_t)p ||
	    r->hostalloc != hostalloc) {
		pthread_mutex_unlock(&sim_lock);
		return hostalloc ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	}
	range_unlink_locked(r);
	pthread_mutex_unlock(&sim_lock);
	if (hostalloc)
		munmap(r->host, r->size);
	free(r);
	return CUDA_SUCCESS;
}

API CUresult cuMemFreeHost(void *p)
{
	NEED_INIT();
	sim_sync_all("cuMemFreeHost");
	return host_drop(p, 1);
}

API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned int flags)
{
	struct range *r;
	NEED_INIT();
	if (!d || flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	r = find((CUdeviceptr)(uintptr_t)p, 0);
	pthread_mutex_unlock(&sim_lock);
	if (!r || r->kind != R_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	*d = (CUdeviceptr)(uintptr_t)p;      /* unified addressing */
	return CUDA_SUCCESS;
}

/* Pinning a large buffer takes long on a real machine (1-2 GB/s: a
 * minute for 100 GiB).  CKPT_CUDASIM_PIN_HOLD=FILE makes a registration of
 * more than 1 MiB take until FILE exists (tests: the state while pinning,
 * not a timing). */
static void pin_hold(size_t n)
{
	const char *f = getenv("CKPT_CUDASIM_PIN_HOLD");
	struct timespec ts = { 0, 10 * 1000000 };

	if (!f || !*f || n <= (1u << 20))
		return;
	while (access(f, F_OK) != 0)
		nanosleep(&ts, NULL);
}

API CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags)
{
	struct CUctx_st *c;
	NEED_CTX(c);
	(void)flags;
	if (!p || !n)
		return CUDA_ERROR_INVALID_VALUE;
	sim_sync_all("cuMemHostRegister");   /* implicitly synchronising */
	pin_hold(n);
	pthread_mutex_lock(&sim_lock);
	if (find((CUdeviceptr)(uintptr_t)p, 0) || find((CUdeviceptr)(uintptr_t)p + n - 1, 0)) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	}
	pthread_mutex_unlock(&sim_lock);
	if (!range_add(R_HOST, (CUdeviceptr)(uintptr_t)p, n, p, c->ordinal, -1, 0))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

API CUresult cuMemHostUnregister(void *p)
{
	NEED_INIT();
	sim_sync_all("cuMemHostUnregister");
	return host_drop(p, 0);
}
