/* rsave.h - one rank's save: the unit the stager and the writers work on.
 *
 * A rank save is a list of output files (one safetensors shard per group,
 * one file per blob).  Each file is a byte stream described by segments
 * (header bytes owned by the rsave, then tensor bytes in the trainer's
 * shared memory).  The streams are cut into pool-sized chunks; stager
 * threads fill chunks in order, writer threads write and hash each file's
 * chunks in order and give them back to the pool.
 *
 * Threads: the loop thread builds the rsave and owns its lifetime (refcount
 * only touched on the loop).  Stager/writer threads touch the chunk states
 * (under the pipeline lock), the atomics and err/errmsg (first error wins,
 * under the pipeline lock).
 */
#ifndef CKPT_RSAVE_H
#define CKPT_RSAVE_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "layout.h"
#include "digest.h"
#include "safet.h"

struct gpu_mem;
struct gpu_sync;
struct memt_cap;
struct prior;

/* A segment's source: host memory (src), or CUDA memory (gm != NULL:
 * bytes [goff, goff+len) of that allocation, copied by gpu_copy_d2h). */
struct seg {
	uint64_t       off;       /* offset in the file */
	uint64_t       len;
	const uint8_t *src;       /* host pointer valid until STAGED */
	struct gpu_mem *gm;       /* NULL: host; held by rsave.regions */
	uint64_t       goff;      /* offset in gm, or in shm's memfd */
	const struct shm_region *shm;   /* host memfd src lies in, or NULL:
				   * its holes are staged as zeros, unread */
};

/* A MiB of a changed file is cloned from the prior step's file (wr.c)
 * when each range of this many bytes in it has the same hash
 * (digest_range) as there: wr.c hashes in blocks of this size while they
 * are cached. */
#define RANGE_HASH_BYTES (256u << 10)

struct file_range {
	struct range_hash hash;
	unsigned          shared;   /* other checkpoints that have its blocks
	                               (it was linked or cloned; prior_copies) */
};

struct wfile {
	char       path[LAYOUT_PATH_MAX];   /* relative to the staging dir */
	uint64_t   size;
	struct seg *segs;
	size_t     nsegs;
	uint8_t   *owned;                   /* header or blob bytes */
	uint64_t   first_chunk, nchunks;    /* in the rsave's chunk array */
	struct digest digest;               /* set when written */
	uint32_t  *crcs;                    /* CRC32C per CSUM_CHUNK_BYTES,
	                                       set when written (owned) */
	struct file_range *ranges;          /* per RANGE_HASH_BYTES, when the
	                                       save may clone (owned), or NULL */
	uint64_t   cloned;                  /* bytes cloned, not written */
	int        direct;                  /* opened with O_DIRECT */
	/* set when written: the inode, for the next save (prior.h) */
	int        linked;                  /* a link to the prior step's */
	unsigned   unchecked;               /* saves linking it uncompared */
	dev_t      dev;
	ino_t      ino;
	struct timespec mtime;
};

enum chunk_state { CHUNK_EMPTY = 0, CHUNK_READY, CHUNK_SKIPPED };

struct chunk {
	int      pool_idx;     /* -1 until filled */
	uint32_t len;          /* payload bytes */
	uint32_t file;         /* index into rsave.files */
	uint8_t  state;        /* enum chunk_state */
};

/* What the manifest needs to say about each tensor and blob.  A piece of
 * a global tensor is listed whether this rank writes it or not (written
 * 0: another replica does; file/begin/end unused): the commit checks the
 * layout of every rank. */
struct rs_tensor {
	const char *group, *name;     /* the plan's (plan.c) */
	char     dtype[8];
	int      ndim;
	int64_t  shape[SAFET_MAX_NDIM];
	size_t   file;
	uint64_t begin, end;   /* absolute in the file */
	int      global, written;
	int64_t  gshape[SAFET_MAX_NDIM], goffset[SAFET_MAX_NDIM];
	int      replica_index, replica_count;
};

struct rs_blob {
	char  *name;
	size_t file;
};

struct step;
struct session;
struct region_ref;
struct plan_tmpl;

struct rsave {
	int             refs;          /* loop thread only */
	struct step    *step;
	const char     *job;           /* its job's name, for the log */
	struct session *sess;          /* NULL once the trainer is gone */
	int             rank;
	uint64_t        ticket;
	uint64_t        t_accept_ns, t_staged_ns, t_durable_ns;
	int             staging_fd;    /* dup of the step's staging dir */

	struct region_ref **regions;   /* held until STAGED */
	size_t          nregions;
	struct gpu_sync *gsync;        /* ckpt_save_stream(): ready/done, or NULL */
	struct memt_cap *memt;         /* the memory tier's copy, or NULL */
	int             memt_whole;    /* it holds a copy of every file, even one
	                                  that did not change (a partner could
	                                  not share the last save's) */
	int             memory_only;   /* a memory-level step: no file is
	                                  written, the copy is all there is */
	int             digest_alg;    /* of every file: enum digest_alg, from
	                                  "file_digest" when it was accepted */
	/* Incremental saves: the rank's newest committed step (NULL: write
	 * every file), its directory, and how many steps may share a file */
	struct prior   *prior;
	int             prior_dirfd;
	unsigned        max_shared;    /* 0: no limit */
	uint64_t        link_min;      /* smaller files are written */
	int             clone;         /* the file system clones ranges, and
	                                  chunks are whole csum chunks: a
	                                  changed file's unchanged chunks are
	                                  cloned from the prior step's */

	struct wfile   *files;
	size_t          nfiles;
	struct chunk   *chunks;
	uint64_t        nchunks;
	uint64_t        chunk_bytes;
	uint64_t        bytes_total;

	struct rs_tensor *tensors;  size_t ntensors;   /* the plan's */
	uint64_t          sess_id, reg_gen;   /* the registrations it is of */
	struct rs_blob   *blobs;    size_t nblobs;
	struct plan_tmpl *tmpl;         /* what tensors and names are from */

	/* pipeline progress */
	uint64_t        next_claim;    /* under pipe.claim_lock */
	uint32_t       *claim_order;   /* a reserved rsave's chunks in the
	                                  order of their trainer memory, or NULL */
	uint64_t        resv_left;     /* pool chunks promised, not yet taken;
	                                  under pipe.claim_lock */
	int             reserved;      /* all chunks promised: staged out of
	                                  order with other reserved rsaves */
	atomic_uint_fast64_t filled;   /* chunks filled */
	atomic_uint_fast64_t bytes_staged;
	atomic_uint_fast64_t bytes_written;
	atomic_uint     files_done;
	atomic_int      cancel;        /* stop: aborted or failed */
	/* The rank's first error (0 if none) and its message: state of the
	 * save, not an error-return idiom.  Stager and writer threads record
	 * it (pipe_fail, under the pipeline lock: the first one wins) and
	 * return; the loop reads it when the rank finishes (step.c), as
	 * io_uring keeps a request's result in its completion. */
	int             err;
	char            errmsg[256];
	int             staged, durable, finished;   /* loop thread's view */
};

#endif
