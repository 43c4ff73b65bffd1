/* prior.h - a rank's newest committed step on disk, file by file: what its
 * next save compares each file with, to link a file that did not change
 * instead of writing it again (incremental saves, wr.c).
 *
 * Built on the loop thread when a step commits, from the rank's own
 * finished save (ckptd wrote or linked every file, and knows each one's
 * digest and chunk CRC32Cs), or, after a restart, from the newest
 * checkpoint's manifest on a worker (prep.c); read-only after, shared by
 * the saves that start before the next commit (refs: loop thread only).
 * A file is only linked (or cloned from) when it is still the inode that
 * was committed, or (after a restart) that was read back and checked by
 * the save that links it (device, inode, size and modification time), so
 * a file an operator replaced or rewrote is written again.  Between two
 * saves of one ckptd the bytes of a committed file are not read again:
 * damage that keeps its inode, size and mtime (bit rot, an edit followed
 * by touch -r) reaches the saves that link or clone it
 * (incremental_max_shared bounds how many). */
#ifndef CKPT_PRIOR_H
#define CKPT_PRIOR_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>

#include "digest.h"
#include "layout.h"

struct rsave;
struct memt;

/* A file as committed. */
struct prior_file {
	char            path[LAYOUT_PATH_MAX];   /* in the step's directory */
	uint64_t        size;
	struct digest   digest;
	uint32_t       *crcs;       /* CRC32C per CSUM_CHUNK_BYTES */
	struct file_range *ranges;  /* per RANGE_HASH_BYTES, or NULL: not
	                               cloned from (prior_load's) */
	unsigned        disk_copies; /* without ranges: checkpoints known to
	                               have its blocks (2: some are shared with
	                               another file, prior_load; else 1) */
	atomic_uint     sharers;    /* saves that clone from it (claimed; the
	                               links are its names) */
	dev_t           dev;
	ino_t           ino;
	struct timespec mtime;
	unsigned        unchecked;  /* saves in a row that linked it without
	                               comparing the trainer's bytes (a frozen
	                               shard: prior_prelink) */
};

/* A CKPT_FROZEN shard is linked without copying the trainer's bytes at
 * most this many saves minus one in a row; then a save copies and
 * compares them (a trainer that changed "frozen" tensors is caught). */
#define PRIOR_FROZEN_CHECK 4

struct prior {
	int                refs;
	uint64_t           step;
	int                from_disk;  /* prior_load's: no byte read yet */
	uint64_t           sess_id, reg_gen;   /* the registrations saved */
	struct prior_file *files;
	size_t             nfiles;
};

/* The files of rs, a save of step that committed; NULL when it wrote none
 * (memory level) or out of memory (the next save writes every file). */
struct prior *prior_from_rsave(const struct rsave *rs, uint64_t step);
/* The files paths[0..n) (a rank's) of the newest checkpoint of the job
 * directory jobfd, as its manifest records them, each only if it still
 * looks as committed: a regular file of the recorded size, not modified
 * since the manifest was written, with chunk CRC32Cs of CSUM_CHUNK_BYTES.
 * NULL when no file qualifies.  Any thread: file work.  Its files' bytes
 * are unread (from_disk): a save reads one back before it links it. */
struct prior *prior_load(int jobfd, char *const *paths, size_t n);
/* Is pf's file in dirfd the inode pf records, and do its bytes, read
 * back, match pf's digest and chunk CRC32Cs?  Any thread; reads the file. */
int  prior_read_back(const struct prior_file *pf, int dirfd);
struct prior *prior_get(struct prior *p);      /* NULL-safe */
void          prior_put(struct prior *p);      /* NULL-safe */

/* p's file at path (at index hint when the layout is unchanged), or NULL. */
const struct prior_file *prior_find(const struct prior *p, size_t hint,
				    const char *path);

/* How many checkpoints have the blocks of pf's range i (RANGE_HASH_BYTES)
 * now, as far as ckptd knows: its file's names (names: st_nlink), or
 * those that cloned or linked them along the saves before it, when more;
 * and the saves that clone from it (prior_claim, one's own included). */
unsigned prior_copies(const struct prior_file *pf, nlink_t names, uint64_t i);
/* A save is about to clone from pf: count it in prior_copies (before
 * looking at the file's names: a link made meanwhile sees the claim), and
 * take it back when nothing was cloned.  Any thread. */
void prior_claim(const struct prior_file *pf);
void prior_unclaim(const struct prior_file *pf);
/* May pf's file take one more link: fewer than max_shared (0: any)
 * checkpoints (kept, and saves in flight) have it, or any of its ranges
 * (prior_copies), now? */
int  prior_may_share(const struct prior_file *pf, int dirfd, unsigned max_shared);

/* Link pf's file (in rs's prior directory) into rs's staging directory as
 * f, and check that the link is the inode pf records and that, with it, no
 * more than rs->max_shared (0: any) names have that inode; f is then
 * linked, with that inode noted.  0, or -errno (-ESTALE: another inode;
 * -ETOOMANYREFS: shared enough, by saves that overlap; the link is removed
 * again): the file is to be written.  f's ranges, when it has them, are
 * marked shared (prior_share_ranges). */
int  prior_link(const struct prior_file *pf, const struct rsave *rs, struct wfile *f);
/* f's bytes [off, end) have the blocks of pf's file (names: its st_nlink
 * before f) now, linked or cloned (claimed: f's save is counted in pf's
 * sharers): its ranges there have pf's hashes (when pf has them), in one
 * checkpoint more than pf's (prior_copies).  Done by prior_link for a
 * link. */
void prior_share_ranges(struct wfile *f, const struct prior_file *pf, uint64_t off,
			uint64_t end, nlink_t names, int claimed);
/* f is st's inode (written, or linked): what the next save compares with. */
void prior_note_inode(struct wfile *f, const struct stat *st);

/* Loop thread, before rs is submitted and its memory-tier capture started:
 * its CKPT_FROZEN shards that can be linked to the prior step's without
 * copying the trainer's bytes (the same session and registrations as the
 * prior's save, not due for a comparison, PRIOR_FROZEN_CHECK; with the
 * memory tier on, tier, only those it holds for the capture to share:
 * memt_can_share) are linked now and leave the pipeline: the stall copies
 * only the rest.  Returns how many bytes were linked so; a failed link
 * leaves the file to be copied and written as usual. */
uint64_t prior_prelink(struct rsave *rs, struct memt *tier);

/* Bytes of rs's files that are links to its prior step's, and bytes of
 * its other files cloned from there (not written). */
void prior_shared_bytes(const struct rsave *rs, uint64_t *linked, uint64_t *cloned);

/* Does st describe pf's inode as it was committed? */
int  prior_same_inode(const struct prior_file *pf, const struct stat *st);

#endif
