/* fcheck.h - a file's bytes, seen once in order, checked against its
 * manifest entry the fast way: the CRC32C of every chunk recorded when it
 * was written (format 2), or its digest where the manifest has no chunk
 * checksums (format 1: SHA-256).  A restore checks what it reads with it;
 * `ckptctl verify` and the offline audit check the file's digest (the
 * algorithm its manifest names, digest.h) and CRC32Cs both (verify.c).
 *
 * CRC32C runs at ~15 GB/s per core with SSE4.2 (csum.c), SHA-256 at ~1.7:
 * a restore that hashed every byte with SHA-256 was CPU-bound at 0.6 s/GB.
 * A CRC32C of 1 MiB chunks catches every burst error up to 32 bits and any
 * other change with probability 1 - 2^-32 per chunk; it is no defence
 * against someone who can write the manifest (nor is the SHA-256 next to
 * it). */
#ifndef CKPT_FCHECK_H
#define CKPT_FCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "csum.h"
#include "digest.h"

struct mfst_file;

struct fcheck {
	const struct mfst_file *mf;     /* borrowed: path, size, digest, crc32c */
	int                fast;        /* chunk CRC32Cs; 0: the file's digest */
	struct csum_stream cs;
	uint64_t           checked;     /* chunks compared so far */
	uint64_t           seen;        /* bytes fed, past the size too */
	struct digest_ctx  dg;
};

/* Start checking file mf.  0 or -ENOMEM (msg filled). */
int  fcheck_init(struct fcheck *c, const struct mfst_file *mf, char *msg, size_t msglen);

/* The file's next len bytes.  With chunk checksums every chunk is compared
 * as soon as it is complete: 0, or -EBADMSG with msg naming the file, the
 * chunk and its bytes (stop there: the file is damaged). */
int  fcheck_update(struct fcheck *c, const void *buf, size_t len, char *msg, size_t msglen);

/* After the last byte: 0 when exactly mf->size bytes were seen and they
 * match, else -EBADMSG with msg.  Releases c. */
int  fcheck_final(struct fcheck *c, char *msg, size_t msglen);

/* For a check abandoned part way; NULL-safe, idempotent. */
void fcheck_release(struct fcheck *c);

#endif
