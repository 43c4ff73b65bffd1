/* mfst.h - checkpoint_manifest.json: written last into a checkpoint, it is
 * the checkpoint's table of contents and its proof of completeness.
 *
 * {
 *   "format": "ckpt-manifest", "format_version": 1, "status": "committed",
 *   "job": "demo", "run_id": "<32 hex>", "txid": "<32 hex>", "step": 500,
 *   "world_size": 2, "created_unix": 1790000000,
 *   "files":   [{"path": "model/rank_00000.safetensors", "size": N,
 *                "sha256": "<64 hex>"}, ...],
 *   "tensors": [{"group": "model", "rank": 0, "name": "w", "file": 0,
 *                "dtype": "F32", "shape": [4, 4], "begin": B, "end": E}, ...],
 *   "blobs":   [{"rank": 0, "name": "rng", "file": 2}, ...]
 * }
 * "file" indexes "files"; begin/end are absolute byte offsets in that file.
 * Paths are relative, made only of whitelisted components (names.h):
 * "<group>/rank_NNNNN.safetensors" or "extra/rank_NNNNN/<blob>".
 */
#ifndef CKPT_MFST_H
#define CKPT_MFST_H

#include <stddef.h>
#include <stdint.h>
#include "sha.h"
#include "safet.h"

#define MFST_NAME          "checkpoint_manifest.json"
#define MFST_FORMAT        "ckpt-manifest"
#define MFST_VERSION       1
#define MFST_MAX_BYTES     (256u << 20)

struct mfst_file {
	char    *path;
	uint64_t size;
	char     sha256[SHA_HEX_LEN + 1];
};

struct mfst_tensor {
	char    *group;
	int      rank;
	char    *name;
	size_t   file;                       /* index into files */
	char     dtype[8];
	int      ndim;
	int64_t  shape[SAFET_MAX_NDIM];
	uint64_t begin, end;                 /* absolute in the file */
};

struct mfst_blob {
	int    rank;
	char  *name;
	size_t file;
};

struct mfst {
	int      format_version;
	char     status[16];                 /* "committed" */
	char    *job;
	char     run_id[33];
	char     txid[33];
	uint64_t step;
	int      world_size;
	int64_t  created_unix;
	struct mfst_file   *files;   size_t nfiles;
	struct mfst_tensor *tensors; size_t ntensors;
	struct mfst_blob   *blobs;   size_t nblobs;
};

/* Serialise (compact JSON, trailing newline).  *out malloc'd.  0 or -errno. */
int  mfst_dump(const struct mfst *m, char **out, size_t *len);
/* Parse and validate strictly: every field present with the right type,
 * format/version known, hex fields well-formed, paths whitelisted, indexes
 * in range, ranks < world_size, begin <= end <= file size, dtype known and
 * end-begin == prod(shape)*size.  Unknown top-level keys are ignored
 * (forward compatible); format_version > MFST_VERSION is refused.
 * Returns 0 or -EINVAL with err filled. */
int  mfst_parse(const char *json, size_t len, struct mfst **out,
		char *err, size_t errlen);
/* Read dirfd/checkpoint_manifest.json (O_NOFOLLOW) and parse it. */
int  mfst_read(int dirfd, struct mfst **out, char *err, size_t errlen);
/* Write dirfd/checkpoint_manifest.json (O_EXCL), fsync it.  0 or -errno. */
int  mfst_write(int dirfd, const struct mfst *m);
void mfst_free(struct mfst *m);           /* NULL-safe, half-built safe */

#endif
