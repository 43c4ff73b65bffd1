/* sim.h - internals of cudasim, the CUDA driver simulator (a test double of
 * libcuda.so.1 for machines without a GPU).  sim_dev.c owns the
 * configuration, devices and contexts; sim_mem.c the address space;
 * sim_stream.c owns hardware queues,
 * streams, events and the watchdog. */
#ifndef CUDASIM_SIM_H
#define CUDASIM_SIM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "../../daemon/cuda_api.h"

#define SIM_MAX_GPUS   16
#define SIM_MAX_QUEUES 32
#define SIM_MAGIC      0x4d495341444f4443ull    /* "CDOASIM" */

struct sim_op;

/* One hardware queue (CUDA_DEVICE_MAX_CONNECTIONS of them per context):
 * a FIFO executed by one thread.  A blocked operation blocks everything
 * behind it, whichever stream it came from. */
struct sim_queue {
	int              idx;
	struct CUctx_st *ctx;
	pthread_t        thread;
	struct sim_op   *head, *tail;
	uint64_t         submitted, completed;   /* ops, under ctx->lock */
	struct sim_op   *running;                /* under ctx->lock */
	_Atomic uint64_t blocked_since_ms;       /* 0: not blocked */
};

struct CUctx_st {
	int              ordinal, phys;
	int              refs;
	int              nq;
	pthread_mutex_t  lock;
	pthread_cond_t   cond;       /* queue work arrived / an op completed */
	struct sim_queue q[SIM_MAX_QUEUES];
	unsigned         nstreams;   /* created so far: queue = n % nq */
	struct CUstream_st *legacy;
	struct CUstream_st *streams; /* live streams (list) */
	int              stopping;
	/* a sticky error (CKPT_CUDASIM_STICKY_COPY): every call on the
	 * context returns it until cuDevicePrimaryCtxReset, which also
	 * makes the streams made before it invalid (epoch) */
	_Atomic int      sticky;
	_Atomic unsigned epoch;
};

struct CUstream_st {
	struct CUctx_st  *ctx;
	struct sim_queue *q;
	unsigned          id;        /* 0 = the legacy default stream */
	unsigned          flags;
	uint64_t          submitted, completed;   /* ops, under ctx->lock */
	int               destroyed, refs;        /* refs: queued ops + handle */
	unsigned          epoch;                  /* the context's, when made */
	struct CUstream_st *next;
};

/* An event's state lives in shared memory when it is interprocess. */
struct sim_event_state {
	uint64_t magic;
	_Atomic uint64_t recorded, completed;     /* record generations */
};

struct CUevent_st {
	uint64_t magic;
	struct sim_event_state *st;
	unsigned flags;
	int      fd;          /* interprocess: the memfd of st */
	int      imported;
	_Atomic int refs;     /* handle + queued ops */
	uint64_t nonce;
	struct CUctx_st *ctx; /* made or opened in; a reset of it makes it stale */
	unsigned epoch;       /* ctx's, then */
};

struct ipc_handle {           /* the 64 bytes of CUipcMemHandle / EventHandle */
	uint64_t magic;
	uint32_t kind;            /* 1 memory, 2 event */
	int32_t  pid, fd, phys;
	uint64_t size, nonce;
	uint8_t  pad[24];
};
_Static_assert(sizeof(struct ipc_handle) == CUDA_IPC_HANDLE_SIZE, "ipc handle");

/* The simulated GPU's own accesses to memory (copies, memsets, stream
 * memory operations on host words) are DMA on real hardware, outside the
 * C memory model: hidden from ThreadSanitizer, which would call every
 * trainer's plain store to a word its stream waits on a race.  Everything
 * else the simulator does is checked like any host code. */
#if defined(__SANITIZE_THREAD__)
#define SIM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)         /* clang */
#define SIM_TSAN 1
#endif
#endif
#ifdef SIM_TSAN
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#define SIM_DMA_BEGIN() __tsan_ignore_thread_begin()
#define SIM_DMA_END()   __tsan_ignore_thread_end()
#else
#define SIM_DMA_BEGIN() ((void)0)
#define SIM_DMA_END()   ((void)0)
#endif

/* Exported driver entry points; the checks that open most of them. */
#define API __attribute__((visibility("default")))
#define NEED_INIT() do { if (!sim.initialised) return CUDA_ERROR_NOT_INITIALIZED; } while (0)
#define NEED_CTX(c) do { NEED_INIT();                                \
	if (!((c) = sim_current())) return CUDA_ERROR_INVALID_CONTEXT;   \
	if ((c)->sticky) return (c)->sticky; } while (0)

/* sim_dev.c */
extern pthread_mutex_t sim_lock;         /* configuration, contexts, ranges */
extern struct sim_config {
	int ngpus, nvisible;
	int phys_of[SIM_MAX_GPUS];          /* ordinal -> physical */
	int nq;                             /* CUDA_DEVICE_MAX_CONNECTIONS */
	unsigned hang_ms;                   /* watchdog */
	unsigned op_us;                     /* latency of every copy */
	double   bytes_per_us;
	int      init_error;                /* CKPT_CUDASIM_INIT_ERROR */
	int      compute_mode;              /* CKPT_CUDASIM_EXCLUSIVE=1 */
	int      bad_phys;                  /* CKPT_CUDASIM_BAD_GPU: a broken GPU */
	unsigned sticky_copy;               /* CKPT_CUDASIM_STICKY_COPY: Nth D2H faults */
	int      sticky_dev;                /* CKPT_CUDASIM_STICKY_DEV: on this ordinal */
	int      initialised;
} sim;

struct CUctx_st *sim_current(void);
int  sim_ctx_of(struct CUctx_st *c, CUstream s, struct CUstream_st **out);
/* Host address behind device range [p, p+n): memory to memcpy; NULL if the
 * range is not device or mapped host memory (*err set). */
void *sim_xlate(CUdeviceptr p, size_t n, CUresult *err);
/* The part of [p, p+n) inside one mapping: its host address, *seg bytes
 * (VMM ranges mapped back to back continue in the next call); NULL if p
 * is not mapped device memory. */
void *sim_xlate_seg(CUdeviceptr p, size_t n, size_t *seg);
uint64_t sim_now_ms(void);
void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t sim_nonce(void);
/* Open another process's memfd named by an IPC handle ("mem", "event"). */
int  sim_open_peer(const struct ipc_handle *ih, const char *what);

/* sim_stream.c */
int  sim_ctx_start(struct CUctx_st *c);
/* Implicit synchronisation: wait until every operation submitted so far to
 * any stream of this process has completed ("what" names the caller for
 * the watchdog). */
void sim_sync_all(const char *what);
/* For the watchdog: how long a hardware queue has been blocked on its
 * running operation, if longer than limit ms (who: which, and what it
 * runs), else 0; and every queue's first operations, logged. */
uint64_t sim_queue_stuck(uint64_t now, uint64_t limit, char *who, size_t n);
void sim_queues_log(void);

/* sim_watchdog.c */
void sim_watchdog_start(void);
void sim_progress(void);                 /* an operation completed */
/* who has hung (blocked ms; 0: a wait that would never end): log what
 * every queue runs and abort. */
void sim_hang(const char *who, uint64_t ms) __attribute__((noreturn));
void sim_host_wait_begin(const char *what);
void sim_host_wait_end(void);

#endif
