/* remote_xfer_int.h - what remote_xfer.c (moving checkpoints) and
 * remote_bucket.c (listing and deleting them) share: object keys. */
#ifndef CKPT_REMOTE_XFER_INT_H
#define CKPT_REMOTE_XFER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "s3.h"

#define KEY_MAX 1024

/* The key of rel ("iter_N/<path>", "latest_checkpoint.txt") under job's
 * prefix, and of a step's file.  0 or -ENAMETOOLONG. */
int xfer__job_key(const struct s3_target *t, const char *job, const char *rel,
		  char *buf, size_t len);
int xfer__step_key(const struct s3_target *t, const char *job, uint64_t step,
		   const char *path, char *buf, size_t len);

#endif
