/* memt_fd.c - the memory tier across a restart of ckptd under systemd:
 * each committed capture's memfd goes to systemd's file descriptor store
 * (sd_notify "FDSTORE=1", the unit's FileDescriptorStoreMax=) and comes
 * back at the next start ($LISTEN_FDS, $LISTEN_FDNAMES).  The memfd
 * describes itself: after its data, a JSON description (job, step, txid,
 * rank, files with their sizes, digests and chunk checksums) and a fixed
 * trailer that says where it is.  A file shared with an older step is
 * described without bytes (its room, when it has one, is a hole): that
 * step's memfd stays in the store while shared, and at the next start it
 * is taken back first; so is the step a file's spliced chunks come from
 * (memt_splice.c; described by index and step, holes here too).  Without
 * systemd
 * nothing is stored and a restart loses the tier: restores then come from
 * disk. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "memt.h"
#include "memt_int.h"
#include "names.h"
#include "notify.h"

#define FD_PREFIX     "memt."
#define TRAILER_MAGIC "CKPTMEMT"
#define FORMAT_VER    4      /* 2: files shared with an older step;
				* 3: ... some with a room, a hole;
				* 4: chunks spliced from an older step */
#define META_MAX      (64u << 20)

struct trailer {               /* the memfd's last bytes, little-endian */
	char     magic[8];
	uint32_t version;
	uint32_t reserved;
	uint64_t meta_off, meta_len;
};
_Static_assert(sizeof(struct trailer) == 32, "trailer layout");

/* f's spliced chunks, [[k, step], ...], or NULL when none is. */
static json_t *describe_chunks(const struct mt_file *f)
{
	json_t *a = NULL;

	for (uint64_t k = 0; f->src && k < f->nsums; k++)
		if (f->src[k].on && (a || (a = json_array())))
			json_array_append_new(a, json_pack("[II]", (json_int_t)k,
							   (json_int_t)f->src[k].step));
	return a;
}

/* f's chunks given back (an orphan's: memt__trim_chunks), [k, ...], or
 * NULL when none is. */
static json_t *describe_gone(const struct mt_file *f)
{
	json_t *a = NULL;

	for (uint64_t k = 0; f->gone && k < f->nsums; k++)
		if (f->gone[k] && (a || (a = json_array())))
			json_array_append_new(a, json_integer((json_int_t)k));
	return a;
}

/* The version a description needs: 4 only with spliced chunks or chunks
 * given back (a ckptd older than this one keeps the others). */
static int format_of(const struct memt_cap *c)
{
	for (size_t i = 0; i < c->nfiles; i++)
		if (!c->files[i].shared && memt__not_held(c, &c->files[i]))
			return 4;
	return 3;
}

json_t *memt__describe(const char *job, uint64_t step, const char *txid,
		       const struct memt_cap *c)
{
	json_t *files = json_array(), *o, *chunks;

	for (size_t i = 0; files && i < c->nfiles; i++) {
		const struct mt_file *f = &c->files[i];
		json_t *sums = json_array(), *fo;
		char hex[17];
		for (uint64_t k = 0; sums && k < f->nsums; k++) {
			snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)f->sums[k]);
			json_array_append_new(sums, json_string(hex));
		}
		/* the digest under its manifest key, "sha256" as before
		 * format 3; a shared file has no bytes here */
		fo = json_pack("{sssIsssO*}", "path", f->path, "size", (json_int_t)f->size,
			       digest_key(f->digest.alg), f->digest.hex, "sums", sums);
		if (f->shared)
			json_object_set_new(fo, "shared", json_true());
		if (!f->shared || f->hole)
			json_object_set_new(fo, "off", json_integer((json_int_t)f->off));
		if (!f->shared && (chunks = describe_chunks(f)))
			json_object_set_new(fo, "chunks", chunks);
		if (!f->shared && (chunks = describe_gone(f)))
			json_object_set_new(fo, "gone", chunks);
		json_array_append_new(files, fo);
		json_decref(sums);
	}
	o = json_pack("{sssisssIsssisIsIsIso*}", "format", "ckpt-memt", "version", format_of(c),
		      "job", job, "step", (json_int_t)step, "txid", txid,
		      "rank", c->rank, "chunk_bytes", (json_int_t)c->chunk_bytes,
		      "data_bytes", (json_int_t)c->len, "sent_bytes",
		      (json_int_t)memt_cap_sent(c), "files", files);
	return o;
}

/* Write c's description after its data, then the trailer.  0, or -1
 * (logged).  (Crashing meanwhile leaves a memfd that does not describe
 * itself: the next start drops it.) */
static int describe_in(const char *job, uint64_t step, const char *txid,
		       struct memt_cap *c)
{
	struct trailer tr = { TRAILER_MAGIC, (uint32_t)format_of(c), 0, 0, 0 };
	json_t *o = memt__describe(job, step, txid, c);
	char *meta = o ? json_dumps(o, JSON_COMPACT) : NULL;
	size_t len;

	json_decref(o);
	if (!meta) {
		log_warnx("job %s: iter_%09llu: out of memory describing the memory copy for "
			  "the fd store", job, (unsigned long long)step);
		return -1;
	}
	len = strlen(meta);
	tr.meta_off = c->len;
	tr.meta_len = len;
	/* after the data, ending the file (a reused memfd may be longer) */
	if (ftruncate(c->fd, (off_t)(c->len + len + sizeof(tr))) < 0 ||
	    pwrite(c->fd, meta, len, (off_t)c->len) != (ssize_t)len ||
	    pwrite(c->fd, &tr, sizeof(tr), (off_t)(c->len + len)) != (ssize_t)sizeof(tr)) {
		log_warn("job %s: iter_%09llu: cannot describe the memory copy for the fd store",
			 job, (unsigned long long)step);
		free(meta);
		return -1;
	}
	free(meta);
	return 0;
}

void memt_fd_keep(const struct mt_entry *e, struct memt_cap *c)
{
	char name[sizeof(c->fdname)], state[sizeof(name) + 32];
	int r;

	if (!getenv("NOTIFY_SOCKET") || c->fd < 0 || c->fdname[0] ||
	    describe_in(e->job, e->step, e->txid, c) < 0)
		return;
	snprintf(name, sizeof(name), FD_PREFIX "%s.%llu.%d", e->job,
		 (unsigned long long)e->step, c->rank);
	snprintf(state, sizeof(state), "FDSTORE=1\nFDNAME=%s", name);
	if ((r = notify_send_fd(state, c->fd)) < 0)
		log_warnx("job %s: cannot hand iter_%09llu to systemd's fd store: %s "
			  "(a restart of ckptd loses it)", e->job, (unsigned long long)e->step,
			  strerror(-r));
	else
		snprintf(c->fdname, sizeof(c->fdname), "%s", name);
}

void memt_fd_redescribe(struct memt_cap *c)
{
	if (c->fdname[0])         /* the store holds the memfd: the same file */
		(void)describe_in(c->job, c->step, c->txid, c);
}

void memt_fd_forget(struct memt_cap *c)
{
	char state[sizeof(c->fdname) + 32];

	if (!c->fdname[0])
		return;
	snprintf(state, sizeof(state), "FDSTOREREMOVE=1\nFDNAME=%s", c->fdname);
	(void)notify_send(state);
	c->fdname[0] = '\0';
}

/* f's spliced chunks as described (describe_chunks), in c of step: each
 * from an older step, in order.  0, or -1 when not valid. */
static int parse_chunks(const json_t *a, struct memt_cap *c, struct mt_file *f,
			uint64_t step)
{
	size_t i;
	json_t *v;
	json_int_t k, from, last = -1;

	if (!a)
		return 0;
	if (!json_is_array(a) || f->shared || c->chunk_bytes % PAGE ||
	    !(f->src = calloc(f->nsums + 1, sizeof(*f->src))))
		return -1;
	json_array_foreach(a, i, v) {
		if (json_unpack(v, "[II]", &k, &from) < 0 || k <= last ||
		    (uint64_t)k >= f->nsums || from < 0 || (uint64_t)from >= step)
			return -1;
		f->src[k].on = 1;
		f->src[k].step = (uint64_t)from;
		last = k;
	}
	return 0;
}

/* f's chunks given back (describe_gone): not readable, its room holes. */
static int parse_gone(const json_t *a, struct memt_cap *c, struct mt_file *f)
{
	size_t i;
	json_t *v;
	json_int_t k, last = -1;

	if (!a)
		return 0;
	if (!json_is_array(a) || f->shared || c->chunk_bytes % PAGE ||
	    !(f->gone = calloc(f->nsums + 1, 1)))
		return -1;
	json_array_foreach(a, i, v) {
		k = json_is_integer(v) ? json_integer_value(v) : -1;
		if (k <= last || (uint64_t)k >= f->nsums || (f->src && f->src[k].on))
			return -1;
		f->gone[k] = 1;
		last = k;
	}
	f->done = 0;
	return 0;
}

static int hex_ok(const char *s, size_t n)
{
	if (!s || strlen(s) != n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

int memt__cap_parse(const json_t *o, struct memt_cap **out, char job[65], uint64_t *step,
		    char txid[33], char *why, size_t whylen)
{
	json_t *files, *sent;
	struct memt_cap *c = NULL;
	const char *j = NULL, *tx = NULL;
	char bad[128];
	json_int_t stp = -1, rank = -1, chunk = 0, data = -1;
	uint64_t off = 0;
	int r = -EINVAL;

	if (!o || json_unpack((json_t *)o, "{sssIsssIsIsIso}", "job", &j, "step", &stp,
			      "txid", &tx, "rank", &rank, "chunk_bytes", &chunk, "data_bytes",
			      &data, "files", &files) < 0 || !json_is_array(files) ||
	    name_check(j, 64, bad, sizeof(bad)) < 0 || !hex_ok(tx, 32) || stp < 0 || rank < 0 ||
	    rank > 1 << 24 || chunk < 4096 || data < 0 || data % PAGE) {
		snprintf(why, whylen, "its description is not valid");
		goto out;
	}
	if (!(c = calloc(1, sizeof(*c))) || pthread_mutex_init(&c->alloc_lock, NULL)) {
		free(c);
		c = NULL;
		r = -ENOMEM;
		snprintf(why, whylen, "out of memory");
		goto out;
	}
	c->fd = -1;
	c->rank = (int)rank;
	c->chunk_bytes = (uint64_t)chunk;
	c->len = c->bytes = (uint64_t)data;
	c->nfiles = json_array_size(files);
	if (!(c->files = calloc(c->nfiles + 1, sizeof(*c->files)))) {
		r = -ENOMEM;
		snprintf(why, whylen, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < c->nfiles; i++) {
		struct mt_file *f = &c->files[i];
		const json_t *fo = json_array_get(files, i);
		const char *path = NULL, *hex = NULL;
		json_int_t size = -1, foff = -1;
		json_t *sums = NULL;
		int alg = -1;
		for (int a = 0; a < DIGEST_NALGS && !hex; a++)
			if ((hex = json_string_value(json_object_get(fo, digest_key(a)))))
				alg = a;
		/* a shared file has no bytes here, and a room (a hole) or none */
		f->shared = json_is_true(json_object_get(fo, "shared"));
		f->hole = f->shared && json_object_get(fo, "off");
		if (f->shared && !f->hole)
			foff = (json_int_t)off;
		if (!hex || json_unpack((json_t *)fo, "{sssIsO}", "path", &path, "size",
					&size, "sums", &sums) < 0)
			goto bad_file;
		if (!f->shared || f->hole)
			(void)json_unpack((json_t *)fo, "{sI}", "off", &foff);
		if (size < 0 || foff < 0 || (uint64_t)foff != off ||
		    !hex_ok(hex, digest_hex_len(alg)) ||
		    ((!f->shared || f->hole) && (uint64_t)size > (uint64_t)data - off) ||
		    !json_is_array(sums) ||
		    json_array_size(sums) != ((uint64_t)size + (uint64_t)chunk - 1) / (uint64_t)chunk) {
			json_decref(sums);
			goto bad_file;
		}
		f->path = strdup(path);
		f->size = (uint64_t)size;
		f->off = f->shared && !f->hole ? 0 : off;
		f->nsums = json_array_size(sums);
		f->sums = calloc(f->nsums + 1, sizeof(*f->sums));
		f->digest.alg = alg;
		snprintf(f->digest.hex, sizeof(f->digest.hex), "%s", hex);
		f->filled = f->size;
		f->done = 1;
		for (uint64_t k = 0; f->sums && k < f->nsums; k++) {
			const char *h = json_string_value(json_array_get(sums, k));
			if (!hex_ok(h, 16))
				f->done = 0;
			else
				f->sums[k] = strtoull(h, NULL, 16);
		}
		json_decref(sums);
		if (!f->path || !f->sums || !f->done)
			goto bad_file;
		if (parse_chunks(json_object_get(fo, "chunks"), c, f, (uint64_t)stp) < 0 ||
		    parse_gone(json_object_get(fo, "gone"), c, f) < 0)
			goto bad_file;
		if (f->shared)
			f->done = 0;        /* until found (memt__adopt) */
		if (!f->shared || f->hole)
			off += ROOM(f->size);
		if (f->hole)
			c->bytes -= ROOM(f->size);
		else if (!f->shared)
			c->bytes -= memt__not_held(c, f);
	}
	sent = json_object_get(o, "sent_bytes");
	if (off != (uint64_t)data ||
	    (sent && json_integer_value(sent) != (json_int_t)memt_cap_sent(c)))
		goto bad_file;
	snprintf(job, 65, "%s", j);
	snprintf(txid, 33, "%s", tx);
	*step = (uint64_t)stp;
	*out = c;
	return 0;
bad_file:
	snprintf(why, whylen, "its description of the files is not valid");
	r = -EINVAL;
out:
	if (c)
		memt__cap_free(c);
	return r;
}

/* Rebuild a capture from memfd fd.  0 (*out, with job/step/txid filled)
 * or -EINVAL with why. */
static int load(int fd, struct memt_cap **out, char job[65], uint64_t *step,
		char txid[33], char *why, size_t whylen)
{
	struct trailer tr;
	struct stat st;
	json_t *o = NULL;
	json_error_t jerr;
	struct memt_cap *c = NULL;
	char *meta = NULL;
	int r = -EINVAL;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    fcntl(fd, F_GET_SEALS) < 0 || st.st_size < (off_t)sizeof(tr) ||
	    pread(fd, &tr, sizeof(tr), st.st_size - (off_t)sizeof(tr)) != (ssize_t)sizeof(tr) ||
	    memcmp(tr.magic, TRAILER_MAGIC, 8) || tr.version < 1 || tr.version > FORMAT_VER ||
	    tr.meta_len > META_MAX || tr.meta_off % PAGE ||
	    tr.meta_off + tr.meta_len + sizeof(tr) != (uint64_t)st.st_size) {
		snprintf(why, whylen, "not a memfd that ckptd described");
		goto out;
	}
	if (!(meta = malloc(tr.meta_len + 1)) ||
	    pread(fd, meta, tr.meta_len, (off_t)tr.meta_off) != (ssize_t)tr.meta_len) {
		snprintf(why, whylen, "cannot read its description");
		goto out;
	}
	o = json_loadb(meta, tr.meta_len, 0, &jerr);
	if ((r = memt__cap_parse(o, &c, job, step, txid, why, whylen)) < 0)
		goto out;
	if (c->len != tr.meta_off) {
		snprintf(why, whylen, "its description is not valid");
		r = -EINVAL;
		goto out;
	}
	c->map = mmap(NULL, MAP_LEN(c), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (c->map == MAP_FAILED) {
		c->map = NULL;
		r = -errno;
		snprintf(why, whylen, "cannot map it: %s", strerror(errno));
		goto out;
	}
	c->fd = fd;
	*out = c;
	c = NULL;
	r = 0;
out:
	if (c)
		memt__cap_free(c);
	json_decref(o);
	free(meta);
	return r;
}

/* Say to the fd store to forget fd name (not ours, or not kept). */
static void store_remove(const char *name)
{
	char state[300];

	snprintf(state, sizeof(state), "FDSTOREREMOVE=1\nFDNAME=%s", name);
	(void)notify_send(state);
}

/* A memfd taken from the store, loaded (c NULL: not ckptd's, or not
 * valid; it is closed). */
struct stored {
	int              fd;
	const char      *name;
	struct memt_cap *c;
	char             job[65], txid[33], why[200];
	uint64_t         step;
};

/* Oldest step first: a newer copy of a job replaces the older one, which
 * stays only while the newer one shares its files. */
static int by_step(const void *a, const void *b)
{
	const struct stored *x = a, *y = b;

	return (x->c != NULL) - (y->c != NULL) ? (x->c != NULL) - (y->c != NULL)
	       : (x->step > y->step) - (x->step < y->step);
}

/* Is st[i] of the newest step of its job that was stored (and loaded)? */
static int newest_stored(const struct stored *st, int n, int i)
{
	for (int k = 0; k < n; k++)
		if (st[k].fd > 0 && st[k].step > st[i].step && !strcmp(st[k].job, st[i].job))
			return 0;
	return 1;
}

void memt_fd_take_back(struct memt *t)
{
	const char *pid = getenv("LISTEN_PID"), *nfds = getenv("LISTEN_FDS");
	char *names = getenv("LISTEN_FDNAMES") ? strdup(getenv("LISTEN_FDNAMES")) : NULL;
	char *save = NULL, *name = names ? strtok_r(names, ":", &save) : NULL;
	struct stored *st;
	int n;

	if (!pid || !nfds || strtol(pid, NULL, 10) != getpid()) {
		free(names);
		return;
	}
	n = atoi(nfds);
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	st = calloc(n > 0 ? (size_t)n : 1, sizeof(*st));
	for (int i = 0; i < n; i++, name = name ? strtok_r(NULL, ":", &save) : NULL) {
		int fd = 3 + i;

		(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
		if (!name || strncmp(name, FD_PREFIX, strlen(FD_PREFIX))) {
			log_warnx("fd store: fd %d (%s) is not ckptd's: closed", fd,
				  name ? name : "no name");
			if (name)
				store_remove(name);
			close(fd);
			continue;
		}
		if (!st || !t || load(fd, &st[i].c, st[i].job, &st[i].step, st[i].txid,
				      st[i].why, sizeof(st[i].why)) < 0) {
			log_warnx("fd store: %s is dropped: %s", name, !t ? "the memory tier "
				  "is off" : st ? st[i].why : "out of memory");
			store_remove(name);
			close(fd);
			continue;
		}
		st[i].fd = fd;
		st[i].name = name;
	}
	if (st)
		qsort(st, (size_t)n, sizeof(*st), by_step);
	for (int i = 0; st && i < n; i++) {
		struct memt_cap *c = st[i].c;

		if (!c)
			continue;
		if (memt__adopt(t, st[i].job, st[i].step, st[i].txid, c,
				!newest_stored(st, n, i), st[i].why, sizeof(st[i].why)) < 0) {
			c->fd = -1;        /* closed below */
			memt__cap_free(c);
			log_warnx("fd store: %s is dropped: %s", st[i].name, st[i].why);
			store_remove(st[i].name);
			close(st[i].fd);
			continue;
		}
		snprintf(c->fdname, sizeof(c->fdname), "%s", st[i].name);
		memt__lock_bytes(t, c);
		log_info("job %s: iter_%09llu (rank %d, %llu bytes) is back in memory from "
			 "systemd's fd store", st[i].job, (unsigned long long)st[i].step, c->rank,
			 (unsigned long long)c->bytes);
	}
	/* a job keeps its newest step (every rank's copy now taken back or
	 * not), and of the older ones what it borrows; none when it is not
	 * held (one step per job) */
	for (int i = 0; st && i < n; i++)
		if (st[i].fd > 0 && newest_stored(st, n, i) &&
		    memt__drop_older(t, st[i].job, st[i].step) > 0)
			log_warnx("fd store: job %s: the older steps taken back are dropped "
				  "too: iter_%09llu, which shared them, is not kept", st[i].job,
				  (unsigned long long)st[i].step);
	free(st);
	free(names);
	if (n > 0) {
		struct memt_usage u;
		memt_usage(t, &u);
		log_info("fd store: %d memory copies offered: %u steps kept in memory "
			 "(%.1f MiB)", n, u.steps, (double)(u.held - u.spare) / 1048576.0);
	}
}
