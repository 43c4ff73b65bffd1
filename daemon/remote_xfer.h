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
 * and exists only once its manifest does.  A file whose bytes the newest
 * complete step before it has (same path, size and digest; incremental
 * saves on) is not uploaded again: its manifest entry names that object
 * ("object": "iter_M/<path>", mfst.h), and the object stays while a step
 * the remote keeps names it. */
#ifndef CKPT_REMOTE_XFER_H
#define CKPT_REMOTE_XFER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mfst.h"
#include "s3.h"

/* What an upload reports as it goes (atomics: status reads them). */
struct xfer_progress {
	_Atomic uint64_t bytes_done, bytes_total, bytes_sent;
	_Atomic uint64_t retries;
};

/* Called once the step verified here, before anything is sent, with the
 * manifest that will go up (the upload journal records it).  Non-zero
 * (-errno) stops the upload. */
typedef int (*xfer_begin_cb)(void *arg, const char *mbuf, size_t mlen);

/* Upload step of job from jobfd with up to threads connections, parts of
 * part_bytes.  Files already on the remote with the same size and digest
 * (an upload cut short) are not sent again; with share, nor those the
 * remote's newest complete step before it has (its objects referenced).  Another checkpoint under the
 * same step number on the remote (another txid: a rollback here, then
 * the step saved again) is made invisible first (its manifest deleted,
 * then its files).  Then latest (xfer_put_latest; back only when step is
 * the newest here).  Returns 0, or -errno with msg (the step is then not
 * visible on the remote). */
int xfer_upload(const struct s3_target *t, const volatile int *stop, int jobfd,
		const char *job, uint64_t step, unsigned threads, uint64_t part_bytes,
		int share, struct xfer_progress *pg, xfer_begin_cb begin, void *arg,
		char *msg, size_t msglen);

/* Point the job's latest on the remote at step when it names an older one
 * or none; with back, also when it names a newer step of the same run_id
 * (a rollback here: that step was removed and the run went on from step).
 * Never back over another run's step (another cluster's).  1 (latest
 * written), 0 (left as it was) or -errno (s3_conn_msg says why). */
int xfer_put_latest(struct s3_conn *c, const char *job, uint64_t step,
		    const char *run_id, int back);

/* xfer_get_manifest, shortly: 0 with *out (new), -ENOENT (none), -EINVAL
 * (not a valid manifest of this job and step), or -errno (s3_conn_msg
 * says why). */
int xfer_manifest(struct s3_conn *c, const char *job, uint64_t step, struct mfst **out);
/* What deleting an old step must leave (retention): the objects that the
 * steps kept name ("object"), and those whose own step is complete on the
 * remote (listed in l: that step deletes them when it goes). */
struct xfer_list;
struct xfer_keep {
	char  **refs;   size_t nrefs;     /* "iter_N/<path>", under the job */
	const struct xfer_list *l;
};
/* Add kept step m's references.  0 or -ENOMEM. */
int  xfer_keep_add(struct xfer_keep *k, const struct mfst *m);
void xfer_keep_release(struct xfer_keep *k);

/* Delete the objects manifest m names -- the manifest first, so the step
 * is never seen half deleted, then its files -- and nothing else: an
 * object ckptd did not put there (an operator's) stays.  Objects m names
 * under another step ("object") are deleted only with keep (retention),
 * when keep allows; without, never (only m's own).  With except, only m's
 * files that except does not name (the manifest stays).  0 or -errno
 * (s3_conn_msg says why). */
int xfer_delete_files(struct s3_conn *c, const char *job, const struct mfst *m,
		      const struct mfst *except, const struct xfer_keep *keep);

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

/* Abort the multipart uploads in progress under one step of the job (one
 * this ckptd was uploading when it stopped).  Returns how many, or -errno. */
int  xfer_abort_uploads(struct s3_conn *c, const char *job, uint64_t step);

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
 * against the manifest's size and digest, then published as iter_N
 * (a broken local iter_N is replaced).  world > 0: a step saved by
 * another world size that holds rank-local tensors is passed over (it
 * cannot be restored by that world: restore.c's rule).  *got gets the
 * step.  0 or -errno with msg (-ENOENT: nothing on the remote; -EUCLEAN:
 * steps, but none that verifies; -EINVAL: steps, but none of that world;
 * a bucket that cannot be read is another error). */
int  xfer_download(const struct s3_target *t, const volatile int *stop, int jobfd,
		   const char *job, int64_t want, int world, unsigned threads, uint64_t *got,
		   uint64_t *bytes, char *msg, size_t msglen);

#endif
