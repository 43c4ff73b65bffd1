/* restore.c - see restore.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu.h"
#include "io.h"
#include "job.h"
#include "layout.h"
#include "log.h"
#include "mfst.h"
#include "restore.h"
#include "verify.h"

#define PIECE_BYTES (4u << 20)
#define READ_DEPTH  4

void region_unref(struct region_ref *rg);   /* srv.c */

/* --- verification verdicts, shared by the ranks of a job ---------------- */

/* What a verdict was computed from: every entry of the checkpoint tree
 * (count, and the newest ctime, which any write, truncation, rename or
 * removal inside it moves and nobody can set back).  A file changed after
 * its checkpoint was verified makes the verdict stale. */
struct tree_stamp {
	unsigned long   n;
	struct timespec ctime;
};

static void stamp_add(struct tree_stamp *t, const struct stat *st)
{
	t->n++;
	if (st->st_ctim.tv_sec > t->ctime.tv_sec ||
	    (st->st_ctim.tv_sec == t->ctime.tv_sec && st->st_ctim.tv_nsec > t->ctime.tv_nsec))
		t->ctime = st->st_ctim;
}

static void tree_stamp(int dirfd, int depth, struct tree_stamp *t)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *e;
	struct stat st;
	DIR *d;

	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0)
		stamp_add(t, &st);
	if (!(d = fdopendir(fd))) {
		close(fd);
		return;
	}
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode) && depth < 4) {
			int sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY |
					 O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0) {
				tree_stamp(sub, depth + 1, t);
				close(sub);
			}
		} else {
			stamp_add(t, &st);
		}
	}
	closedir(d);
}

struct verdict {
	char     job[65];
	uint64_t step;
	dev_t    dev;
	ino_t    ino;
	struct timespec mtime;
	struct tree_stamp tree;
	int      state;      /* 0 free, 1 verifying, 2 done */
	int      r;
	char     why[256];
};

static struct verdict verdicts[64];
static unsigned verdict_next;
static pthread_mutex_t verdict_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t verdict_cond = PTHREAD_COND_INITIALIZER;

void restore_cache_clear(void)
{
	pthread_mutex_lock(&verdict_lock);
	for (unsigned i = 0; i < 64; i++)
		if (verdicts[i].state == 2)
			verdicts[i].state = 0;
	pthread_mutex_unlock(&verdict_lock);
}

/* Full verification of one checkpoint, once per (job, step, manifest
 * identity): the first rank to ask hashes every file, the others wait for
 * its verdict, so all ranks of a job pick the same step. */
static int verify_once(const char *job, uint64_t step, int iterfd, unsigned threads,
		       char *why, size_t whylen)
{
	struct stat st;
	struct verdict *v = NULL;
	struct tree_stamp ts = { 0 };
	int r;

	if (fstatat(iterfd, MFST_NAME, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		snprintf(why, whylen, "%s: %s", MFST_NAME, strerror(errno));
		return -errno;
	}
	tree_stamp(iterfd, 0, &ts);
	pthread_mutex_lock(&verdict_lock);
	for (;;) {
		v = NULL;
		for (unsigned i = 0; i < 64; i++) {
			struct verdict *c = &verdicts[i];
			if (c->state && c->step == step && !strcmp(c->job, job) &&
			    c->dev == st.st_dev && c->ino == st.st_ino &&
			    c->mtime.tv_sec == st.st_mtim.tv_sec &&
			    c->mtime.tv_nsec == st.st_mtim.tv_nsec &&
			    c->tree.n == ts.n && c->tree.ctime.tv_sec == ts.ctime.tv_sec &&
			    c->tree.ctime.tv_nsec == ts.ctime.tv_nsec)
				v = c;
		}
		if (!v || v->state == 2)
			break;
		pthread_cond_wait(&verdict_cond, &verdict_lock);
	}
	if (v) {
		r = v->r;
		snprintf(why, whylen, "%s", v->why);
		pthread_mutex_unlock(&verdict_lock);
		return r;
	}
	/* claim a slot (never one still being verified) */
	for (unsigned n = 0; n < 64; n++) {
		v = &verdicts[verdict_next++ % 64];
		if (v->state != 1)
			break;
	}
	*v = (struct verdict){ .step = step, .dev = st.st_dev, .ino = st.st_ino,
			       .mtime = st.st_mtim, .tree = ts, .state = 1 };
	snprintf(v->job, sizeof(v->job), "%s", job);
	pthread_mutex_unlock(&verdict_lock);

	r = verify_checkpoint(iterfd, VERIFY_FULL, threads, NULL, why, whylen);

	pthread_mutex_lock(&verdict_lock);
	v->r = r;
	snprintf(v->why, sizeof(v->why), "%s", r ? why : "");
	v->state = 2;
	pthread_cond_broadcast(&verdict_cond);
	pthread_mutex_unlock(&verdict_lock);
	return r;
}

/* --- the work item ------------------------------------------------------ */

struct want {                 /* a registered tensor, snapshotted */
	char    *group, *name;
	char     dtype[8];
	int      ndim;
	int64_t  shape[SAFET_MAX_NDIM];
	uint64_t nbytes;
	uint8_t *dst;              /* host memory, or NULL for CUDA memory: */
	struct gpu_mem *gm;        /* bytes [goff, goff+nbytes) of it */
	uint64_t goff;
	int      matched;
};

struct got_blob {
	char    *name;
	uint8_t *data;
	size_t   len;
};

struct restore_work {
	uv_work_t        req;
	struct srv      *S;
	struct session  *s;
	uint64_t         req_id;
	int64_t          step;
	int              partial;
	char             job[65];
	int              jobfd;
	int              rank, world;
	unsigned         threads;
	size_t           max_reply;
	struct want     *want;     size_t nwant;
	struct region_ref **regions; size_t nregions;
	/* results */
	int              r;
	char             msg[1024];
	uint64_t         chosen;
	json_t          *skipped, *restored, *missing, *unexpected;
	struct got_blob *blobs;    size_t nblobs;
};

struct piece {
	uint64_t off, len;
	uint8_t *dst;              /* in the trainer's memory, or scratch */
	int      done;
	ssize_t  res;
	const struct want *gw;     /* CUDA tensor: copy scratch there at goff */
	uint64_t goff;
};

/* Read one shard file in order, hashing every byte, tensors straight into
 * the trainer's memory; bytes nobody wants go through scratch buffers. */
static int read_shard(struct io_ctx *io, int iterfd, const struct mfst *m, size_t fidx,
		      struct want **dst_of, char *msg, size_t msglen)
{
	const struct mfst_file *mf = &m->files[fidx];
	struct piece *pc = NULL;
	size_t np = 0, cap = 0, next = 0, hashed = 0;
	uint8_t *scratch[READ_DEPTH] = { 0 };
	int pinned[READ_DEPTH] = { 0 };
	struct sha_ctx sha = { 0 };
	char hex[SHA_HEX_LEN + 1], dir[LAYOUT_PATH_MAX], *slash;
	int fd = -1, dfd = -1, r = 0;

	/* pieces: every byte of the file, in order */
	for (uint64_t off = 0; off < mf->size;) {
		uint64_t end = mf->size;
		uint8_t *dst = NULL;
		const struct want *gw = NULL;
		uint64_t goff = 0;
		for (size_t t = 0; t < m->ntensors; t++) {
			const struct mfst_tensor *mt = &m->tensors[t];
			if (mt->file != fidx)
				continue;
			if (mt->begin <= off && off < mt->end) {     /* inside a tensor */
				end = mt->end;
				dst = dst_of[t] && dst_of[t]->dst ?
				      dst_of[t]->dst + (off - mt->begin) : NULL;
				if (dst_of[t] && dst_of[t]->gm) {   /* via scratch */
					gw = dst_of[t];
					goff = gw->goff + (off - mt->begin);
				}
				break;
			}
			if (mt->begin > off && mt->begin < end)      /* header or gap */
				end = mt->begin;
		}
		if (end - off > PIECE_BYTES)
			end = off + PIECE_BYTES;
		if (np == cap) {
			cap = cap ? cap * 2 : 64;
			struct piece *n = realloc(pc, cap * sizeof(*pc));
			if (!n) {
				r = -ENOMEM;
				goto out;
			}
			pc = n;
		}
		pc[np++] = (struct piece){ off, end - off, dst, 0, 0, gw, goff };
		off = end;
	}

	snprintf(dir, sizeof(dir), "%s", mf->path);
	slash = strchr(dir, '/');
	if (slash)
		*slash = '\0';
	dfd = openat(iterfd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	fd = dfd < 0 ? -1 : openat(dfd, slash ? slash + 1 : dir, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || sha_init(&sha) < 0) {
		r = -errno ? -errno : -ENOMEM;
		snprintf(msg, msglen, "open %s: %s", mf->path, strerror(-r));
		goto out;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

	while (hashed < np) {
		/* keep READ_DEPTH pieces in flight; scratch slot = index % depth */
		while (next < np && next - hashed < READ_DEPTH) {
			struct piece *p = &pc[next];
			if (!p->dst) {
				uint8_t **sb = &scratch[next % READ_DEPTH];
				if (!*sb && !(*sb = malloc(PIECE_BYTES))) {
					r = -ENOMEM;
					goto drain;
				}
				if (p->gw && !pinned[next % READ_DEPTH])   /* fast H2D */
					pinned[next % READ_DEPTH] =
						gpu_host_register(*sb, PIECE_BYTES) == 0;
				p->dst = *sb;
			}
			r = io_submit(io, IO_READ, fd, p->dst, p->len, (off_t)p->off, p);
			if (r == -EBUSY)
				break;
			if (r < 0)
				goto drain;
			next++;
		}
		while (!pc[hashed].done) {
			struct io_cqe cqe[READ_DEPTH];
			int n = io_reap(io, cqe, READ_DEPTH, 1);
			if (n < 0) {
				r = n;
				goto drain;
			}
			for (int i = 0; i < n; i++) {
				struct piece *p = cqe[i].tag;
				p->done = 1;
				p->res = cqe[i].res;
			}
		}
		if (pc[hashed].res != (ssize_t)pc[hashed].len) {
			r = pc[hashed].res < 0 ? (int)pc[hashed].res : -EIO;
			snprintf(msg, msglen, "read %s: %s", mf->path, pc[hashed].res < 0 ?
				 strerror((int)-pc[hashed].res) : "file shorter than its manifest says");
			goto drain;
		}
		sha_update(&sha, pc[hashed].dst, pc[hashed].len);
		if (pc[hashed].gw) {
			char why[200];
			r = gpu_copy_h2d(pc[hashed].gw->gm, pc[hashed].goff, pc[hashed].dst,
					 pc[hashed].len, why, sizeof(why));
			if (r < 0) {
				snprintf(msg, msglen, "%s: cannot copy to the GPU: %s",
					 mf->path, why);
				goto drain;
			}
		}
		hashed++;
	}
	sha_final_hex(&sha, hex);
	sha.md = NULL;
	if (strcmp(hex, mf->sha256)) {
		r = -EBADMSG;
		snprintf(msg, msglen, "%s changed after it was verified (sha256 %s, manifest %s): "
			 "the restored tensors are not trustworthy", mf->path, hex, mf->sha256);
	}
	goto out;
drain:
	while (io->inflight > 0) {
		struct io_cqe cqe[READ_DEPTH];
		if (io_reap(io, cqe, READ_DEPTH, 1) <= 0)
			break;
	}
	if (!msg[0])
		snprintf(msg, msglen, "read %s: %s", mf->path, strerror(-r));
out:
	sha_release(&sha);
	for (int i = 0; i < READ_DEPTH; i++) {
		if (pinned[i])
			gpu_host_unregister(scratch[i]);
		free(scratch[i]);
	}
	free(pc);
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	return r;
}

static int read_blob(int iterfd, const struct mfst *m, const struct mfst_blob *b,
		     struct got_blob *out, char *msg, size_t msglen)
{
	const struct mfst_file *mf = &m->files[b->file];
	char hex[SHA_HEX_LEN + 1];
	struct sha_ctx sha = { 0 };
	int dfd, fd = -1, r = 0;
	char rankdir[32];

	layout_rank_dir(b->rank, rankdir, sizeof(rankdir));
	dfd = openat(iterfd, LAYOUT_EXTRA, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd >= 0) {
		int rd = openat(dfd, rankdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(dfd);
		dfd = rd;
	}
	if (dfd >= 0)
		fd = openat(dfd, b->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	out->data = malloc(mf->size ? mf->size : 1);
	out->name = strdup(b->name);
	out->len = mf->size;
	if (fd < 0 || !out->data || !out->name) {
		r = fd < 0 ? -ENOENT : -ENOMEM;
		snprintf(msg, msglen, "blob %s: %s", mf->path, strerror(-r));
		goto out;
	}
	if (pread(fd, out->data, mf->size, 0) != (ssize_t)mf->size) {
		r = -EIO;
		snprintf(msg, msglen, "blob %s: short read", mf->path);
		goto out;
	}
	if ((r = sha_init(&sha)) < 0)
		goto out;
	sha_update(&sha, out->data, mf->size);
	sha_final_hex(&sha, hex);
	sha.md = NULL;
	if (strcmp(hex, mf->sha256)) {
		r = -EBADMSG;
		snprintf(msg, msglen, "blob %s changed after it was verified", mf->path);
	}
out:
	sha_release(&sha);
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	return r;
}

/* Compare what the trainer registered with the checkpoint's tensors of this
 * rank; fills dst_of[t] for manifest tensor t. */
static int match(struct restore_work *w, const struct mfst *m, struct want **dst_of)
{
	char bad[512] = "";
	size_t nb = 0;

	for (size_t i = 0; i < m->ntensors; i++) {
		const struct mfst_tensor *mt = &m->tensors[i];
		struct want *wt = NULL;
		if (mt->rank != w->rank)
			continue;
		for (size_t k = 0; k < w->nwant && !wt; k++)
			if (!strcmp(w->want[k].group, mt->group) && !strcmp(w->want[k].name, mt->name))
				wt = &w->want[k];
		if (!wt) {
			json_array_append_new(w->unexpected, json_sprintf("%s/%s", mt->group, mt->name));
			continue;
		}
		wt->matched = 1;
		if (strcmp(wt->dtype, mt->dtype) || wt->ndim != mt->ndim ||
		    memcmp(wt->shape, mt->shape, sizeof(int64_t) * (size_t)mt->ndim)) {
			if (nb < sizeof(bad) - 64)
				nb += (size_t)snprintf(bad + nb, sizeof(bad) - nb, "%s%s/%s (checkpoint %s%s)",
					nb ? ", " : "", mt->group, mt->name, mt->dtype,
					mt->ndim ? " with another shape" : "");
			continue;
		}
		dst_of[i] = wt;
		json_array_append_new(w->restored, json_sprintf("%s/%s", mt->group, mt->name));
	}
	for (size_t k = 0; k < w->nwant; k++)
		if (!w->want[k].matched)
			json_array_append_new(w->missing, json_sprintf("%s/%s", w->want[k].group,
								       w->want[k].name));
	if (nb) {
		snprintf(w->msg, sizeof(w->msg), "iter_%09llu: dtype or shape differs for %s",
			 (unsigned long long)m->step, bad);
		return -EINVAL;
	}
	if (!w->partial && (json_array_size(w->missing) || json_array_size(w->unexpected))) {
		char *mi = json_dumps(w->missing, JSON_COMPACT);
		char *un = json_dumps(w->unexpected, JSON_COMPACT);
		snprintf(w->msg, sizeof(w->msg), "iter_%09llu does not match the registered tensors: "
			 "missing from the checkpoint %s, not registered %s (CKPT_PARTIAL restores "
			 "the intersection)", (unsigned long long)m->step, mi ? mi : "?", un ? un : "?");
		free(mi);
		free(un);
		return -ENOENT;
	}
	return 0;
}

static int restore_from(struct restore_work *w, int iterfd, struct mfst *m)
{
	struct want **dst_of = calloc(m->ntensors + 1, sizeof(*dst_of));
	struct io_ctx io = { 0 };
	size_t total = 0;
	int r;

	if (!dst_of)
		return -ENOMEM;
	if (m->world_size != w->world) {
		snprintf(w->msg, sizeof(w->msg), "iter_%09llu was written by %d ranks; this job "
			 "has %d", (unsigned long long)m->step, m->world_size, w->world);
		r = -EINVAL;
		goto out;
	}
	if ((r = match(w, m, dst_of)) < 0)
		goto out;
	if ((r = io_ctx_init(&io, w->S->pipe.io_backend, READ_DEPTH, NULL)) < 0)
		goto out;
	for (size_t f = 0; f < m->nfiles && r == 0; f++) {
		int mine = 0;
		for (size_t t = 0; t < m->ntensors && !mine; t++)
			mine = m->tensors[t].file == f && dst_of[t];
		if (mine)
			r = read_shard(&io, iterfd, m, f, dst_of, w->msg, sizeof(w->msg));
	}
	io_ctx_release(&io);
	for (size_t b = 0; b < m->nblobs && r == 0; b++) {
		if (m->blobs[b].rank != w->rank)
			continue;
		total += m->files[m->blobs[b].file].size;
		if (total > w->max_reply) {
			snprintf(w->msg, sizeof(w->msg), "the blobs of rank %d exceed one message",
				 w->rank);
			r = -EMSGSIZE;
			break;
		}
		r = read_blob(iterfd, m, &m->blobs[b], &w->blobs[w->nblobs++], w->msg,
			      sizeof(w->msg));
	}
out:
	free(dst_of);
	return r;
}

static void restore_thread(uv_work_t *req)
{
	struct restore_work *w = req->data;
	uint64_t *steps = NULL, one;
	int n;

	if (w->step >= 0) {
		one = (uint64_t)w->step;
		steps = &one;
		n = 1;
	} else if ((n = layout_list_steps(w->jobfd, &steps)) < 0) {
		w->r = n;
		snprintf(w->msg, sizeof(w->msg), "cannot list checkpoints: %s", strerror(-n));
		return;
	}
	w->r = -ENOENT;
	snprintf(w->msg, sizeof(w->msg), "no checkpoint of job '%s' verifies", w->job);
	for (int i = 0; i < n; i++) {
		char iter[32], why[512] = "";
		struct mfst *m = NULL;
		int fd, r;

		layout_iter_name(steps[i], iter, sizeof(iter));
		fd = openat(w->jobfd, iter, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			r = -errno;
			snprintf(why, sizeof(why), "%s", strerror(errno));
		} else {
			r = verify_once(w->job, steps[i], fd, w->threads, why, sizeof(why));
			if (r == 0)
				r = mfst_read(fd, &m, why, sizeof(why));
		}
		if (r < 0) {
			log_warnx("job %s: restore skips %s: %s", w->job, iter, why);
			json_array_append_new(w->skipped, json_pack("{sIss}", "step",
						(json_int_t)steps[i], "reason", why));
			if (fd >= 0)
				close(fd);
			if (w->step >= 0) {
				w->r = r;
				snprintf(w->msg, sizeof(w->msg), "%s does not verify: %s", iter, why);
			}
			continue;
		}
		w->blobs = calloc(m->nblobs + 1, sizeof(*w->blobs));
		w->msg[0] = '\0';
		w->r = w->blobs ? restore_from(w, fd, m) : -ENOMEM;
		w->chosen = steps[i];
		mfst_free(m);
		close(fd);
		break;
	}
	if (steps != &one)
		free(steps);
}

static void restore_done(uv_work_t *req, int status)
{
	struct restore_work *w = req->data;
	struct session *s = w->s;

	if (w->r == 0) {
		json_t *bl = json_array();
		size_t total = 0, off = 0;
		uint8_t *bin;
		char *txt;
		for (size_t i = 0; i < w->nblobs; i++) {
			json_array_append_new(bl, json_pack("{sssI}", "name", w->blobs[i].name,
							    "len", (json_int_t)w->blobs[i].len));
			total += w->blobs[i].len;
		}
		bin = malloc(total ? total : 1);
		for (size_t i = 0; bin && i < w->nblobs; i++) {
			memcpy(bin + off, w->blobs[i].data, w->blobs[i].len);
			off += w->blobs[i].len;
		}
		json_t *o = json_pack("{sIsOsOsOsosO}", "step", (json_int_t)w->chosen,
				      "restored", w->restored, "missing", w->missing,
				      "unexpected", w->unexpected, "blobs", bl, "skipped", w->skipped);
		txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
		json_decref(o);       /* the reply object was leaked on every restore */
		if (bin && txt) {
			session_reply(s, PROTO_RESTORE | PROTO_REPLY, w->req_id, 0, txt, bin, total);
			log_info("job %s: rank %d restored iter_%09llu", w->job, w->rank,
				 (unsigned long long)w->chosen);
		} else {
			session_reply_err(s, PROTO_RESTORE | PROTO_REPLY, w->req_id, -ENOMEM,
					  "out of memory");
		}
		free(txt);
		free(bin);
	} else {
		session_reply_err(s, PROTO_RESTORE | PROTO_REPLY, w->req_id, w->r, "%s", w->msg);
	}
	for (size_t i = 0; i < w->nblobs; i++) {
		free(w->blobs[i].name);
		free(w->blobs[i].data);
	}
	free(w->blobs);
	for (size_t i = 0; i < w->nwant; i++) {
		free(w->want[i].group);
		free(w->want[i].name);
	}
	free(w->want);
	for (size_t i = 0; i < w->nregions; i++)
		region_unref(w->regions[i]);
	free(w->regions);
	json_decref(w->skipped);
	json_decref(w->restored);
	json_decref(w->missing);
	json_decref(w->unexpected);
	close(w->jobfd);
	free(w);
	session_resume(s);
	session_unref(s);
}

int restore_start(struct srv *S, struct session *s, uint64_t req_id, int64_t step,
		  int partial)
{
	struct restore_work *w = calloc(1, sizeof(*w));
	struct job *j = s->job;

	if (!w)
		return -ENOMEM;
	w->S = S;
	w->s = s;
	w->req_id = req_id;
	w->step = step;
	w->partial = partial;
	w->rank = s->rank;
	w->world = j->world_size;
	w->threads = S->cfg.verify_threads;
	w->max_reply = S->cfg.max_message_bytes > 65536 ? S->cfg.max_message_bytes - 65536 : 0;
	snprintf(w->job, sizeof(w->job), "%s", j->name);
	w->jobfd = fcntl(j->jobfd, F_DUPFD_CLOEXEC, 3);
	w->want = calloc(s->ntensors + 1, sizeof(*w->want));
	w->regions = calloc(s->nregions + 1, sizeof(*w->regions));
	w->skipped = json_array();
	w->restored = json_array();
	w->missing = json_array();
	w->unexpected = json_array();
	if (w->jobfd < 0 || !w->want || !w->regions) {
		if (w->jobfd >= 0)
			close(w->jobfd);
		free(w->want);
		free(w->regions);
		json_decref(w->skipped);
		json_decref(w->restored);
		json_decref(w->missing);
		json_decref(w->unexpected);
		free(w);
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->ntensors; i++) {
		struct reg_tensor *t = &s->tensors[i];
		struct want *wt = &w->want[w->nwant++];
		wt->group = strdup(t->group);
		wt->name = strdup(t->name);
		memcpy(wt->dtype, t->dtype, sizeof(wt->dtype));
		wt->ndim = t->ndim;
		memcpy(wt->shape, t->shape, sizeof(wt->shape));
		wt->nbytes = t->nbytes;
		if (t->rg->gm) {       /* CUDA memory: through pinned scratch */
			wt->gm = t->rg->gm;
			wt->goff = t->offset;
		} else {
			wt->dst = (uint8_t *)t->rg->r.base + t->offset;
		}
	}
	/* the trainer's memory must outlive the work, even if it disconnects */
	for (size_t i = 0; i < s->nregions; i++) {
		w->regions[w->nregions++] = s->regions[i];
		s->regions[i]->refs++;
	}
	s->refs++;
	s->busy = 1;
	w->req.data = w;
	uv_queue_work(S->loop, &w->req, restore_thread, restore_done);
	return 0;
}
