/* mfst.h - checkpoint_manifest.json: written last into a checkpoint, it is
 * the checkpoint's table of contents and its proof of completeness.
 *
 * {
 *   "format": "ckpt-manifest", "format_version": 2, "status": "committed",
 *   "job": "demo", "run_id": "<32 hex>", "txid": "<32 hex>", "step": 500,
 *   "world_size": 2, "created_unix": 1790000000,
 *   "files":   [{"path": "model/rank_00000.safetensors", "size": N,
 *                "xxh3_128": "<32 hex>", "chunk_size": 1048576,
 *                "crc32c": [C0, C1, ...]}, ...],
 *   "tensors": [{"group": "model", "rank": 0, "name": "w", "file": 0,
 *                "dtype": "F32", "shape": [4, 4], "begin": B, "end": E}, ...],
 *   "blobs":   [{"rank": 0, "name": "rng", "file": 2}, ...],
 *   "globals": [{"group": "model", "name": "emb", "dtype": "F32",
 *                "shape": [8, 4],
 *                "pieces": [{"rank": 1, "file": 0, "offset": [0, 0],
 *                            "shape": [4, 4], "begin": B, "end": E}, ...]}]
 * }
 * "file" indexes "files"; begin/end are absolute byte offsets in that file.
 * Paths are relative, made only of whitelisted components (names.h):
 * "<group>/rank_NNNNN.safetensors" or "extra/rank_NNNNN/<blob>".
 *
 * Format 2 added, both optional in the JSON so format 1 reads as before:
 * - per file, CRC32C of each chunk_size bytes (the last chunk shorter), so
 *   a restore that reads a byte range checks every byte it reads (csum.h);
 * - "globals": tensors registered with ckpt_register_global.  "tensors"
 *   holds rank-local tensors only.  Each global's pieces are distinct
 *   (a replicated piece is listed once, under the rank that wrote it),
 *   row-major boxes of the global shape that tile it exactly; a piece is
 *   stored in its rank's shard of the group, under the global's name.
 *
 * Format 3 lets a file's digest be XXH3-128 ("xxh3_128": 32 hex, digest.h)
 * instead of SHA-256 ("sha256": 64 hex): each file has exactly one of the
 * two keys, so a reader (ours or anyone's) sees by the key which one to
 * compute.  Formats 1 and 2 have "sha256" only.  A manifest is written as
 * format 3 only when a file has XXH3-128, so a "file_digest": "sha256"
 * checkpoint stays readable by a ckpt that knows format 2; one that knows
 * format 2 refuses a format 3 manifest as newer rather than as broken.
 *
 * Format 4 adds a group's frozen shard, "<group>/rank_NNNNN.frozen.safetensors":
 * the tensors registered with CKPT_FROZEN, in a file of their own so that
 * a save links it when they did not change.  A manifest is format 4 only
 * when it has one; a reader that knows format 3 refuses it as newer
 * (it would not find those tensors in the group's shard).
 *
 * "bytes_written" (top level, optional: readers that do not know it ignore
 * it) is how many of the files' bytes the save wrote; the rest are files
 * hard-linked to the step before because they did not change (incremental
 * saves).  Absent, or not between 0 and the files' total, it reads as
 * every file's size.
 *
 * "object" (per file, optional; only in manifests on the object store,
 * remote_xfer.h) names the object that holds the file's bytes when it is
 * another step's, uploaded once and referenced by the steps after it:
 * "iter_N/<the file's path>" under the job's prefix, N older than the
 * manifest's step.  A reader that does not know it looks under the step's
 * own prefix, finds nothing, and refuses the step as damaged.
 */
#ifndef CKPT_MFST_H
#define CKPT_MFST_H

#include <stddef.h>
#include <stdint.h>
#include "digest.h"
#include "safet.h"

#define MFST_NAME          "checkpoint_manifest.json"
#define MFST_FORMAT        "ckpt-manifest"
#define MFST_VERSION       4
#define MFST_MAX_BYTES     (256u << 20)
#define MFST_MAX_WORLD     100000        /* ranks are written with 5 digits */

struct mfst_file {
	char    *path;
	uint64_t size;
	struct digest digest;                /* of the whole file */
	uint64_t chunk_size;                 /* 0: no chunk checksums (format 1) */
	uint32_t *crc32c;                    /* [csum_count(size, chunk_size)] */
	char    *object;                     /* "object" above; NULL: its own */
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

/* A stored piece of a global tensor.  t is what the piece's shard holds:
 * t.group, t.name and t.dtype are the global's (strings borrowed from it),
 * t.rank the rank that wrote it, t.shape the piece's shape, t.file /
 * t.begin / t.end where its bytes are. */
struct mfst_piece {
	struct mfst_tensor t;
	int64_t  offset[SAFET_MAX_NDIM];     /* first index in the global */
	size_t   global;                     /* index into globals */
};

struct mfst_global {
	char    *group, *name;
	char     dtype[8];
	int      ndim;
	int64_t  shape[SAFET_MAX_NDIM];      /* the whole tensor */
	size_t   first_piece, npieces;       /* in mfst.pieces */
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
	uint64_t bytes_written;               /* see "bytes_written" above */
	struct mfst_file   *files;   size_t nfiles;
	struct mfst_tensor *tensors; size_t ntensors;
	struct mfst_blob   *blobs;   size_t nblobs;
	struct mfst_global *globals; size_t nglobals;
	struct mfst_piece  *pieces;  size_t npieces;
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
/* Tests: 0 reads every manifest through jansson alone, the reference the
 * fast tensor-table reader (mfst_fast.c) must agree with; how many
 * manifests it read (counted atomically; read it in single-threaded tests). */
extern int mfst_parse_fast;
extern unsigned long mfst_parse_fast_count;
/* Read dirfd/checkpoint_manifest.json (O_NOFOLLOW) and parse it. */
int  mfst_read(int dirfd, struct mfst **out, char *err, size_t errlen);
/* The same for a manifest under another name (a memory-level step's in
 * its staging directory: LAYOUT_MEMORY_MANIFEST). */
int  mfst_read_named(int dirfd, const char *name, struct mfst **out, char *err,
		     size_t errlen);
/* The step whose prefix holds file f's object ("object"): 0 with *step,
 * or -EINVAL when f has none or it is not of the form above. */
int  mfst_object_step(const struct mfst *m, const struct mfst_file *f, uint64_t *step);
/* Write dirfd/checkpoint_manifest.json (O_EXCL), fsync it.  0 or -errno. */
int  mfst_write(int dirfd, const struct mfst *m);
void mfst_free(struct mfst *m);           /* NULL-safe, half-built safe */

#endif
