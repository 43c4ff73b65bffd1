/* verify.c - check a checkpoint directory on its own: manifest, files,
 * sizes and, at VERIFY_FULL, every file digest and safetensors header. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "csum.h"
#include "errbuf.h"
#include "fcheck.h"
#include "safet.h"
#include "digest.h"
#include "verify.h"

#define VERIFY_HDR_PROBE (64u << 10)   /* first read for a header */
#define VERIFY_MSG 512
#define FAST_BUF (8u << 20)             /* reads of a fast check */

/* Open a relative path under dirfd one component at a time, each with
 * O_NOFOLLOW, so no symlink anywhere on the path is followed (a plain
 * openat only refuses one in the last component).  fd or -errno. */
static int open_beneath(int dirfd, const char *path)
{
	char comp[NAME_MAX + 1];
	const char *p = path, *slash;
	int cur = dirfd, fd, e;
	size_t len;

	while ((slash = strchr(p, '/'))) {
		len = (size_t)(slash - p);
		if (len == 0 || len > NAME_MAX) {
			fd = -EINVAL;
			goto out_close;
		}
		memcpy(comp, p, len);
		comp[len] = '\0';
		fd = openat(cur, comp,
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		e = errno;
		/* O_DIRECTORY wins over O_NOFOLLOW: a symlinked directory
		 * reads as ENOTDIR.  Report it as the symlink it is. */
		if (fd < 0 && e == ENOTDIR) {
			struct stat st;

			if (fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISLNK(st.st_mode))
				e = ELOOP;
		}
		if (cur != dirfd)
			close(cur);
		if (fd < 0)
			return -e;
		cur = fd;
		p = slash + 1;
	}
	/* O_NONBLOCK: a FIFO planted here must not hang us. */
	fd = openat(cur, p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		fd = -errno;
out_close:
	if (cur != dirfd)
		close(cur);
	return fd;
}

/* Open f->path and check it is a regular file of the recorded size.
 * Returns the fd or -errno with the message filled. */
static int open_checked(int dirfd, const struct mfst_file *f,
			char *err, size_t errlen)
{
	struct stat st;
	int fd, ret;

	fd = open_beneath(dirfd, f->path);
	if (fd == -ENOENT)
		return errbuf_fail(err, errlen, -ENOENT, "%s: missing", f->path);
	if (fd == -ELOOP)
		return errbuf_fail(err, errlen, -ELOOP,
				   "%s: is a symbolic link (or has one on its path)",
				   f->path);
	if (fd < 0)
		return errbuf_fail(err, errlen, fd, "%s: cannot open: %s", f->path,
				   strerror(-fd));
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		errbuf_fail(err, errlen, ret, "%s: cannot stat: %s", f->path,
			    strerror(-ret));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = errbuf_fail(err, errlen, -EINVAL, "%s: not a regular file", f->path);
		goto out_close;
	}
	if ((uint64_t)st.st_size != f->size) {
		ret = errbuf_fail(err, errlen, -EBADMSG,
				  "%s: size mismatch (expected %llu, got %llu)", f->path,
				  (unsigned long long)f->size,
				  (unsigned long long)st.st_size);
		goto out_close;
	}
	return fd;
out_close:
	close(fd);
	return ret;
}

static int pread_full(int fd, uint8_t *buf, size_t len, off_t off)
{
	size_t got = 0;
	ssize_t r;

	while (got < len) {
		r = pread(fd, buf + got, len - got, off + (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;        /* shrank under us */
		got += (size_t)r;
	}
	return 0;
}

static int cmp_mt(const void *a, const void *b)
{
	return strcmp((*(const struct mfst_tensor *const *)a)->name,
		      (*(const struct mfst_tensor *const *)b)->name);
}

static int cmp_st(const void *a, const void *b)
{
	return strcmp((*(const struct safet_tensor *const *)a)->name,
		      (*(const struct safet_tensor *const *)b)->name);
}

/* Compare the header's tensors with the manifest's for this file, matched
 * by name: same set, dtypes, shapes and absolute offsets. */
static int compare_tensors(const struct mfst_file *f,
			   const struct safet_header *h,
			   const struct mfst_tensor **mt, size_t nm,
			   char *err, size_t errlen)
{
	const struct safet_tensor **ht;
	size_t i = 0, j = 0;
	int ret = 0;

	ht = calloc(h->ntensors + 1, sizeof(*ht));
	if (!ht)
		return errbuf_fail(err, errlen, -ENOMEM, "%s: out of memory", f->path);
	for (size_t k = 0; k < h->ntensors; k++)
		ht[k] = &h->tensors[k];
	qsort(ht, h->ntensors, sizeof(*ht), cmp_st);
	qsort(mt, nm, sizeof(*mt), cmp_mt);
	while (ret == 0 && (i < h->ntensors || j < nm)) {
		int c = i == h->ntensors ? 1 : j == nm ? -1 :
			strcmp(ht[i]->name, mt[j]->name);
		const struct safet_tensor *a;
		const struct mfst_tensor *b;

		if (c < 0) {
			ret = errbuf_fail(err, errlen, -EINVAL,
					  "%s: tensor '%.200s' is in the header but not in the manifest",
					  f->path, ht[i]->name);
			break;
		}
		if (c > 0) {
			ret = errbuf_fail(err, errlen, -EINVAL,
					  "%s: tensor '%.200s' is in the manifest but not in the header",
					  f->path, mt[j]->name);
			break;
		}
		a = ht[i++];
		b = mt[j++];
		if (strcmp(a->dtype, b->dtype) != 0)
			ret = errbuf_fail(err, errlen, -EINVAL,
					  "%s: tensor '%.200s' is %s in the header, %s in the manifest",
					  f->path, a->name, a->dtype, b->dtype);
		else if (a->ndim != b->ndim ||
			 memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(a->shape[0])))
			ret = errbuf_fail(err, errlen, -EINVAL,
					  "%s: tensor '%.200s' has a different shape in the header",
					  f->path, a->name);
		else if (h->data_start + a->begin != b->begin ||
			 h->data_start + a->end != b->end)
			ret = errbuf_fail(err, errlen, -EINVAL,
					  "%s: tensor '%.200s' is at [%llu, %llu) in the header, [%llu, %llu) in the manifest",
					  f->path, a->name,
					  (unsigned long long)(h->data_start + a->begin),
					  (unsigned long long)(h->data_start + a->end),
					  (unsigned long long)b->begin,
					  (unsigned long long)b->end);
	}
	free(ht);
	return ret;
}

static int check_header(int fd, const struct mfst_file *f,
			const struct mfst_tensor **mt, size_t nm,
			char *err, size_t errlen)
{
	struct safet_header *h = NULL;
	char perr[256];
	size_t len, need = 0;
	uint8_t *buf;
	int ret;

	len = f->size < VERIFY_HDR_PROBE ? (size_t)f->size : VERIFY_HDR_PROBE;
	for (int pass = 0; pass < 2; pass++) {
		buf = malloc(len ? len : 1);
		if (!buf)
			return errbuf_fail(err, errlen, -ENOMEM, "%s: out of memory", f->path);
		ret = pread_full(fd, buf, len, 0);
		if (ret == 0)
			ret = safet_header_parse(buf, len, f->size, &h, &need,
						 perr, sizeof(perr));
		else
			snprintf(perr, sizeof(perr), "read error: %s", strerror(-ret));
		free(buf);
		/* A long header: one more read of exactly what it needs. */
		if (ret != -EAGAIN || need <= len)
			break;
		len = need;
	}
	if (ret == -EAGAIN) {
		ret = -EINVAL;
		snprintf(perr, sizeof(perr), "header truncated");
	}
	if (ret < 0)
		return errbuf_fail(err, errlen, ret == -ENOMEM ? ret : -EINVAL,
				   "%s: bad safetensors header: %s", f->path, perr);
	ret = compare_tensors(f, h, mt, nm, err, errlen);
	safet_header_free(h);
	return ret;
}

struct vctx {
	int                 dirfd;
	const struct mfst  *m;
	const struct mfst_tensor **by_file;  /* tensors grouped by file */
	size_t             *first;           /* by_file[first[i]..first[i+1]) */
	pthread_mutex_t     lock;
	size_t              next;
	int                 stop;
	int                 ret;             /* first failure, by file index */
	size_t              bad;
	char                msg[VERIFY_MSG];
};

/* The t-th tensor a shard holds: rank-local tensors, then the stored
 * pieces of global tensors (under the global's name). */
static const struct mfst_tensor *entry(const struct mfst *m, size_t t)
{
	return t < m->ntensors ? &m->tensors[t] : &m->pieces[t - m->ntensors].t;
}

/* In a validated manifest, shard paths have one '/' ("<group>/rank_N...")
 * and blob paths two ("extra/rank_N/<blob>"). */
static int is_shard(const char *path)
{
	const char *slash = strchr(path, '/');

	return slash && !strchr(slash + 1, '/');
}

/* Read fd (file f) to its end through fcheck: chunk CRC32Cs, or its digest. */
static int check_fast(int fd, const struct mfst_file *f, char *msg, size_t msglen)
{
	struct fcheck fc;
	uint8_t *buf;
	ssize_t n;
	int ret;

	if (!(buf = malloc(FAST_BUF)))
		return errbuf_fail(msg, msglen, -ENOMEM, "%s: out of memory", f->path);
	if ((ret = fcheck_init(&fc, f, msg, msglen)) < 0)
		goto out_free;
	for (;;) {
		n = read(fd, buf, FAST_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = errbuf_fail(msg, msglen, -errno, "%s: read error: %s", f->path,
					  strerror(errno));
			break;
		}
		if (n == 0) {
			ret = fcheck_final(&fc, msg, msglen);
			break;
		}
		if ((ret = fcheck_update(&fc, buf, (size_t)n, msg, msglen)) < 0)
			break;
	}
	fcheck_release(&fc);
out_free:
	free(buf);
	return ret;
}

/* Check the bytes (as asked) and the header of file i; mt[0..nm) are its
 * tensors. */
static int check_file(int dirfd, const struct mfst_file *f, enum verify_bytes bytes,
		      const struct mfst_tensor **mt, size_t nm,
		      char *msg, size_t msglen)
{
	struct digest got;
	struct csum_stream cs = { 0 };
	uint32_t *crcs = NULL;
	uint64_t size;
	int fd, ret = 0;

	fd = open_checked(dirfd, f, msg, msglen);
	if (fd < 0)
		return fd;
	if (bytes == VERIFY_BYTES_NONE)
		goto header;
	if (bytes == VERIFY_BYTES_FAST) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
		if ((ret = check_fast(fd, f, msg, msglen)) < 0)
			goto out_close;
		goto header;
	}
	if (f->chunk_size && csum_stream_init(&cs, f->chunk_size, f->size) < 0) {
		ret = errbuf_fail(msg, msglen, -ENOMEM, "%s: out of memory", f->path);
		goto out_close;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	ret = digest_fd_csum(fd, f->digest.alg, &got, &size, f->chunk_size ? &cs : NULL);
	if (ret < 0) {
		errbuf_fail(msg, msglen, ret, "%s: read error: %s", f->path, strerror(-ret));
		goto out_close;
	}
	if (size != f->size) {
		ret = errbuf_fail(msg, msglen, -EBADMSG,
				  "%s: size changed while hashing (expected %llu, read %llu)",
				  f->path, (unsigned long long)f->size,
				  (unsigned long long)size);
		goto out_close;
	}
	if (!digest_eq(&got, &f->digest)) {
		ret = errbuf_fail(msg, msglen, -EBADMSG,
				  "%s: %s mismatch (expected %.16s..., got %.16s...)",
				  f->path, digest_key(f->digest.alg), f->digest.hex, got.hex);
		goto out_close;
	}
	/* the chunk checksums a range read relies on must agree too */
	if (f->chunk_size && csum_stream_finish(&cs, &crcs) == 0)
		for (uint64_t k = 0; k < csum_count(f->size, f->chunk_size); k++)
			if (crcs[k] != f->crc32c[k]) {
				ret = errbuf_fail(msg, msglen, -EBADMSG, "%s: crc32c of chunk "
						  "%llu does not match the manifest", f->path,
						  (unsigned long long)k);
				goto out_close;
			}
header:
	if (is_shard(f->path))
		ret = check_header(fd, f, mt, nm, msg, msglen);
out_close:
	free(crcs);
	csum_stream_release(&cs);
	close(fd);
	return ret;
}

static int verify_one(struct vctx *v, size_t i, char *msg, size_t msglen)
{
	return check_file(v->dirfd, &v->m->files[i], VERIFY_BYTES_AUDIT,
			  v->by_file + v->first[i], v->first[i + 1] - v->first[i], msg, msglen);
}

int verify_file(int dirfd, const struct mfst *m, size_t i, enum verify_bytes bytes,
		char *err, size_t errlen)
{
	const struct mfst_tensor **mt;
	size_t nm = 0;
	int ret;

	if (!m || i >= m->nfiles)
		return errbuf_fail(err, errlen, -EINVAL, "no file %zu in the manifest", i);
	mt = calloc(m->ntensors + m->npieces + 1, sizeof(*mt));
	if (!mt)
		return errbuf_fail(err, errlen, -ENOMEM, "out of memory");
	for (size_t t = 0; t < m->ntensors + m->npieces; t++)
		if (entry(m, t)->file == i)
			mt[nm++] = entry(m, t);
	ret = check_file(dirfd, &m->files[i], bytes, mt, nm, err, errlen);
	free(mt);
	return ret;
}

static void *worker(void *arg)
{
	struct vctx *v = arg;
	char msg[VERIFY_MSG];
	size_t i;
	int ret;

	for (;;) {
		pthread_mutex_lock(&v->lock);
		if (v->stop || v->next >= v->m->nfiles) {
			pthread_mutex_unlock(&v->lock);
			break;
		}
		i = v->next++;
		pthread_mutex_unlock(&v->lock);

		ret = verify_one(v, i, msg, sizeof(msg));
		if (ret == 0)
			continue;
		pthread_mutex_lock(&v->lock);
		/* Keep the lowest-indexed failure so reports are stable. */
		if (v->ret == 0 || i < v->bad) {
			v->ret = ret;
			v->bad = i;
			snprintf(v->msg, sizeof(v->msg), "%s", msg);
		}
		v->stop = 1;
		pthread_mutex_unlock(&v->lock);
	}
	return NULL;
}

/* Hash every file and check every header on up to nthreads threads, the
 * caller's included. */
static int verify_full(int dirfd, const struct mfst *m, unsigned nthreads,
		       char *err, size_t errlen)
{
	struct vctx v = { .dirfd = dirfd, .m = m };
	pthread_t *tids = NULL;
	size_t *fill = NULL;
	unsigned started = 0, want;
	int ret;

	v.by_file = calloc(m->ntensors + m->npieces + 1, sizeof(*v.by_file));
	v.first = calloc(m->nfiles + 1, sizeof(*v.first));
	fill = calloc(m->nfiles + 1, sizeof(*fill));
	if (!v.by_file || !v.first || !fill) {
		ret = errbuf_fail(err, errlen, -ENOMEM, "out of memory");
		goto out_free;
	}
	/* Counting sort of tensors by file. */
	for (size_t t = 0; t < m->ntensors + m->npieces; t++)
		v.first[entry(m, t)->file + 1]++;
	for (size_t i = 0; i < m->nfiles; i++)
		v.first[i + 1] += v.first[i];
	for (size_t t = 0; t < m->ntensors + m->npieces; t++) {
		size_t fi = entry(m, t)->file;
		v.by_file[v.first[fi] + fill[fi]++] = entry(m, t);
	}
	ret = pthread_mutex_init(&v.lock, NULL);
	if (ret) {
		ret = errbuf_fail(err, errlen, -ret, "cannot create a mutex");
		goto out_free;
	}
	want = nthreads ? nthreads : 1;
	if (want > m->nfiles)
		want = m->nfiles ? (unsigned)m->nfiles : 1;
	tids = calloc(want, sizeof(*tids));
	/* Fewer threads than asked (or none) only makes it slower. */
	for (unsigned t = 1; tids && t < want; t++) {
		if (pthread_create(&tids[started], NULL, worker, &v))
			break;
		started++;
	}
	worker(&v);
	for (unsigned t = 0; t < started; t++)
		pthread_join(tids[t], NULL);
	pthread_mutex_destroy(&v.lock);
	ret = v.ret;
	if (ret < 0)
		errbuf_fail(err, errlen, ret, "%s", v.msg);
out_free:
	free(tids);
	free(fill);
	free(v.first);
	free(v.by_file);
	return ret;
}

int verify_checkpoint(int dirfd, enum verify_level level, unsigned nthreads,
		      struct mfst **out_m, char *err, size_t errlen)
{
	struct mfst *m = NULL;
	int ret, fd;

	if (level != VERIFY_STRUCTURE && level != VERIFY_FULL)
		return errbuf_fail(err, errlen, -EINVAL, "unknown verify level");
	ret = mfst_read(dirfd, &m, err, errlen);
	if (ret < 0)
		return ret;
	if (strcmp(m->status, "committed") != 0) {
		ret = errbuf_fail(err, errlen, -EINVAL, "%s: status is '%s', not 'committed'",
				  MFST_NAME, m->status);
		goto out_free;
	}
	/* Cheap checks first, so a missing file is reported before hours
	 * of hashing. */
	for (size_t i = 0; i < m->nfiles; i++) {
		fd = open_checked(dirfd, &m->files[i], err, errlen);
		if (fd < 0) {
			ret = fd;
			goto out_free;
		}
		close(fd);
	}
	if (level == VERIFY_FULL) {
		ret = verify_full(dirfd, m, nthreads, err, errlen);
		if (ret < 0)
			goto out_free;
	}
	if (out_m)
		*out_m = m;
	else
		mfst_free(m);
	return 0;
out_free:
	mfst_free(m);
	return ret;
}

/* --- structure checks of unchanged manifests ----------------------------- */

/* What VERIFY_STRUCTURE read from a manifest, kept while the manifest's
 * file is the same: same device, inode, size, mtime and ctime (any write
 * or replacement changes one of them). */
struct known {
	struct stat      st;          /* of the manifest */
	uint64_t         step;
	char             run_id[33];
	struct mfst_file *files;      /* path and size only */
	size_t           nfiles;
	uint64_t         used;        /* 0: an empty slot */
};

#define KNOWN_SLOTS 64

static struct known known[KNOWN_SLOTS];
static uint64_t known_clock, known_hit_count;
static pthread_mutex_t known_lock = PTHREAD_MUTEX_INITIALIZER;

static int manifest_stat(int dirfd, struct stat *st)
{
	return fstatat(dirfd, MFST_NAME, st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       S_ISREG(st->st_mode) ? 0 : -1;
}

/* The same manifest file, unchanged? */
static int same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static int known_is(const struct known *k, const struct stat *st)
{
	return k->used && same_file(&k->st, st);
}

static void files_free(struct mfst_file *f, size_t n)
{
	for (size_t i = 0; f && i < n; i++)
		free(f[i].path);
	free(f);
}

/* A copy of n files' paths and sizes, or NULL. */
static struct mfst_file *files_copy(const struct mfst_file *f, size_t n)
{
	struct mfst_file *c = calloc(n + 1, sizeof(*c));

	for (size_t i = 0; c && i < n; i++) {
		c[i].size = f[i].size;
		if (!(c[i].path = strdup(f[i].path))) {
			files_free(c, i);
			return NULL;
		}
	}
	return c;
}

/* Remember m as what the manifest st says (out of memory: not at all). */
static void known_put(const struct stat *st, const struct mfst *m)
{
	struct mfst_file *files = files_copy(m->files, m->nfiles);
	struct known *slot = NULL;

	if (!files)
		return;
	pthread_mutex_lock(&known_lock);
	for (size_t i = 0; i < KNOWN_SLOTS && !slot; i++)
		if (known_is(&known[i], st))
			slot = &known[i];
	for (size_t i = 0; i < KNOWN_SLOTS && !slot; i++)
		if (!known[i].used)
			slot = &known[i];
	if (!slot) {                     /* the least recently used */
		slot = &known[0];
		for (size_t i = 1; i < KNOWN_SLOTS; i++)
			if (known[i].used < slot->used)
				slot = &known[i];
	}
	files_free(slot->files, slot->nfiles);
	*slot = (struct known){ *st, m->step, "", files, m->nfiles, ++known_clock };
	memcpy(slot->run_id, m->run_id, sizeof(slot->run_id));
	pthread_mutex_unlock(&known_lock);
}

/* What the manifest st is known to say: 0 with a copy of its files, or -1. */
static int known_get(const struct stat *st, uint64_t *step, char run_id[33],
		     struct mfst_file **files, size_t *nfiles)
{
	int r = -1;

	pthread_mutex_lock(&known_lock);
	for (size_t i = 0; i < KNOWN_SLOTS && r < 0; i++) {
		struct known *k = &known[i];
		if (!known_is(k, st) || !(*files = files_copy(k->files, k->nfiles)))
			continue;
		*nfiles = k->nfiles;
		*step = k->step;
		memcpy(run_id, k->run_id, 33);
		k->used = ++known_clock;
		known_hit_count++;
		r = 0;
	}
	pthread_mutex_unlock(&known_lock);
	return r;
}

int verify_structure_known(int dirfd, uint64_t *step, char run_id[33], char *err,
			   size_t errlen)
{
	struct mfst_file *files;
	struct stat st, after;
	struct mfst *m = NULL;
	size_t nfiles;
	int have = manifest_stat(dirfd, &st) == 0, r = 0;

	if (have && known_get(&st, step, run_id, &files, &nfiles) == 0) {
		for (size_t i = 0; i < nfiles && r == 0; i++) {
			int fd = open_checked(dirfd, &files[i], err, errlen);
			if (fd < 0)
				r = fd;
			else
				close(fd);
		}
		files_free(files, nfiles);
		return r;
	}
	if ((r = verify_checkpoint(dirfd, VERIFY_STRUCTURE, 1, &m, err, errlen)) < 0)
		return r;
	*step = m->step;
	memcpy(run_id, m->run_id, 33);
	/* only if what was read is the file stat'ed before */
	if (have && manifest_stat(dirfd, &after) == 0 && same_file(&after, &st))
		known_put(&st, m);
	mfst_free(m);
	return 0;
}

void verify_structure_note(int dirfd, const struct mfst *m)
{
	struct stat st;

	if (strcmp(m->status, "committed") == 0 && manifest_stat(dirfd, &st) == 0)
		known_put(&st, m);
}

unsigned long verify_structure_hits(void)
{
	unsigned long n;

	pthread_mutex_lock(&known_lock);
	n = (unsigned long)known_hit_count;
	pthread_mutex_unlock(&known_lock);
	return n;
}
