/* test_commit.c - the commit module (commit.h) and the store's publish and
 * prune under it, on real small steps in a private temp directory: parts
 * from an rsave and over the wire, the manifest of several ranks, publish
 * (ok / failed / outcome unknown), the check of reported files, pruning,
 * and both on a file system that leaves d_type DT_UNKNOWN. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testhelp.h"
#include "commit.h"
#include "io.h"
#include "layout.h"
#include "mfst.h"
#include "rsave.h"
#include "safet.h"
#include "digest.h"
#include "store.h"
#include "verify.h"

#define WORLD 2
#define RUN   "0123456789abcdef0123456789abcdef"

/* readdir() as XFS without ftype answers it: every d_type DT_UNKNOWN, while
 * hide_d_type is set.  Defined here, it takes the place of libc's for the
 * daemon's objects linked into this test. */
static int hide_d_type;
static unsigned hidden_entries;

struct dirent *readdir(DIR *d)
{
	static struct dirent *(*real)(DIR *);
	struct dirent *e;

	if (!real)
		real = (struct dirent *(*)(DIR *))dlsym(RTLD_NEXT, "readdir");
	e = real(d);
	if (e && hide_d_type) {
		e->d_type = DT_UNKNOWN;
		hidden_entries++;
	}
	return e;
}

struct tj {                        /* a job directory in a temp root */
	char root[64];
	int  rootfd, jobfd;
};

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

static int tj_open(struct tj *t)
{
	strcpy(t->root, "/tmp/ckpt_commit_XXXXXX");
	if (!mkdtemp(t->root))
		return -1;
	t->rootfd = open(t->root, O_RDONLY | O_DIRECTORY);
	if (t->rootfd < 0 || mkdirat(t->rootfd, "job", 0700) < 0)
		return -1;
	t->jobfd = openat(t->rootfd, "job", O_RDONLY | O_DIRECTORY);
	return t->jobfd < 0 ? -1 : 0;
}

static void tj_close(struct tj *t)
{
	close(t->jobfd);
	close(t->rootfd);
	nftw(t->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Rank r's part of step: one model shard (two tensors) and one blob,
 * written into the staging directory sfd. */
static struct commit_part *make_part(int sfd, int r, uint64_t step)
{
	static const int64_t shw[] = { 4, 4 }, shb[] = { 4 };
	const struct safet_entry e[] = {
		{ "w", "F32", 2, shw, 64 }, { "b", "F32", 1, shb, 16 },
	};
	struct commit_part *p = calloc(1, sizeof(*p));
	char path[LAYOUT_PATH_MAX], blob[64], rd[32];
	uint64_t offs[3];
	uint8_t *hdr, data[80];
	size_t hlen;
	int fd;

	if (!p)
		return NULL;
	p->rank = r;
	p->files = calloc(2, sizeof(*p->files));
	p->tensors = calloc(2, sizeof(*p->tensors));
	p->blobs = calloc(1, sizeof(*p->blobs));
	if (safet_header_build(e, 2, NULL, 64, &hdr, &hlen, offs) < 0)
		return NULL;
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i + r * 3 + step);
	mkdirat(sfd, "model", 0700);
	layout_shard_path("model", r, 0, path, sizeof(path));
	fd = openat(sfd, path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || write(fd, hdr, hlen) != (ssize_t)hlen ||
	    write(fd, data, sizeof(data)) != (ssize_t)sizeof(data))
		return NULL;
	close(fd);
	p->files[0].path = strdup(path);
	digest_file(sfd, path, DIGEST_SHA256, &p->files[0].digest, &p->files[0].size);
	for (int i = 0; i < 2; i++) {
		struct mfst_tensor *t = &p->tensors[i];
		t->group = strdup("model");
		t->name = strdup(e[i].name);
		strcpy(t->dtype, "F32");
		t->ndim = e[i].ndim;
		memcpy(t->shape, e[i].shape, sizeof(int64_t) * (size_t)e[i].ndim);
		t->begin = hlen + offs[i];
		t->end = hlen + offs[i + 1];
	}
	free(hdr);
	mkdirat(sfd, LAYOUT_EXTRA, 0700);
	layout_rank_dir(r, rd, sizeof(rd));
	snprintf(blob, sizeof(blob), LAYOUT_EXTRA "/%s", rd);
	mkdirat(sfd, blob, 0700);
	layout_blob_path("rng", r, path, sizeof(path));
	fd = openat(sfd, path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || write(fd, "rng", 3) != 3)
		return NULL;
	close(fd);
	p->files[1].path = strdup(path);
	digest_file(sfd, path, DIGEST_SHA256, &p->files[1].digest, &p->files[1].size);
	p->blobs[0].name = strdup("rng");
	p->blobs[0].file = 1;
	p->nfiles = 2;
	p->ntensors = 2;
	p->nblobs = 1;
	return p;
}

struct tstep {
	struct commit_part *parts[WORLD];
	struct commit_step  cs;
	char                name[96];
	int                 sfd;
};

/* A staging directory of step with every rank's files, ready to publish. */
static int stage(struct tj *t, uint64_t step, struct tstep *s)
{
	memset(s, 0, sizeof(*s));
	store_new_id(s->cs.txid);
	if (store_staging_create(t->jobfd, step, s->cs.txid, &s->sfd, s->name,
				 sizeof(s->name)) < 0)
		return -1;
	for (int r = 0; r < WORLD; r++)
		if (!(s->parts[r] = make_part(s->sfd, r, step)))
			return -1;
	s->cs.job = "job";
	strcpy(s->cs.run_id, RUN);
	s->cs.step = step;
	s->cs.world_size = WORLD;
	s->cs.parts = s->parts;
	return 0;
}

static void unstage(struct tstep *s)
{
	for (int r = 0; r < WORLD; r++)
		commit_part_free(s->parts[r]);
	close(s->sfd);
}

static int publish(struct tj *t, uint64_t step, enum commit_outcome *oc, char *msg,
		   size_t msglen)
{
	struct tstep s;
	int r;

	if (stage(t, step, &s) < 0)
		return -999;
	r = commit_publish(t->jobfd, s.sfd, s.name, &s.cs, oc, msg, msglen);
	unstage(&s);
	return r;
}

static int test_manifest_of_parts(void)
{
	struct tj t;
	struct tstep s;
	struct mfst m;
	char msg[256];

	CHECK_EQ(tj_open(&t), 0);
	CHECK_EQ(stage(&t, 5, &s), 0);
	CHECK_EQ(commit_manifest(&s.cs, &m, msg, sizeof(msg)), 0);
	CHECK_EQ(m.nfiles, 4);
	CHECK_EQ(m.ntensors, 4);
	CHECK_EQ(m.nblobs, 2);
	/* rank 1's indexes are rebased past rank 0's files */
	CHECK_EQ(m.tensors[2].rank, 1);
	CHECK_EQ(m.tensors[2].file, 2);
	CHECK_EQ(m.blobs[1].file, 3);
	CHECK(strcmp(m.files[2].path, "model/rank_00001.safetensors") == 0);
	CHECK_EQ(m.step, 5);
	CHECK(strcmp(m.status, "committed") == 0);
	/* SHA-256 files only: format 2, readable by a ckpt that knows no 3 */
	CHECK_EQ(m.format_version, 2);
	commit_manifest_release(&m);
	/* one XXH3-128 file makes it format 3 (mfst.h) */
	s.parts[1]->files[1].digest.alg = DIGEST_XXH3_128;
	CHECK_EQ(commit_manifest(&s.cs, &m, msg, sizeof(msg)), 0);
	CHECK_EQ(m.format_version, 3);
	commit_manifest_release(&m);
	s.parts[1]->files[1].digest.alg = DIGEST_SHA256;
	/* a missing rank is refused, not published short */
	commit_part_free(s.parts[1]);
	s.parts[1] = NULL;
	CHECK_EQ(commit_manifest(&s.cs, &m, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "rank 1 has no part"));
	unstage(&s);
	tj_close(&t);
	return 0;
}

static int test_publish_ok(void)
{
	enum commit_outcome oc = COMMIT_FAILED;
	struct mfst *m = NULL;
	struct tj t;
	char msg[256] = "";
	uint64_t latest = 0;
	int fd;

	CHECK_EQ(tj_open(&t), 0);
	CHECK_EQ(publish(&t, 7, &oc, msg, sizeof(msg)), 0);
	CHECK_EQ(oc, COMMIT_OK);
	CHECK_EQ(layout_latest_read(t.jobfd, &latest), 0);
	CHECK_EQ(latest, 7);
	fd = openat(t.jobfd, "iter_000000007", O_RDONLY | O_DIRECTORY);
	CHECK(fd >= 0);
	CHECK_EQ(verify_checkpoint(fd, VERIFY_FULL, 1, &m, msg, sizeof(msg)), 0);
	CHECK_EQ(m->world_size, WORLD);
	CHECK(strcmp(m->run_id, RUN) == 0);
	mfst_free(m);
	close(fd);
	/* an older step published later does not move latest back */
	CHECK_EQ(publish(&t, 3, &oc, msg, sizeof(msg)), 0);
	CHECK_EQ(layout_latest_read(t.jobfd, &latest), 0);
	CHECK_EQ(latest, 7);
	tj_close(&t);
	return 0;
}

/* A reported file that is gone (or changed size) fails the publish before
 * anything is visible. */
static int test_publish_file_gone(void)
{
	enum commit_outcome oc = COMMIT_OK;
	struct tj t;
	struct tstep s;
	char msg[256] = "";

	CHECK_EQ(tj_open(&t), 0);
	CHECK_EQ(stage(&t, 9, &s), 0);
	CHECK_EQ(unlinkat(s.sfd, "model/rank_00001.safetensors", 0), 0);
	CHECK_EQ(commit_publish(t.jobfd, s.sfd, s.name, &s.cs, &oc, msg, sizeof(msg)),
		 -ENOENT);
	CHECK_EQ(oc, COMMIT_FAILED);
	CHECK(strstr(msg, "publish failed: file model/rank_00001.safetensors of rank 1 is gone"));
	CHECK(faccessat(t.jobfd, "iter_000000009", F_OK, 0) < 0);
	CHECK(faccessat(t.jobfd, LAYOUT_LATEST, F_OK, 0) < 0);
	CHECK(faccessat(s.sfd, MFST_NAME, F_OK, 0) < 0);
	/* a truncated one */
	int fd = openat(s.sfd, "extra/rank_00000/rng", O_WRONLY | O_TRUNC);
	CHECK(fd >= 0);
	close(fd);
	s.parts[1]->nfiles = 0;       /* (rank 1 no longer reports the gone one) */
	s.parts[1]->ntensors = 0;
	s.parts[1]->nblobs = 0;
	CHECK_EQ(commit_publish(t.jobfd, s.sfd, s.name, &s.cs, &oc, msg, sizeof(msg)), -EIO);
	CHECK(strstr(msg, "file extra/rank_00000/rng of rank 0 changed: 0 bytes, 3 reported"));
	CHECK(faccessat(t.jobfd, "iter_000000009", F_OK, 0) < 0);
	s.parts[1]->nfiles = 2;
	s.parts[1]->ntensors = 2;
	s.parts[1]->nblobs = 1;
	unstage(&s);
	tj_close(&t);
	return 0;
}

/* Faults at each I/O of the publish: before the rename nothing is visible
 * (failed), after it the outcome is unknown and the step is on disk. */
static int test_publish_faults(void)
{
	int failed = 0, unknown = 0, ok = 0;

	for (int n = 1; n < 40 && !ok; n++) {
		enum commit_outcome oc;
		struct tj t;
		char spec[32], msg[256] = "", iter[32];
		int r;

		CHECK_EQ(tj_open(&t), 0);
		snprintf(spec, sizeof(spec), "fsync:%d:-5", n);
		CHECK_EQ(io_fault_setup(spec), 0);
		r = publish(&t, 11, &oc, msg, sizeof(msg));
		CHECK(r != -999);
		layout_iter_name(11, iter, sizeof(iter));
		if (r == 0) {
			CHECK_EQ(io_fault_fired(), 0);
			ok = 1;
		} else if (oc == COMMIT_FAILED) {
			CHECK_EQ(r, -EIO);
			CHECK(strncmp(msg, "publish failed: ", 16) == 0);
			CHECK(faccessat(t.jobfd, iter, F_OK, 0) < 0);
			failed++;
		} else {
			CHECK_EQ(oc, COMMIT_UNKNOWN);
			CHECK(strncmp(msg, "outcome unknown after publish: ", 31) == 0);
			CHECK(faccessat(t.jobfd, iter, F_OK, 0) == 0);
			unknown++;
		}
		tj_close(&t);
	}
	io_fault_setup("");
	CHECK(ok);
	CHECK(failed > 0);
	CHECK(unknown > 0);
	return 0;
}

/* How many of the fsyncs of a publish are of the staging directories:
 * fail the nth fsync for n = 1, 2, ... until one is not theirs. */
static int staging_dir_fsyncs(void)
{
	int n;

	for (n = 1; n < 40; n++) {
		enum commit_outcome oc;
		struct tj t;
		char spec[32], msg[256] = "";

		if (tj_open(&t) < 0)
			return -1;
		snprintf(spec, sizeof(spec), "fsync:%d:-5", n);
		io_fault_setup(spec);
		publish(&t, 13, &oc, msg, sizeof(msg));
		io_fault_setup("");
		tj_close(&t);
		if (!strstr(msg, "fsync of the staging directories"))
			break;
	}
	return n - 1;
}

/* Without d_type the publish still fsyncs every staging directory (model/,
 * extra/, extra/rank_N/ and the staging directory itself) before the
 * manifest, and start-up recovery still repairs the job. */
static int test_dt_unknown(void)
{
	struct store_job_info ji;
	struct tj t;
	char txid[33], name[96], msg[256];
	int want, got, sfd, jobfd;

	want = staging_dir_fsyncs();
	CHECK_EQ(want, 2 + WORLD + 1);
	hide_d_type = 1;
	hidden_entries = 0;
	got = staging_dir_fsyncs();
	hide_d_type = 0;
	CHECK(hidden_entries > 0);
	CHECK_EQ(got, want);

	/* a leftover staging directory of a job is removed at start-up */
	CHECK_EQ(tj_open(&t), 0);
	CHECK_EQ(store_job_open(t.rootfd, "rec", getuid(), 1, &ji, &jobfd, msg, sizeof(msg)), 0);
	store_new_id(txid);
	CHECK_EQ(store_staging_create(jobfd, 4, txid, &sfd, name, sizeof(name)), 0);
	close(sfd);
	hide_d_type = 1;
	hidden_entries = 0;
	CHECK_EQ(store_recover(t.rootfd), 0);
	hide_d_type = 0;
	CHECK(hidden_entries > 0);
	CHECK(faccessat(jobfd, name, F_OK, AT_SYMLINK_NOFOLLOW) < 0);
	close(jobfd);
	tj_close(&t);
	return 0;
}

/* keep_last: only this run's, never the one latest names, oldest first. */
static int test_prune(void)
{
	enum commit_outcome oc;
	struct tj t;
	char msg[256];
	uint64_t *gone = NULL, latest;

	CHECK_EQ(tj_open(&t), 0);
	for (uint64_t s = 1; s <= 4; s++)
		CHECK_EQ(publish(&t, s, &oc, msg, sizeof(msg)), 0);
	CHECK_EQ(store_prune(t.jobfd, RUN, 2, &gone), 2);
	CHECK(gone[0] == 2 || gone[0] == 1);
	free(gone);
	CHECK(faccessat(t.jobfd, "iter_000000001", F_OK, 0) < 0);
	CHECK(faccessat(t.jobfd, "iter_000000002", F_OK, 0) < 0);
	CHECK_EQ(faccessat(t.jobfd, "iter_000000003", F_OK, 0), 0);
	CHECK_EQ(faccessat(t.jobfd, "iter_000000004", F_OK, 0), 0);
	/* another run's checkpoints are not ours to delete */
	CHECK_EQ(commit_prune(t.jobfd, "job", "ffffffffffffffffffffffffffffffff", 1, 4), 0);
	CHECK_EQ(faccessat(t.jobfd, "iter_000000003", F_OK, 0), 0);
	/* latest names 3 (rolled back by hand): kept beyond keep */
	CHECK_EQ(layout_latest_write(t.jobfd, 3), 0);
	CHECK_EQ(commit_prune(t.jobfd, "job", RUN, 1, 4), 0);
	CHECK_EQ(faccessat(t.jobfd, "iter_000000003", F_OK, 0), 0);
	CHECK_EQ(layout_latest_read(t.jobfd, &latest), 0);
	CHECK_EQ(latest, 3);
	/* the step just committed is kept even when newer ones fill keep:
	 * 5 committed after 6 (issue 11) is not pruned at once */
	CHECK_EQ(publish(&t, 6, &oc, msg, sizeof(msg)), 0);
	CHECK_EQ(publish(&t, 5, &oc, msg, sizeof(msg)), 0);
	CHECK_EQ(commit_prune(t.jobfd, "job", RUN, 1, 5), 2);    /* 3 and 4 */
	CHECK_EQ(faccessat(t.jobfd, "iter_000000005", F_OK, 0), 0);
	CHECK_EQ(faccessat(t.jobfd, "iter_000000006", F_OK, 0), 0);
	CHECK(faccessat(t.jobfd, "iter_000000004", F_OK, 0) < 0);
	tj_close(&t);
	return 0;
}

static int test_part_from_rsave(void)
{
	struct wfile files[2] = { { .path = "model/rank_00003.safetensors", .size = 100 },
				  { .path = "extra/rank_00003/rng", .size = 3 } };
	struct rs_tensor tens[1] = { { .group = "model", .name = "w", .dtype = "F32",
				       .ndim = 1, .shape = { 4 }, .file = 0,
				       .begin = 84, .end = 100 } };
	struct rs_blob blobs[1] = { { .name = "rng", .file = 1 } };
	struct rsave rs = { .rank = 3, .files = files, .nfiles = 2, .tensors = tens,
			    .ntensors = 1, .blobs = blobs, .nblobs = 1 };
	struct commit_part *p = NULL;

	memset(files[0].digest.hex, 'a', SHA_HEX_LEN);
	memset(files[1].digest.hex, 'b', SHA_HEX_LEN);
	CHECK_EQ(commit_part_from_rsave(&rs, &p), 0);
	CHECK_EQ(p->rank, 3);
	CHECK_EQ(p->nfiles, 2);
	CHECK(p->files[0].path != files[0].path);       /* copied */
	CHECK(strcmp(p->files[1].path, "extra/rank_00003/rng") == 0);
	CHECK_EQ(p->tensors[0].end, 100);
	CHECK_EQ(p->blobs[0].file, 1);
	commit_part_free(p);
	commit_part_free(NULL);
	return 0;
}

/* The wire form: what goes out comes back the same; what is malformed or
 * would leave the staging directory is refused. */
static int test_part_wire(void)
{
	struct tj t;
	struct tstep s;
	struct commit_part *back = NULL;
	json_t *o = NULL, *o2 = NULL;
	char msg[256];
	static const char *const bad[] = {
		"{\"rank\":0,\"files\":[[\"../../etc/passwd\",3,\"%s\"]],\"tensors\":[],\"blobs\":[]}",
		"{\"rank\":0,\"files\":[[\"/abs\",3,\"%s\"]],\"tensors\":[],\"blobs\":[]}",
		"{\"rank\":0,\"files\":[[\"a/b\",3,\"%.10s\"]],\"tensors\":[],\"blobs\":[]}",
		"{\"rank\":0,\"files\":[[\"a/b\",-1,\"%s\"]],\"tensors\":[],\"blobs\":[]}",
		"{\"rank\":0,\"files\":[[\"a/b\",3,\"%s\"]],\"tensors\":[],\"blobs\":[[\"rng\",1]]}",
		"{\"rank\":0,\"files\":[[\"a/b\",3,\"%s\"]],\"tensors\":[[\"g\",\"w\",0,\"F32\",[4],9,8]],\"blobs\":[]}",
		"{\"rank\":-1,\"files\":[],\"tensors\":[],\"blobs\":[]}",
		"{\"rank\":0,\"files\":[],\"tensors\":[]}",
	};
	char hex[SHA_HEX_LEN + 1];

	CHECK_EQ(tj_open(&t), 0);
	CHECK_EQ(stage(&t, 1, &s), 0);
	CHECK_EQ(commit_part_to_json(s.parts[1], &o), 0);
	CHECK_EQ(commit_part_from_json(o, &back, msg, sizeof(msg)), 0);
	CHECK_EQ(commit_part_to_json(back, &o2), 0);
	CHECK(json_equal(o, o2));
	CHECK_EQ(back->rank, 1);
	CHECK_EQ(back->ntensors, 2);
	CHECK(strcmp(back->files[0].digest.hex, s.parts[1]->files[0].digest.hex) == 0);
	CHECK_EQ(back->tensors[1].begin, s.parts[1]->tensors[1].begin);
	json_decref(o);
	json_decref(o2);
	commit_part_free(back);
	/* an XXH3-128 digest travels with its key; SHA-256 ones without */
	s.parts[1]->files[0].digest = (struct digest){ DIGEST_XXH3_128,
						       "00112233445566778899aabbccddeeff" };
	CHECK_EQ(commit_part_to_json(s.parts[1], &o), 0);
	CHECK(strcmp(json_string_value(json_array_get(json_array_get(json_object_get(o, "files"),
								     0), 5)), "xxh3_128") == 0);
	CHECK_EQ(json_array_size(json_array_get(json_object_get(o, "files"), 1)), 5);
	CHECK_EQ(commit_part_from_json(o, &back, msg, sizeof(msg)), 0);
	CHECK(digest_eq(&back->files[0].digest, &s.parts[1]->files[0].digest));
	CHECK_EQ(back->files[1].digest.alg, DIGEST_SHA256);
	commit_part_free(back);
	/* a 64-digit hex under "xxh3_128", or an unknown key: refused */
	json_array_set_new(json_array_get(json_object_get(o, "files"), 0), 2,
			   json_string(s.parts[1]->files[1].digest.hex));
	back = NULL;
	CHECK_EQ(commit_part_from_json(o, &back, msg, sizeof(msg)), -EINVAL);
	json_array_set_new(json_array_get(json_object_get(o, "files"), 0), 2,
			   json_string("00112233445566778899aabbccddeeff"));
	json_array_set_new(json_array_get(json_object_get(o, "files"), 0), 5, json_string("md5"));
	CHECK_EQ(commit_part_from_json(o, &back, msg, sizeof(msg)), -EINVAL);
	CHECK(back == NULL);
	json_decref(o);
	memset(hex, 'c', SHA_HEX_LEN);
	hex[SHA_HEX_LEN] = '\0';
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char txt[512];
		snprintf(txt, sizeof(txt), bad[i], hex);
		o = json_loads(txt, 0, NULL);
		CHECK(o);
		back = NULL;
		if (commit_part_from_json(o, &back, msg, sizeof(msg)) != -EINVAL) {
			fprintf(stderr, "    accepted: %s\n", txt);
			return 1;
		}
		CHECK(back == NULL);
		CHECK(strstr(msg, "malformed part"));
		json_decref(o);
	}
	unstage(&s);
	tj_close(&t);
	return 0;
}

/* A part of rank r holding one piece of global tensor model/w, in the wire
 * form: dtype, global shape, offset, shape, replica index and count, and
 * whether r wrote it. */
static struct commit_part *piece_part(int r, const char *dtype, const char *gshape,
				      const char *off, const char *shape, int ri, int rc,
				      int written)
{
	char txt[1024], hex[SHA_HEX_LEN + 1], msg[256];
	struct commit_part *p = NULL;
	json_t *o;

	memset(hex, 'a', SHA_HEX_LEN);
	hex[SHA_HEX_LEN] = '\0';
	snprintf(txt, sizeof(txt), "{\"rank\":%d,\"files\":[[\"model/rank_%05d.safetensors\","
		 "4096,\"%s\",1048576,[7]]],\"tensors\":[],\"blobs\":[],\"pieces\":"
		 "[[\"model\",\"w\",\"%s\",%s,%s,%s,%d,%d,%d,0,128,%d]]}", r, r, hex, dtype,
		 gshape, off, shape, ri, rc, written, written ? 128 + 64 : 128);
	o = json_loads(txt, 0, NULL);
	if (o && commit_part_from_json(o, &p, msg, sizeof(msg)) < 0)
		fprintf(stderr, "    %s: %s\n", txt, msg);
	json_decref(o);
	return p;
}

/* The table of globals from two ranks' pieces: layouts that tile are
 * accepted (one piece per replica group, under its writer), the others
 * refused with the tensor named and the reason. */
static int test_global_layouts(void)
{
	static const struct {
		const char *d0, *o0, *s0, *d1, *o1, *s1;
		int ri0, rc0, w0, ri1, rc1, w1;
		const char *why;          /* NULL: accepted */
		size_t npieces;
	} c[] = {
		/* DDP: the same piece on both, written by rank 0 */
		{ "F32", "[0,0]", "[4,4]", "F32", "[0,0]", "[4,4]", 0, 2, 1, 1, 2, 0, NULL, 1 },
		/* rows */
		{ "F32", "[0,0]", "[2,4]", "F32", "[2,0]", "[2,4]", 0, 1, 1, 0, 1, 1, NULL, 2 },
		{ "F32", "[0,0]", "[4,4]", "F32", "[0,0]", "[4,4]", 0, 2, 1, 1, 2, 1,
		  "ranks 0 and 1 both wrote it", 0 },
		{ "F32", "[0,0]", "[4,4]", "F32", "[0,0]", "[4,4]", 0, 2, 0, 1, 2, 0,
		  "none of ranks", 0 },
		{ "F32", "[0,0]", "[4,4]", "F32", "[0,0]", "[4,4]", 0, 2, 1, 0, 1, 0,
		  "held by 2 rank(s), but rank 1 says replica 0 of 1", 0 },
		{ "F32", "[0,0]", "[4,4]", "F32", "[0,0]", "[4,4]", 0, 2, 1, 0, 2, 0,
		  "replica_index 0 twice", 0 },
		{ "F32", "[0,0]", "[2,4]", "F16", "[2,0]", "[2,4]", 0, 1, 1, 0, 1, 1,
		  "ranks disagree on it: rank 0 registers F32 [4, 4], rank 1 F16 [4, 4]", 0 },
		{ "F32", "[0,0]", "[2,4]", "F32", "[3,0]", "[1,4]", 0, 1, 1, 0, 1, 1,
		  "leave a gap in its global shape [4, 4]", 0 },
		{ "F32", "[0,0]", "[2,4]", "F32", "[1,0]", "[3,4]", 0, 1, 1, 0, 1, 1,
		  "the pieces of ranks 0 (at offset [0, 0]) and 1 overlap", 0 },
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct commit_part *p[2] = {
			piece_part(0, c[i].d0, "[4,4]", c[i].o0, c[i].s0, c[i].ri0, c[i].rc0, c[i].w0),
			piece_part(1, c[i].d1, "[4,4]", c[i].o1, c[i].s1, c[i].ri1, c[i].rc1, c[i].w1),
		};
		struct commit_step cs = { "job", RUN, RUN, 1, 2, p };
		struct mfst m;
		char msg[512] = "";
		int r;

		CHECK(p[0] && p[1]);
		if (i == 0) {      /* the wire form of pieces round-trips */
			struct commit_part *back = NULL;
			json_t *o = NULL, *o2 = NULL;
			CHECK_EQ(commit_part_to_json(p[1], &o), 0);
			CHECK_EQ(commit_part_from_json(o, &back, msg, sizeof(msg)), 0);
			CHECK_EQ(commit_part_to_json(back, &o2), 0);
			CHECK(json_equal(o, o2));
			CHECK_EQ(back->npieces, 1);
			CHECK_EQ(back->pieces[0].replica_index, 1);
			CHECK_EQ(back->pieces[0].written, 0);
			json_decref(o);
			json_decref(o2);
			commit_part_free(back);
		}
		r = commit_manifest(&cs, &m, msg, sizeof(msg));
		if (!c[i].why) {
			if (r != 0)
				fprintf(stderr, "    case %zu: %s\n", i, msg);
			CHECK_EQ(r, 0);
			CHECK_EQ(m.nglobals, 1);
			CHECK_EQ(m.npieces, c[i].npieces);
			CHECK_EQ(m.pieces[0].t.rank, 0);
			CHECK_EQ(m.pieces[0].t.file, 0);          /* rank 0's first file */
			if (c[i].npieces == 2)
				CHECK_EQ(m.pieces[1].t.file, 1);  /* rank 1's, after rank 0's */
			commit_manifest_release(&m);
		} else {
			CHECK_EQ(r, -EINVAL);
			if (!strstr(msg, c[i].why) || !strstr(msg, "global tensor model/w")) {
				fprintf(stderr, "    case %zu: '%s', wanted '%s'\n", i, msg, c[i].why);
				return 1;
			}
		}
		commit_part_free(p[0]);
		commit_part_free(p[1]);
	}
	return 0;
}

/* Empty pieces hold nothing: several ranks may have one at the same offset
 * (torch gives ranks past the rows an empty piece at the end), each saying
 * replica 0 of 1; so may every rank of an empty global tensor. */
static int test_global_empty_pieces(void)
{
	struct commit_part *p[3] = {
		piece_part(0, "F32", "[4,4]", "[0,0]", "[4,4]", 0, 1, 1),
		piece_part(1, "F32", "[4,4]", "[4,0]", "[0,4]", 0, 1, 1),
		piece_part(2, "F32", "[4,4]", "[4,0]", "[0,4]", 0, 1, 1),
	};
	struct commit_part *e[2] = {
		piece_part(0, "F32", "[0,4]", "[0,0]", "[0,4]", 0, 1, 1),
		piece_part(1, "F32", "[0,4]", "[0,0]", "[0,4]", 0, 1, 1),
	};
	struct commit_step cs = { "job", RUN, RUN, 1, 3, p };
	struct commit_step ce = { "job", RUN, RUN, 1, 2, e };
	struct mfst m;
	char msg[512] = "";

	CHECK(p[0] && p[1] && p[2] && e[0] && e[1]);
	if (commit_manifest(&cs, &m, msg, sizeof(msg)) != 0) {
		fprintf(stderr, "    %s\n", msg);
		return 1;
	}
	CHECK_EQ(m.nglobals, 1);
	CHECK_EQ(m.npieces, 2);
	commit_manifest_release(&m);
	if (commit_manifest(&ce, &m, msg, sizeof(msg)) != 0) {
		fprintf(stderr, "    %s\n", msg);
		return 1;
	}
	CHECK_EQ(m.npieces, 1);
	commit_manifest_release(&m);
	/* still one writer: empty pieces nobody wrote are refused */
	commit_part_free(e[1]);
	e[0]->pieces[0].written = 0;
	e[1] = piece_part(1, "F32", "[0,4]", "[0,0]", "[0,4]", 0, 1, 0);
	CHECK_EQ(commit_manifest(&ce, &m, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "held by 2 rank(s)") != NULL);
	for (int i = 0; i < 3; i++)
		commit_part_free(p[i]);
	commit_part_free(e[0]);
	commit_part_free(e[1]);
	return 0;
}

static const struct test tests[] = {
	{ "manifest_of_parts", test_manifest_of_parts },
	{ "publish_ok", test_publish_ok },
	{ "publish_file_gone", test_publish_file_gone },
	{ "publish_faults", test_publish_faults },
	{ "prune", test_prune },
	{ "part_from_rsave", test_part_from_rsave },
	{ "part_wire", test_part_wire },
	{ "dt_unknown", test_dt_unknown },
	{ "global_layouts", test_global_layouts },
	{ "global_empty_pieces", test_global_empty_pieces },
};

TEST_MAIN(tests)
