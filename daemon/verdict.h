/* verdict.h - verification verdicts of checkpoints, computed once and
 * shared by the ranks of a job that restore at the same time.
 *
 * A rank reading its own shards into the trainer checks them anyway, so
 * those files are verified by that read (verdict_claim / verdict_mark);
 * whatever file no rank claims (another rank's, a blob) is checked by
 * whichever rank is free (verdict_finish).  Both check what a restore
 * checks (chunk CRC32Cs, SHA-256 for format 1: fcheck.h); `ckptctl
 * verify` is the full audit.  Each file is read from disk
 * once.  All ranks wait for the whole verdict, so all pick the same step.
 * A verdict is remembered while the checkpoint's files are unchanged
 * (manifest identity and a stamp of the whole tree); thread-safe.
 */
#ifndef CKPT_VERDICT_H
#define CKPT_VERDICT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct mfst;
struct verdict;

/* Join the verdict of checkpoint `step` of `job` (directory iterfd, nfiles
 * files in its manifest).  Already decided: returns NULL with *r (0 or
 * -errno) and why set.  Being computed, or new: returns it joined; leave
 * with verdict_finish or verdict_leave.  NULL with *r == -EAGAIN: it could
 * not be tracked (out of memory) and a full verification passed instead. */
struct verdict *verdict_join(const char *job, uint64_t step, int iterfd,
			     size_t nfiles, unsigned threads, int *r,
			     char *why, size_t whylen);

/* Take file f to verify it by reading it (1), or not: someone has (0). */
int  verdict_claim(struct verdict *v, size_t f);

/* The outcome of a claimed file: r == 0 verified, r < 0 failed (why),
 * r == 1 not decided (handed back for someone to check). */
void verdict_mark(struct verdict *v, size_t f, int r, const char *why);

/* Check the files nobody claimed (on up to `threads` threads), wait for the
 * verdict and leave it.  Returns the verdict: 0, or -errno with why; or
 * -ECANCELED as soon as *cancel is set (the verdict is left undecided for
 * the other ranks to finish). */
int  verdict_finish(struct verdict *v, int iterfd, const struct mfst *m,
		    unsigned threads, const atomic_int *cancel,
		    char *why, size_t whylen);

/* A restore of global tensors checks only the chunks it reads, so it does
 * not join a verdict; what one rank finds damaged is recorded for all.
 * verdict_known: the decided verdict of the checkpoint as its files are
 * now (0, or -errno with why), or 1 when none is known.
 * verdict_record_bad: remember that it failed with r (why). */
int  verdict_known(const char *job, uint64_t step, int iterfd, size_t nfiles,
		   char *why, size_t whylen);
void verdict_record_bad(const char *job, uint64_t step, int iterfd, size_t nfiles,
			int r, const char *why);

/* Forget every decided verdict (after a prune). */
void verdict_cache_clear(void);

#endif
