/* cuda_api.h - the subset of the CUDA driver API (libcuda.so.1) that ckptd,
 * libckpt, the test trainer and the driver simulator share, declared here
 * so that nothing needs the CUDA toolkit to build.  Only the driver: no
 * libcudart.  Functions are looked up with dlsym() by the versioned names
 * that CUDA 12/13's cuda.h maps the plain names to (cuMemAlloc ->
 * cuMemAlloc_v2, ...); nothing links -lcuda.  Types, constants and struct
 * layouts are those of cuda.h (stable ABI). */
#ifndef CKPT_CUDA_API_H
#define CKPT_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#define CUDA_IPC_HANDLE_SIZE 64

typedef int CUresult;                      /* 0 = CUDA_SUCCESS */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct { char reserved[CUDA_IPC_HANDLE_SIZE]; } CUipcMemHandle;
typedef struct { char reserved[CUDA_IPC_HANDLE_SIZE]; } CUipcEventHandle;
typedef struct { char bytes[16]; } CUuuid;
typedef void (*CUhostFn)(void *);

/* CUresult values we name */
#define CUDA_SUCCESS                   0
#define CUDA_ERROR_INVALID_VALUE       1
#define CUDA_ERROR_OUT_OF_MEMORY       2
#define CUDA_ERROR_NOT_INITIALIZED     3
#define CUDA_ERROR_NO_DEVICE           100
#define CUDA_ERROR_INVALID_DEVICE      101
#define CUDA_ERROR_INVALID_CONTEXT     201
#define CUDA_ERROR_MAP_FAILED          205
#define CUDA_ERROR_INVALID_HANDLE      400
#define CUDA_ERROR_NOT_FOUND           500
#define CUDA_ERROR_NOT_READY           600
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED     713
#define CUDA_ERROR_NOT_PERMITTED       800
#define CUDA_ERROR_NOT_SUPPORTED       801
#define CUDA_ERROR_SYSTEM_DRIVER_MISMATCH 803
#define CUDA_ERROR_UNKNOWN             999
#define CUDA_ERROR_ILLEGAL_ADDRESS     700

/* streams and events */
#define CU_STREAM_DEFAULT              0x0
#define CU_STREAM_NON_BLOCKING         0x1
#define CU_STREAM_LEGACY               ((CUstream)0x1)
#define CU_STREAM_PER_THREAD           ((CUstream)0x2)
#define CU_EVENT_DISABLE_TIMING        0x2
#define CU_EVENT_INTERPROCESS          0x4
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1

/* cuStreamWaitValue32 flags (cuda.h CUstreamWaitValue_flags) */
#define CU_STREAM_WAIT_VALUE_GEQ       0x0   /* (int32_t)(*addr - value) >= 0 */
#define CU_STREAM_WAIT_VALUE_EQ        0x1   /* *addr == value */
#define CU_STREAM_WAIT_VALUE_AND       0x2   /* (*addr & value) != 0 */
#define CU_STREAM_WAIT_VALUE_NOR       0x3   /* ~(*addr | value) != 0 */
#define CU_STREAM_WAIT_VALUE_FLUSH     (1 << 30)
#define CU_STREAM_WRITE_VALUE_DEFAULT  0x0

/* host memory */
#define CU_MEMHOSTALLOC_PORTABLE       0x01
#define CU_MEMHOSTALLOC_DEVICEMAP      0x02
#define CU_MEMHOSTREGISTER_PORTABLE    0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP   0x02

/* CUpointer_attribute */
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE     2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED      8
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL  9
#define CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE 10
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE      12
#define CU_MEMORYTYPE_HOST             0x1
#define CU_MEMORYTYPE_DEVICE           0x2

/* CUdevice_attribute */
#define CU_DEVICE_ATTRIBUTE_COMPUTE_MODE 20
#define CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED 99
#define CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 102
#define CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED 103
#define CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED 125
#define CU_COMPUTEMODE_DEFAULT           0
#define CU_COMPUTEMODE_PROHIBITED        2
#define CU_COMPUTEMODE_EXCLUSIVE_PROCESS 3

/* VMM */
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 0x1
#define CU_MEM_HANDLE_TYPE_WIN32                 0x2
#define CU_MEM_HANDLE_TYPE_WIN32_KMT             0x4
#define CU_MEM_HANDLE_TYPE_FABRIC                0x8
#define CU_MEM_ALLOCATION_TYPE_PINNED  0x1
#define CU_MEM_LOCATION_TYPE_DEVICE    0x1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 0x3
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM 0x0

typedef struct {
	int type;          /* CUmemLocationType */
	int id;
} CUmemLocation;

typedef struct {
	CUmemLocation location;
	int flags;                  /* CUmemAccess_flags */
} CUmemAccessDesc;

typedef struct {
	int type;                   /* CUmemAllocationType */
	int requestedHandleTypes;   /* CUmemAllocationHandleType */
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp layout");
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc layout");

/* Every driver function used here, by the exact symbol libcuda.so.1
 * exports for the CUDA 12/13 headers' default (legacy stream) build.
 * X(symbol, parameter list).  All return CUresult. */
#define CUDA_DRIVER_FUNCS(X) \
	X(cuInit, (unsigned int flags)) \
	X(cuDriverGetVersion, (int *version)) \
	X(cuGetErrorString, (CUresult e, const char **s)) \
	X(cuDeviceGetCount, (int *n)) \
	X(cuDeviceGet, (CUdevice *d, int ordinal)) \
	X(cuDeviceGetUuid_v2, (CUuuid *u, CUdevice d)) \
	X(cuDeviceGetAttribute, (int *v, int attr, CUdevice d)) \
	X(cuDevicePrimaryCtxRetain, (CUcontext *c, CUdevice d)) \
	X(cuDevicePrimaryCtxRelease_v2, (CUdevice d)) \
	X(cuDevicePrimaryCtxReset_v2, (CUdevice d)) \
	X(cuCtxSetCurrent, (CUcontext c)) \
	X(cuCtxGetCurrent, (CUcontext *c)) \
	X(cuCtxPushCurrent_v2, (CUcontext c)) \
	X(cuCtxPopCurrent_v2, (CUcontext *c)) \
	X(cuCtxGetDevice, (CUdevice *d)) \
	X(cuCtxSynchronize, (void)) \
	X(cuMemAlloc_v2, (CUdeviceptr *p, size_t n)) \
	X(cuMemAllocManaged, (CUdeviceptr *p, size_t n, unsigned int flags)) \
	X(cuMemFree_v2, (CUdeviceptr p)) \
	X(cuMemGetAddressRange_v2, (CUdeviceptr *base, size_t *size, CUdeviceptr p)) \
	X(cuPointerGetAttribute, (void *data, int attr, CUdeviceptr p)) \
	X(cuIpcGetMemHandle, (CUipcMemHandle *h, CUdeviceptr p)) \
	X(cuIpcOpenMemHandle_v2, (CUdeviceptr *p, CUipcMemHandle h, unsigned int flags)) \
	X(cuIpcCloseMemHandle, (CUdeviceptr p)) \
	X(cuIpcGetEventHandle, (CUipcEventHandle *h, CUevent e)) \
	X(cuIpcOpenEventHandle, (CUevent *e, CUipcEventHandle h)) \
	X(cuMemCreate, (CUmemGenericAllocationHandle *h, size_t n, \
			const CUmemAllocationProp *prop, unsigned long long flags)) \
	X(cuMemRelease, (CUmemGenericAllocationHandle h)) \
	X(cuMemAddressReserve, (CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, \
				unsigned long long flags)) \
	X(cuMemAddressFree, (CUdeviceptr p, size_t n)) \
	X(cuMemMap, (CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, \
		     unsigned long long flags)) \
	X(cuMemUnmap, (CUdeviceptr p, size_t n)) \
	X(cuMemSetAccess, (CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t count)) \
	X(cuMemExportToShareableHandle, (void *out, CUmemGenericAllocationHandle h, int type, \
					 unsigned long long flags)) \
	X(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *h, void *os, int type)) \
	X(cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle *h, void *addr)) \
	X(cuMemGetAllocationPropertiesFromHandle, (CUmemAllocationProp *prop, \
						    CUmemGenericAllocationHandle h)) \
	X(cuMemGetAllocationGranularity, (size_t *g, const CUmemAllocationProp *prop, int option)) \
	X(cuMemHostAlloc, (void **p, size_t n, unsigned int flags)) \
	X(cuMemFreeHost, (void *p)) \
	X(cuMemHostGetDevicePointer_v2, (CUdeviceptr *d, void *p, unsigned int flags)) \
	X(cuMemHostRegister_v2, (void *p, size_t n, unsigned int flags)) \
	X(cuMemHostUnregister, (void *p)) \
	X(cuStreamCreate, (CUstream *s, unsigned int flags)) \
	X(cuStreamDestroy_v2, (CUstream s)) \
	X(cuStreamGetCtx, (CUstream s, CUcontext *c)) \
	X(cuStreamSynchronize, (CUstream s)) \
	X(cuStreamQuery, (CUstream s)) \
	X(cuStreamWaitEvent, (CUstream s, CUevent e, unsigned int flags)) \
	X(cuStreamWaitValue32_v2, (CUstream s, CUdeviceptr a, uint32_t v, unsigned int flags)) \
	X(cuStreamWriteValue32_v2, (CUstream s, CUdeviceptr a, uint32_t v, unsigned int flags)) \
	X(cuMemcpyHtoDAsync_v2, (CUdeviceptr d, const void *s, size_t n, CUstream st)) \
	X(cuMemcpyDtoHAsync_v2, (void *d, CUdeviceptr s, size_t n, CUstream st)) \
	X(cuMemcpyHtoD_v2, (CUdeviceptr d, const void *s, size_t n)) \
	X(cuMemcpyDtoH_v2, (void *d, CUdeviceptr s, size_t n)) \
	X(cuMemsetD32Async, (CUdeviceptr d, unsigned int v, size_t n, CUstream st)) \
	X(cuLaunchHostFunc, (CUstream s, CUhostFn fn, void *arg)) \
	X(cuEventCreate, (CUevent *e, unsigned int flags)) \
	X(cuEventDestroy_v2, (CUevent e)) \
	X(cuEventRecord, (CUevent e, CUstream s)) \
	X(cuEventQuery, (CUevent e)) \
	X(cuEventSynchronize, (CUevent e))

/* A table of pointers to all of them: struct cuda_driver d; d.cuInit(0). */
#define CUDA_DRIVER_FIELD(name, args) CUresult (*name) args;
struct cuda_driver {
	CUDA_DRIVER_FUNCS(CUDA_DRIVER_FIELD)
};
#undef CUDA_DRIVER_FIELD

#ifdef CUDA_DRIVER_LOADER
#include <dlfcn.h>
/* Fill *d from a dlopen()ed libcuda.so.1.  NULL, or the first name the
 * driver lacks (then *d is partly filled: do not use it). */
static inline const char *cuda_driver_load(void *h, struct cuda_driver *d)
{
#define CUDA_DRIVER_LOAD(name, args) \
	if (!(*(void **)&d->name = dlsym(h, #name))) return #name;
	CUDA_DRIVER_FUNCS(CUDA_DRIVER_LOAD)
#undef CUDA_DRIVER_LOAD
	return NULL;
}
#endif

#endif
