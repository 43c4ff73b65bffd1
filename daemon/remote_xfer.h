/* remote_xfer.h - what moves one checkpoint between a job directory and
 * the bucket: upload a step (files in parallel, multipart above the part
 * size, manifest last, then latest), download one (verify, then publish it
 * locally as a commit would), list a job's steps on the remote, and delete
 * steps there.  No queue, no daemon state: remote.c schedules these.
 *
 * On the remote, a job's checkpoint N is
 *   <prefix>/<job>/iter_N/<path as on disk>     every file of the manifest
 *   <prefix>/<job>/iter_N/checkpoint_manifest.json   uploaded last
 *   <prefix>/<job>/latest_checkpoint.txt             after the manifest
 *   <prefix>/<job>/owner.json      {"owner_uid": N}, before each manifest
 * and exists only once its manifest does. */
#ifndef CKPT_REMOTE_XFER_H
#define CKPT_REMOTE_XFER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "s3.h"

/* What an upload reports as it goes (atomics: status reads them). */
struct xfer_progress {
	_Atomic uint64_t bytes_done, bytes_total, bytes_sent;
	_Atomic uint64_t retries;
};

/* Upload step of job from jobfd with up to threads connections, parts of
 * part_bytes.  Files already on the remote with the same size and SHA-256
 * (an upload cut short) are not sent again.  Returns 0, or -errno with msg
 * (the step is then not visible on the remote). */
int xfer_upload(const struct s3_target *t, const volatile int *stop, int jobfd,
		const char *job, uint64_t step, unsigned threads, uint64_t part_bytes,
		struct xfer_progress *pg, char *msg, size_t msglen);

/* Point the job's latest on the remote at step, unless it names a newer
 * one already.  0 or -errno (s3_conn_msg says why). */
int xfer_put_latest(struct s3_conn *c, const char *job, uint64_t step);

/* The owner uid the remote records for job: 0 with *owner, -ENOENT when
 * it records none (uploaded by an older ckptd), or -errno (s3_conn_msg
 * says why; -EINVAL: not valid). */
int xfer_get_owner(struct s3_conn *c, const char *job, uid_t *owner);

/* One job's steps on the remote, from one listing. */
struct xfer_step {
	uint64_t step;
	int      complete;           /* its manifest is there */
	uint64_t bytes;
	char   **keys;   size_t nkeys;
};
struct xfer_list {
	struct xfer_step *steps;     size_t nsteps;     /* newest first */
	int      have_latest;
	uint64_t latest;
};
int  xfer_list(struct s3_conn *c, const char *job, struct xfer_list *out);
void xfer_list_release(struct xfer_list *l);
/* The jobs that have anything under the prefix; *jobs malloc'd, each
 * malloc'd.  Returns the count or -errno. */
int  xfer_list_jobs(struct s3_conn *c, char ***jobs);

/* Delete one listed step: its manifest first (so it is never seen half
 * deleted), then the rest.  0 or -errno (s3_conn_msg says why). */
int  xfer_delete_step(struct s3_conn *c, const struct xfer_step *s);
/* Abort every multipart upload in progress under the job (none of ours is
 * running).  Returns how many, or -errno. */
int  xfer_abort_uploads(struct s3_conn *c, const char *job);

/* GET step's manifest from the remote and check it: valid (mfst_parse),
 * naming this job and step.  0 with *out (new; NULL: not kept) and, when
 * raw is not NULL, its bytes (*raw malloc'd, *rawlen); or -errno with msg,
 * and *damaged set when the fault is the remote copy's (missing, too
 * long, not valid, another job's or step's). */
struct mfst;
int  xfer_get_manifest(struct s3_conn *c, const char *job, uint64_t step,
		       struct mfst **out, char **raw, size_t *rawlen, int *damaged,
		       char *msg, size_t msglen);

/* Download step of job (want < 0: the remote's latest, else its newest
 * complete step) into jobfd: files into a staging directory, each checked
 * against the manifest's size and SHA-256, then published as iter_N
 * (a broken local iter_N is replaced).  *got gets the step.  0 or -errno
 * with msg (-ENOENT: nothing on the remote). */
int  xfer_download(const struct s3_target *t, const volatile int *stop, int jobfd,
		   const char *job, int64_t want, unsigned threads, uint64_t *got,
		   uint64_t *bytes, char *msg, size_t msglen);

#endif
