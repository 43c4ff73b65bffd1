/* shard_read.c - see shard_read.h: one shard file, read in order and
 * checked, its wanted byte ranges delivered to the trainer. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fcheck.h"
#include "gpu.h"
#include "io.h"
#include "layout.h"
#include "mfst.h"
#include "shard_read.h"
#include "shm_pool.h"

#define PIECE_BYTES (8u << 20)   /* buffered pieces, as the write chunks */
#define READ_DEPTH  8            /* reads in flight: deep enough for the disk */

struct piece {
	uint64_t off, len;         /* file bytes */
	uint8_t *buf;              /* where they are read */
	int      in_place;         /* buf is the destination: nothing to copy */
	int      done;
	ssize_t  res;
};

struct reader {
	const struct shard_src *src;
	const struct shard_seg *segs;
	size_t   nsegs;
	int      direct;           /* O_DIRECT windows of `win` bytes */
	size_t   win;              /* scratch buffer size */
	int      fd;
	uint8_t *slot[READ_DEPTH]; /* scratch: piece k uses slot k % READ_DEPTH */
	int      pool_idx[READ_DEPTH];   /* >= 0: borrowed from the pool */
	int      pinned[READ_DEPTH];
	struct piece ring[READ_DEPTH];
	uint64_t plan_off;         /* next byte to plan a piece for */
	size_t   plan_seg, give_seg;     /* cursors into segs */
};

/* A scratch buffer for piece k: pool chunk (O_DIRECT) or aligned heap. */
static uint8_t *scratch(struct reader *rd, uint64_t k, int for_gpu)
{
	unsigned s = (unsigned)(k % READ_DEPTH);

	if (!rd->slot[s]) {
		if (rd->direct && (rd->pool_idx[s] = shm_pool_try_take(rd->src->pool)) >= 0)
			rd->slot[s] = shm_pool_chunk(rd->src->pool, (unsigned)rd->pool_idx[s]);
		else if (posix_memalign((void **)&rd->slot[s], 4096, rd->win))
			rd->slot[s] = NULL;
	}
	if (rd->slot[s] && for_gpu && !rd->pinned[s])      /* fast host-to-device */
		rd->pinned[s] = gpu_host_register(rd->slot[s], rd->win) == 0;
	return rd->slot[s];
}

/* Plan piece k at rd->plan_off.  0, 1 when the file is done, -ENOMEM. */
static int plan(struct reader *rd, uint64_t k, struct piece *p)
{
	uint64_t off = rd->plan_off, size = rd->src->mf->size, end;
	const struct shard_seg *s = NULL;

	if (off >= size)
		return 1;
	*p = (struct piece){ .off = off };
	if (rd->direct) {
		end = off + rd->win < size ? off + rd->win : size;
	} else {
		/* follow the wanted ranges: one inside a host tensor is read in place */
		while (rd->plan_seg < rd->nsegs && rd->segs[rd->plan_seg].end <= off)
			rd->plan_seg++;
		if (rd->plan_seg < rd->nsegs)
			s = &rd->segs[rd->plan_seg];
		if (s && s->begin <= off) {
			end = s->end;
			if (s->dst) {
				p->buf = s->dst + (off - s->begin);
				p->in_place = 1;
			}
		} else {
			end = s ? s->begin : size;      /* a header or a gap */
			s = NULL;
		}
		if (end - off > PIECE_BYTES)
			end = off + PIECE_BYTES;
	}
	p->len = end - off;
	if (!p->buf && !(p->buf = scratch(rd, k, s && !s->dst)))
		return -ENOMEM;
	rd->plan_off = end;
	return 0;
}

/* Copy the wanted bytes of a checked piece to their tensors. */
static int give(struct reader *rd, const struct piece *p, char *msg, size_t msglen)
{
	uint64_t end = p->off + p->len;

	if (p->in_place)
		return 0;
	while (rd->give_seg < rd->nsegs && rd->segs[rd->give_seg].end <= p->off)
		rd->give_seg++;
	for (size_t k = rd->give_seg; k < rd->nsegs && rd->segs[k].begin < end; k++) {
		const struct shard_seg *s = &rd->segs[k];
		uint64_t lo = s->begin > p->off ? s->begin : p->off;
		uint64_t hi = s->end < end ? s->end : end;
		char why[200];

		if (hi <= lo)
			continue;
		if (s->dst) {
			memcpy(s->dst + (lo - s->begin), p->buf + (lo - p->off), hi - lo);
		} else if (gpu_copy_h2d(s->gm, s->goff + (lo - s->begin), p->buf + (lo - p->off),
					hi - lo, why, sizeof(why)) < 0) {
			snprintf(msg, msglen, "%s: cannot copy to the GPU: %s",
				 rd->src->mf->path, why);
			return -EIO;
		}
	}
	return 0;
}

/* Open the file (dir/name in the checkpoint), O_DIRECT when asked. */
static int open_shard(const struct shard_src *src, int direct)
{
	char dir[LAYOUT_PATH_MAX], *slash;
	int dfd, fd, err;

	snprintf(dir, sizeof(dir), "%s", src->mf->path);
	slash = strchr(dir, '/');
	if (slash)
		*slash = '\0';
	dfd = openat(src->iterfd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	fd = openat(dfd, slash ? slash + 1 : dir, O_RDONLY | O_NOFOLLOW | O_CLOEXEC |
		    (direct ? O_DIRECT : 0));
	err = errno;
	close(dfd);
	return fd < 0 ? -err : fd;
}

static void release(struct reader *rd)
{
	for (int i = 0; i < READ_DEPTH; i++) {
		if (!rd->slot[i])
			continue;
		if (rd->pinned[i])
			gpu_host_unregister(rd->slot[i]);
		if (rd->pool_idx[i] >= 0)
			shm_pool_give(rd->src->pool, (unsigned)rd->pool_idx[i]);
		else
			free(rd->slot[i]);
	}
	if (rd->fd >= 0)
		close(rd->fd);
}

int shard_read(const struct shard_src *src, const struct shard_seg *segs,
	       size_t nsegs, char *msg, size_t msglen)
{
	const struct mfst_file *mf = src->mf;
	struct reader rd = { .src = src, .segs = segs, .nsegs = nsegs, .fd = -1,
			     .win = PIECE_BYTES };
	struct io_ctx *io = src->io;
	struct fcheck fc = { 0 };
	struct stat st = { 0 };
	char why[300];
	uint64_t next = 0, checked = 0;
	int r = 0, last = 0;

	for (int i = 0; i < READ_DEPTH; i++)
		rd.pool_idx[i] = -1;
	/* O_DIRECT needs aligned pool windows and host destinations */
	rd.direct = src->pool && src->pool->chunk_bytes % 4096 == 0;
	for (size_t k = 0; k < nsegs && rd.direct; k++)
		rd.direct = segs[k].dst != NULL;
	if (rd.direct && src->pool->chunk_bytes)
		rd.win = src->pool->chunk_bytes;
	if (rd.direct && (rd.fd = open_shard(src, 1)) == -EINVAL)
		rd.direct = 0;            /* the file system has no O_DIRECT */
	if (!rd.direct) {
		rd.win = PIECE_BYTES;
		rd.fd = open_shard(src, 0);
	}
	if (rd.fd < 0) {
		r = rd.fd;
		snprintf(msg, msglen, "open %s: %s", mf->path, strerror(-r));
		goto out;
	}
	if (fstat(rd.fd, &st) < 0 || (uint64_t)st.st_size != mf->size) {
		r = (uint64_t)st.st_size < mf->size ? -EIO : -EBADMSG;
		snprintf(msg, msglen, "read %s: file %s than its manifest says (%lld bytes, "
			 "not %llu)", mf->path, r == -EIO ? "shorter" : "longer",
			 (long long)st.st_size, (unsigned long long)mf->size);
		goto out;
	}
	if ((r = fcheck_init(&fc, mf, msg, msglen)) < 0)
		goto out;
	if (!rd.direct)
		posix_fadvise(rd.fd, 0, 0, POSIX_FADV_SEQUENTIAL);

	while (!last || checked < next) {
		struct piece *p;

		if (atomic_load(src->cancel)) {
			r = -ECANCELED;
			snprintf(msg, msglen, "the restore was cancelled");
			goto drain;
		}
		/* keep READ_DEPTH pieces in flight */
		while (!last && next - checked < READ_DEPTH) {
			struct piece *q = &rd.ring[next % READ_DEPTH];
			if ((r = plan(&rd, next, q)) == 1) {
				last = 1;
				r = 0;
				break;
			}
			if (r < 0) {
				snprintf(msg, msglen, "out of memory reading %s", mf->path);
				goto drain;
			}
			r = io_submit(io, IO_READ, rd.fd, q->buf, rd.direct ?
				      (q->len + 4095) & ~(uint64_t)4095 : q->len, (off_t)q->off, q);
			if (r == -EBUSY) {         /* the queue is full: reap first */
				rd.plan_off = q->off;
				r = 0;
				break;
			}
			if (r < 0) {
				snprintf(msg, msglen, "read %s: %s", mf->path, strerror(-r));
				goto drain;
			}
			next++;
		}
		if (checked == next)
			continue;
		p = &rd.ring[checked % READ_DEPTH];
		while (!p->done) {
			struct io_cqe cqe[READ_DEPTH];
			int n = io_reap(io, cqe, READ_DEPTH, 1);
			if (n < 0) {
				r = n;
				snprintf(msg, msglen, "read %s: %s", mf->path, strerror(-r));
				goto drain;
			}
			for (int i = 0; i < n; i++) {
				struct piece *d = cqe[i].tag;
				d->done = 1;
				d->res = cqe[i].res;
			}
		}
		if (p->res < (ssize_t)p->len) {
			r = p->res < 0 ? (int)p->res : -EIO;
			snprintf(msg, msglen, "read %s: %s", mf->path, p->res < 0 ?
				 strerror((int)-p->res) : "file shorter than its manifest says");
			goto drain;
		}
		if ((r = fcheck_update(&fc, p->buf, p->len, why, sizeof(why))) < 0)
			goto bad;
		if ((r = give(&rd, p, msg, msglen)) < 0)
			goto drain;
		checked++;
	}
	if ((r = fcheck_final(&fc, why, sizeof(why))) == 0)
		goto out;
bad:
	snprintf(msg, msglen, "%s: the restored tensors are not trustworthy", why);
drain:          /* wait for the reads still in flight: they use our buffers */
	while (io->inflight > 0) {
		struct io_cqe cqe[READ_DEPTH];
		if (io_reap(io, cqe, READ_DEPTH, 1) <= 0)
			break;
	}
out:
	fcheck_release(&fc);
	release(&rd);
	return r;
}
