/* wr.c - writer threads: each takes the next file of the pipeline, writes
 * its chunks in order through the I/O table (io_uring, O_DIRECT where
 * possible) while hashing the same staged bytes, then truncates the block
 * padding, fsyncs and closes it.  The hash of chunk k is computed while
 * chunk k is being written. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pipe.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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

static void give_back(struct pipe *p, struct chunk *ch)
{
	if (ch->pool_idx >= 0) {
		shm_pool_give(p->pool, (unsigned)ch->pool_idx);
		ch->pool_idx = -1;
	}
}

/* Collect completions; a failed or short write fails the rsave. */
static int reap(struct pipe *p, struct io_ctx *io, struct rsave *rs,
		struct wfile *f, int wait)
{
	struct io_cqe cqe[16];
	int n = io_reap(io, cqe, 16, wait);

	for (int i = 0; i < n; i++) {
		struct chunk *ch = cqe[i].tag;
		size_t want = f->direct ? (ch->len + 4095u) & ~4095u : ch->len;
		if (cqe[i].res < 0)
			pipe_fail(p, rs, (int)cqe[i].res, "write %s: %s", f->path,
				  strerror((int)-cqe[i].res));
		else if ((size_t)cqe[i].res != want)
			pipe_fail(p, rs, -EIO, "write %s: short write (%zd of %zu bytes)",
				  f->path, cqe[i].res, want);
		else {
			atomic_fetch_add(&rs->bytes_written, ch->len);
			atomic_fetch_add(&p->bytes_written, ch->len);
		}
		give_back(p, ch);
	}
	return n;
}

static void write_file(struct pipe *p, struct io_ctx *io, struct rsave *rs,
		       struct wfile *f)
{
	struct sha_ctx sha = { 0 };
	int fd = -1, r;

	if (!rs->cancel) {
		fd = io_open_write(rs->staging_fd, f->path, p->direct_io, &f->direct);
		if (fd < 0)
			pipe_fail(p, rs, fd, "create %s: %s", f->path, strerror(-fd));
		else if (sha_init(&sha) < 0)
			pipe_fail(p, rs, -ENOMEM, "out of memory hashing %s", f->path);
	}

	for (uint64_t c = f->first_chunk; c < f->first_chunk + f->nchunks; c++) {
		struct chunk *ch = &rs->chunks[c];
		uint8_t *buf;
		size_t len;

		if (wait_chunk(p, ch) == CHUNK_SKIPPED)
			continue;
		if (rs->cancel) {
			give_back(p, ch);
			continue;
		}
		buf = shm_pool_chunk(p->pool, (unsigned)ch->pool_idx);
		len = f->direct ? (ch->len + 4095u) & ~4095u : ch->len;
		while ((r = io_submit(io, IO_WRITE, fd, buf, len,
				      (off_t)((c - f->first_chunk) * rs->chunk_bytes), ch)) == -EBUSY)
			reap(p, io, rs, f, 1);
		if (r < 0) {
			pipe_fail(p, rs, r, "write %s: %s", f->path, strerror(-r));
			give_back(p, ch);
			continue;
		}
		sha_update(&sha, buf, ch->len);
		reap(p, io, rs, f, 0);
	}
	while (io->inflight > 0)
		reap(p, io, rs, f, 1);

	if (fd >= 0 && !rs->cancel) {
		if (f->direct && f->size % 4096 && (r = io_ftruncate(fd, (off_t)f->size)) < 0)
			pipe_fail(p, rs, r, "truncate %s: %s", f->path, strerror(-r));
		else if ((r = io_fsync(fd)) < 0)
			pipe_fail(p, rs, r, "fsync %s: %s", f->path, strerror(-r));
		else {
			sha_final_hex(&sha, f->sha256);
			sha.md = NULL;
		}
	}
	sha_release(&sha);
	if (fd >= 0)
		close(fd);
}

void *wr_thread(void *arg)
{
	struct pipe *p = arg;
	struct io_ctx io = { 0 };
	int r = io_ctx_init(&io, p->io_backend, p->io_depth, NULL);

	for (;;) {
		struct wjob j;

		pthread_mutex_lock(&p->lock);
		while (!p->stopping && p->wq_len == 0)
			pthread_cond_wait(&p->write_cond, &p->lock);
		if (p->wq_len == 0) {
			pthread_mutex_unlock(&p->lock);
			break;
		}
		j = p->wq[p->wq_head];
		p->wq_head = (p->wq_head + 1) % p->wq_cap;
		p->wq_len--;
		pthread_mutex_unlock(&p->lock);

		if (r < 0)
			pipe_fail(p, j.rs, r, "I/O back-end unavailable: %s", strerror(-r));
		write_file(p, &io, j.rs, &j.rs->files[j.file]);
		if (atomic_fetch_add(&j.rs->files_done, 1) + 1 == j.rs->nfiles) {
			j.rs->t_durable_ns = now_ns();
			p->notify(p->notify_arg, PIPE_DONE, j.rs);
		}
	}
	if (r == 0)
		io_ctx_release(&io);
	return NULL;
}
