/* gpu.h - the daemon's CUDA memory source.  CUDA is loaded with dlopen at
 * run time (never linked): on a machine without a driver or a device ckptd
 * says so once and stays host-only, and every call here fails cleanly.
 *
 * One interface, one table: everything CUDA goes through `struct gpu_ops`.
 * The real table (gpu.c) calls the CUDA driver API (libcuda.so.1 only); unit
 * tests install a fake table with gpu_set_ops(), integration tests run the
 * real table on the CUDA driver simulator (tests/cudasim).  Callers (srv.c, plan.c, stage.c,
 * restore.c) never see a CUDA type.
 *
 * Objects:
 *  - gpu_mem: one trainer allocation opened in ckptd (a cudaIpcMemHandle_t
 *    of a cudaMalloc base, or VMM chunks imported from POSIX fds and mapped
 *    into one reserved range).  Cached per (trainer pid, base): a second
 *    registration of the same allocation shares the mapping; the same base
 *    with different handle bytes means the trainer freed it and got the
 *    address again, so the old entry leaves the cache (its holders keep it
 *    until they let go) and the new one is opened.  Refcounted; loop thread.
 *  - gpu_sess: a trainer's ckpt_save_stream() state: a ring of slots, each
 *    an opened "ready" event (the trainer's), and the trainer's gate page.
 *    Refcounted; loop thread.
 *  - gpu_sync: one save's synchronisation: wait (host-side poll) for
 *    "ready" before the first copy, open the slot's gate when staged or
 *    abandoned.
 *
 * Gates: the trainer's stream waits (cuStreamWaitValue32 GEQ n, cyclic) on
 * word `slot` of a small page the trainer made (shm/gate_page.h) (a sealed memfd, registered
 * in its context, sent with its first stream SAVE).  ckptd opens a gate
 * with a plain CPU store of n into its own shared mapping of that page:
 * ckptd makes no stream wait for anything, so it needs no gate streams, and
 * nothing it holds (or a ckptd that died) can block a trainer: libckpt
 * opens its own gates when the connection to ckptd is lost.
 */
#ifndef CKPT_GPU_H
#define CKPT_GPU_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GPU_HANDLE_BYTES 64
#define GPU_UUID_BYTES   16
#define GPU_RING_SLOTS   8     /* event pairs per trainer (client agrees) */
#define GPU_MAX_DEVICES  64

/* 1 if the CUDA runtime loaded and at least one device answers, 0 if not
 * (the reason is logged once), computed once. */
int gpu_available(void);
/* Why the GPU path is off ("" when it is on). */
const char *gpu_reason(void);
/* GPUs the probe found but will not use (broken, PROHIBITED). */
int gpu_failed_devices(void);
/* "GPU <uuid> is not visible to ckptd ..." naming the likely causes, for
 * a GPU that device_of() does not know. */
void gpu_unknown_msg(const uint8_t uuid[GPU_UUID_BYTES], char *msg, size_t msglen);

/* Where the pinning of the staging pool stands (ckptctl status). */
enum gpu_pin_state {
	GPU_PIN_NONE = 0,     /* no GPU, or the pool is not to be pinned */
	GPU_PIN_WAITING,      /* until the first device context is made */
	GPU_PIN_RUNNING,      /* on its own thread; GPU copies wait */
	GPU_PIN_DONE,
	GPU_PIN_FAILED,       /* copies go through unpinned memory (logged) */
};
struct gpu_pin_info {
	int      state;       /* enum gpu_pin_state */
	uint64_t bytes, done; /* the pool's size, bytes pinned so far */
	uint64_t ms;          /* pinning so far, or how long it took */
};

/* A device's context faults (ckptctl status, metrics). */
struct gpu_dev_state {
	unsigned resets;       /* context resets after a sticky error */
	int      faulted;      /* CUresult waiting for its reset; 0: none */
	int      last_fault;   /* the error of the last reset */
	int64_t  last_at;      /* its time (epoch seconds) */
	char     last_name[96];
};

/* One copy of a batch: n bytes from src to dst (device or host by kind). */
struct gpu_xfer {
	void       *dst;
	const void *src;
	size_t      n;
};

/* --- the backend table ---------------------------------------------------
 * Every function returns 0 or a negative errno and, on failure, writes a
 * reason into msg.  dev is the daemon's CUDA ordinal. */
struct gpu_ops {
	const char *name;
	int  (*device_of)(const uint8_t uuid[GPU_UUID_BYTES]);   /* ordinal, -ENODEV */
	int  (*ipc_open)(int dev, const uint8_t h[GPU_HANDLE_BYTES], void **dptr,
			 char *msg, size_t msglen);
	void (*ipc_close)(int dev, void *dptr);
	int  (*vmm_reserve)(int dev, size_t size, void **va, char *msg, size_t msglen);
	/* import fd (always closed), map it at va + off for len bytes */
	int  (*vmm_map)(int dev, void *va, size_t off, size_t len, int fd,
			char *msg, size_t msglen);
	void (*vmm_free)(int dev, void *va, size_t mapped, size_t size);
	/* copy n bytes (kind 1 H2D, 2 D2H) on the device's copy stream after
	 * waiting on ev (NULL: none); returns once the copy is complete */
	int  (*copy)(int dev, void *dst, const void *src, size_t n, int kind,
		     void *ev, char *msg, size_t msglen);
	/* n copies (kind 1 H2D, 2 D2H) queued back to back on the device's
	 * copy stream, then one completion wait for them all: the per-copy
	 * cost is the call, not a round trip.  NULL: copy() per piece. */
	int  (*copy_many)(int dev, const struct gpu_xfer *x, size_t n, int kind,
			  char *msg, size_t msglen);
	/* 1 if ev (a trainer's event) has passed, 0 if not yet, -errno */
	int  (*event_ready)(void *ev, char *msg, size_t msglen);
	/* wait on the host until ev (a trainer's event) has passed, polling;
	 * -ECANCELED as soon as *cancel is set.  ckptd never makes its own
	 * streams wait on a trainer's event: if the trainer dies before the
	 * GPU reaches the record, the event may never complete. */
	int  (*event_wait)(void *ev, const atomic_int *cancel, char *msg, size_t msglen);
	int  (*host_register)(void *p, size_t n);
	/* optional (NULL: host_register, never waits, no info): the staging
	 * pool, pinned off the caller's thread in pieces of whole multiples
	 * of piece bytes; a wait (polling, -ECANCELED on *cancel) while
	 * [p, p+n) of it (p NULL: any of it) is being pinned; its state */
	int  (*pool_register)(void *p, size_t n, size_t piece);
	int  (*pool_wait)(const void *p, size_t n, const atomic_int *cancel,
			  char *msg, size_t msglen);
	void (*pin_info)(struct gpu_pin_info *out);
	/* optional: ckptd exits (no copy in flight): unpin pool (NULL: none),
	 * destroy the streams, release the contexts */
	void (*shutdown)(void *pool);
	void (*host_unregister)(void *p);
	/* optional: resets of dev's context so far (a mapping or event made
	 * under an older count is gone: make it again), and their story */
	unsigned (*dev_gen)(int dev);
	void (*dev_state)(int dev, struct gpu_dev_state *out);
	int  (*event_open)(int dev, const uint8_t h[GPU_HANDLE_BYTES], void **ev,
			   char *msg, size_t msglen);
	void (*event_close)(void *ev);
};

const struct gpu_ops *gpu_ops(void);             /* NULL when host-only */
/* gpu_ops(), or NULL with "no GPU in ckptd (why)" in msg */
const struct gpu_ops *gpu_need_ops(char *msg, size_t msglen);
void gpu_set_ops(const struct gpu_ops *ops);      /* tests: a test double */

/* --- allocations --------------------------------------------------------- */
enum gpu_mem_kind { GPU_MEM_IPC = 1, GPU_MEM_VMM = 2 };

struct gpu_mem {
	struct gpu_mem *next;          /* cache list */
	int            refs;
	int            cached;         /* still findable in the cache */
	pid_t          owner;
	uint64_t       base, size;     /* in the trainer's address space */
	enum gpu_mem_kind kind;
	uint8_t        key[GPU_HANDLE_BYTES];   /* handle bytes (IPC) or ids (VMM) */
	int            dev;
	uint8_t       *dptr;           /* our mapping */
	uint64_t       mapped;         /* VMM: bytes mapped so far */
	unsigned       gen;            /* the device's context resets when mapped */
};

/* Find or open the allocation [base, base+size) of process owner.  *hit is
 * set to 1 when an existing mapping was shared.  VMM entries come back with
 * mapped == 0 on a miss; add the chunks with gpu_mem_vmm_add().  Returns 0
 * and a new reference in *out, or -errno with msg filled. */
int  gpu_mem_get(pid_t owner, const uint8_t uuid[GPU_UUID_BYTES], uint64_t base,
		 uint64_t size, enum gpu_mem_kind kind,
		 const uint8_t key[GPU_HANDLE_BYTES], struct gpu_mem **out, int *hit,
		 char *msg, size_t msglen);
/* Map one VMM chunk at offset at (chunks arrive in order). fd is stolen. */
int  gpu_mem_vmm_add(struct gpu_mem *m, uint64_t at, uint64_t len, int fd,
		     char *msg, size_t msglen);
static inline int gpu_mem_ready(const struct gpu_mem *m)
{
	return m->kind == GPU_MEM_IPC || m->mapped == m->size;
}
void gpu_mem_unref(struct gpu_mem *m);           /* NULL-safe; closes at 0 */
size_t gpu_cache_count(void);                     /* entries findable; tests */

/* --- per-trainer event ring and per-save sync ---------------------------- */
struct gpu_sess;
struct gpu_sync;

/* A SAVE from ckpt_save_stream(): open (or reuse) the trainer's "ready"
 * event of slot; the save's gate is word slot of the session's gate page,
 * opened by raising it to seq.  page_fd (stolen; -1: none came) is the
 * trainer's gate page, adopted the first time (later copies must be the
 * same memfd).  *gs is created on first use.  Returns 0 and a new
 * gpu_sync, or -errno with msg. */
int  gpu_sess_save(struct gpu_sess **gs, const uint8_t uuid[GPU_UUID_BYTES],
		   unsigned slot, uint32_t seq, const uint8_t ready_h[GPU_HANDLE_BYTES],
		   int page_fd, struct gpu_sync **out, char *msg, size_t msglen);
/* The trainer left: open every gate at its last armed value, drop the
 * session's reference. */
void gpu_sess_close(struct gpu_sess *gs);

/* Open the save's gate (staged, failed or abandoned).  Thread-safe,
 * idempotent, NULL-safe. */
void gpu_sync_release(struct gpu_sync *s);
struct gpu_sync *gpu_sync_ref(struct gpu_sync *s);  /* NULL-safe; loop thread */
/* 1 when the save may be copied (no sync, or the trainer's "ready" has
 * passed), 0 not yet, -errno (msg) if the event failed.  Never blocks:
 * stagers pick another save meanwhile (saves queued behind this one may be
 * what the trainer's stream waits for).  Any thread. */
int  gpu_sync_ready(struct gpu_sync *s, char *msg, size_t msglen);
/* Wait on the host (polling) until gpu_sync_ready() says 1; -ECANCELED as
 * soon as *cancel is set; 0 at once for NULL.  Stager threads. */
int  gpu_sync_wait(struct gpu_sync *s, const atomic_int *cancel, char *msg, size_t msglen);
void gpu_sync_unref(struct gpu_sync *s);          /* releases too; loop thread */

/* --- copies (stager and restore threads) ---------------------------------
 * dst/src in host memory (the pinned pool or a pinned scratch buffer). */
/* gpu_copy_d2h first waits (once per save) for the trainer's "ready"
 * event of sync (NULL: none), giving up with -ECANCELED when *cancel is
 * set (the save was aborted, e.g. the trainer died). */
int  gpu_copy_d2h(const struct gpu_mem *m, uint64_t off, void *dst, size_t n,
		  struct gpu_sync *sync, const atomic_int *cancel,
		  char *msg, size_t msglen);
int  gpu_copy_h2d(const struct gpu_mem *m, uint64_t off, const void *src, size_t n,
		  char *msg, size_t msglen);

/* A batch of device-to-host pieces (a staging chunk's): pieces adjacent on
 * both sides are merged into one copy; pieces of one allocation with a
 * small gap between them (a caching allocator's 512-byte rounding) are
 * bridged: the whole span, gap bytes included, is copied into the batch's
 * scratch buffer and the pieces are laid out from it after the wait.  The
 * rest are queued together under one completion wait per device.  Add with
 * gpu_batch_add(), run with gpu_batch_run() (also run by gpu_batch_add()
 * when the batch or its scratch is full); the same waits and errors as
 * gpu_copy_d2h().  A span never leaves the allocation both pieces are in.
 * gpu_batch_release() frees the scratch (NULL-safe). */
#define GPU_BATCH_MAX     256
#define GPU_BATCH_PIECES  4096
#define GPU_BRIDGE_GAP    (64u << 10)   /* copying this costs about one copy call */
#define GPU_BRIDGE_SCRATCH (4u << 20)
struct gpu_piece {                     /* scratch + at -> dst, laid out after the wait */
	uint8_t  *dst;
	uint32_t  at, n;
};
struct gpu_batch {
	struct gpu_sync     *sync;         /* borrowed; NULL: none */
	const atomic_int    *cancel;       /* borrowed; NULL: none */
	size_t               n;
	const struct gpu_mem *m[GPU_BATCH_MAX];
	struct gpu_xfer      x[GPU_BATCH_MAX];
	uint8_t             *end;          /* where the last entry's pieces end in dst */
	int                  last_bridged; /* x[n-1] copies into scratch */
	size_t               npieces;
	struct gpu_piece     p[GPU_BATCH_PIECES];
	uint8_t             *scratch;      /* owned, GPU_BRIDGE_SCRATCH bytes, lazily */
	int                  scratch_pinned;
	size_t               scratch_used;
	uint64_t             copies, merged, bridged;  /* stats, tests */
};
int  gpu_batch_add(struct gpu_batch *b, const struct gpu_mem *m, uint64_t off, void *dst,
		   size_t n, char *msg, size_t msglen);
int  gpu_batch_run(struct gpu_batch *b, char *msg, size_t msglen);
void gpu_batch_drop(struct gpu_batch *b);        /* forget what is queued, copy nothing */
void gpu_batch_release(struct gpu_batch *b);

/* Pin host memory for fast copies (the staging pool, restore scratch).
 * 0, or -errno when there is no GPU or pinning failed; the memory stays
 * usable.  The real backend pins the pool when the first device context
 * is made (pinning needs one). */
int  gpu_host_register(void *p, size_t n);
void gpu_host_unregister(void *p);
/* The staging pool: pinned in pieces of whole chunks (chunk bytes), by a
 * thread of its own once the first device context is made, never on the
 * caller's.  Copies into it wait until it is done.  0 or -errno. */
int  gpu_pool_register(void *p, size_t n, size_t chunk);
void gpu_pin_info(struct gpu_pin_info *out);        /* zeros when no GPU */
const char *gpu_pin_state_name(int state);          /* "pinning", ... */
/* Context faults of device dev (zeros when none, no GPU, or dev out of
 * range); the resets of every device together. */
void gpu_dev_state(int dev, struct gpu_dev_state *out);
unsigned gpu_context_resets(void);
/* ckptd exits, every worker stopped: unpin the pool, release the GPUs. */
void gpu_shutdown(void *pool);

/* --- wire helpers -------------------------------------------------------- */
/* hex and UUID text: proto/hex.h (shared with libckpt) */

#endif
