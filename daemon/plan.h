/* plan.h - lays out one rank's save: which files, the safetensors header of
 * each group, the segments of every file's byte stream and its chunks. */
#ifndef CKPT_PLAN_H
#define CKPT_PLAN_H

#include "rsave.h"
#include "srv.h"

/* Build rs (zeroed by the caller) from a session's registered tensors and
 * blobs.  Takes a reference on every region used.  Returns 0 or -errno with
 * msg filled (-ENODATA: nothing registered). */
int  plan_rsave(struct rsave *rs, const struct session *s, uint64_t step,
		uint64_t chunk_bytes, char *msg, size_t msglen);
/* Free everything an rsave owns (regions are unreffed by the caller). */
void plan_free(struct rsave *rs);

#endif
