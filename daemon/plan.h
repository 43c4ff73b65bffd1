/* plan.h - lays out one rank's save: which files, the safetensors header of
 * each group, the segments of every file's byte stream and its chunks. */
#ifndef CKPT_PLAN_H
#define CKPT_PLAN_H

#include "rsave.h"
#include "srv.h"

/* Build rs (zeroed by the caller) from a session's registered tensors and
 * blobs.  Takes a reference on every region used.  Returns 0 or -errno with
 * msg filled (-ENODATA: nothing registered).  What the registrations make
 * of a save is kept in s until they change (s->treg_gen). */
int  plan_rsave(struct rsave *rs, struct session *s, uint64_t chunk_bytes, char *msg,
		size_t msglen);
/* File i of rs is not staged (a frozen shard linked instead: prior.h): its
 * chunks leave rs, the other files' move up.  Before rs is submitted. */
void plan_drop_chunks(struct rsave *rs, size_t i);
/* Is s's layout kept for its registrations as they are? */
int  plan_current(const struct session *s);
/* Drop what s keeps for its saves (saves planned from it keep theirs). */
void plan_forget(struct session *s);
/* Free everything an rsave owns (regions are unreffed by the caller). */
void plan_free(struct rsave *rs);

#endif
