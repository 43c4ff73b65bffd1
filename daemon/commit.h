/* commit.h - the one commit path of a step, for one node and for many:
 * build the manifest from typed per-rank parts, check that every reported
 * file is still there, publish (ok / failed / outcome unknown), and prune
 * once every client was told.
 *
 * Holds no daemon state, so it runs on whatever thread does file work:
 * step.c calls it from a libuv worker (one node), coord.c from the
 * coordinator's file thread (cluster).  Dependencies run one way:
 * step -> commit <- coord. */
#ifndef CKPT_COMMIT_H
#define CKPT_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "mfst.h"

struct rsave;
typedef struct json_t json_t;

/* A rank's piece of a global tensor, as registered: written by this rank
 * (file, begin, end in the part's files) or by another of its replicas. */
struct commit_piece {
	char    *group, *name;
	char     dtype[8];
	int      ndim;
	int64_t  gshape[SAFET_MAX_NDIM], offset[SAFET_MAX_NDIM], shape[SAFET_MAX_NDIM];
	int      replica_index, replica_count;
	int      written;
	size_t   file;
	uint64_t begin, end;
};

/* One rank's durable part of a step: its files (path relative to the
 * staging directory, size, digest, chunk checksums), rank-local tensors,
 * blobs and pieces of global tensors.  A tensor's, blob's or piece's file
 * indexes the part's own files; a tensor's rank field is unused (the
 * part's rank rules).  Owns every string and array. */
struct commit_part {
	int                 rank;
	uint64_t            bytes_written;   /* of its files', not linked (wr.c) */
	struct mfst_file   *files;   size_t nfiles;
	struct mfst_tensor *tensors; size_t ntensors;
	struct mfst_blob   *blobs;   size_t nblobs;
	struct commit_piece *pieces; size_t npieces;
};

/* The part of a finished (durable) rsave, copied: it outlives the rsave.
 * 0 with *out (new), or -ENOMEM. */
int  commit_part_from_rsave(const struct rsave *rs, struct commit_part **out);
void commit_part_free(struct commit_part *p);          /* NULL-safe */

/* The MPI wire form of a part:
 *   {"rank":r,"files":[[path,size,hex,chunk_size,[crc32c...](,key)]],
 *    "tensors":[[group,name,file,
 *    dtype,[shape],begin,end]],"blobs":[[name,file]],
 *    "pieces":[[group,name,dtype,[global shape],[offset],[shape],
 *               replica_index,replica_count,written,file,begin,end]],
 *    "written":bytes_written}   (absent: every file's size)
 * (key: the digest's manifest key, "xxh3_128"; absent for SHA-256, as
 * before format 3, so a SHA-256 part reads as it always did)
 * to_json: 0 with *out (new reference) or -ENOMEM.  from_json checks every
 * field (types, path and name whitelists, indexes in range) and returns 0
 * with *out (new), or -EINVAL / -ENOMEM with msg filled. */
int  commit_part_to_json(const struct commit_part *p, json_t **out);
int  commit_part_from_json(const json_t *o, struct commit_part **out,
			   char *msg, size_t msglen);

/* A step ready to publish: every rank's part (parts[r] has rank r). */
struct commit_step {
	const char          *job;          /* borrowed */
	char                 run_id[33], txid[33];
	uint64_t             step;
	int                  world_size;
	struct commit_part **parts;        /* [world_size], borrowed */
};

/* Fill m (status "committed", created now) from the step; m borrows every
 * string from the parts.  Release with commit_manifest_release.  0, or
 * -EINVAL (a part missing or of the wrong rank, or global tensors whose
 * pieces do not tile them: gtab.h) / -ENOMEM with msg. */
int  commit_manifest(const struct commit_step *cs, struct mfst *m,
		     char *msg, size_t msglen);
void commit_manifest_release(struct mfst *m);          /* arrays only */

/* Every file of every part is in the staging directory, a regular file
 * with the reported size (a second world's recovery, or an operator, may
 * have removed it).  0, or -ENOENT / -EIO with msg naming the file. */
int  commit_check_files(int stagingfd, const struct commit_step *cs,
			char *msg, size_t msglen);

enum commit_outcome { COMMIT_OK = 0, COMMIT_FAILED, COMMIT_UNKNOWN };

/* The publish of a step: build the manifest, check the files, then
 * store_publish.  Returns 0 (COMMIT_OK) or -errno with *outcome
 * COMMIT_FAILED (nothing visible: "publish failed: ...") or COMMIT_UNKNOWN
 * (renamed but not fully synced, recovery decides: "outcome unknown after
 * publish: ...") and msg filled with that text.
 * jobfd must be the directory <root>/<job> is now, not one an operator
 * moved or removed during the save (that would report COMMITTED for a step
 * the job no longer has): one node holds its jobfd from the step's start
 * and checks it first (job_dir_same); a cluster's coordinator opens the job
 * and the staging directory by name at publish time, so a moved job's
 * staging directory is not found and the publish fails. */
int  commit_publish(int jobfd, int stagingfd, const char *staging_name,
		    const struct commit_step *cs, enum commit_outcome *outcome,
		    char *msg, size_t msglen);

/* keep-last-N pruning of run_id's checkpoints of job (after every client
 * was told COMMITTED that step committed); logs what it removed.  Never
 * removes committed itself, even when newer steps make it one too many:
 * an acknowledged checkpoint is not lost at once.  Returns the count or
 * -errno (logged). */
int  commit_prune(int jobfd, const char *job, const char *run_id, unsigned keep,
		  uint64_t committed);
/* store_held_fn for job (the arg, a name): a step being uploaded. */
int  commit_held(void *job, uint64_t step);

#endif
