/* memt.h - the memory tier: ckptd keeps the newest committed step of each
 * job in its own RAM (README "The memory tier"), so that a trainer that
 * died while the node lives on restores without reading a shard file.
 *
 * A rank's save is captured while it is written: the writer threads copy
 * each staged chunk into a memfd of the rank's files (the same bytes they
 * write and hash for the disk) and record a fast checksum of it.  When the
 * step commits, its captures become the job's memory copy and older ones
 * are dropped; when it fails, they are dropped.  Everything held stays
 * within memory_tier_bytes, locked in RAM like the staging pool when
 * permitted.  A capture that does not fit is not made: that step restores
 * from disk, and the reason is logged (and given to memt_get's caller).
 *
 * Threads: captures are started and steps committed or dropped on the loop
 * thread; each file of a capture is filled by one writer thread, in order;
 * restore threads read committed steps under a reference (memt_get/put).
 * All bookkeeping is under one mutex; bytes are copied outside it.
 */
#ifndef CKPT_MEMT_H
#define CKPT_MEMT_H

#include <stddef.h>
#include <stdint.h>

typedef struct json_t json_t;
struct mfst_file;
struct rsave;
struct shard_seg;
struct digest;

struct memt;            /* the tier */
struct memt_cap;        /* one rank's files of one step, being captured */
struct memt_step;       /* a committed step, held by a reader */

/* A new tier of budget bytes (0: off, every call below is then a no-op or
 * a miss).  lock: mlock what it holds when permitted.  0 or -ENOMEM. */
int  memt_new(uint64_t budget, int lock, struct memt **out);
void memt_free(struct memt *t);           /* NULL-safe; nothing may be held */

/* Loop thread: capture rank save rs (planned: files, sizes, chunk size) of
 * job's step txid.  Its files linked unstaged (frozen shards: prior.h) are
 * not copied: the capture shares their bytes with the job's newest
 * committed step held here (memt_can_share said it could), which keeps
 * the memory they are in while shared.  Older committed copies of the same
 * job make room when needed.  Returns the capture (the caller owns one
 * reference: memt_cap_put) or NULL with why filled ("" when the tier is
 * off). */
struct memt_cap *memt_cap_start(struct memt *t, const char *job, uint64_t step,
				const char *txid, const struct rsave *rs,
				char *why, size_t whylen);
/* Loop thread: may a save of job link the file at path (size bytes,
 * digest d, chunks of chunk_bytes) unstaged?  1 when the tier is off
 * (nothing to capture) or holds that file whole in the job's newest
 * committed step (a capture then shares it); else 0. */
int  memt_can_share(struct memt *t, const char *job, const char *path, uint64_t size,
		    const struct digest *d, uint64_t chunk_bytes);
/* Writer thread, before file f is compared with the job's newest committed
 * step (prior.h), where its digest was d: does the tier hold that file
 * (same path, size, digest and chunk size)?  Then the writer may hold
 * back copying f until it knows whether f changed (memt_cap_same). */
int  memt_cap_may_share(struct memt_cap *c, size_t f, const struct digest *d);
/* Writer thread: file f turned out the same as the committed step's (its
 * digest d): the capture shares that step's copy instead of holding one,
 * and gives f's room back (a hole in its memfd, no longer counted).  0,
 * or -ENOENT when the tier no longer holds it: f is then captured as any
 * other (memt_cap_chunk, memt_cap_file_done). */
int  memt_cap_same(struct memt_cap *c, size_t f, const struct digest *d);
/* Writer thread: chunk k (file bytes [k * chunk_bytes, + len)) of file f. */
void memt_cap_chunk(struct memt_cap *c, size_t f, uint64_t k, const void *buf,
		    size_t len);
/* Writer thread: file f is written and fsynced; d its digest as in the
 * manifest (copied). */
void memt_cap_file_done(struct memt_cap *c, size_t f, const struct digest *d);
/* Loop thread: the rank save is freed.  NULL-safe. */
void memt_cap_put(struct memt_cap *c);

/* Loop thread: job's step committed (the captures of every rank of it on
 * this node become the job's memory copy; older copies are dropped), or
 * it failed (its captures are dropped). */
void memt_step_committed(struct memt *t, const char *job, uint64_t step);
/* Loop thread: job's committed step is in memory only (a memory-level
 * step): it is the only copy, so no later save of the job makes room by
 * dropping it; a newer committed step replaces it. */
void memt_step_pin(struct memt *t, const char *job, uint64_t step);
void memt_step_failed(struct memt *t, const char *job, uint64_t step);
/* ... failed for good (the cluster aborted it): a partner's copy of it
 * that arrives later is refused, not kept for ever. */
void memt_step_aborted(struct memt *t, const char *job, uint64_t step);

/* Restore thread: hold the memory copy of job's step, committed as txid.
 * NULL with why filled when there is none (the tier is off, the step is
 * not the one kept, it did not fit: the reason logged when it was saved). */
struct memt_step *memt_get(struct memt *t, const char *job, uint64_t step,
			   const char *txid, char *why, size_t whylen);
void memt_put(struct memt_step *s);       /* NULL-safe */
/* Does the tier hold file mf (path, size and digest from the manifest)
 * of job's step committed as txid?  Any thread. */
int  memt_holds(struct memt *t, const char *job, uint64_t step, const char *txid,
		const struct mfst_file *mf);
/* The held step's memory copy failed its checksum: no later restore may
 * use it (it goes once the last reader lets go).  Any thread. */
void memt_distrust(struct memt_step *s);

/* Deliver segs (sorted, not overlapping; host or CUDA destinations) of the
 * file mf (path, size and digest from the manifest) from the held step,
 * checking every block they touch against its checksum.  0, or -errno with
 * msg: -ENOENT when the file is not held (or held with other contents),
 * -EBADMSG when a block does not match its checksum (what was delivered is
 * then not trustworthy), -EIO when a copy to the GPU fails. */
int  memt_read(struct memt_step *s, const struct mfst_file *mf,
	       const struct shard_seg *segs, size_t nsegs, char *msg, size_t msglen);

/* Start-up, loop thread, before any save: take back the copies a previous
 * ckptd handed to systemd's fd store ($LISTEN_FDS; memt_fd.c), those that
 * describe themselves and fit the budget; the others are closed and taken
 * out of the store (t NULL: the tier is off, all of them).  Committed
 * copies are handed to the store whenever $NOTIFY_SOCKET is set. */
void memt_fd_take_back(struct memt *t);

/* --- partner nodes (memt_peer.c; the wire is coord_repl.c's) ---------- */

/* Is capture c whole (every file captured, or shared with an older
 * step)?  0, or -ENODATA with why. */
int  memt_cap_ready(struct memt_cap *c, char *why, size_t whylen);
/* Keep c's memory while it is sent to partners, even if its save is
 * dropped meanwhile (it goes at the release).  Any thread. */
void memt_cap_hold(struct memt_cap *c);
void memt_cap_release(struct memt_cap *c);
/* What a partner needs to hold c: its description (new reference, NULL
 * when out of memory) and its bytes (files page-aligned, as described;
 * written only into a copy being filled: memt_copy_start).  The bytes
 * sent are those of the files that are not shared, in order: their total
 * (memt_cap_sent), and where the run of them at or after offset off
 * starts (c's length when none is left) and how long it is (*run). */
json_t *memt_cap_describe(const struct memt_cap *c);
uint8_t *memt_cap_bytes(const struct memt_cap *c);
uint64_t memt_cap_sent(const struct memt_cap *c);
uint64_t memt_cap_next_run(const struct memt_cap *c, uint64_t off, uint64_t *run);
/* Does c share files with an older step (not described with their bytes:
 * a partner finds them in its copy of that step)?  NULL-safe. */
int  memt_cap_shares(const struct memt_cap *c);

/* A partner's copy, described as memt_cap_describe does: into the step
 * being saved (committed 0), or into the committed step a restore fetches
 * it for (1).  Its files shared with an older step are shared with the
 * job's committed step held here, as a capture's.  Its memory is ready
 * for the bytes (memt_cap_bytes); until memt_copy_end(ok) it is not read.
 * NULL with why (it does not fit, a shared file is not held here, the
 * description is not valid, the tier is off). */
struct memt_cap *memt_copy_start(struct memt *t, const json_t *desc, int committed,
				 char *why, size_t whylen);
/* Bytes [off, off+len) of the copy are about to be written: their memory
 * is allocated now (a piece at a time: the MPI thread never stalls on a
 * whole copy).  0, or -ENOMEM: the node has not the memory (end with 0). */
int  memt_copy_prepare(struct memt_cap *c, uint64_t off, uint64_t len);
void memt_copy_end(struct memt_cap *c, int ok);

/* The held step's whole file at path, for a peer: a description of it
 * alone (new reference) and its bytes (page-padded), valid while s is
 * held.  0, -ENOENT (not held), -ENOMEM. */
int  memt_file_describe(struct memt_step *s, const char *path, json_t **desc,
			const uint8_t **data, uint64_t *len);

/* Every whole file the held step has, once each, its blocks checked
 * first (one that changed is logged and passed over): fn's first value
 * < 0 stops and is returned; else 0. */
typedef int (*memt_file_fn)(void *arg, const char *path, const uint8_t *data,
			    uint64_t size, const struct digest *d);
int  memt_each_file(struct memt_step *s, memt_file_fn fn, void *arg);

/* Before a job's first save: the memory of its captures, made now so
 * that no save waits while the kernel allocates and zeroes it. */
/* The bytes a capture of rank save rs takes (its files, page-aligned);
 * shared: one that shares its frozen shards (memt_cap_start). */
uint64_t memt_cap_len(const struct rsave *rs, int shared);
/* Worker thread: memory for count captures of about len bytes of job's
 * rank (what it has already counts: its spares, its captures in the
 * newest committed step and a save in flight), allocated, zeroed and
 * locked now, while what the tier holds stays within its budget.  How
 * many were made (0: it had them), or -errno when none could be made
 * (-ENOSPC: the budget is taken). */
int  memt_reserve(struct memt *t, const char *job, int rank, uint64_t len, unsigned count);
/* Worker thread: free up to count spares of job's rank of about len
 * bytes (a layout that changed since they were reserved). */
void memt_unreserve(struct memt *t, const char *job, int rank, uint64_t len, unsigned count);
/* Worker thread: free every spare of job (its last rank has left: what
 * it kept for its next saves goes; its committed copy stays). */
void memt_release_job(struct memt *t, const char *job);

/* For status and metrics. */
struct memt_usage {
	uint64_t held;          /* committed steps, captures, spares */
	uint64_t spare;         /* of held: memory kept for the next captures */
	uint64_t reserving;     /* spares being made now */
	uint64_t budget;        /* 0: the tier is off */
	unsigned steps;         /* committed steps held */
	uint64_t copied;        /* bytes captures copied in, since the start */
	uint64_t shared;        /* ... and did not, held already: unchanged
				 * files and spliced chunks */
};
void memt_usage(struct memt *t, struct memt_usage *u);

#endif
