/* mfst.c - the manifest's JSON form: dump and write (validated first),
 * read and strict parse (validated last, mfst_check.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "errbuf.h"
#include "io.h"
#include "jtext.h"
#include "mfst.h"
#include "mfst_int.h"
#include "mfst_v2.h"

/* ---- dump ------------------------------------------------------------- */

/* Steals v; any failure here is an allocation failure (inputs were
 * validated, so every string is ASCII or checked UTF-8). */
static int put(json_t *o, const char *key, json_t *v)
{
	return v && json_object_set_new(o, key, v) == 0 ? 0 : -1;
}

static int append(json_t *a, json_t *v)
{
	return v && json_array_append_new(a, v) == 0 ? 0 : -1;
}

/* Everything but the tensor table (dump_tensors). */
static json_t *dump_json(const struct mfst *m)
{
	json_t *root, *files, *blobs;

	root = json_object();
	files = json_array();
	blobs = json_array();
	if (!root || !files || !blobs)
		goto out_fail;
	if (put(root, "format", json_string(MFST_FORMAT)) ||
	    put(root, "format_version", json_integer(m->format_version)) ||
	    put(root, "status", json_string(m->status)) ||
	    put(root, "job", json_string(m->job)) ||
	    put(root, "run_id", json_string(m->run_id)) ||
	    put(root, "txid", json_string(m->txid)) ||
	    put(root, "step", json_integer((json_int_t)m->step)) ||
	    put(root, "world_size", json_integer(m->world_size)) ||
	    put(root, "created_unix", json_integer(m->created_unix)) ||
	    put(root, "bytes_written", json_integer((json_int_t)m->bytes_written)) ||
	    put(root, "files", json_incref(files)) ||
	    put(root, "blobs", json_incref(blobs)))
		goto out_fail;
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct mfst_file *f = &m->files[i];
		json_t *o = json_object();

		if (append(files, o) ||
		    put(o, "path", json_string(f->path)) ||
		    put(o, "size", json_integer((json_int_t)f->size)) ||
		    put(o, digest_key(f->digest.alg), json_string(f->digest.hex)) ||
		    (f->object && put(o, "object", json_string(f->object))) ||
		    mfst__file_csum_dump(f, o))
			goto out_fail;
	}
	for (size_t i = 0; i < m->nblobs; i++) {
		const struct mfst_blob *b = &m->blobs[i];
		json_t *o = json_object();

		if (append(blobs, o) ||
		    put(o, "rank", json_integer(b->rank)) ||
		    put(o, "name", json_string(b->name)) ||
		    put(o, "file", json_integer((json_int_t)b->file)))
			goto out_fail;
	}
	if (mfst__globals_dump(m, root))
		goto out_fail;
	json_decref(files);
	json_decref(blobs);
	return root;
out_fail:
	json_decref(files);
	json_decref(blobs);
	json_decref(root);
	return NULL;
}

/* ,"tensors":[...]} : the table as text (through jansson, its objects,
 * dump and read-back took ~7 us a tensor of the commit).  Every string
 * was checked by mfst__validate. */
static void dump_tensors(const struct mfst *m, struct jtext *t)
{
	jtext_puts(t, ",\"tensors\":[");
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct mfst_tensor *x = &m->tensors[i];

		jtext_puts(t, i ? ",{\"group\":" : "{\"group\":");
		jtext_str(t, x->group);
		jtext_puts(t, ",\"rank\":");
		jtext_int(t, x->rank);
		jtext_puts(t, ",\"name\":");
		jtext_str(t, x->name);
		jtext_puts(t, ",\"file\":");
		jtext_int(t, (int64_t)x->file);
		jtext_puts(t, ",\"dtype\":");
		jtext_str(t, x->dtype);
		jtext_puts(t, ",\"shape\":");
		jtext_ints(t, x->shape, x->ndim);
		jtext_puts(t, ",\"begin\":");
		jtext_int(t, (int64_t)x->begin);
		jtext_puts(t, ",\"end\":");
		jtext_int(t, (int64_t)x->end);
		jtext_put(t, "}", 1);
	}
	jtext_puts(t, "]}\n");
}

int mfst_dump(const struct mfst *m, char **out, size_t *len)
{
	char ebuf[256];
	struct jtext t = { 0 };
	json_t *root;
	char *s;
	size_t n;

	if (!m || !out || !len)
		return -EINVAL;
	/* Never write a manifest that mfst_parse would refuse. */
	if (mfst__validate(m, ebuf, sizeof(ebuf)) < 0)
		return -EINVAL;
	root = dump_json(m);
	if (!root)
		return -ENOMEM;
	s = json_dumps(root, JSON_COMPACT);
	/* jansson 2.14 ignores some failed appends (a key's) and can return
	 * a truncated document when memory runs out: read it back. */
	if (s) {
		json_t *chk = json_loads(s, 0, NULL);
		int same = chk && json_equal(chk, root);
		json_decref(chk);
		if (!same) {
			free(s);
			s = NULL;
		}
	}
	json_decref(root);
	if (!s)
		return -ENOMEM;
	/* {...} less its '}', then the table, '}' and a newline */
	n = strlen(s);
	jtext_put(&t, s, n - 1);
	free(s);
	dump_tensors(m, &t);
	jtext_put(&t, "", 1);           /* NUL-terminated for its readers */
	if (t.nomem) {
		free(t.p);
		return -ENOMEM;
	}
	*out = t.p;
	*len = t.len - 1;
	return 0;
}

/* ---- parse ------------------------------------------------------------ */

void mfst_free(struct mfst *m)
{
	if (!m)
		return;
	mfst__v2_free(m);
	for (size_t i = 0; m->files && i < m->nfiles; i++) {
		free(m->files[i].path);
		free(m->files[i].object);
	}
	for (size_t i = 0; m->tensors && i < m->ntensors; i++) {
		free(m->tensors[i].group);
		free(m->tensors[i].name);
	}
	for (size_t i = 0; m->blobs && i < m->nblobs; i++)
		free(m->blobs[i].name);
	free(m->files);
	free(m->tensors);
	free(m->blobs);
	free(m->job);
	free(m);
}

/* Typed field readers: each fills err as "<where>.<key>: ..." on failure. */
int mfst__get_str(const json_t *o, const char *where, const char *key,
		  const char **out, char *err, size_t errlen)
{
	const json_t *v = json_object_get(o, key);

	if (!json_is_string(v))
		return errbuf_fail(err, errlen, -EINVAL, "%s%s: %s", where, key,
				   v ? "must be a string" : "missing");
	*out = json_string_value(v);
	return 0;
}

static int get_dup(const json_t *o, const char *where, const char *key,
		   char **out, char *err, size_t errlen)
{
	const char *s = NULL;
	int ret = mfst__get_str(o, where, key, &s, err, errlen);

	if (ret < 0)
		return ret;
	*out = strdup(s);
	if (!*out) {
		errbuf_fail(err, errlen, -EINVAL, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

/* Into a fixed buffer; strings that do not fit are malformed anyway. */
static int get_fixed(const json_t *o, const char *where, const char *key,
		     char *buf, size_t size, char *err, size_t errlen)
{
	const char *s = NULL;
	int ret = mfst__get_str(o, where, key, &s, err, errlen);

	if (ret < 0)
		return ret;
	if (strlen(s) >= size)
		return errbuf_fail(err, errlen, -EINVAL, "%s%s: too long", where, key);
	strcpy(buf, s);
	return 0;
}

int mfst__get_int(const json_t *o, const char *where, const char *key,
		  int64_t min, int64_t max, int64_t *out,
		  char *err, size_t errlen)
{
	const json_t *v = json_object_get(o, key);
	json_int_t i;

	if (!json_is_integer(v))
		return errbuf_fail(err, errlen, -EINVAL, "%s%s: %s", where, key,
				   v ? "must be an integer" : "missing");
	i = json_integer_value(v);
	if (i < min || i > max)
		return errbuf_fail(err, errlen, -EINVAL, "%s%s: %lld out of range", where, key,
				   (long long)i);
	*out = i;
	return 0;
}

static int get_array(const json_t *o, const char *key, const json_t **out,
		     char *err, size_t errlen)
{
	const json_t *v = json_object_get(o, key);

	if (!json_is_array(v))
		return errbuf_fail(err, errlen, -EINVAL, "%s: %s", key,
				   v ? "must be an array" : "missing");
	*out = v;
	return 0;
}

static int parse_file(const json_t *o, size_t i, struct mfst_file *f,
		      char *err, size_t errlen)
{
	char where[48];
	int64_t v = 0;
	int ret;

	snprintf(where, sizeof(where), "files[%zu].", i);
	if (!json_is_object(o))
		return errbuf_fail(err, errlen, -EINVAL, "files[%zu]: must be an object", i);
	if ((ret = get_dup(o, where, "path", &f->path, err, errlen)) < 0 ||
	    (ret = mfst__get_int(o, where, "size", 0, INT64_MAX, &v, err, errlen)) < 0)
		return ret;
	/* exactly one digest key; its form is checked with the rest
	 * (mfst_check.c), the format version too */
	f->digest.alg = -1;
	for (int a = 0; a < DIGEST_NALGS; a++) {
		if (!json_object_get(o, digest_key(a)))
			continue;
		if (f->digest.alg >= 0)
			return errbuf_fail(err, errlen, -EINVAL, "%s%s, %s: only one digest "
					   "per file", where, digest_key(f->digest.alg),
					   digest_key(a));
		if ((ret = get_fixed(o, where, digest_key(a), f->digest.hex,
				     sizeof(f->digest.hex), err, errlen)) < 0)
			return ret;
		f->digest.alg = a;
	}
	if (f->digest.alg < 0)
		return errbuf_fail(err, errlen, -EINVAL, "%ssha256: missing (nor %s)", where,
				   digest_key(DIGEST_XXH3_128));
	f->size = (uint64_t)v;
	/* (its form: mfst_check.c) */
	if (json_object_get(o, "object") &&
	    (ret = get_dup(o, where, "object", &f->object, err, errlen)) < 0)
		return ret;
	return mfst__file_csum_parse(o, i, f, err, errlen);
}

static int parse_tensor(const json_t *o, size_t i, struct mfst_tensor *t,
			char *err, size_t errlen)
{
	const json_t *shape;
	char where[48];
	int64_t rank = 0, file = 0, b = 0, e = 0;
	int ret;

	snprintf(where, sizeof(where), "tensors[%zu].", i);
	if (!json_is_object(o))
		return errbuf_fail(err, errlen, -EINVAL, "tensors[%zu]: must be an object", i);
	if ((ret = get_dup(o, where, "group", &t->group, err, errlen)) < 0 ||
	    (ret = mfst__get_int(o, where, "rank", 0, MFST_MAX_WORLD - 1, &rank,
			   err, errlen)) < 0 ||
	    (ret = get_dup(o, where, "name", &t->name, err, errlen)) < 0 ||
	    (ret = mfst__get_int(o, where, "file", 0, INT64_MAX, &file, err,
			   errlen)) < 0 ||
	    (ret = get_fixed(o, where, "dtype", t->dtype, sizeof(t->dtype),
			     err, errlen)) < 0 ||
	    (ret = mfst__get_int(o, where, "begin", 0, INT64_MAX, &b, err,
			   errlen)) < 0 ||
	    (ret = mfst__get_int(o, where, "end", 0, INT64_MAX, &e, err,
			   errlen)) < 0)
		return ret;
	shape = json_object_get(o, "shape");
	if (!json_is_array(shape) || json_array_size(shape) > SAFET_MAX_NDIM)
		return errbuf_fail(err, errlen, -EINVAL,
				   "%sshape: must be an array of at most %d integers",
				   where, SAFET_MAX_NDIM);
	t->ndim = (int)json_array_size(shape);
	for (int d = 0; d < t->ndim; d++) {
		const json_t *v = json_array_get(shape, (size_t)d);

		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return errbuf_fail(err, errlen, -EINVAL,
					   "%sshape[%d]: must be a non-negative integer",
					   where, d);
		t->shape[d] = json_integer_value(v);
	}
	t->rank = (int)rank;
	t->file = (uint64_t)file > SIZE_MAX ? SIZE_MAX : (size_t)file;
	t->begin = (uint64_t)b;
	t->end = (uint64_t)e;
	return 0;
}

static int parse_blob(const json_t *o, size_t i, struct mfst_blob *bl,
		      char *err, size_t errlen)
{
	char where[48];
	int64_t rank = 0, file = 0;
	int ret;

	snprintf(where, sizeof(where), "blobs[%zu].", i);
	if (!json_is_object(o))
		return errbuf_fail(err, errlen, -EINVAL, "blobs[%zu]: must be an object", i);
	if ((ret = mfst__get_int(o, where, "rank", 0, MFST_MAX_WORLD - 1, &rank,
			   err, errlen)) < 0 ||
	    (ret = get_dup(o, where, "name", &bl->name, err, errlen)) < 0 ||
	    (ret = mfst__get_int(o, where, "file", 0, INT64_MAX, &file, err,
			   errlen)) < 0)
		return ret;
	bl->rank = (int)rank;
	bl->file = (uint64_t)file > SIZE_MAX ? SIZE_MAX : (size_t)file;
	return 0;
}

/* mfst_parse of json; with *fast (n tensors read by mfst__fast_table from
 * a manifest whose table json has empty), those are the tensors, taken
 * into the manifest (*fast NULL once taken). */
static int parse_doc(const char *json, size_t len, struct mfst_tensor **fast, size_t nfast,
		     struct mfst **out, char *err, size_t errlen)
{
	const json_t *files = NULL, *tensors = NULL, *blobs = NULL;
	const char *s = NULL;
	struct mfst *m = NULL;
	json_error_t jerr;
	json_t *root;
	int64_t v = 0;
	int ret;

	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return errbuf_fail(err, errlen, -EINVAL, "not valid JSON: %s (line %d, column %d)",
				   jerr.text, jerr.line, jerr.column);
	if (!json_is_object(root)) {
		ret = errbuf_fail(err, errlen, -EINVAL, "not a JSON object");
		goto out_free;
	}
	/* Identify the format and its version before anything else, so a
	 * newer manifest is refused as such rather than as malformed. */
	if ((ret = mfst__get_str(root, "", "format", &s, err, errlen)) < 0)
		goto out_free;
	if (strcmp(s, MFST_FORMAT) != 0) {
		ret = errbuf_fail(err, errlen, -EINVAL,
				  "format: '%.32s' is not '%s'", s, MFST_FORMAT);
		goto out_free;
	}
	if ((ret = mfst__get_int(root, "", "format_version", INT64_MIN, INT64_MAX, &v,
			   err, errlen)) < 0)
		goto out_free;
	if (v > MFST_VERSION) {
		ret = errbuf_fail(err, errlen, -EINVAL, "format_version %lld is newer than this "
				  "ckpt supports (%d); upgrade ckpt to read it",
				  (long long)v, MFST_VERSION);
		goto out_free;
	}
	if (v < 1) {
		ret = errbuf_fail(err, errlen, -EINVAL,
				  "format_version %lld is invalid", (long long)v);
		goto out_free;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		ret = -ENOMEM;
		errbuf_fail(err, errlen, -EINVAL, "out of memory");
		goto out_free;
	}
	m->format_version = (int)v;
	if ((ret = get_fixed(root, "", "status", m->status, sizeof(m->status),
			     err, errlen)) < 0 ||
	    (ret = get_dup(root, "", "job", &m->job, err, errlen)) < 0 ||
	    (ret = get_fixed(root, "", "run_id", m->run_id, sizeof(m->run_id),
			     err, errlen)) < 0 ||
	    (ret = get_fixed(root, "", "txid", m->txid, sizeof(m->txid),
			     err, errlen)) < 0)
		goto out_free;
	if ((ret = mfst__get_int(root, "", "step", 0, INT64_MAX, &v, err, errlen)) < 0)
		goto out_free;
	m->step = (uint64_t)v;
	if ((ret = mfst__get_int(root, "", "world_size", 1, MFST_MAX_WORLD, &v, err,
			   errlen)) < 0)
		goto out_free;
	m->world_size = (int)v;
	if ((ret = mfst__get_int(root, "", "created_unix", INT64_MIN, INT64_MAX,
			   &m->created_unix, err, errlen)) < 0)
		goto out_free;
	if ((ret = get_array(root, "files", &files, err, errlen)) < 0 ||
	    (ret = get_array(root, "tensors", &tensors, err, errlen)) < 0 ||
	    (ret = get_array(root, "blobs", &blobs, err, errlen)) < 0)
		goto out_free;

	/* Counts are set with the allocation so mfst_free can walk them. */
	m->files = calloc(json_array_size(files) + 1, sizeof(*m->files));
	if (fast) {
		m->tensors = *fast;
		*fast = NULL;
	} else {
		m->tensors = calloc(json_array_size(tensors) + 1, sizeof(*m->tensors));
	}
	m->blobs = calloc(json_array_size(blobs) + 1, sizeof(*m->blobs));
	m->ntensors = fast ? nfast : json_array_size(tensors);
	if (!m->files || !m->tensors || !m->blobs) {
		ret = -ENOMEM;
		errbuf_fail(err, errlen, -EINVAL, "out of memory");
		goto out_free;
	}
	m->nfiles = json_array_size(files);
	m->nblobs = json_array_size(blobs);
	for (size_t i = 0; i < m->nfiles; i++) {
		if ((ret = parse_file(json_array_get(files, i), i, &m->files[i],
				      err, errlen)) < 0)
			goto out_free;
		m->bytes_written += m->files[i].size;
	}
	/* a figure for people, not a check: a value that cannot be right
	 * (not 0..the files' bytes) reads as absent */
	v = json_integer_value(json_object_get(root, "bytes_written"));
	if (json_is_integer(json_object_get(root, "bytes_written")) && v >= 0 &&
	    (uint64_t)v <= m->bytes_written)
		m->bytes_written = (uint64_t)v;
	for (size_t i = 0; !fast && i < m->ntensors; i++)
		if ((ret = parse_tensor(json_array_get(tensors, i), i,
					&m->tensors[i], err, errlen)) < 0)
			goto out_free;
	for (size_t i = 0; i < m->nblobs; i++)
		if ((ret = parse_blob(json_array_get(blobs, i), i, &m->blobs[i],
				      err, errlen)) < 0)
			goto out_free;
	if ((ret = mfst__globals_parse(root, m, err, errlen)) < 0 ||
	    (ret = mfst__validate(m, err, errlen)) < 0)
		goto out_free;
	json_decref(root);
	*out = m;
	return 0;
out_free:
	mfst_free(m);
	json_decref(root);
	return ret;
}

int mfst_parse_fast = 1;
unsigned long mfst_parse_fast_count;

int mfst_parse(const char *json, size_t len, struct mfst **out,
	       char *err, size_t errlen)
{
	struct mfst_tensor *fast = NULL;
	size_t nfast = 0, rest_len = 0;
	char *rest = NULL;

	if (!json || !out)
		return errbuf_fail(err, errlen, -EINVAL, "bad arguments");
	if (len > MFST_MAX_BYTES)
		return errbuf_fail(err, errlen, -EINVAL, "larger than %u bytes", MFST_MAX_BYTES);
	/* the tensor table read fast; on any failure the whole manifest is
	 * read again by jansson, which finds and words the error */
	if (mfst_parse_fast && mfst__fast_table(json, len, &fast, &nfast, &rest, &rest_len) == 0) {
		int r = parse_doc(rest, rest_len, &fast, nfast, out, err, errlen);
		free(rest);
		mfst__fast_table_free(fast, nfast);   /* NULL once taken */
		if (r == 0) {
			__atomic_fetch_add(&mfst_parse_fast_count, 1, __ATOMIC_RELAXED);
			return 0;
		}
		if (err && errlen)
			err[0] = '\0';
	}
	return parse_doc(json, len, NULL, 0, out, err, errlen);
}

/* ---- files ------------------------------------------------------------ */

int mfst_read_named(int dirfd, const char *name, struct mfst **out, char *err,
		    size_t errlen)
{
	char ebuf[512];
	struct stat st;
	size_t got = 0;
	char *buf;
	ssize_t r;
	int fd, ret;

	if (!out)
		return -EINVAL;
	/* O_NONBLOCK: a FIFO in its place must not hang recovery. */
	fd = openat(dirfd, name,
		    O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		ret = -errno;
		if (err && errlen)
			snprintf(err, errlen, "%s: cannot open: %s", name,
				 ret == -ELOOP ? "is a symbolic link" : strerror(-ret));
		return ret;
	}
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		if (err && errlen)
			snprintf(err, errlen, "%s: cannot stat: %s", name,
				 strerror(-ret));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > MFST_MAX_BYTES) {
		ret = errbuf_fail(err, errlen, -EINVAL, "%s: %s", name,
				  S_ISREG(st.st_mode) ? "too large" : "not a regular file");
		goto out_close;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		ret = -ENOMEM;
		if (err && errlen)
			snprintf(err, errlen, "%s: out of memory", name);
		goto out_close;
	}
	/* Read up to the size seen by fstat; a file still growing is not a
	 * finished manifest and will fail to parse. */
	while (got < (size_t)st.st_size) {
		r = read(fd, buf + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = -errno;
			if (err && errlen)
				snprintf(err, errlen, "%s: read error: %s", name,
					 strerror(-ret));
			goto out_free_buf;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	ret = mfst_parse(buf, got, out, ebuf, sizeof(ebuf));
	if (ret < 0 && err && errlen)
		snprintf(err, errlen, "%s: %s", name, ebuf);
out_free_buf:
	free(buf);
out_close:
	close(fd);
	return ret;
}

int mfst_read(int dirfd, struct mfst **out, char *err, size_t errlen)
{
	return mfst_read_named(dirfd, MFST_NAME, out, err, errlen);
}

int mfst_write(int dirfd, const struct mfst *m)
{
	size_t len;
	char *buf;
	int ret = mfst_dump(m, &buf, &len);

	if (ret < 0)
		return ret;
	/* through the I/O table (fault injection reaches it); a torn
	 * manifest is never left under its name */
	ret = io_write_file(dirfd, MFST_NAME, MFST_NAME ".tmp", buf, len,
			    IO_FILE_NOREPLACE, 0640);
	free(buf);
	return ret;
}
