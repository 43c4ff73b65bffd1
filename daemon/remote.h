/* remote.h - the object-store tier: committed steps are copied to an
 * S3-compatible bucket by ckptd's own upload thread, off the training path,
 * and restored from it when no local copy verifies.  This module decides
 * what is uploaded when (every Nth commit of a job, the newest pending one
 * of each job first, failed steps again after a backoff), keeps the
 * counters for status and metrics, and resumes or removes what a killed
 * ckptd left half-uploaded; remote_xfer.c moves the bytes.
 *
 * Off unless the configuration has "remote".  Thread-safe: the hooks are
 * called from the loop, worker and coordinator threads. */
#ifndef CKPT_REMOTE_H
#define CKPT_REMOTE_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"

/* Load the credentials (environment, or remote.credentials_file, which
 * must not be readable by group or others) and, with uploads (the node
 * that publishes: one node, or a cluster's coordinator), start the upload
 * thread; without, this node only restores from the remote.  rootfd is
 * borrowed (dup'ed).  0 (also when the remote is off), or -errno with err
 * saying why ckptd cannot start. */
int  remote_start(const struct config *cfg, int rootfd, int uploads, char *err,
		  size_t errlen);
/* ckptd -n: what remote_start would refuse of the credentials (loaded
 * and wiped at once).  0, or -errno with err. */
int  remote_check(const struct config *cfg, char *err, size_t errlen);
/* SIGHUP: remote_every, remote_keep_last, remote_max_bytes_per_s. */
void remote_reload(const struct config *cfg);
/* Stop the thread (an upload in progress is resumed at the next start). */
void remote_stop(void);
int  remote_enabled(void);

/* job's step was published locally (after its clients were told). */
void remote_committed(const char *job, uint64_t step);
/* 1 while job's step is queued or being uploaded: pruning keeps it. */
int  remote_held(const char *job, uint64_t step);
/* ckptctl push: queue step of job now.  0, or -errno with msg. */
int  remote_push(int jobfd, const char *job, uint64_t step, char *msg, size_t msglen);

/* May uid take job's copy from the remote?  Root (and ckptd's user) may:
 * *owner gets the owner the remote records (uid itself when it records
 * none); another uid only when the remote records it as the owner
 * (*owner = uid).  0, 1 when the remote records no owner, or -errno with
 * msg (-EPERM: not theirs). */
int  remote_may_pull(const char *job, uid_t uid, uid_t *owner, char *msg, size_t msglen);
/* Download step (< 0: latest) of job into jobfd and publish it there, for
 * uid (remote_may_pull; and the local job must be the recorded owner's),
 * on the calling (worker) thread; one download per job at a time; world
 * > 0: only a step that world size can restore (xfer_download).  0 with
 * *got, or -errno with msg (-ENOENT: the remote has none, -EUCLEAN: none
 * that verifies, -EINVAL: none of that world, -ENOTCONN: the remote is
 * off, -EPERM: not uid's; a bucket that is missing, refused or down is
 * never -ENOENT). */
int  remote_pull(int jobfd, const char *job, uid_t uid, int64_t step, int world,
		 uint64_t *got, char *msg, size_t msglen);
/* The remote's checkpoints of job (NULL: every job), worker thread:
 * [{"job","step","bytes","latest","valid"[,"reason"]}], newest first per
 * job; each manifest is read and checked (valid false: no restore takes
 * it).  0 with *out (new reference), or -errno with msg. */
int  remote_list(const char *job, json_t **out, char *msg, size_t msglen);

/* For STATUS and the metrics: {"url", "bytes_uploaded", "steps_uploaded",
 * "failures", "retries", "queued", "lag_seconds", "last_error",
 * "uploading": {"job","step","bytes_done","bytes_total"}, "jobs": [...]}
 * or NULL when off (new reference). */
json_t *remote_status_json(void);

#endif
