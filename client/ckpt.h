/* ckpt.h - libckpt, the trainer's side of ckptd.
 *
 * A trainer process (one per rank) connects to the node's ckptd, allocates
 * the tensors it wants checkpointed with ckpt_alloc() (host memory the daemon
 * can read and restore into) or registers CUDA memory, and calls ckpt_save()
 * every few steps.  ckpt_save() returns as soon as the daemon accepted the
 * request; the tensors may be modified again once the save is STAGED.
 *
 * Every function returns 0 (or a count) on success and a negative errno on
 * failure; ckpt_strerror() turns it into text and ckpt_last_error() gives
 * the daemon's own explanation of the last failure on that handle.  The
 * library never logs, exits or aborts.  A handle may be used by one thread
 * at a time.
 */
#ifndef CKPT_H
#define CKPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_API_VERSION 1

typedef struct ckpt_client ckpt_client;

typedef enum {
	CKPT_F64 = 0, CKPT_F32, CKPT_F16, CKPT_BF16,
	CKPT_I64, CKPT_I32, CKPT_I16, CKPT_I8, CKPT_U8, CKPT_BOOL,
	CKPT_DTYPE_COUNT
} ckpt_dtype;

/* A save goes STAGED, REPLICATED, DURABLE, COMMITTED, in that order (the
 * values keep their first numbering; ckpt_wait knows the order).
 * REPLICATED comes only when ckptd runs the memory levels across nodes
 * (memory_replicas or persist_every): waiting for it otherwise returns at
 * DURABLE.  A step committed at memory level (persist_every) has no
 * DURABLE: waiting for DURABLE returns at COMMITTED. */
typedef enum {
	CKPT_STAGED = 1,     /* copied into the daemon: tensors may change */
	CKPT_DURABLE = 2,    /* this rank's files are on disk, fsynced */
	CKPT_COMMITTED = 3,  /* every rank durable (or, at memory level,
			        replicated), checkpoint published */
	CKPT_REPLICATED = 4, /* in RAM on this node and its memory_replicas
			        partner nodes (after STAGED, before DURABLE) */
} ckpt_phase;

#define CKPT_LATEST   (-1)
#define CKPT_PARTIAL  0x1u           /* restore the intersection only */
#define CKPT_MAX_NDIM 8
/* Steps go from 0 to CKPT_MAX_STEP (a checkpoint is iter_<9 digits>); a
 * larger one is refused with -EINVAL.  Within a job they only go up: a
 * step older than the newest checkpoint is refused with -EINVAL, one
 * already committed with -EEXIST (README.md, "Rolling back"). */
#define CKPT_MAX_STEP 999999999ull

/* Default socket when none is given and $CKPT_SOCKET is unset. */
#define CKPT_DEFAULT_SOCKET "/run/ckpt/ckptd.sock"

/* Connect and say HELLO.  socket_path NULL means $CKPT_SOCKET, else
 * CKPT_DEFAULT_SOCKET.  job is a path-safe name ([A-Za-z0-9_.-], <= 64);
 * 0 <= rank < world_size.  *out is a new handle (caller frees with
 * ckpt_close); untouched on failure.  -EBUSY: ckptd serves max_clients
 * connections, or this user already holds max_clients_per_uid. */
int ckpt_connect(const char *socket_path, const char *job, int rank,
		 int world_size, ckpt_client **out);
/* Closes the connection and unmaps ckpt_alloc() memory.  NULL-safe.
 * Saves already STAGED are still completed by the daemon; stream saves not
 * yet staged fail, and their streams go on once ckptd has noticed (it
 * never sees a torn save as staged).  Never blocks. */
void ckpt_close(ckpt_client *c);

/* Host memory shared with the daemon (a sealed memfd), page aligned and
 * zero-filled.  NULL on failure (see ckpt_last_error).  Valid until
 * ckpt_free() or ckpt_close(). */
void *ckpt_alloc(ckpt_client *c, size_t nbytes);
int   ckpt_free(ckpt_client *c, void *ptr);   /* unregisters its tensors */

/* Register (or re-register: replaces) a tensor.  ptr must lie inside
 * memory from ckpt_alloc(), or be CUDA device memory where the daemon has a
 * GPU: from cudaMalloc (shared with a CUDA IPC handle, which needs the
 * trainer and ckptd in one PID namespace: in containers use VMM memory),
 * or VMM memory from cuMemCreate with POSIX-fd handles (PyTorch
 * expandable_segments:True; sent as fds).  Other device memory (cudaMallocAsync pools, managed
 * memory) is refused with a message saying so; so is VMM memory whose
 * handle types lack POSIX_FILE_DESCRIPTOR (e.g. FABRIC only): -EOPNOTSUPP
 * here, at registration, naming the handle types.  A zero-element tensor
 * may have any pointer (NULL, as PyTorch gives an empty CUDA tensor, or the
 * end of an allocation).  Borrowed: the caller keeps
 * the memory alive; unregister a CUDA allocation's last tensor before
 * freeing it (ckptd holds a mapping while tensors are registered).
 * -ENOSPC past max_tensors; -E2BIG when the group's safetensors header
 * (names, dtypes, shapes of its tensors on this rank) would pass the
 * format's 100 MiB: use shorter names or more groups.  Pages of
 * ckpt_alloc() memory never written are saved as zeros without ckptd
 * reading them (they cost no memory). */
int ckpt_register(ckpt_client *c, const char *group, const char *name,
		  const void *ptr, ckpt_dtype dtype, int ndim,
		  const int64_t *shape);
int ckpt_unregister(ckpt_client *c, const char *group, const char *name);

/* Flags of ckpt_register_flags().  CKPT_FROZEN: training does not change
 * this tensor (a fine-tune's frozen weights, requires_grad=False).  ckptd
 * keeps a group's frozen tensors in a file of their own,
 * <group>/rank_NNNNN.frozen.safetensors (manifest format 4), which a save
 * links to the previous checkpoint's instead of copying and writing it
 * (README, Incremental saves): the trainer's stall is the copy of the
 * rest.  A promise, checked: every 4th save at the latest copies and
 * compares the frozen tensors, so one that did change in place is saved
 * stale by at most 3 saves and then written as it is; any change of the
 * registrations (a tensor added, re-registered, dropped) makes the next
 * save copy and compare them too.  Registering again without
 * the flag unfreezes it (its next save copies it). */
#define CKPT_FROZEN 1u

/* Where this rank's piece of a global tensor sits. */
struct ckpt_layout {
	int64_t global_shape[CKPT_MAX_NDIM]; /* the whole tensor */
	int64_t offset[CKPT_MAX_NDIM];       /* first index of this piece, per dim */
	int replica_index;                   /* 0 .. replica_count-1 */
	int replica_count;                   /* ranks holding this same piece; 1 = not replicated */
};

/* ckpt_register() (layout NULL) or ckpt_register_global() (layout set)
 * with flags (0: the same call).  -EINVAL for unknown flags; -EOPNOTSUPP
 * for CKPT_FROZEN with a ckptd that does not know it. */
int ckpt_register_flags(ckpt_client *c, const char *group, const char *name,
			const void *ptr, ckpt_dtype dtype, int ndim,
			const int64_t *shape, const struct ckpt_layout *layout,
			unsigned flags);

/* Register (or re-register) this rank's piece of a global tensor: a dense
 * box of it, row-major and contiguous at ptr (memory as for
 * ckpt_register()), local_shape[ndim] elements starting at
 * layout->offset.  Every rank that holds a piece of (group, name)
 * registers it with the same dtype and global shape.
 *   DDP (every rank holds everything): offset 0, local = global,
 *     replica_index = rank, replica_count = world size.
 *   Row / column / block sharding: offsets differ, replica_count 1.
 *   Sharded and replicated (HSDP): both.
 * Save: each distinct piece is written once, by one of its replicas (chosen
 * from the piece alone, a hash of its name and offset, so the replicas
 * spread the pieces among them; the others neither copy nor write it),
 * so a DDP save writes the model once, not once per rank.  The commit
 * refuses, on every rank and with an error naming the tensor, a global
 * tensor whose pieces do not tile its global shape exactly (a gap, an
 * overlap, ranks disagreeing on dtype or global shape, a replica group
 * whose members disagree); nothing is published.
 * Restore (ckpt_restore(), in a job of any world size, each rank with its
 * new layout): every registered piece is filled from the saved pieces that
 * overlap it, reading only the 1 MiB chunks that hold bytes it needs, each
 * chunk once, and checking each against its CRC32C before using it.  A
 * chunk that does not match fails that restore with -EBADMSG naming it
 * (other ranks, which read other chunks, may already hold that step, so
 * the rank does not walk back alone); ckptd remembers the damage and the
 * next restore of every rank passes over that checkpoint, as over one that
 * does not verify.  Only what it reads is checked: a damaged
 * byte elsewhere does not block it (ckptctl verify finds it).  Strict by
 * default: a registered global tensor the checkpoint does not hold is an
 * error naming it; with CKPT_PARTIAL the rest is restored and it is
 * listed by ckpt_restore_missing().  Another dtype or global shape is an
 * error either way.  Global tensors of the checkpoint that this rank does
 * not register are not an error.  Rank-local tensors (ckpt_register) and
 * blobs restore only into the same rank of a job of the same world size:
 * in another world size they are missing (strict error, or reported with
 * CKPT_PARTIAL).
 * -EOPNOTSUPP when the daemon predates global tensors. */
int ckpt_register_global(ckpt_client *c, const char *group, const char *name,
			 const void *ptr, ckpt_dtype dtype, int ndim,
			 const int64_t *local_shape, const struct ckpt_layout *layout);

/* A small opaque per-rank blob (RNG state, data-loader progress), copied
 * now; saved with every later ckpt_save().  Replaces a blob of that name.
 * ckptd holds blobs in its memory: -EFBIG above max_blob_bytes, -ENOSPC
 * past max_blobs, max_client_blob_bytes (this client's blobs together) or
 * max_total_blob_bytes (every client's), the message naming the limit. */
int ckpt_put_blob(ckpt_client *c, const char *name, const void *data,
		  size_t len);

/* Ask for a checkpoint of everything registered at this step (0 to
 * CKPT_MAX_STEP, above the job's newest checkpoint).  Returns 0
 * once ckptd accepted it, with *ticket (may be NULL) identifying the save
 * for ckpt_wait(); how the save ends is ckpt_wait()'s to tell.  A negative
 * errno means no save was accepted and *ticket is untouched -- except when
 * ckptd's answer never arrives or cannot be read (the connection is lost,
 * -EPROTO): then whether ckptd took the save is unknown, and only the
 * checkpoints on disk (ckptctl list) can tell. */
int ckpt_save(ckpt_client *c, uint64_t step, uint64_t *ticket);

/* The same for CUDA tensors, without blocking the CPU or the GPU: records
 * an interprocess "ready" event on cuda_stream (a cudaStream_t; call with
 * its device current), ckptd copies the tensors once "ready" has passed,
 * and cuda_stream waits (cuStreamWaitValue32) on a word of a small pinned
 * page of this handle's until ckptd opens it, so kernels queued on it
 * after this call (the optimizer step) run only once the save is STAGED.
 * Other streams that write the tensors must wait on cuda_stream.
 * (ckpt_save() also works with CUDA tensors: the caller then synchronizes
 * before it, and waits for CKPT_STAGED before changing them.)
 * The stream never waits on ckptd for longer than the connection lasts:
 * when it ends (ckptd crashed, was killed, or closed it; or ckpt_close(),
 * once ckptd has let go) a thread of libckpt's opens every gate, and
 * unstaged saves fail.  Pinning the page synchronises with the device: it
 * happens at the first ckpt_register() of CUDA memory (or, failing that,
 * in the first ckpt_save_stream()).
 *
 * Whenever ckptd accepted the save, *ticket (may be NULL) is set and the
 * return value is >= 0:
 *   0               accepted; cuda_stream waits for the save to be STAGED.
 *   CKPT_UNORDERED  accepted, but cuda_stream could not be made to wait
 *                   (ckpt_last_error() says why): call ckpt_wait(c,
 *                   *ticket, CKPT_STAGED, -1) before anything changes the
 *                   tensors.  The save itself goes on as usual.
 * A negative errno means no save was accepted (with ckpt_save()'s
 * exception for an answer that never arrives) and *ticket is untouched:
 * -EBUSY when 8 such saves are still staging, -EOPNOTSUPP when ckptd has
 * no GPU or the driver lacks stream memory operations, the errors of
 * ckpt_save(), or the CUDA error that kept the "ready" event from being
 * recorded. */
#define CKPT_UNORDERED 1
int ckpt_save_stream(ckpt_client *c, uint64_t step, void *cuda_stream,
		     uint64_t *ticket);

/* ckpt_save_stream() with flags (0: the same call).  CKPT_GATE_LATER:
 * record "ready" on cuda_stream but do not make it wait, so that work
 * queued after the call (the next forward and backward pass) runs while
 * ckptd copies; before anything changes the tensors (the optimizer step),
 * gate the stream that does it with ckpt_gate_stream(), or ckpt_wait() for
 * CKPT_STAGED.  Returns 0 once accepted (never CKPT_UNORDERED: nothing is
 * gated yet), else as ckpt_save_stream(); -EINVAL for an unknown flag. */
#define CKPT_GATE_LATER 0x1u
int ckpt_save_stream_flags(ckpt_client *c, uint64_t step, void *cuda_stream,
			   unsigned flags, uint64_t *ticket);

/* Make cuda_stream (a cudaStream_t; any stream of the save's GPU) wait,
 * on the GPU, until the stream save ticket is STAGED: kernels queued on
 * it after this call run only then.  The CPU never blocks.  Like the gate
 * of ckpt_save_stream(), it opens when the save fails, or when the
 * connection to ckptd ends (the save then fails): a stream never waits
 * forever.  Idempotent: a save already known to be STAGED, or already
 * gated on this stream, queues nothing.
 *   0        the stream waits (or needs not: already STAGED)
 *   -ENOENT  no such ticket on this handle (never issued, or forgotten:
 *            past 4096 saves a handle forgets the oldest finished ones)
 *   -EINVAL  the ticket is a ckpt_save(), which has no gate
 *   the save's error (as ckpt_wait() returns it) when it failed: nothing
 *            is queued, the failed save needs no ordering
 *   -ENXIO, -EINVAL, -EOPNOTSUPP when the stream cannot be made to wait
 *            (ckpt_last_error() says why): ckpt_wait(c, ticket,
 *            CKPT_STAGED, -1) before anything changes the tensors. */
int ckpt_gate_stream(ckpt_client *c, uint64_t ticket, void *cuda_stream);

/* Wait until the save reached phase (or failed).  timeout_ms < 0 waits
 * forever, 0 polls.  Returns 0, the save's error (e.g. -EIO, -ENOSPC,
 * -ENXIO when the GPU or its driver failed,
 * -ETIMEDOUT when a rank missed the deadline, -ECANCELED when another
 * rank failed), or -EAGAIN if the timeout passed first. */
int ckpt_wait(ckpt_client *c, uint64_t ticket, ckpt_phase phase,
	      int timeout_ms);

/* Microseconds from acceptance to each phase (0 if not reached). */
struct ckpt_times {
	uint64_t staged_us, durable_us, committed_us;
	uint64_t bytes;
};
int ckpt_times(ckpt_client *c, uint64_t ticket, struct ckpt_times *out);

/* Restore the newest verifying checkpoint (step CKPT_LATEST) or a given
 * step into the registered tensors, and fetch its blobs.  Strict by
 * default: a tensor missing on either side is an error that names it
 * (ckpt_last_error()), -EINVAL, and nothing is restored.  With
 * CKPT_PARTIAL the intersection is restored and the rest reported by
 * ckpt_restore_missing() / ckpt_restore_unexpected().  Newer checkpoints
 * that did not verify are passed over (ckpt_restore_skipped()), and so
 * are, unless CKPT_PARTIAL, steps saved by another world size that hold
 * rank-local tensors: -EINVAL when steps exist but none fits this world
 * size.  -ENOENT means only that no checkpoint (or not the step asked
 * for) exists: a trainer may start from scratch.  -EUCLEAN: checkpoints
 * exist (on disk, or in object storage), but none verifies; it must not
 * start over them (ckpt_last_error() names each and why: an operator
 * repairs or removes them).  -EBADMSG: a chunk this rank read did not
 * match its checksum (a restore of global tensors, or a step asked for by
 * number): restore every rank again, and the newest step passes over it.
 * Any checkpoint the daemon accepted can be
 * restored, however many tensors and blobs it holds.  *restored_step may
 * be NULL.  On success ckpt_last_error() is "".
 * CUDA tensors are written by ckptd's own streams, which are not ordered
 * with the trainer's: synchronise every stream that uses the tensors
 * before the call (cudaDeviceSynchronize()); when it returns, the bytes
 * are in device memory and any stream may read them. */
int ckpt_restore(ckpt_client *c, int64_t step, unsigned flags,
		 uint64_t *restored_step);

/* Where a restore's bytes came from. */
enum ckpt_source {
	CKPT_FROM_DISK = 1,      /* the checkpoint's files */
	CKPT_FROM_MEMORY,        /* ckptd's memory tier (memory_tier_bytes): no
				  * shard file read, every chunk checksummed */
	CKPT_FROM_PEER,          /* a partner node's memory */
	CKPT_FROM_REMOTE,        /* object storage: no local copy verified, so
				  * ckptd downloaded, verified and published
				  * the step under its root first */
};

/* The outcome of the last ckpt_restore() on c, when it succeeded. */
struct ckpt_restore_info {
	uint64_t step, bytes, micros; /* step restored; tensor and blob bytes
				       * delivered; microseconds ckptd took */
	int source;                   /* enum ckpt_source (0: one this
				       * library does not know) */
	int n_missing, n_unexpected;  /* tensors, for CKPT_PARTIAL */
};

/* Fills *out.  -ENOENT when the last ckpt_restore() on c failed or there
 * was none (*out untouched). */
int ckpt_restore_info(ckpt_client *c, struct ckpt_restore_info *out);

/* Name of the i-th missing (registered, not in the checkpoint) or
 * unexpected (in the checkpoint, not registered) tensor of the last
 * restore, 0 <= i < n_missing / n_unexpected.  *group and *name (either
 * may be NULL) are borrowed: valid until the next ckpt_restore() or
 * ckpt_close().  -ENOENT for an i out of range or no restore. */
int ckpt_restore_missing(ckpt_client *c, int i, const char **group,
			 const char **name);
int ckpt_restore_unexpected(ckpt_client *c, int i, const char **group,
			    const char **name);

/* The i-th newer checkpoint the last restore passed over because it did
 * not verify (or did not fit this world size), newest first, and why
 * (borrowed, as above).  -ENOENT past the last one. */
int ckpt_restore_skipped(ckpt_client *c, int i, uint64_t *step,
			 const char **reason);

/* A blob from the last restore.  Copies min(len, cap) bytes; *len gets the
 * full size (so cap 0 asks for the size).  -ENOENT if there is none. */
int ckpt_get_blob(ckpt_client *c, const char *name, void *buf, size_t cap,
		  size_t *len);

const char *ckpt_strerror(int err);
/* The daemon's message for the last failed call on c ("" if none). */
const char *ckpt_last_error(const ckpt_client *c);

#ifdef __cplusplus
}
#endif
#endif
