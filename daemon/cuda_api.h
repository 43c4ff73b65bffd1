/* cuda_api.h - the few CUDA runtime / driver ABI pieces ckptd and libckpt
 * use, declared here so that neither needs the CUDA toolkit to build.  Every
 * function is looked up with dlsym() at run time; nothing links -lcuda or
 * -lcudart.  Values are those of CUDA 12/13's driver_types.h and cuda.h
 * (stable ABI).  Only types and constants live here; the tables of function
 * pointers are in daemon/gpu.c and client/gpu_client.c. */
#ifndef CKPT_CUDA_API_H
#define CKPT_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#define CUDA_IPC_HANDLE_SIZE 64

typedef struct { char reserved[CUDA_IPC_HANDLE_SIZE]; } cudaIpcMemHandle_t;
typedef struct { char reserved[CUDA_IPC_HANDLE_SIZE]; } cudaIpcEventHandle_t;
typedef struct { char bytes[16]; } CUuuid;

typedef int cudaError_t;               /* 0 = cudaSuccess */
typedef int CUresult;                  /* 0 = CUDA_SUCCESS */
typedef void *cudaStream_t;            /* == CUstream */
typedef void *cudaEvent_t;             /* == CUevent */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;

/* cudaError_t values we name */
#define CUDA_ERR_INSUFFICIENT_DRIVER 35
#define CUDA_ERR_NO_DEVICE           100
#define CUDA_ERR_NOT_READY           600

/* cudaMemcpyKind */
#define CUDA_MEMCPY_H2D 1
#define CUDA_MEMCPY_D2H 2

/* flags */
#define CUDA_EVENT_DISABLE_TIMING   0x02
#define CUDA_EVENT_INTERPROCESS     0x04
#define CUDA_STREAM_NON_BLOCKING    0x01
#define CUDA_IPC_LAZY_ENABLE_PEER   0x01
#define CUDA_HOST_REGISTER_PORTABLE 0x01
#define CUDA_HOST_REGISTER_MAPPED   0x02
#define CUDA_HOST_ALLOC_PORTABLE    0x01
#define CUDA_HOST_ALLOC_MAPPED      0x02

/* cudaMemoryType */
#define CUDA_MEM_DEVICE 2

/* CU_POINTER_ATTRIBUTE_* */
#define CU_PTR_ATTR_MEMORY_TYPE     2
#define CU_PTR_ATTR_DEVICE_ORDINAL  9
#define CU_PTR_ATTR_IS_LEGACY_IPC   17   /* CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE */
#define CU_MEMORYTYPE_DEVICE        2

/* VMM */
#define CU_MEM_HANDLE_TYPE_POSIX_FD   0x1
#define CU_MEM_LOCATION_TYPE_DEVICE   0x1
#define CU_MEM_ACCESS_FLAGS_PROT_RW   0x3
#define CU_STREAM_WAIT_VALUE_GEQ      0x0

typedef struct {
	int type;          /* CUmemLocationType */
	int id;
} CUmemLocation;

typedef struct {
	CUmemLocation location;
	int flags;                  /* CUmemAccess_flags */
} CUmemAccessDesc;

#endif
