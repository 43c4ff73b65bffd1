/* memt_help.h - what the memory tier's unit tests share (test_memt.c,
 * test_memt_keep.c): one rank's save of one file (or of gK files),
 * captured as the writers do, shared with the step held, committed, and
 * read back; what the tier holds. */
#ifndef CKPT_MEMT_HELP_H
#define CKPT_MEMT_HELP_H

#include <stddef.h>
#include <stdint.h>

#include "memt.h"
#include "rsave.h"

#define CHUNK   (64u << 10)
#define FSIZE   (3 * CHUNK + 777)        /* a partial last chunk */
#define TXID    "0123456789abcdef0123456789abcdef"
#define SHA     "aa00000000000000000000000000000000000000000000000000000000000000"
#define CAPLEN  ((FSIZE + 4095) & ~4095ull)   /* one capture's memory */

extern uint8_t content[FSIZE];     /* every file's bytes */
void content_fill(void);

/* One rank's save of one file of FSIZE bytes, planned as plan.c does,
 * captured whole (memt_whole: no chunk spliced from an older step). */
void rsave_fake(struct rsave *rs, struct wfile *f, int rank);
/* File fi of c captured whole as the writer does (skip: chunk `skip` left
 * out; UINT64_MAX none). */
void fill_file(struct memt_cap *c, size_t fi, uint64_t skip);
struct memt_cap *capture(struct memt *t, const char *job, uint64_t step, int rank,
			 uint64_t skip);
/* Step of job whose file is linked unstaged (a frozen shard), or found
 * unchanged as it was written (NULL with why when the tier holds no such
 * file): shared with the job's committed step held, never filled. */
struct memt_cap *capture_shared(struct memt *t, const char *job, uint64_t step, int rank,
				char *why, size_t whylen);
struct memt_cap *capture_same(struct memt *t, const char *job, uint64_t step, int rank,
			      char *why, size_t whylen);
/* Step of job "j" with nfiles files gK/rank_00000.safetensors: those in
 * same (a bit mask) found unchanged as written, the others copied (NULL:
 * refused); save_files commits it: 0, or 1. */
struct memt_cap *capture_files(struct memt *t, uint64_t step, size_t nfiles, unsigned same);
int save_files(struct memt *t, uint64_t step, size_t nfiles, unsigned same);

/* content with the chunks in changed (a bit mask) changed (a byte xor
 * by), in out (FSIZE bytes). */
void version(uint8_t *out, unsigned changed, uint8_t by);
/* Job "j" step's rank's file with these FSIZE bytes, the chunks the same
 * as in the job's committed step held spliced from it (NULL: refused);
 * save_bytes captures rank 0's and commits it: 0, or 1.  reads_as: 0
 * when the rank's file reads back as bytes. */
struct memt_cap *capture_bytes(struct memt *t, uint64_t step, int rank, const uint8_t *bytes);
int save_bytes(struct memt *t, uint64_t step, const uint8_t *bytes);
int reads_as(struct memt *t, uint64_t step, int rank, const uint8_t *bytes);

int held(struct memt *t);                 /* committed steps held */
uint64_t held_bytes(struct memt *t);      /* what it holds apart from spares */
/* Read job's step's file at path (or its rank's file) whole: 0 when it is
 * content. */
int path_reads_back(struct memt *t, const char *job, uint64_t step, const char *path);
int reads_back(struct memt *t, const char *job, uint64_t step, int rank);
/* Steps "j" step's files g0..g(n-1) read back: 0, or 1. */
int files_read_back(struct memt *t, uint64_t step, int n);

/* memt_each_file: every file once, with its bytes (arg: struct seen). */
struct seen { int n; int ok; };
int each(void *arg, const char *path, const uint8_t *data, uint64_t size,
	 const struct digest *d);

#endif
