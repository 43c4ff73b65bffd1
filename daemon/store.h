/* store.h - the checkpoint root on disk: job directories and their owner
 * file, staging directories, the publish sequence, start-up recovery,
 * pruning and listing.  Every path is opened relative to a directory fd
 * with O_NOFOLLOW; names were whitelisted by the caller.  Safe to call from
 * worker threads (no daemon state inside). */
#ifndef CKPT_STORE_H
#define CKPT_STORE_H

#include <stdint.h>
#include <sys/types.h>

#include "mfst.h"

struct store_job_info {
	uid_t owner;
	char  run_id[33];
};

/* Open <root>/<job>: its job.json says who owns it.  With create, a missing
 * job is created for uid with a fresh run id, and the job directory is
 * closed to everyone but its owner and ckptd (perm_job_dir; failing that
 * the job is not used).  Errors, with msg saying why: -EPERM when it
 * belongs to another uid (uid 0 may use any) or is not a directory,
 * -EACCES when the directory or its job.json was not made by ckptd
 * (store_job_dir_is_ours), -ENOTEMPTY for a directory without job.json
 * that holds other things, -ENOENT when missing and !create.
 * Returns 0 and *jobfd (new) and *info, or -errno. */
int store_job_open(int rootfd, const char *job, uid_t uid, int create,
		   struct store_job_info *info, int *jobfd, char *msg, size_t msglen);

/* Could ckptd have made this job directory and its job.json (if it has
 * one)?  Both must be perm_is_ours.  1, or 0 with why ("owned by uid
 * 1001, not ckptd's uid 0"). */
int store_job_dir_is_ours(int jobfd, char *why, size_t whylen);

/* The owner uid in jobfd's job.json (if ckptd made it).  0 or -errno. */
int store_job_owner(int jobfd, uid_t *owner);

/* 32 random lowercase hex chars + NUL. */
void store_new_id(char out[33]);

/* Write name in dirfd only if it does not exist: io_write_file (io.h) under
 * a temp name of this writer's own, "<name>.<32 hex>.tmp", as several
 * daemons on a shared root may race; dirfd is fsynced.  0, -EEXIST when
 * another writer was first (name untouched), or -errno. */
int store_create_exclusive(int dirfd, const char *name, const void *data, size_t len,
			   mode_t mode);

/* mkdir <jobfd>/.iter_N.staging-<txid> and open it.  name gets its name. */
int store_staging_create(int jobfd, uint64_t step, const char *txid,
			 int *fd, char *name, size_t namelen);
/* Multi-node: the same, but an existing directory of that name (another
 * node made it) is opened instead of refused. */
int store_staging_join(int jobfd, uint64_t step, const char *txid,
		       int *fd, char *name, size_t namelen);
/* mkdir -p a relative directory path below dirfd (components whitelisted). */
int store_mkdirs(int dirfd, const char *rel);

/* The publish sequence (README.md "On disk"): fsync the staging tree's directories,
 * write + fsync the manifest, fsync the staging dir, renameat2 NOREPLACE to
 * iter_N, fsync the job dir, then replace latest when step is newer than
 * what it names.  On failure returns -errno with msg; *renamed says whether
 * the rename happened ("outcome unknown" after it). */
int store_publish(int jobfd, int stagingfd, const char *staging_name,
		  const struct mfst *m, int *renamed, char *msg, size_t msglen);

/* rm -rf of dirfd/name without following symlinks. */
int store_remove_tree(int dirfd, const char *name);

/* rm -rf of a leftover of ckptd's (layout_is_leftover) in a job directory,
 * only if ckptd's uid owns it: a name in that pattern that another user
 * made stays (-EPERM).  0 if it is gone. */
int store_remove_leftover(int jobfd, const char *name);

/* Start-up recovery of every job under rootfd: remove staging leftovers and
 * temp files, point latest at the newest checkpoint that verifies
 * (structure: manifest, files, sizes).  Logs what it changes. */
int store_recover(int rootfd);

/* Remove committed checkpoints of run_id beyond the newest keep (never the
 * one latest names, never another run's).  *removed (malloc'd, may be
 * NULL) lists removed steps.  Returns the count or -errno. */
int store_prune(int jobfd, const char *run_id, unsigned keep,
		uint64_t **removed);
/* The same, keeping (and not counting) every step for which held(arg,
 * step) says 1: one still being copied elsewhere (remote.h). */
typedef int (*store_held_fn)(void *arg, uint64_t step);
int store_prune_held(int jobfd, const char *run_id, unsigned keep,
		     store_held_fn held, void *arg, uint64_t **removed);

#endif
