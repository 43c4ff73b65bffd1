/* gpu_client.h - libckpt's seam for CUDA device memory: tells whether a
 * pointer the trainer registers is CUDA device memory, exports it to ckptd
 * (a CUDA IPC handle of a cudaMalloc allocation, or POSIX fds of VMM
 * chunks), and keeps the ring of "ready" events and gates that
 * ckpt_save_stream() uses.  Only the CUDA driver API (libcuda.so.1, found
 * with dlopen() at run time, never linked): the trainer may use any CUDA
 * runtime version, or none; libckpt works the same without CUDA.  Internal to libckpt (gpu_client_ prefix). */
#ifndef CKPT_GPU_CLIENT_H
#define CKPT_GPU_CLIENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define GPU_CLIENT_HANDLE   64    /* cudaIpc{Mem,Event}Handle_t bytes */
#define GPU_CLIENT_RING     8     /* stream saves at once (== daemon GPU_RING_SLOTS) */
#define GPU_CLIENT_MAX_CHUNKS 1024 /* VMM chunks one tensor may span */
#define GPU_CLIENT_FDS_PER_MSG 8   /* == PROTO_MAX_FDS */

struct gpu_client_mem {
	const void *dptr;       /* device pointer, as given */
	size_t      nbytes;
	int         device;     /* CUDA ordinal here (not for the wire) */
	int         managed;    /* cudaMallocManaged: cannot be exported */
};

/* Describe [ptr, ptr + nbytes).  Returns 0 and fills *out when ptr is CUDA
 * device memory; -ENOTSUP when no CUDA runtime can be loaded, CUDA has no
 * usable device or driver here, or ptr is not device memory (host, managed,
 * unregistered).  *out is untouched on failure.  Thread-safe; the runtime
 * is looked up once per process.
 *
 * Note: on Linux ENOTSUP and EOPNOTSUPP are the same number, so "this is
 * device memory but we cannot use it" cannot be a different return code;
 * the caller decides that after a 0 return. */
int gpu_client_describe(const void *ptr, size_t nbytes,
			struct gpu_client_mem *out);

/* Why CUDA is unusable in this process ("" if it is usable or untried). */
const char *gpu_client_reason(void);

enum { GPU_CLIENT_IPC = 1, GPU_CLIENT_VMM = 2 };

/* What ckptd needs to open the allocation holding a tensor. */
struct gpu_client_export {
	int      kind;                      /* GPU_CLIENT_IPC / _VMM */
	uint8_t  uuid[16];                  /* the GPU, by UUID */
	uint64_t base, size;                /* allocation (IPC) or VMM range */
	uint64_t offset;                    /* of the tensor from base */
	uint8_t  key[GPU_CLIENT_HANDLE];    /* IPC handle, or VMM handle ids */
	unsigned nchunks;                   /* VMM: fds[i] maps chunk[i] */
	uint64_t chunk[GPU_CLIENT_MAX_CHUNKS];
	int      fds[GPU_CLIENT_MAX_CHUNKS];   /* owned: gpu_client_export_release */
};

/* Export the memory behind mem.  0, or -errno with a reason in err that
 * says why and what to do (memory that cannot be shared). */
int  gpu_client_export(const struct gpu_client_mem *mem,
		       struct gpu_client_export *out, char *err, size_t errlen);
void gpu_client_export_release(struct gpu_client_export *ex);  /* closes fds */

/* CUDA_REGION_ADD's JSON for chunks [first, first+n) of ex (VMM), or the
 * whole IPC region (first = n = 0).  New reference; NULL on ENOMEM. */
json_t *gpu_client_region_json(const struct gpu_client_export *ex,
			       uint64_t region, unsigned first, unsigned n);


/* --- the ring ----------------------------------------------------------------
 * Slot i is busy from ckpt_save_stream() until its save is STAGED (or
 * failed); a busy slot's event is never re-recorded.  Slot i's save: the
 * trainer's "ready" event i (ckptd polls it), and gate word i of the gate
 * page (gpu_gates.h), which the stream waits on until it reaches seq[i].
 * The bookkeeping is plain C (unit-tested); events and page are made on
 * the device on first use. */
struct gpu_gates;
struct gpu_ring {
	uint8_t  busy[GPU_CLIENT_RING];
	uint64_t ticket[GPU_CLIENT_RING];   /* 0 until bound */
	uint32_t seq[GPU_CLIENT_RING];      /* slot i's last save waits for this */
	unsigned next;                      /* round robin */
	int      dev;                       /* -1 until events exist */
	int      sock;                      /* the connection (borrowed), for the
	                                       gates' watcher; -1: none */
	int      page_sent;                 /* ckptd accepted a SAVE with the page */
	void    *ready[GPU_CLIENT_RING];    /* ours, interprocess */
	struct gpu_gates *gates;            /* NULL until the first stream save */
};

void gpu_ring_init(struct gpu_ring *r);
int  gpu_ring_acquire(struct gpu_ring *r);                  /* slot, -EBUSY */
void gpu_ring_bind(struct gpu_ring *r, unsigned slot, uint64_t ticket);
void gpu_ring_release(struct gpu_ring *r, unsigned slot);
int  gpu_ring_busy(const struct gpu_ring *r);               /* count; tests */
/* The connection is closing (r->sock still open): destroy the events and
 * hand the gates to their watcher (gpu_gates_close). */
void gpu_ring_destroy(struct gpu_ring *r);

/* CUDA memory was registered: make the gate page now if a context is
 * current (pinning it synchronises with the device, better done before
 * training than inside the first ckpt_save_stream()).  Best effort. */
void gpu_ring_prepare(struct gpu_ring *r);

/* What SAVE's "cuda" object needs for one stream save. */
struct gpu_ring_save {
	uint8_t  uuid[16];                  /* the stream's GPU */
	uint8_t  ready[GPU_CLIENT_HANDLE];  /* slot's event handle */
	uint32_t seq;                       /* the gate opens at this value */
	int      page_fd;                   /* send it (borrowed), or -1 */
};

/* Record slot's "ready" on stream and arm its gate at the slot's next
 * sequence number (the gate page is made on first use, in the stream's
 * context).  0, or -errno with a reason in err. */
int gpu_ring_record(struct gpu_ring *r, unsigned slot, void *stream,
		    struct gpu_ring_save *out, char *err, size_t errlen);
/* Make stream wait until slot's gate reaches seq (the save recorded with
 * it is staged or abandoned; SAVE accepted).  A later save on the slot
 * only raises the word, so seq may be an older save's.  Never blocks the
 * host. */
int gpu_ring_wait(struct gpu_ring *r, unsigned slot, uint32_t seq, void *stream,
		  char *err, size_t errlen);

#endif
