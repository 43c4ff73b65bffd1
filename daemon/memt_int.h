/* memt_int.h - what the memory tier's two files share: memt.c (steps,
 * captures, reads) and memt_fd.c (systemd's fd store).  Every field is
 * under memt.lock, except as noted. */
#ifndef CKPT_MEMT_INT_H
#define CKPT_MEMT_INT_H

#include <pthread.h>
#include <stdint.h>

#include "memt.h"
#include "digest.h"

typedef struct json_t json_t;
struct mfst_file;

#define PAGE       4096u
#define ORIGINS_MAX 16            /* steps a capture's chunks may come from */
#define RUNS_MAX   256            /* runs of spliced chunks in a capture */
#define MISS_MAX   64             /* jobs whose last capture was refused */
#define ABORTED_MAX 64            /* steps the cluster aborted, remembered */

/* Chunk k of a file whose bytes another capture holds (memt_splice.c). */
struct mt_src {
	struct memt_cap *c;        /* that capture, lending them; NULL: not
				    * found yet (described) or let go */
	struct mt_file  *f;
	uint64_t         step;     /* c's step: found again by it */
	int              on;       /* spliced: the chunk's pages in this
				    * capture's mapping are c's (its room
				    * here a hole, not counted) */
};

struct mt_file {
	char     *path;
	uint64_t  size;
	uint64_t  off;             /* in the capture's memfd */
	uint64_t *sums;            /* one per chunk */
	uint64_t  nsums;
	uint64_t  filled;          /* bytes copied; its writer only */
	struct digest digest;      /* the file's, as in the manifest */
	int       done;            /* written, fsynced, every byte copied */
	/* Shared with an older step: its bytes are file from_file of
	 * capture from, not in this one, and that capture lives while it is
	 * lent.  A frozen shard linked unstaged has no room here (off
	 * unused); a file found unchanged as it was written (memt_cap_same),
	 * or one an orphan no longer needs, keeps its room at off, a hole:
	 * never read, sent or counted. */
	int       shared;
	int       hole;
	struct memt_cap *from;     /* NULL until found (borrow) */
	struct mt_file  *from_file;
	int       lent;            /* newer steps' files sharing its bytes,
				    * and newer chunks spliced from it */
	/* Chunks the same as an older step's, held there (memt_splice.c):
	 * one per chunk, NULL when none is.  A capture looks once, at its
	 * first chunk, for the file in the job's newest committed step and
	 * keeps its sums (prev) to know which chunks may be the same. */
	struct mt_src *src;
	uint64_t      *prev;
	int            looked;
	/* Its chunks spliced into newer captures: how many times each (of
	 * lent, klent_sum); an orphan's file that only lends chunks keeps
	 * only those, the others given back (gone: holes, not readable). */
	uint32_t      *klent;
	uint64_t       klent_sum;
	uint8_t       *gone;
};

/* The room a file of size bytes takes in a capture's memfd. */
#define ROOM(size) (((size) + PAGE - 1) & ~(uint64_t)(PAGE - 1))

struct mt_entry;

struct memt_cap {
	struct memt_cap *next;     /* in the entry */
	struct mt_entry *e;
	int              rank;
	uint64_t         chunk_bytes;
	struct mt_file  *files;
	size_t           nfiles;
	uint64_t         len;      /* data bytes mapped (in the fd store, the
				    * memfd describes itself after them) */
	uint64_t         bytes;    /* of len, counted in the budget: all but
				    * the holes (mt_file.hole) */
	pthread_mutex_t  alloc_lock;
	int              fd;
	uint8_t         *map;
	int              unmade;   /* its memory may lack pages: each file's
				    * room is made when its first chunk comes */
	int              failed;   /* a file was not captured whole */
	int              whole;    /* splices nothing (a partner that could
				    * not share gets it whole: rsave) */
	/* memt_splice.c, under t->lock: the steps not to splice from
	 * (sorted; found once, looked), and the runs of chunks spliced */
	uint64_t        *avoid;
	size_t           navoid;
	int              looked;
	unsigned         runs;
	char             why[160];
	char             fdname[160];   /* in systemd's fd store; "" if not */
	struct mt_spare *claimed;  /* a spare it will use (memt__claim), and */
	struct mt_spare *gone;     /*   spares over the budget it frees */
	int              holds;    /* sends to partner nodes (memt_cap_hold) */
	int              discard;  /* put while held: discarded when let go */
	int              lent;     /* files of newer captures share its bytes */
	int              orphan;   /* its step is gone, it lives while lent
				    * (in memt.orphans, e NULL, still counted) */
	/* an orphan's step (its entry gone): its memory's job as a spare, and
	 * its description in the fd store (memt_fd_redescribe) */
	char             job[65];
	uint64_t         step;
	char             txid[33];
};

/* A capture's mapping (a page for one of no bytes). */
#define MAP_LEN(c) ((c)->len ? (c)->len : PAGE)

struct mt_entry {
	struct mt_entry *next;
	struct memt     *t;
	char             job[65];
	uint64_t         step;
	char             txid[33];
	int              committed, dropped;
	int              pinned;   /* committed in memory only: never dropped to
				    * make room, only for a newer committed step */
	int              refs;     /* captures not yet put, readers */
	uint64_t         bytes;    /* counted in the budget */
	struct memt_cap *caps;
};

/* The memory of a dropped copy, kept for the next capture of the same
 * size: a new one would cost allocating and zeroing every page, and
 * freeing it the same again (never on the loop thread). */
struct mt_spare {
	struct mt_spare *next;
	int              fd;
	uint8_t         *map;
	uint64_t         len;
	uint64_t         bytes;    /* counted: len less the holes it has */
	char             job[65];  /* made or last used for (memt_spare.c) */
	int              rank;
};

struct memt {
	pthread_mutex_t  lock;
	uint64_t         budget, used;  /* used: captures, copies and spares */
	struct mt_spare *spares;
	uint64_t         spare_bytes;
	uint64_t         reserving;     /* spares being made (memt_reserve) */
	int              lock_mem, lock_warned;
	int              closing;       /* memt_free: orphans give nothing back */
	uint64_t         copied, shared;   /* (memt_usage; atomic, no lock) */
	struct mt_entry *entries;
	struct memt_cap *orphans;       /* lent captures of dropped steps */
	struct { char job[65]; uint64_t step; char why[200]; } miss[MISS_MAX];
	unsigned         nmiss;
	struct { char job[65]; uint64_t step; } aborted[ABORTED_MAX];
	unsigned         naborted;
};

/* memt.c: a committed step of job with capture c, taken back from the fd
 * store at start-up (the budget permitting), its shared files found in
 * the job's step taken back before it, its spliced chunks in the steps
 * they came from (older steps stay: memt__drop_older).  Loop thread,
 * before any save.
 * lender: a newer step of the job was stored too, and may share this
 * one's files: a shared file of its own that is not held is left out
 * (not readable; an orphan's, which no step needed any more) instead of
 * refusing it.  0, or with why: -ENOSPC when it does not fit, -EEXIST
 * when the tier holds a newer step of the job or another save of that
 * step, -ENOENT when a shared file is not held, -ENOMEM. */
int  memt__adopt(struct memt *t, const char *job, uint64_t step, const char *txid,
		 struct memt_cap *c, int lender, char *why, size_t whylen);
/* memt.c, at start-up, once every stored copy is taken back or not: the
 * older steps of job taken back for its newest stored step to share are
 * dropped (each keeping, as an orphan, what that step borrows).  How
 * many when that step is not held (they were of no use), else 0. */
int  memt__drop_older(struct memt *t, const char *job, uint64_t step);
void memt__cap_free(struct memt_cap *c);
/* memt_lend.c, under t->lock: let go of what c's files borrowed (found in
 * the job's committed steps when c joins one: memt__borrow). */
void memt__unlend(struct memt *t, struct memt_cap *c);
/* File f of c: its bytes, wherever they are (NULL: not mapped). */
const uint8_t *memt__file_bytes(const struct memt_cap *c, const struct mt_file *f);
/* Count capture c (c->len bytes) in job's step: a capture or a partner's
 * copy joins the step's entry not yet committed (committed 0), a copy
 * fetched for a restore the committed one of txid (1).  Its shared files
 * are found in the job's committed step held.  Older committed copies of
 * the job make room.  The caller holds one reference until memt__cap_end
 * (a capture: memt_cap_put).  0, or -ENOSPC (noted for memt_get),
 * -ENOENT (a shared file not held), -EEXIST, -ENOMEM with why. */
int  memt__cap_insert(struct memt *t, const char *job, uint64_t step, const char *txid,
		      struct memt_cap *c, int committed, char *why, size_t whylen);
/* The capture's memory: a spare (allocated and locked, its holes punched
 * again where c has some), or a new memfd whose pages are allocated later,
 * a file's room or a piece at a time, by whoever fills it
 * (memt__cap_populate; then memt__lock_bytes).  0 or -errno. */
int  memt__cap_alloc(struct memt_cap *c, struct memt *t);
/* Lock every byte of c that is not a hole, when the tier locks its
 * memory (mlock of a hole would allocate it). */
void memt__lock_bytes(struct memt *t, struct memt_cap *c);
/* Allocate the pages of bytes [off, off+len) of c's memory: 0, or -ENOMEM
 * when the node has not the memory (a write there would be SIGBUS). */
int  memt__cap_populate(struct memt_cap *c, uint64_t off, uint64_t len);
/* Filling c is over: kept (ok), or taken out and freed.  Drops the
 * reference memt__cap_insert gave. */
void memt__cap_end(struct memt_cap *c, int ok);

/* memt_spare.c, under t->lock: c's memory becomes a spare of its job and
 * rank (still counted in t->used), and what it claimed goes back; the
 * caller frees c. */
void memt__to_spare(struct memt *t, struct memt_cap *c);
void memt__spares_free(struct mt_spare *sp);      /* a list; NULL ok */
/* Wait until the spares given to threads to free (memt_spare.c: off the
 * writers' path) are freed: memt_free, so nothing outlives the tier. */
void memt__frees_wait(void);
/* Under t->lock, c just counted in t->used: claim the spare c will use
 * (of about its size, one of job's rank first), and take its rank's
 * spares of other sizes and what else is over the budget for c's writer
 * to free (memt__spare_take). */
void memt__claim(struct memt *t, struct memt_cap *c, const char *job);
/* Writer thread: free what c took, and return its claimed spare resized
 * to c->len (NULL: none, or it could not be resized). */
struct mt_spare *memt__spare_take(struct memt *t, struct memt_cap *c);
/* New memory of len bytes (a page mapped when 0): a memfd mapped shared,
 * no page allocated yet.  0 or -errno; *fd, *map untouched on failure. */
int  memt__mem_new(uint64_t len, int *fd, uint8_t **map);
/* mlock len bytes at p when the tier locks its memory; warns once. */
void memt__mem_lock(struct memt *t, void *p, uint64_t len);

/* memt_read.c: the fast checksum of a block (XXH3-64), recorded at
 * capture, checked when read. */
uint64_t memt__block_sum(const void *p, size_t n);
/* memt_read.c, under t->lock or holding e: e's file with mf's path, size
 * and digest, its bytes mapped, or NULL. */
struct memt_cap *memt__file_find(struct mt_entry *e, const struct mfst_file *mf,
				 struct mt_file **out);

/* memt.c: give f's room in c's memory back to the kernel (under
 * c->alloc_lock while c is being filled).  0, or -1 (logged: its pages
 * stay). */
int  memt__room_punch(struct memt_cap *c, const struct mt_file *f);

/* memt_lend.c, under t->lock: job's newest committed step held older
 * than step before (at start-up, other ranks' copies of a step may be
 * taken back before one that shares their older step's files), or NULL. */
struct mt_entry *memt__newest_committed(struct memt *t, const char *job, uint64_t before);
/* memt_lend.c, under t->lock: shared file f of c found in held (same
 * path, size, digest and chunk size): the capture that has its bytes
 * lends them.  0, or -ENOENT. */
int  memt__borrow_file(struct mt_entry *held, struct memt_cap *c, struct mt_file *f);
/* memt_lend.c, under t->lock: every shared file and spliced chunk of c (of
 * job's step) not yet found, borrowed from job's newest committed step
 * held here before it (lender: a file not held is left out, not readable:
 * memt__adopt).  0, or -ENOENT with why (what was found is let go). */
int  memt__borrow(struct memt *t, struct memt_cap *c, const char *job, uint64_t step,
		  int lender, char *why, size_t whylen);
/* memt_lend.c, under t->lock: orphan c keeps of file f what newer steps
 * share (all of it while one shares it whole, else the chunks spliced from
 * it); the rest goes.  The bytes given back (the caller says so in the fd
 * store); 0 while the tier closes. */
uint64_t memt__orphan_give_back(struct memt *t, struct memt_cap *c, struct mt_file *f);
/* memt_lend.c, under t->lock: the file at path (this size and chunk size) of
 * job's step, in a step held (committed or not) or an orphan; NULL when
 * there is none. */
struct memt_cap *memt__step_file(struct memt *t, const char *job, uint64_t step,
				 const char *path, uint64_t size, uint64_t chunk_bytes,
				 struct mt_file **out);
/* memt_lend.c, under t->lock: the file at path of job's newest committed
 * step, whole and mapped, with this size, chunk size and (d not NULL) digest;
 * NULL when there is none. */
struct memt_cap *memt__held_file(struct memt *t, const char *job, const char *path,
				 uint64_t size, const struct digest *d,
				 uint64_t chunk_bytes, struct mt_file **out);
/* memt_lend.c, under t->lock: file of of capture o lends its bytes (a
 * file, or n chunks) to n less; an orphan keeps only what it lends. */
void memt__lend_release(struct memt *t, struct memt_cap *o, struct mt_file *of, int n);
/* memt.c, under t->lock: the room f takes in c's memfd, less its spliced
 * chunks' (what giving the room back frees). */
uint64_t memt__room_counted(const struct memt_cap *c, const struct mt_file *f);

/* memt_splice.c: the step of capture c (its entry's, or an orphan's). */
uint64_t memt__cap_step(const struct memt_cap *c);
/* Bytes of f's room whose pages are not in c's memfd: chunks spliced
 * (mapped from another capture) or given back (gone). */
uint64_t memt__not_held(const struct memt_cap *c, const struct mt_file *f);
/* Under t->lock, orphan c's file f lends chunks only: the others go (and
 * what f borrowed); the bytes given back.  f is no longer readable. */
uint64_t memt__trim_chunks(struct memt *t, struct memt_cap *c, struct mt_file *f);
/* Piece k of f's room in c's memfd (the whole room, or with spliced or
 * given back chunks a chunk each): its length and *off, 0 when its pages
 * are not c's (shared, spliced, gone), UINT64_MAX past the last piece. */
uint64_t memt__own_piece(const struct memt_cap *c, const struct mt_file *f, uint64_t k,
			 uint64_t *off);
/* Writer thread, chunk k of f (len bytes at buf, its sum recorded in
 * f->sums[k]): the same as in the job's newest committed step?  Then its
 * pages there are mapped over its room, lent, and its room here given
 * back: 0.  -1: copy it; -EFAULT: its room is no longer mapped (the file
 * is not captured). */
int  memt__splice_chunk(struct memt_cap *c, struct mt_file *f, uint64_t k,
			const void *buf, size_t len);
/* Writer thread, at f's first chunk: keep the sums of f's file in the
 * job's newest committed step, if there is one to splice from. */
void memt__splice_look(struct memt_cap *c, struct mt_file *f);
/* Under t->lock: find the spliced chunks of c's file f of job (as
 * described: after a restart, or from a partner), each in the step it was
 * spliced from, there its own, and borrow them; map them too when c has
 * its memory.  0, or -ENOENT (those found are let go, f not readable). */
int  memt__splice_borrow(struct memt *t, struct memt_cap *c, struct mt_file *f,
			 const char *job);
/* Map c's spliced chunks over its memory (made after they were found).
 * 0 or -errno. */
int  memt__splice_map(struct memt_cap *c);
/* Under t->lock: f lets go of the chunks it borrowed (they stay mapped
 * until memt__unsplice; f is no longer readable). */
void memt__splice_release(struct memt *t, struct mt_file *f);
/* ... and c's own memory is mapped back there at once (an orphan's file
 * giving back: the chunks are gone; one mapping again, not one per
 * spliced run). */
void memt__splice_drop(struct memt *t, struct memt_cap *c, struct mt_file *f);
/* Map c's own memory back where chunks were spliced (its holes), before
 * it serves another capture.  0, or -1: it cannot (freed instead). */
int  memt__unsplice(struct memt_cap *c);

/* memt_fd.c: a capture's description (new reference, NULL when out of
 * memory), and a capture rebuilt from one (no memory yet: c->map NULL).
 * 0 with *out, job, step, txid; or -EINVAL / -ENOMEM with why. */
json_t *memt__describe(const char *job, uint64_t step, const char *txid,
		       const struct memt_cap *c);
int  memt__cap_parse(const json_t *o, struct memt_cap **out, char job[65],
		     uint64_t *step, char txid[33], char *why, size_t whylen);

/* memt_fd.c: hand capture c of e (committed) to the fd store, or take it
 * out of it; describe orphan c again in the store (it gave files back).
 * Without $NOTIFY_SOCKET they do nothing. */
void memt_fd_keep(const struct mt_entry *e, struct memt_cap *c);
void memt_fd_forget(struct memt_cap *c);
void memt_fd_redescribe(struct memt_cap *c);

#endif
