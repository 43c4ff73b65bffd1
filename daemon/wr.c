/* wr.c - writer threads: each takes the next file of the pipeline, writes
 * its chunks in order through the I/O table (io_uring, O_DIRECT where
 * possible) while hashing the same staged bytes, then truncates the block
 * padding, fsyncs and closes it.  The hash and the chunk CRC32Cs (csum.h)
 * of chunk k are computed while chunk k is being written.  A file that is
 * the same as in the rank's newest committed step (prior.h) is hashed
 * first and, when equal, hard-linked to it instead of written; in one that
 * changed, where the file system clones ranges, each chunk is hashed before
 * its write, and the unchanged ones are cloned from that step's file.  The
 * memory tier's copy of a file that may be the same waits until it is
 * known: a file that did not change shares the tier's older copy. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/param.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fail.h"
#include "csum.h"
#include "log.h"
#include "memt.h"
#include "pipe.h"
#include "prior.h"

#define WR_NICE 10      /* writer threads' nice value (stagers keep 0) */
#define WR_HASH_BLOCK RANGE_HASH_BYTES   /* hashed and checksummed in one go */


/* Wait until chunk c is filled or skipped; returns its state. */
static int wait_chunk(struct pipe *p, struct chunk *ch)
{
	int st;
	pthread_mutex_lock(&p->lock);
	while (ch->state == CHUNK_EMPTY)
		pthread_cond_wait(&p->write_cond, &p->lock);
	st = ch->state;
	pthread_mutex_unlock(&p->lock);
	return st;
}

/* Filled (or skipped) yet?  Does not wait. */
static int chunk_filled(struct pipe *p, struct chunk *ch)
{
	int st;
	pthread_mutex_lock(&p->lock);
	st = ch->state;
	pthread_mutex_unlock(&p->lock);
	return st != CHUNK_EMPTY;
}

static void give_back(struct pipe *p, struct chunk *ch)
{
	if (ch->pool_idx >= 0) {
		shm_pool_give(p->pool, (unsigned)ch->pool_idx);
		ch->pool_idx = -1;
	}
}

/* The bytes to write for len bytes of f: whole blocks with O_DIRECT (the
 * padding is truncated away once the file is written). */
static size_t write_len(const struct wfile *f, size_t len)
{
	return f->direct ? (len + 4095u) & ~4095u : len;
}

/* Its job's name, for the log ("-" in tests that build an rsave alone). */
static const char *job_of(const struct rsave *rs)
{
	return rs->job ? rs->job : "-";
}

/* A write came back short (a full disk does that before it says ENOSPC):
 * write the rest here, which either completes the chunk or returns the real
 * reason.  0, -errno, or 1 when the rest cannot be written either and the
 * kernel gives no reason. */
static int finish_short(int fd, const uint8_t *buf, size_t want, off_t off,
			size_t done)
{
	while (done < want) {
		ssize_t n = pwrite(fd, buf + done, want - done, off + (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EINVAL ? 1 : -errno;   /* EINVAL: O_DIRECT alignment */
		if (n == 0)
			return 1;
		done += (size_t)n;
	}
	return 0;
}

/* Collect completions; a failed write (or a short one whose rest fails
 * too) fails the rsave. */
static int reap(struct pipe *p, struct io_ctx *io, struct rsave *rs,
		struct wfile *f, int fd, int wait)
{
	struct io_cqe cqe[16];
	int n = io_reap(io, cqe, 16, wait);

	for (int i = 0; i < n; i++) {
		struct chunk *ch = cqe[i].tag;
		size_t want = write_len(f, ch->len);
		int r = 0;
		if (cqe[i].res >= 0 && (size_t)cqe[i].res < want)
			r = finish_short(fd, shm_pool_chunk(p->pool, (unsigned)ch->pool_idx),
					 want, (off_t)((uint64_t)(ch - rs->chunks - f->first_chunk) *
						       rs->chunk_bytes), (size_t)cqe[i].res);
		if (cqe[i].res < 0)
			pipe_fail(p, rs, (int)cqe[i].res, "write %s: %s", f->path,
				  strerror((int)-cqe[i].res));
		else if ((size_t)cqe[i].res > want || r > 0)
			pipe_fail(p, rs, -EIO, "write %s: short write (%zd of %zu bytes)",
				  f->path, cqe[i].res, want);
		else if (r < 0)
			pipe_fail(p, rs, r, "write %s: %s", f->path, strerror(-r));
		else {
			atomic_fetch_add(&rs->bytes_written, ch->len);
			atomic_fetch_add(&p->bytes_written, ch->len);
			FAILPOINT("wr.after_write");
		}
		give_back(p, ch);
	}
	return n;
}

/* Chunk k of f, staged: into the file's digest, chunk CRC32Cs and range
 * hashes (when it has them: a chunk is then whole csum chunks, and so
 * whole ranges), a block at a time while it is still in the cache, and
 * into the memory tier (unless tier_later: probe). */
static void hash_chunk(struct rsave *rs, struct wfile *f, uint64_t k, const uint8_t *buf,
		       size_t len, struct digest_ctx *dg, struct csum_stream *crc, int tier_later)
{
	if (!tier_later)
		memt_cap_chunk(rs->memt, (size_t)(f - rs->files), k, buf, len);
	for (size_t o = 0; o < len; o += WR_HASH_BLOCK) {
		size_t n = len - o < WR_HASH_BLOCK ? len - o : WR_HASH_BLOCK;
		digest_update(dg, buf + o, n);
		csum_stream_update(crc, buf + o, n);
		if (f->ranges)
			digest_range(buf + o, n,
				     &f->ranges[(k * rs->chunk_bytes + o) / RANGE_HASH_BYTES].hash);
	}
}

/* Every byte of f was hashed (f->digest is final): its chunk CRC32Cs, and
 * the memory tier's copy is complete. */
static void hashes_done(struct pipe *p, struct rsave *rs, struct wfile *f,
			struct csum_stream *crc)
{
	int r = csum_stream_finish(crc, &f->crcs);

	if (r < 0)
		pipe_fail(p, rs, r, "checksums of %s: not every byte was seen", f->path);
	memt_cap_file_done(rs->memt, (size_t)(f - rs->files), &f->digest);
	csum_stream_release(crc);
}

/* --- incremental saves: link a file that did not change ------------------ */

/* f's file in the rank's newest committed step, when f may be the same:
 * same size (not a small one) and digest algorithm, linked into fewer
 * checkpoints than allowed, and every chunk staged (staged: a streaming
 * save gives chunks back as it writes, it cannot look ahead). */
static const struct prior_file *link_candidate(const struct rsave *rs,
					       const struct wfile *f, int staged)
{
	const struct prior_file *pf;

	if (!rs->prior || !staged || rs->memory_only)
		return NULL;
	pf = prior_find(rs->prior, (size_t)(f - rs->files), f->path);
	if (!pf || pf->size != f->size || f->size < rs->link_min ||
	    pf->digest.alg != rs->digest_alg ||
	    !prior_may_share(pf, rs->prior_dirfd, rs->max_shared))
		return NULL;
	return pf;
}

/* Hash f's staged chunks in order while their CRC32Cs are pf's; stop after
 * the first that differs (a changed file costs the hashing of the bytes up
 * to its first change, before its writes start).  Returns how many chunks
 * were hashed: all of them when every CRC matched.  tier_later: they are
 * not copied into the memory tier yet (tier_copy). */
static uint64_t probe(struct pipe *p, struct rsave *rs, struct wfile *f,
		      const struct prior_file *pf, struct digest_ctx *dg,
		      struct csum_stream *crc, int tier_later)
{
	uint64_t k, checked = 0;

	for (k = 0; k < f->nchunks; k++) {
		struct chunk *ch = &rs->chunks[f->first_chunk + k];
		uint64_t done;

		if (wait_chunk(p, ch) == CHUNK_SKIPPED || rs->cancel)
			return k;
		hash_chunk(rs, f, k, shm_pool_chunk(p->pool, (unsigned)ch->pool_idx), ch->len,
			   dg, crc, tier_later);
		done = crc->pos == crc->size ? csum_count(crc->size, CSUM_CHUNK_BYTES)
					     : crc->pos / CSUM_CHUNK_BYTES;
		for (; checked < done; checked++)
			if (crc->crcs[checked] != pf->crcs[checked])
				return k + 1;
	}
	return k;
}

/* Chunk k of f, staged and hashed, into the memory tier after all (probe
 * held it back, and f changed or the tier no longer holds its older copy). */
static void tier_copy(struct pipe *p, struct rsave *rs, struct wfile *f, uint64_t k)
{
	struct chunk *ch = &rs->chunks[f->first_chunk + k];

	memt_cap_chunk(rs->memt, (size_t)(f - rs->files), k,
		       shm_pool_chunk(p->pool, (unsigned)ch->pool_idx), ch->len);
}

/* --- incremental saves: clone the unchanged chunks of a changed file ----- */

/* pf's file, open for reading and claimed (prior_claim), when f's
 * unchanged chunks may be cloned from it: the save clones (rs->clone),
 * every chunk is staged (a chunk to clone keeps its pool buffer until the
 * clones are done, in case one fails), f is hashed by range and pf was
 * too, with f's size, and pf is still the inode committed (*names: its
 * names).  -1 otherwise. */
static int clone_source(const struct rsave *rs, const struct wfile *f, int staged,
			const struct prior_file **out, nlink_t *names)
{
	const struct prior_file *pf;
	struct stat st;
	int fd;

	if (!rs->clone || !staged || !f->ranges || !rs->prior ||
	    !(pf = prior_find(rs->prior, (size_t)(f - rs->files), f->path)) ||
	    !pf->ranges || pf->size != f->size)
		return -1;
	if ((fd = openat(rs->prior_dirfd, pf->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return -1;
	prior_claim(pf);           /* before its names are read: see prior.h */
	if (fstat(fd, &st) < 0 || !prior_same_inode(pf, &st)) {
		prior_unclaim(pf);
		close(fd);
		return -1;
	}
	*out = pf;
	*names = st.st_nlink;
	return fd;
}

enum { MARKED = 1, CLONED = 2 };     /* a piece's state in marks[] */

/* f's pieces (CSUM_CHUNK_BYTES: a chunk is whole pieces when rs->clone)
 * and their bytes. */
static uint64_t npieces(const struct wfile *f)
{
	return csum_count(f->size, CSUM_CHUNK_BYTES);
}

static uint64_t piece_len(const struct wfile *f, uint64_t j)
{
	return MIN((uint64_t)CSUM_CHUNK_BYTES, f->size - j * CSUM_CHUNK_BYTES);
}

/* Mark the pieces of f's chunk k (hashed, len bytes) that may be cloned
 * from pf (names: its file's; this save claimed it): block-aligned, its
 * CRC32C and range hashes equal, and its blocks in at most rs->max_shared
 * checkpoints (0: any) with this one (prior_copies).  How many were
 * marked. */
static unsigned mark_unchanged(const struct rsave *rs, const struct wfile *f,
			       const struct prior_file *pf, nlink_t names,
			       const struct csum_stream *crc, uint64_t k, size_t len,
			       uint8_t *marks)
{
	const uint64_t per = CSUM_CHUNK_BYTES / RANGE_HASH_BYTES;
	uint64_t j0 = k * rs->chunk_bytes / CSUM_CHUNK_BYTES;
	unsigned n = 0;

	for (uint64_t j = j0; j < j0 + csum_count(len, CSUM_CHUNK_BYTES); j++) {
		int same = piece_len(f, j) % 4096 == 0 &&      /* else a tail: written */
			   crc->crcs[j] == pf->crcs[j];
		for (uint64_t i = j * per; same && i < MIN((j + 1) * per,
						csum_count(f->size, RANGE_HASH_BYTES)); i++)
			same = range_hash_eq(&f->ranges[i].hash, &pf->ranges[i].hash) &&
			       (!rs->max_shared || prior_copies(pf, names, i) <= rs->max_shared);
		if (same) {
			marks[j] = MARKED;
			n++;
		}
	}
	return n;
}

/* f's inode, for the next save's comparison. */
static int note_inode(struct wfile *f, int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	prior_note_inode(f, &st);
	return 0;
}

/* --- writing ------------------------------------------------------------- */

/* Queue chunk c of f (staged) for writing at its offset; its buffer goes
 * back when the write completes.  0, or -errno: the save failed and the
 * buffer is back. */
static int submit_chunk(struct pipe *p, struct io_ctx *io, struct rsave *rs,
			struct wfile *f, int fd, uint64_t c)
{
	struct chunk *ch = &rs->chunks[c];
	size_t len = write_len(f, ch->len);
	int r;

	while ((r = io_submit(io, IO_WRITE, fd, shm_pool_chunk(p->pool, (unsigned)ch->pool_idx),
			      len, (off_t)((c - f->first_chunk) * rs->chunk_bytes), ch)) == -EBUSY)
		reap(p, io, rs, f, fd, 1);
	if (r < 0) {
		pipe_fail(p, rs, r, "write %s: %s", f->path, strerror(-r));
		give_back(p, ch);
	}
	return r;
}

/* Write f's pieces [j, end) of chunk c, held back (direct: the last
 * padded, as a chunk's).  0, or fails rs. */
static int write_pieces(struct pipe *p, struct rsave *rs, struct wfile *f, int fd,
			uint64_t c, uint64_t j, uint64_t end)
{
	struct chunk *ch = &rs->chunks[c];
	uint64_t first = (c - f->first_chunk) * rs->chunk_bytes / CSUM_CHUNK_BYTES;
	uint64_t off = j * CSUM_CHUNK_BYTES, len = 0;
	int r;

	for (uint64_t i = j; i < end; i++)
		len += piece_len(f, i);
	r = io_pwrite(fd, shm_pool_chunk(p->pool, (unsigned)ch->pool_idx) +
		      (j - first) * CSUM_CHUNK_BYTES, write_len(f, len),
		      (off_t)off);
	if (r < 0) {
		pipe_fail(p, rs, r, "write %s: %s", f->path, strerror(-r));
		return r;
	}
	atomic_fetch_add(&rs->bytes_written, len);
	atomic_fetch_add(&p->bytes_written, len);
	return 0;
}

/* f's chunks held back with pieces marked unchanged: clone those from src
 * (pf's file), in runs, once f's writes are done (a clone waits for the
 * file's direct writes in flight), and write the rest of each chunk.  A
 * run that does not clone is written, and so is every piece after it;
 * so is every piece when pf's file was modified before it was cloned
 * (what was cloned may not be what was compared; a write after the clone
 * does not reach f: its blocks are copied on write).  Their buffers go
 * back.  Was any piece cloned? */
static int clone_marked(struct pipe *p, struct rsave *rs, struct wfile *f, int fd,
			const struct prior_file *pf, int src, nlink_t names, uint8_t *marks)
{
	const uint64_t per = rs->chunk_bytes / CSUM_CHUNK_BYTES;
	struct stat st;
	int cloned = 0;

	for (uint64_t j = 0; j < npieces(f) && !rs->cancel; ) {
		uint64_t end = j, len = 0;
		int r;

		if (marks[j] != MARKED) {
			j++;
			continue;
		}
		for (; end < npieces(f) && marks[end] == MARKED; end++)
			len += piece_len(f, end);
		if ((r = io_clone(src, fd, j * CSUM_CHUNK_BYTES, len)) < 0) {
			log_info("job %s: %s: cloning its unchanged chunks from iter_%09llu's failed "
				 "(%s): written", job_of(rs), f->path,
				 (unsigned long long)rs->prior->step, strerror(-r));
			break;
		}
		for (cloned = 1; j < end; j++)
			marks[j] = CLONED;
	}
	if (cloned && (fstat(src, &st) < 0 || !prior_same_inode(pf, &st))) {
		cloned = 0;
		log_info("job %s: %s: iter_%09llu's was modified while its unchanged chunks "
			 "were cloned from it: written", job_of(rs), f->path,
			 (unsigned long long)rs->prior->step);
		for (uint64_t j = 0; j < npieces(f); j++)
			marks[j] = marks[j] ? MARKED : 0;
	}
	for (uint64_t k = 0; k < f->nchunks; k++) {
		uint64_t c = f->first_chunk + k, j0 = k * per, j1 = MIN(j0 + per, npieces(f));
		int held = 0;

		for (uint64_t j = j0; j < j1; j++)
			held |= marks[j] != 0;
		if (!held)               /* written, given back */
			continue;
		for (uint64_t j = j0, end; j < j1; j = end) {
			if (marks[j] == CLONED) {
				f->cloned += piece_len(f, j);
				prior_share_ranges(f, pf, j * CSUM_CHUNK_BYTES,
						   j * CSUM_CHUNK_BYTES + piece_len(f, j), names, 1);
				end = j + 1;
				continue;
			}
			for (end = j; end < j1 && marks[end] != CLONED; end++)
				;
			if (!rs->cancel)
				(void)write_pieces(p, rs, f, fd, c, j, end);
		}
		give_back(p, &rs->chunks[c]);
	}
	return cloned;
}

static void write_file(struct pipe *p, struct io_ctx *io, struct rsave *rs,
		       struct wfile *f)
{
	struct digest_ctx dg = { 0 };
	struct csum_stream crc = { 0 };
	const struct prior_file *pf = NULL;
	uint64_t hashed = 0;        /* chunks already hashed (probe) */
	uint8_t *marks = NULL;      /* pieces to clone from src */
	int fd = -1, src = -1, final = 0, staged, same, r = 0;
	int tier_later = 0;         /* chunks hashed, not yet in the memory tier */
	nlink_t names = 0;          /* of src */

	if (f->linked)                /* a frozen shard, linked unstaged */
		return;

	/* A save whose chunks were all promised (pipe.h) never waits for the
	 * writers to free pool space: hold its writes and hashing back until
	 * it is STAGED, so the trainer's stall is the copy alone (writing and
	 * hashing meanwhile cost the stagers CPU and memory bandwidth). */
	pthread_mutex_lock(&p->lock);
	while (rs->reserved && !rs->cancel && atomic_load(&rs->filled) < rs->nchunks)
		pthread_cond_wait(&p->write_cond, &p->lock);
	staged = rs->reserved && atomic_load(&rs->filled) == rs->nchunks;
	pthread_mutex_unlock(&p->lock);
	/* range hashes: what the next save compares this one's chunks with */
	if (rs->clone && f->size >= rs->link_min &&
	    !(f->ranges = calloc(csum_count(f->size, RANGE_HASH_BYTES), sizeof(*f->ranges))))
		pipe_fail(p, rs, -ENOMEM, "out of memory hashing %s", f->path);
	if (!rs->cancel && (digest_init(&dg, rs->digest_alg) < 0 ||
			    csum_stream_init(&crc, CSUM_CHUNK_BYTES, f->size) < 0))
		pipe_fail(p, rs, -ENOMEM, "out of memory hashing %s", f->path);
	else if (!rs->cancel && (pf = link_candidate(rs, f, staged))) {
		/* the memory tier's copy waits: f may be the one it holds */
		tier_later = !rs->memt_whole &&
			     memt_cap_may_share(rs->memt, (size_t)(f - rs->files), &pf->digest);
		hashed = probe(p, rs, f, pf, &dg, &crc, tier_later);
	}
	if (pf && hashed == f->nchunks && !rs->cancel) {
		digest_final(&dg, &f->digest);       /* releases dg */
		final = 1;
		same = digest_eq(&f->digest, &pf->digest);
		/* the memory tier shares its older copy, linked or not */
		if (same && tier_later &&
		    memt_cap_same(rs->memt, (size_t)(f - rs->files), &f->digest) == 0)
			tier_later = 0;
		if (!same)
			r = -EAGAIN;              /* changed: nothing to say */
		/* after a restart the copy on disk is read back first (it
		 * costs less than the write it saves) */
		else if (rs->prior->from_disk && !prior_read_back(pf, rs->prior_dirfd))
			r = -EBADMSG;
		else if ((r = prior_link(pf, rs, f)) == 0) {
			for (uint64_t k = 0; k < f->nchunks; k++) {
				if (tier_later)
					tier_copy(p, rs, f, k);
				give_back(p, &rs->chunks[f->first_chunk + k]);
			}
			hashes_done(p, rs, f, &crc);
			return;
		}
		if (r != -EAGAIN && r != -ETOOMANYREFS)
			log_info("job %s: %s: unchanged, but not linked to iter_%09llu's (%s): "
				 "written, or cloned where the file system can",
				 job_of(rs), f->path, (unsigned long long)rs->prior->step,
				 r == -ESTALE ? "replaced since its commit" :
				 r == -EBADMSG ? "it does not read back as its manifest says" :
				 strerror(-r));
	}
	if (!rs->cancel && !rs->memory_only &&
	    (fd = io_open_write(rs->staging_fd, f->path, p->direct_io, &f->direct)) < 0)
		pipe_fail(p, rs, fd, "create %s: %s", f->path, strerror(-fd));
	if (fd >= 0 && !rs->cancel && (src = clone_source(rs, f, staged, &pf, &names)) >= 0 &&
	    !(marks = calloc(npieces(f), 1))) {
		prior_unclaim(pf);
		close(src);
		src = -1;
	}

	for (uint64_t c = f->first_chunk; c < f->first_chunk + f->nchunks; c++) {
		struct chunk *ch = &rs->chunks[c];
		uint64_t k = c - f->first_chunk;
		uint8_t *buf;

		/* Before sleeping on the stagers, finish the writes in flight
		 * and give their chunks back: with a small pool the stagers
		 * may be waiting for exactly those chunks. */
		while (io->inflight > 0 && !chunk_filled(p, ch))
			reap(p, io, rs, f, fd, 1);
		if (wait_chunk(p, ch) == CHUNK_SKIPPED)
			continue;
		if (rs->cancel) {
			give_back(p, ch);
			continue;
		}
		buf = shm_pool_chunk(p->pool, (unsigned)ch->pool_idx);
		if (tier_later && k < hashed)
			tier_copy(p, rs, f, k);
		if (marks) {               /* hashed first: written, or cloned */
			if (k >= hashed) {
				hash_chunk(rs, f, k, buf, ch->len, &dg, &crc, 0);
				hashed = k + 1;
			}
			if (mark_unchanged(rs, f, pf, names, &crc, k, ch->len, marks))
				continue;        /* held back: clone_marked */
		}
		if (!rs->memory_only && submit_chunk(p, io, rs, f, fd, c) < 0)
			continue;
		/* while the write is in flight */
		if (k >= hashed)
			hash_chunk(rs, f, k, buf, ch->len, &dg, &crc, 0);
		if (rs->memory_only)
			give_back(p, ch);
		else
			reap(p, io, rs, f, fd, 0);
	}
	while (io->inflight > 0)
		reap(p, io, rs, f, fd, 1);
	if (marks) {
		if (!clone_marked(p, rs, f, fd, pf, src, names, marks))
			prior_unclaim(pf);      /* nothing of it cloned */
		free(marks);
		close(src);
	}

	if ((fd >= 0 || rs->memory_only) && !rs->cancel) {
		if (rs->memory_only)
			r = 0;              /* in memory only: nothing to sync */
		else if (f->direct && f->size % 4096 && (r = io_ftruncate(fd, (off_t)f->size)) < 0)
			pipe_fail(p, rs, r, "truncate %s: %s", f->path, strerror(-r));
		else if ((r = io_fsync(fd)) < 0)
			pipe_fail(p, rs, r, "fsync %s: %s", f->path, strerror(-r));
		else if ((r = note_inode(f, fd)) < 0)
			pipe_fail(p, rs, r, "stat %s: %s", f->path, strerror(-r));
		if (r == 0) {
			FAILPOINT("wr.after_fsync");
			if (!final)
				digest_final(&dg, &f->digest);      /* releases dg */
			hashes_done(p, rs, f, &crc);
		}
	}
	digest_release(&dg);
	csum_stream_release(&crc);
	if (fd >= 0)
		close(fd);
}

/* Take the first queued file whose save can make progress (lock held, queue
 * not empty): a stream save whose trainer's stream has not reached it may
 * wait for ever, and must not hold a writer (other jobs' saves would wait
 * behind it).  0 and *out, or -EAGAIN when every queued file waits so. */
static int wq_take(struct pipe *p, struct wjob *out)
{
	for (size_t k = 0; k < p->wq_len; k++) {
		size_t at = (p->wq_head + k) % p->wq_cap;
		struct wjob j = p->wq[at];
		if (!j.rs->cancel && !rsave_may_copy(j.rs))
			continue;
		/* close the gap: the files queued before it move up one */
		for (size_t i = k; i > 0; i--)
			p->wq[(p->wq_head + i) % p->wq_cap] =
				p->wq[(p->wq_head + i - 1) % p->wq_cap];
		p->wq_head = (p->wq_head + 1) % p->wq_cap;
		p->wq_len--;
		*out = j;
		return 0;
	}
	return -EAGAIN;
}

static void wait_briefly(struct pipe *p)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 2000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&p->write_cond, &p->lock, &ts);
}

void *wr_thread(void *arg)
{
	struct pipe *p = arg;
	struct io_ctx io = { 0 };
	int r = io_ctx_init(&io, p->io_backend, p->io_depth, NULL);

	/* The trainer waits for the stagers only.  When stagers and writers
	 * want the same cores, the stagers go first; hashing catches up while
	 * the disk is still busy with the writes already queued. */
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), WR_NICE);
	for (;;) {
		struct wjob j;
		size_t nfiles;
		int got = -EAGAIN;

		pthread_mutex_lock(&p->lock);
		for (;;) {
			while (!p->stopping && p->wq_len == 0)
				pthread_cond_wait(&p->write_cond, &p->lock);
			if (p->wq_len == 0 || (got = wq_take(p, &j)) == 0)
				break;
			/* only saves whose streams have not reached them: look
			 * again soon ("ready" is polled, nothing signals it) */
			wait_briefly(p);
		}
		pthread_mutex_unlock(&p->lock);
		if (got < 0)                    /* stopping, nothing queued */
			break;

		if (r < 0)
			pipe_fail(p, j.rs, r, "I/O back-end unavailable: %s", strerror(-r));
		write_file(p, &io, j.rs, &j.rs->files[j.file]);
		/* nfiles read first: once another writer counts the last file,
		 * the loop may free rs */
		nfiles = j.rs->nfiles;
		if (atomic_fetch_add(&j.rs->files_done, 1) + 1 == nfiles) {
			j.rs->t_durable_ns = now_ns();
			p->notify(p->notify_arg, PIPE_DONE, j.rs);
		}
	}
	if (r == 0)
		io_ctx_release(&io);
	return NULL;
}
