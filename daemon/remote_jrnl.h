/* remote_jrnl.h - the upload journal: the steps this ckptd has begun to
 * upload and not finished, each with a copy of the manifest it uploads, in
 * <root>/.remote-journal/<job>/iter_N (ckptd's own directory, mode 0700).
 * A half-upload is cleaned up only from this record -- the keys its
 * manifest names, the multipart uploads under its step -- so the clean-up
 * never removes an object another cluster or an operator put in the
 * bucket.  Used by the upload thread only (no locking). */
#ifndef CKPT_REMOTE_JRNL_H
#define CKPT_REMOTE_JRNL_H

#include <stddef.h>
#include <stdint.h>

#include "mfst.h"

/* Make (if missing) and open the journal under rootfd (borrowed).  0 or
 * -errno. */
int  rjrnl_open(int rootfd);
void rjrnl_close(void);

/* Record that step of job is being uploaded with manifest mbuf[mlen]
 * (written, fsynced, renamed into place).  0 or -errno. */
int  rjrnl_add(const char *job, uint64_t step, const char *mbuf, size_t mlen);
/* The manifest recorded for step (new, mfst_free).  0, -ENOENT, or -errno
 * (-EINVAL: the record does not parse; err says why). */
int  rjrnl_read(const char *job, uint64_t step, struct mfst **m, char *err,
		size_t errlen);
/* Forget step (the upload finished, or its objects were deleted). */
int  rjrnl_del(const char *job, uint64_t step);
/* The steps recorded for job, oldest first (*steps malloc'd).  The count
 * or -errno. */
int  rjrnl_steps(const char *job, uint64_t **steps);
/* The jobs with a record (*jobs malloc'd, each malloc'd).  Count or -errno. */
int  rjrnl_jobs(char ***jobs);

#endif
