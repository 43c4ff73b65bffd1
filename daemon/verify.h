/* verify.h - checks a checkpoint directory on its own, with no daemon:
 * used by restore's selection, startup recovery and `ckptctl verify`. */
#ifndef CKPT_VERIFY_H
#define CKPT_VERIFY_H

#include <stddef.h>
#include "mfst.h"

enum verify_level {
	VERIFY_STRUCTURE = 0,   /* manifest valid, files present, sizes match */
	VERIFY_FULL      = 1,   /* and every file's digest and safetensors header */
};

/* Verify the checkpoint whose directory is dirfd.  Every file is opened
 * relative to dirfd with O_NOFOLLOW and must be a regular file.  With
 * VERIFY_FULL, files are hashed on up to nthreads threads.  On success
 * returns 0 and, if out_m is not NULL, hands over the parsed manifest.
 * On failure returns -errno (-ENOENT missing manifest/file, -EINVAL bad
 * manifest or header, -EBADMSG hash or size mismatch) with err naming the
 * file and the reason. */
int verify_checkpoint(int dirfd, enum verify_level level, unsigned nthreads,
		      struct mfst **out_m, char *err, size_t errlen);

/* VERIFY_STRUCTURE of dirfd, with the manifest's step and run id.  What a
 * manifest says is remembered while its file stays the same (device,
 * inode, size, mtime, ctime): checking it again opens and sizes its files
 * but does not parse it again (the prune after every commit checks each
 * step it keeps: 30% of ckptd's CPU with 20,000 tensors a save).  0 or
 * -errno with err, as verify_checkpoint. */
int verify_structure_known(int dirfd, uint64_t *step, char run_id[33], char *err,
			   size_t errlen);
/* Remember m, a committed manifest just written into dirfd, as above. */
void verify_structure_note(int dirfd, const struct mfst *m);
/* How many checks were answered from what was remembered (tests). */
unsigned long verify_structure_hits(void);

/* How verify_file checks a file's bytes. */
enum verify_bytes {
	VERIFY_BYTES_NONE  = 0,   /* not at all: size and header only */
	VERIFY_BYTES_AUDIT = 1,   /* the file's digest (SHA-256 or XXH3-128, as its
				   * manifest says) and every chunk CRC32C
				   * (ckptctl verify) */
	VERIFY_BYTES_FAST  = 2,   /* chunk CRC32Cs; the digest where there are none
				   * (format 1): what a restore reads with (fcheck.h) */
};

/* One file (index i) of a checkpoint whose manifest m was read from dirfd:
 * present, a regular file of the recorded size, and for a shard its
 * safetensors header agrees with the manifest; its bytes checked as `bytes`
 * says.  Lets a caller that reads a file anyway (restore) verify it in the
 * same pass and check only the others.  0 or -errno with err filled, as
 * above. */
int verify_file(int dirfd, const struct mfst *m, size_t i, enum verify_bytes bytes,
		char *err, size_t errlen);

#endif
