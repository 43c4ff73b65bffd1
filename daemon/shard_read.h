/* shard_read.h - read one shard file of a checkpoint in order, checking
 * every byte against its manifest entry (chunk CRC32Cs, SHA-256 for format
 * 1: fcheck.h), and deliver the byte ranges a restore wants into the
 * trainer's memory (host or CUDA).
 *
 * One reader, two ways to read: O_DIRECT in aligned windows through
 * buffers borrowed from the idle staging pool (no page cache, no kernel
 * copy; the tensor bytes are copied out of each window), or, where O_DIRECT
 * is not possible (the file system refuses it, CUDA destinations), buffered
 * reads that follow the tensors' boundaries so host tensors are read
 * straight into the trainer's memory and the rest goes through scratch
 * buffers (pinned for copies to the GPU).  Runs on a restore thread.
 */
#ifndef CKPT_SHARD_READ_H
#define CKPT_SHARD_READ_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct gpu_mem;
struct io_ctx;
struct mfst_file;
struct shm_pool;

/* File bytes [begin, end) go to dst (host), or to bytes [goff, ...) of gm
 * (CUDA memory) when dst is NULL. */
struct shard_seg {
	uint64_t        begin, end;
	uint8_t        *dst;
	struct gpu_mem *gm;
	uint64_t        goff;
};

struct shard_src {
	struct io_ctx          *io;      /* the calling thread's */
	int                     iterfd;  /* the checkpoint directory */
	const struct mfst_file *mf;      /* path (dir/name), size, checksums */
	struct shm_pool        *pool;    /* O_DIRECT buffers; NULL: buffered only */
	const atomic_int       *cancel;  /* set: stop with -ECANCELED */
};

/* Read the file and deliver segs (sorted by begin, not overlapping).
 * Returns 0, or -errno with msg filled: -EBADMSG when the bytes do not
 * match the manifest's checksums (the delivered tensors are then not
 * trustworthy; a damaged chunk stops the read there), -EIO for a short
 * file, the read's error, -ECANCELED. */
int shard_read(const struct shard_src *src, const struct shard_seg *segs,
	       size_t nsegs, char *msg, size_t msglen);

#endif
