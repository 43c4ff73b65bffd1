/* layout.h - names of things inside a job directory (README.md "On disk"). */
#ifndef CKPT_LAYOUT_H
#define CKPT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define LAYOUT_LATEST      "latest_checkpoint.txt"
#define LAYOUT_JOBFILE     "job.json"
#define LAYOUT_EXTRA       "extra"
/* in a staging directory: a memory-level step written out as its world
 * ended (memflush.h), for the next world's recovery to publish */
#define LAYOUT_MEMORY_MANIFEST "memory_level_manifest.json"
#define LAYOUT_ITER_LEN    14          /* "iter_" + 9 digits */
#define LAYOUT_PATH_MAX    512

/* "iter_000000500" into buf (>= 15 bytes).  -ERANGE if step > 999999999. */
int layout_iter_name(uint64_t step, char *buf, size_t len);
/* Parse "iter_NNNNNNNNN" exactly; 0 and *step, or -EINVAL. */
int layout_iter_parse(const char *name, uint64_t *step);
/* ".iter_000000500.staging-<txid>" */
int layout_staging_name(uint64_t step, const char *txid, char *buf, size_t len);
/* 1 if name is one ckptd creates and never publishes: a staging dir
 * (".iter_NNNNNNNNN.staging-<txid>" or "-pruned"), the latest pointer's
 * temp file, or job.json's ("job.json.<32 hex>.tmp").  Anything else in a
 * job directory is not ours to remove. */
int layout_is_leftover(const char *name);
/* 1 if name is "<base>.<32 hex>.tmp", the temp name of one writer of base
 * (store_create_exclusive), else 0. */
int layout_is_unique_tmp(const char *name, const char *base);
/* "<group>/rank_00003.safetensors" ("<group>/rank_00003.frozen.safetensors":
 * the group's frozen tensors, format 4) and "extra/rank_00003/<blob>" */
#define LAYOUT_FROZEN_SUFFIX ".frozen.safetensors"
int layout_shard_path(const char *group, int rank, int frozen, char *buf, size_t len);
/* Is path a group's frozen shard? */
int layout_frozen_shard(const char *path);
int layout_blob_path(const char *blob, int rank, char *buf, size_t len);
int layout_rank_dir(int rank, char *buf, size_t len);   /* "rank_00003" */

/* Latest pointer: read "iter_NNNNNNNNN\n" (0 and *step; -ENOENT absent;
 * -EINVAL malformed).  Write replaces atomically: tmp file, fsync, rename,
 * fsync dirfd.  0 or -errno. */
int layout_latest_read(int jobfd, uint64_t *step);
int layout_latest_write(int jobfd, uint64_t step);

/* 1 if iter_<step> is a directory in jobfd (not a link), else 0. */
int layout_step_exists(int jobfd, uint64_t step);

/* 1 if the entry de of the directory dfd is a directory (not a link to
 * one), else 0.  Where the file system leaves d_type DT_UNKNOWN (XFS
 * without ftype, some network file systems) it asks fstatat(). */
struct dirent;
int layout_is_dir(int dfd, const struct dirent *de);

/* Every iter_* directory step in jobfd, sorted newest first.  *steps is
 * malloc'd.  Returns the count or -errno. */
int layout_list_steps(int jobfd, uint64_t **steps);

#endif
