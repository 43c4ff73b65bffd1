/* restore_int.h - what restore.c (choosing the step a RESTORE restores)
 * and restore_into.c (copying that step into the trainer's tensors) share:
 * the work item, the snapshot of the trainer's tensors, and where a step's
 * bytes come from. */
#ifndef CKPT_RESTORE_INT_H
#define CKPT_RESTORE_INT_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "restore_reply.h"
#include "safet.h"

struct gpu_mem;
struct io_ctx;
struct memt_step;
struct mfst;
struct region_ref;
struct session;
struct srv;
struct verdict;

struct want {                 /* a registered tensor, snapshotted */
	char    *group, *name;
	int      global;            /* a piece of a global tensor: reshard.c
				       (next to the names match() scans) */
	char     dtype[8];
	int      ndim;
	int64_t  shape[SAFET_MAX_NDIM];
	uint64_t nbytes;
	uint8_t *dst;              /* host memory, or NULL for CUDA memory: */
	int      mapped;           /* dst's pages are all mapped (shm_region) */
	struct gpu_mem *gm;        /* bytes [goff, goff+nbytes) of it */
	uint64_t goff;
	int      matched;
	int64_t  gshape[SAFET_MAX_NDIM], goffset[SAFET_MAX_NDIM];
};

struct restore_work {
	uv_work_t        req;
	struct srv      *S;
	struct session  *s;
	uint64_t         req_id;
	int64_t          step;
	int              partial;
	char             job[65];
	int              jobfd;
	uid_t            uid;      /* the session's */
	int              rank, world;
	unsigned         threads;
	atomic_int       cancel;   /* the session closed: stop */
	struct want     *want;     size_t nwant;
	size_t           nglobal;  /* of them, pieces of global tensors */
	int              found_damage; /* this rank's reads of global pieces
				        * found a checkpoint damaged */
	int              other_world;  /* steps passed over: saved by
				        * another world size (world_fits) */
	struct region_ref **regions; size_t nregions;
	/* results */
	int              r;
	char             msg[1024];
	struct restore_result res;
};

/* Where a rank's bytes come from: a checkpoint directory (its shards read
 * through the I/O table and checked, a verdict being computed or not), or
 * ckptd's memory tier (ms). */
struct rsource {
	int               iterfd;
	struct verdict   *v;
	struct io_ctx    *io;
	struct memt_step *ms;
};

/* Match the trainer's tensors against step m and copy this rank's tensors,
 * global pieces and blobs of it from src into them (results in w->res).
 * 0, or -errno with w->msg. */
int restore__into(struct restore_work *w, const struct rsource *src, struct mfst *m);

#endif
