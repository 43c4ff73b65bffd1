/* mcat.h - the memory catalogue: for each job, the newest step the cluster
 * committed as this node heard it from the coordinator: its txid, which
 * node saved each rank (where that rank's copies are kept) and, for a step
 * committed at memory level (persist_every), its manifest, which is on no
 * disk.  Restores read it to find a memory-level step and the peers that
 * hold a file; the flush at the end of a world (memflush.h) to know what
 * must reach the disk.  Any thread (one mutex). */
#ifndef CKPT_MCAT_H
#define CKPT_MCAT_H

#include <stdint.h>

struct mcat_step {
	uint64_t step;
	char     txid[33];
	char    *manifest;           /* memory level: JSON text; else NULL */
	int     *owners;             /* [nowners]: the node that saved rank r */
	int      nowners;
};

/* Loop thread: job's step was committed (a newer one than the entry
 * replaces it).  The arguments are copied; out of memory is logged and
 * the step not recorded (restores then use the disk). */
void mcat_committed(const char *job, uint64_t step, const char *txid,
		    const char *manifest, const int *owners, int nowners);
/* The job's newest committed step, copied into *out (release it with
 * mcat_step_release).  0, or -ENOENT. */
int  mcat_get(const char *job, struct mcat_step *out);
void mcat_step_release(struct mcat_step *s);
/* Every job with a memory-level step: fn(arg, job, step) (the flush). */
void mcat_each_memory(void (*fn)(void *arg, const char *job, const struct mcat_step *s),
		      void *arg);

#endif
