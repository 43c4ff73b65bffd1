/* restore.h - RESTORE: pick the newest checkpoint that verifies (walking
 * back past broken ones), match its tensors against what the trainer
 * registered, read the rank's shards through the I/O table straight into
 * the trainer's shared memory while checking them against the manifest's
 * chunk CRC32Cs (SHA-256 for format 1), and return the blobs.
 * Runs on a worker thread; the reply is sent from the loop. */
#ifndef CKPT_RESTORE_H
#define CKPT_RESTORE_H

#include <stdint.h>

#include "srv.h"

/* Start a restore for session s (trainer).  step < 0 means latest.
 * Returns 0 (the reply follows later; the session is paused meanwhile) or
 * -errno (the caller replies). */
int  restore_start(struct srv *S, struct session *s, uint64_t req_id,
		   int64_t step, int partial);

/* Forget cached verification verdicts (e.g. after a prune). */
void restore_cache_clear(void);

#endif
