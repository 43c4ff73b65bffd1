/* reshard.h - restore of global tensors into any layout: each registered
 * piece is filled from the saved pieces that overlap it, reading only the
 * checksummed chunks that hold the bytes it needs and checking each chunk's
 * CRC32C before any of its bytes are delivered.  Runs on a restore thread.
 */
#ifndef CKPT_RESHARD_H
#define CKPT_RESHARD_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

#include "mfst.h"

/* Delivers n bytes at byte off of a piece held elsewhere (CUDA memory):
 * 0 or -errno with msg filled. */
typedef int (*reshard_copy_fn)(void *arg, uint64_t off, const void *src, size_t n,
			       char *msg, size_t msglen);

/* A registered piece of a global tensor and where its bytes go: host
 * memory dst, or through copy(copy_arg, ...) when dst is NULL. */
struct reshard_want {
	const char     *group, *name;
	char            dtype[8];
	int             ndim;
	int64_t         gshape[SAFET_MAX_NDIM], offset[SAFET_MAX_NDIM], shape[SAFET_MAX_NDIM];
	uint8_t        *dst;
	reshard_copy_fn copy;
	void           *copy_arg;
};

/* What a restore read and delivered. */
struct reshard_stats {
	uint64_t bytes_read;       /* checkpoint bytes read (whole chunks) */
	uint64_t bytes_delivered;  /* bytes written into the pieces */
	uint64_t chunks;           /* chunks read and checked */
	uint64_t chunks_from_mem;  /* of which delivered by mem */
};

/* Where chunks may come from before the files: 0 when mem_read delivered
 * chunk bytes [off, off + len) of file f into buf, checked by its own
 * checksum; 1 when it does not hold them (then they are read from the file
 * and checked against the chunk's CRC32C); -errno with msg filled. */
struct reshard_mem {
	int  (*read)(void *arg, const struct mfst_file *f, uint64_t off, uint8_t *buf,
		     size_t len, char *msg, size_t msglen);
	void *arg;
};

/* Fill want[0..n) from checkpoint m (directory iterfd; chunks first from
 * mem when not NULL: a file all of whose chunks come from it is not
 * opened).  Each restored
 * piece is appended to restored, each whose tensor the checkpoint lacks to
 * missing ("group/name").  Strict (partial 0): a missing tensor is an
 * error (-ENOENT) and nothing is read.  A tensor with another dtype or
 * global shape is an error (-EINVAL) either way.  A chunk that does not
 * match its CRC32C: -EBADMSG.  Returns 0 or -errno with msg filled. */
int reshard_restore(int iterfd, const struct mfst *m, const struct reshard_mem *mem,
		    const struct reshard_want *want,
		    size_t n, int partial, const atomic_int *cancel, json_t *restored,
		    json_t *missing, struct reshard_stats *st, char *msg, size_t msglen);

#endif
