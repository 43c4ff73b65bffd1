/* test_mfst.c - manifest dump/parse/read/write, strict validation, and the
 * old-version fixtures in tests/fixtures (found via $CKPT_FIXTURES). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "testhelp.h"

#include "mfst.h"

#define HEXA "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HEXB "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define HEXC "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

static struct mfst_file files[] = {
	{ "model/rank_00000.safetensors", 200, { DIGEST_SHA256, HEXA }, 0, NULL, NULL },
	{ "model/rank_00001.safetensors", 200, { DIGEST_SHA256, HEXB }, 0, NULL, NULL },
	{ "extra/rank_00001/rng", 16, { DIGEST_SHA256, HEXC }, 0, NULL, NULL },
};
static struct mfst_tensor tensors[] = {
	{ "model", 0, "w", 0, "F32", 2, { 4, 4 }, 128, 192 },
	{ "model", 0, "b", 0, "BF16", 1, { 4 }, 192, 200 },
	{ "model", 1, "w", 1, "F32", 2, { 4, 4 }, 128, 192 },
	{ "model", 1, "e", 1, "U8", 1, { 0 }, 192, 192 },
};
static struct mfst_blob blobs[] = {
	{ 1, "rng", 2 },
};

/* A valid manifest made of static parts (nothing to free). */
static struct mfst base(void)
{
	struct mfst m = {
		.format_version = 1, .status = "committed", .job = "demo",
		.run_id = "0123456789abcdef0123456789abcdef",
		.txid = "fedcba9876543210fedcba9876543210",
		.step = 500, .world_size = 2, .created_unix = 1790000000,
		.files = files, .nfiles = 3,
		.tensors = tensors, .ntensors = 4,
		.blobs = blobs, .nblobs = 1,
	};
	return m;
}

static char *base_json(void)
{
	struct mfst m = base();
	char *s = NULL;
	size_t len;

	if (mfst_dump(&m, &s, &len) < 0)
		return NULL;
	return s;
}

/* s with the first `from` replaced by `to`; NULL if absent. */
static char *subst(const char *s, const char *from, const char *to)
{
	const char *p = strstr(s, from);
	size_t a, b, c;
	char *r;

	if (!p)
		return NULL;
	a = (size_t)(p - s);
	b = strlen(to);
	c = strlen(p + strlen(from));
	r = malloc(a + b + c + 1);
	memcpy(r, s, a);
	memcpy(r + a, to, b);
	memcpy(r + a + b, p + strlen(from), c + 1);
	return r;
}

static int test_dump_format(void)
{
	char *s = base_json();
	size_t n;

	CHECK(s != NULL);
	n = strlen(s);
	CHECK(s[n - 1] == '\n');
	CHECK(strchr(s, '\n') == s + n - 1);        /* compact: one line */
	CHECK(strncmp(s, "{\"format\":\"ckpt-manifest\",\"format_version\":1,"
		      "\"status\":\"committed\",\"job\":\"demo\",", 73) == 0);
	CHECK(strstr(s, "\"files\":[{\"path\":\"model/rank_00000.safetensors\","
		     "\"size\":200,\"sha256\":\"" HEXA "\"}"));
	CHECK(strstr(s, "{\"group\":\"model\",\"rank\":0,\"name\":\"w\",\"file\":0,"
		     "\"dtype\":\"F32\",\"shape\":[4,4],\"begin\":128,\"end\":192}"));
	CHECK(strstr(s, "\"blobs\":[{\"rank\":1,\"name\":\"rng\",\"file\":2}]"));
	free(s);
	return 0;
}

static int test_roundtrip(void)
{
	struct mfst m0 = base(), *m = NULL;
	char *s = base_json(), *s2 = NULL, err[256];
	size_t len;

	CHECK(s != NULL);
	CHECK_EQ(mfst_parse(s, strlen(s), &m, err, sizeof(err)), 0);
	CHECK_EQ(m->format_version, 1);
	CHECK(strcmp(m->status, "committed") == 0);
	CHECK(strcmp(m->job, "demo") == 0);
	CHECK(strcmp(m->run_id, m0.run_id) == 0);
	CHECK(strcmp(m->txid, m0.txid) == 0);
	CHECK_EQ(m->step, 500);
	CHECK_EQ(m->world_size, 2);
	CHECK_EQ(m->created_unix, 1790000000);
	CHECK_EQ(m->nfiles, 3);
	CHECK_EQ(m->ntensors, 4);
	CHECK_EQ(m->nblobs, 1);
	for (size_t i = 0; i < m->nfiles; i++) {
		CHECK(strcmp(m->files[i].path, files[i].path) == 0);
		CHECK_EQ(m->files[i].size, files[i].size);
		CHECK(strcmp(m->files[i].digest.hex, files[i].digest.hex) == 0);
	}
	for (size_t i = 0; i < m->ntensors; i++) {
		CHECK(strcmp(m->tensors[i].group, tensors[i].group) == 0);
		CHECK(strcmp(m->tensors[i].name, tensors[i].name) == 0);
		CHECK_EQ(m->tensors[i].rank, tensors[i].rank);
		CHECK_EQ(m->tensors[i].file, tensors[i].file);
		CHECK(strcmp(m->tensors[i].dtype, tensors[i].dtype) == 0);
		CHECK_EQ(m->tensors[i].ndim, tensors[i].ndim);
		CHECK_EQ(m->tensors[i].shape[0], tensors[i].shape[0]);
		CHECK_EQ(m->tensors[i].begin, tensors[i].begin);
		CHECK_EQ(m->tensors[i].end, tensors[i].end);
	}
	CHECK(strcmp(m->blobs[0].name, "rng") == 0);
	CHECK_EQ(m->blobs[0].rank, 1);
	CHECK_EQ(m->blobs[0].file, 2);
	/* dump(parse(dump(m))) == dump(m) */
	CHECK_EQ(mfst_dump(m, &s2, &len), 0);
	CHECK_EQ(len, strlen(s));
	CHECK(strcmp(s, s2) == 0);
	mfst_free(m);
	free(s);
	free(s2);
	mfst_free(NULL);
	return 0;
}

/* Tensor names that need escaping (names have no control characters),
 * written by the text writer (jtext):
 * both readers (the fast one and jansson) give back the same names, and
 * jansson accepts the whole document. */
static int test_dump_escapes(void)
{
	static const char *names[] = { "a\"b", "back\\slash", "\\u0041", "\"\\\"",
				       "\xc3\xa9t\xc3\xa9 \xe2\x82\xac", "\"tensors\":[]}", "/" };
	struct mfst_tensor ts[7];
	struct mfst m0 = base(), *m = NULL;
	char *s = NULL, err[256];
	size_t len;
	json_t *j;

	for (size_t i = 0; i < 7; i++) {
		ts[i] = tensors[1];          /* model, rank 0, BF16 [4], 192..200 */
		ts[i].name = (char *)names[i];
	}
	m0.tensors = ts;
	m0.ntensors = 7;
	CHECK_EQ(mfst_dump(&m0, &s, &len), 0);
	CHECK((j = json_loads(s, 0, NULL)) != NULL);
	CHECK_EQ(json_array_size(json_object_get(j, "tensors")), 7);
	json_decref(j);
	for (int fast = 0; fast <= 1; fast++) {
		mfst_parse_fast = fast;
		CHECK_EQ(mfst_parse(s, len, &m, err, sizeof(err)), 0);
		CHECK_EQ(m->ntensors, 7);
		for (size_t i = 0; i < 7; i++)
			CHECK(!strcmp(m->tensors[i].name, names[i]));
		mfst_free(m);
	}
	mfst_parse_fast = 1;
	free(s);
	return 0;
}

static int test_forward_compatible(void)
{
	char *s = base_json(), *t, err[256];
	struct mfst *m = NULL;

	t = subst(s, "{", "{\"future_field\":{\"x\":[1,2]},");
	CHECK(t != NULL);
	CHECK_EQ(mfst_parse(t, strlen(t), &m, err, sizeof(err)), 0);
	mfst_free(m);
	free(t);
	free(s);
	return 0;
}

/* A file's "object" (an object store's manifest): kept through a dump and
 * a parse, and its step read back. */
static int test_object(void)
{
	struct mfst m = base(), *got = NULL;
	struct mfst_file f[3];
	char *s = NULL, err[256];
	size_t len;
	uint64_t step;

	memcpy(f, files, sizeof(f));
	f[0].object = "iter_000000400/model/rank_00000.safetensors";
	m.files = f;
	CHECK_EQ(mfst_dump(&m, &s, &len), 0);
	CHECK_EQ(mfst_parse(s, len, &got, err, sizeof(err)), 0);
	CHECK(got->files[0].object && !strcmp(got->files[0].object, f[0].object));
	CHECK(got->files[1].object == NULL);
	CHECK_EQ(mfst_object_step(got, &got->files[0], &step), 0);
	CHECK_EQ(step, 400);
	CHECK_EQ(mfst_object_step(got, &got->files[1], &step), -EINVAL);
	mfst_free(got);
	free(s);
	return 0;
}

static const struct {
	const char *from, *to, *why;
} bad[] = {
	{ "\"format\":\"ckpt-manifest\"", "\"format\":\"other\"", "format" },
	{ "\"format\":\"ckpt-manifest\",", "", "format: missing" },
	{ "\"format_version\":1", "\"format_version\":0", "format_version 0" },
	{ "\"format_version\":1", "\"format_version\":\"1\"", "format_version: must be an integer" },
	{ "\"format_version\":1", "\"format_version\":5", "newer" },
	{ "\"status\":\"committed\",", "", "status: missing" },
	{ "\"status\":\"committed\"", "\"status\":1", "status: must be a string" },
	{ "\"status\":\"committed\"", "\"status\":\"Committed\"", "status" },
	{ "\"status\":\"committed\"", "\"status\":\"committedcommitted\"", "status: too long" },
	{ "\"job\":\"demo\"", "\"job\":\"../x\"", "job" },
	{ "\"job\":\"demo\"", "\"job\":\"\"", "job" },
	{ "\"run_id\":\"0123", "\"run_id\":\"ABCD", "run_id" },
	{ "\"run_id\":\"0123", "\"run_id\":\"123", "run_id" },
	{ "\"txid\":\"fedc", "\"txid\":\"fedcx", "txid" },
	{ "\"step\":500", "\"step\":-1", "step" },
	{ "\"step\":500", "\"step\":500.0", "step" },
	{ "\"world_size\":2", "\"world_size\":0", "world_size" },
	{ "\"world_size\":2", "\"world_size\":100001", "world_size" },
	{ "\"created_unix\":1790000000", "\"created_unix\":null", "created_unix" },
	{ "\"blobs\":[", "\"blobz\":[", "blobs: missing" },
	{ "\"files\":[", "\"files\":{\"a\":1},\"x\":[", "files: must be an array" },
	/* paths */
	{ "model/rank_00000.safetensors", "../rank_00000.safetensors", "files[0].path" },
	{ "model/rank_00000.safetensors", "/model/rank_00000.safetensors", "files[0].path: is an absolute path" },
	{ "model/rank_00000.safetensors", "model/rank_0000.safetensors", "files[0].path" },
	{ "model/rank_00000.safetensors", "model/rank_000000.safetensors", "files[0].path" },
	{ "model/rank_00000.safetensors", "model/rank_00000.safetensorsx", "files[0].path" },
	{ "model/rank_00000.safetensors", "model/x/rank_00000.safetensors", "files[0].path" },
	{ "model/rank_00000.safetensors", "model//rank_00000.safetensors", "files[0].path" },
	{ "model/rank_00000.safetensors", ".model/rank_00000.safetensors", "files[0].path" },
	{ "model/rank_00000.safetensors", "model/rank_-0000.safetensors", "files[0].path" },
	{ "model/rank_00000.safetensors", "model/rank_00002.safetensors", "rank 2 >= world_size" },
	{ "model/rank_00001.safetensors", "model/rank_00000.safetensors", "duplicate" },
	{ "extra/rank_00001/rng", "extra/rank_00001/../rng", "files[2].path" },
	{ "extra/rank_00001/rng", "extra/rank_00001/", "files[2].path" },
	{ "extra/rank_00001/rng", "extra/rank_00001/.rng", "files[2].path" },
	{ "extra/rank_00001/rng", "extra/rank_1/rng", "files[2].path" },
	{ "\"path\":\"model/rank_00000.safetensors\",", "", "files[0].path: missing" },
	{ "\"size\":200", "\"size\":-200", "files[0].size" },
	/* "object": an older step's object of the same path */
#define OBJ(o) "\"path\":\"model/rank_00000.safetensors\",\"object\":" o ","
	{ "\"path\":\"model/rank_00000.safetensors\",",
	  OBJ("\"iter_000000500/model/rank_00000.safetensors\""), "files[0].object" },
	{ "\"path\":\"model/rank_00000.safetensors\",",
	  OBJ("\"iter_000000400/model/rank_00001.safetensors\""), "files[0].object" },
	{ "\"path\":\"model/rank_00000.safetensors\",",
	  OBJ("\"iter_400/model/rank_00000.safetensors\""), "files[0].object" },
	{ "\"path\":\"model/rank_00000.safetensors\",",
	  OBJ("\"../iter_000000400/model/rank_00000.safetensors\""), "files[0].object" },
	{ "\"path\":\"model/rank_00000.safetensors\",", OBJ("400"), "files[0].object" },
	{ "\"sha256\":\"aaaa", "\"sha256\":\"AAAA", "files[0].sha256" },
	{ "\"sha256\":\"aaaa", "\"sha256\":\"aaa", "files[0].sha256" },
	{ "\"sha256\":\"aaaa", "\"sha256\":\"aaaaa", "files[0].sha256" },
	{ "\"files\":[", "\"files\":[1,", "files[0]: must be an object" },
	/* tensors */
	{ "\"name\":\"w\",\"file\":0", "\"name\":\"w\",\"file\":9", "out of range" },
	{ "\"name\":\"w\",\"file\":0", "\"name\":\"w\",\"file\":2", "is not the model shard" },
	{ "\"group\":\"model\",\"rank\":0", "\"group\":\"model\",\"rank\":1", "is not the model shard of rank 1" },
	{ "\"group\":\"model\",\"rank\":0", "\"group\":\"optim\",\"rank\":0", "is not the optim shard" },
	{ "\"group\":\"model\",\"rank\":0", "\"group\":\"mo/del\",\"rank\":0", "tensors[0].group" },
	{ "\"group\":\"model\",\"rank\":0", "\"group\":\"model\",\"rank\":2", "tensors[0].rank" },
	{ "\"group\":\"model\",\"rank\":0", "\"group\":\"model\",\"rank\":-1", "tensors[0].rank" },
	{ "\"dtype\":\"F32\"", "\"dtype\":\"F33\"", "tensors[0].dtype" },
	{ "\"dtype\":\"F32\"", "\"dtype\":\"FLOAT32XYZ\"", "tensors[0].dtype: too long" },
	{ "\"shape\":[4,4]", "\"shape\":[4,5]", "need 80" },
	{ "\"shape\":[4,4]", "\"shape\":[4,-4]", "shape[1]" },
	{ "\"shape\":[4,4]", "\"shape\":4", "shape" },
	{ "\"shape\":[4,4]", "\"shape\":[1,1,1,1,1,1,1,1,16]", "shape" },
	{ "\"shape\":[4,4]", "\"shape\":[4611686018427387904,4611686018427387904]", "too large" },
	{ "\"begin\":128,\"end\":192", "\"begin\":192,\"end\":128", "outside" },
	{ "\"begin\":192,\"end\":200", "\"begin\":200,\"end\":208", "outside" },
	{ "\"name\":\"w\"", "\"name\":\"w\\u0001\"", "control character" },
	{ "\"name\":\"w\"", "\"name\":\"w\\u0000\"", "JSON" },
	{ "\"name\":\"w\"", "\"name\":\"__metadata__\"", "reserved" },
	{ "\"name\":\"w\"", "\"name\":\"\"", "tensors[0].name" },
	{ "\"name\":\"b\"", "\"name\":\"w\"", "duplicate tensor 'w'" },
	{ "\"tensors\":[", "\"tensors\":[null,", "tensors[0]: must be an object" },
	/* blobs */
	{ "\"name\":\"rng\"", "\"name\":\"rng2\"", "is not the path of blob" },
	{ "\"rank\":1,\"name\":\"rng\"", "\"rank\":0,\"name\":\"rng\"", "is not the path of blob" },
	{ "\"name\":\"rng\",\"file\":2", "\"name\":\"rng\",\"file\":1", "is not the path of blob" },
	{ "\"name\":\"rng\",\"file\":2", "\"name\":\"rng\",\"file\":3", "out of range" },
	{ "\"name\":\"rng\"", "\"name\":\"../rng\"", "blobs[0].name" },
	{ "\"blobs\":[", "\"blobs\":[{\"rank\":1,\"name\":\"rng\",\"file\":2},", "duplicate blob" },
	/* JSON itself */
	{ "{", "{\"step\":1,", "JSON" },                  /* duplicate key */
	{ "{", "[", "JSON" },
	{ "\n", "x\n", "JSON" },
};

static int test_rejects(void)
{
	char *s = base_json(), err[256];
	int failed = 0;

	CHECK(s != NULL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct mfst *m = (struct mfst *)0x1;
		char *t = subst(s, bad[i].from, bad[i].to);
		int ret;

		if (!t) {
			fprintf(stderr, "    bad[%zu]: '%s' not in base\n", i, bad[i].from);
			failed = 1;
			continue;
		}
		err[0] = '\0';
		ret = mfst_parse(t, strlen(t), &m, err, sizeof(err));
		if (ret != -EINVAL || m != (struct mfst *)0x1 ||
		    !strstr(err, bad[i].why)) {
			fprintf(stderr, "    bad[%zu] (%s -> %s): ret %d, err '%s', wanted '%s'\n",
				i, bad[i].from, bad[i].to, ret, err, bad[i].why);
			failed = 1;
		}
		free(t);
	}
	free(s);
	return failed;
}

/* Format 2: chunk checksums and global tensors (the seed in the fuzz
 * corpus), read and round-tripped; broken ones refused with the reason. */
#define FIXTURE_V2 "tests/fuzz/corpus/mfst/%s"

static int test_format2(void)
{
	static const struct { const char *from, *to, *why; } bad2[] = {
		{ "[1,2,3,4,5]", "[1,2,3,4]", "files[0].crc32c: 4 checksums for 4160 bytes" },
		{ "[1,2,3,4,5]", "[1,2,3,4,-5]", "crc32c[4]: must be a 32-bit integer" },
		{ "\"chunk_size\":1024,\"crc32c\":[1,2,3,4,5]", "\"crc32c\":[1,2,3,4,5]",
		  "files[0].chunk_size: missing" },
		{ "\"offset\":[2,0]", "\"offset\":[1,0]", "(model/w): its pieces overlap" },
		{ "\"shape\":[4,8]", "\"shape\":[5,8]", "(model/w): its pieces leave a gap" },
		{ "\"shape\":[4,8]", "\"shape\":[3,8]", "(model/w): its pieces leave its shape" },
		{ "{\"rank\":1,\"file\":1,\"offset\"", "{\"rank\":0,\"file\":1,\"offset\"",
		  "pieces[1].file: 'model/rank_00001.safetensors' is not model/rank_00000" },
		{ "\"begin\":4096,\"end\":4160}]", "\"begin\":4096,\"end\":4161}]",
		  "pieces[1]: begin/end do not hold its shape" },
		{ "\"offset\":[0,0]", "\"offset\":[0]", "pieces[0].offset, shape: 2 dims each" },
		{ "\"globals\":[", "\"globals\":[{\"group\":\"model\",\"name\":\"w\","
		  "\"dtype\":\"U8\",\"shape\":[],\"pieces\":[]},", "leave a gap" },
	};
	char path[256], buf[8192], err[256], *dump = NULL;
	struct mfst *m = NULL, *m2 = NULL;
	FILE *f;
	size_t n, dlen;

	snprintf(path, sizeof(path), FIXTURE_V2, "44c859a3ebf9892460fbb7a78658e1dd91dfd82e");
	f = fopen(path, "rb");
	CHECK(f != NULL);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	CHECK_EQ(mfst_parse(buf, n, &m, err, sizeof(err)), 0);
	CHECK_EQ(m->format_version, 2);
	CHECK_EQ(m->files[1].chunk_size, 1024);
	CHECK_EQ(m->files[1].crc32c[4], 10);
	CHECK_EQ(m->nglobals, 1);
	CHECK_EQ(m->npieces, 2);
	CHECK(!strcmp(m->pieces[1].t.name, "w") && m->pieces[1].t.rank == 1);
	CHECK_EQ(m->pieces[1].offset[0], 2);
	CHECK_EQ(m->pieces[1].t.shape[0], 2);
	CHECK_EQ(mfst_dump(m, &dump, &dlen), 0);
	CHECK_EQ(mfst_parse(dump, dlen, &m2, err, sizeof(err)), 0);
	CHECK_EQ(m2->npieces, 2);
	CHECK_EQ(m2->files[0].crc32c[2], 3);
	mfst_free(m2);
	mfst_free(m);
	free(dump);
	for (size_t i = 0; i < sizeof(bad2) / sizeof(bad2[0]); i++) {
		char *t = subst(buf, bad2[i].from, bad2[i].to);
		int ret;
		CHECK(t != NULL);
		err[0] = '\0';
		m = NULL;
		ret = mfst_parse(t, strlen(t), &m, err, sizeof(err));
		free(t);
		if (ret != -EINVAL || m || !strstr(err, bad2[i].why)) {
			fprintf(stderr, "    bad2[%zu]: ret %d, err '%s', wanted '%s'\n", i, ret, err,
				bad2[i].why);
			return 1;
		}
	}
	return 0;
}

static int test_dump_refuses_invalid(void)
{
	struct mfst m = base();
	struct mfst_tensor t[4];
	char *s = (char *)"x";
	size_t len = 7;

	m.status[0] = '\0';
	CHECK_EQ(mfst_dump(&m, &s, &len), -EINVAL);
	m = base();
	m.job = "a/b";
	CHECK_EQ(mfst_dump(&m, &s, &len), -EINVAL);
	m = base();
	memcpy(t, tensors, sizeof(t));
	t[1].end = 300;
	m.tensors = t;
	CHECK_EQ(mfst_dump(&m, &s, &len), -EINVAL);
	CHECK(strcmp(s, "x") == 0 && len == 7);
	CHECK_EQ(mfst_dump(NULL, &s, &len), -EINVAL);
	return 0;
}

static const char *fixtures(void)
{
	const char *d = getenv("CKPT_FIXTURES");

	return d && *d ? d : "tests/fixtures";
}

static char *slurp(const char *name, size_t *len)
{
	char path[512];
	FILE *f;
	char *buf;
	long n;

	snprintf(path, sizeof(path), "%s/%s", fixtures(), name);
	f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return NULL;
	}
	fclose(f);
	buf[n] = '\0';
	*len = (size_t)n;
	return buf;
}

/* A v1 manifest as an old ckpt wrote it must keep loading. */
static int test_fixture_v1(void)
{
	struct mfst *m = NULL;
	char err[256];
	size_t len;
	char *s = slurp("manifest_v1.json", &len);

	if (!s)
		SKIP("tests/fixtures/manifest_v1.json not found (set CKPT_FIXTURES)");
	CHECK_EQ(mfst_parse(s, len, &m, err, sizeof(err)), 0);
	CHECK_EQ(m->format_version, 1);
	CHECK(strcmp(m->job, "demo") == 0);
	CHECK_EQ(m->step, 500);
	CHECK_EQ(m->world_size, 2);
	CHECK_EQ(m->nfiles, 5);
	CHECK_EQ(m->ntensors, 5);
	CHECK_EQ(m->nblobs, 2);
	CHECK(strcmp(m->files[3].path, "extra/rank_00000/rng") == 0);
	CHECK(strcmp(m->tensors[4].name, "step") == 0);
	CHECK_EQ(m->tensors[4].ndim, 0);
	CHECK_EQ(m->tensors[0].begin, 128);
	mfst_free(m);
	free(s);
	return 0;
}

/* A manifest from a newer ckpt is refused, and says so. */
static int test_fixture_v99(void)
{
	struct mfst *m = (struct mfst *)0x1;
	char err[256] = "";
	size_t len;
	char *s = slurp("manifest_v99.json", &len);

	if (!s)
		SKIP("tests/fixtures/manifest_v99.json not found (set CKPT_FIXTURES)");
	CHECK_EQ(mfst_parse(s, len, &m, err, sizeof(err)), -EINVAL);
	CHECK(m == (struct mfst *)0x1);
	CHECK(strstr(err, "format_version 99 is newer than this ckpt supports (4)"));
	free(s);
	return 0;
}

static int test_write_read(void)
{
	char dir[] = "/tmp/ckpt_mfst_XXXXXX", err[256];
	struct mfst m0 = base(), *m = NULL;
	int dfd;

	CHECK(mkdtemp(dir) != NULL);
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	CHECK(dfd >= 0);
	CHECK_EQ(mfst_read(dfd, &m, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, MFST_NAME));
	CHECK_EQ(mfst_write(dfd, &m0), 0);
	CHECK_EQ(mfst_write(dfd, &m0), -EEXIST);       /* never overwritten */
	CHECK_EQ(mfst_read(dfd, &m, err, sizeof(err)), 0);
	CHECK_EQ(m->ntensors, 4);
	mfst_free(m);
	m = NULL;

	/* A symlink in its place is not followed. */
	CHECK_EQ(unlinkat(dfd, MFST_NAME, 0), 0);
	CHECK_EQ(symlinkat("/etc/passwd", dfd, MFST_NAME), 0);
	CHECK_EQ(mfst_read(dfd, &m, err, sizeof(err)), -ELOOP);
	CHECK_EQ(mfst_write(dfd, &m0), -EEXIST);
	CHECK_EQ(unlinkat(dfd, MFST_NAME, 0), 0);

	/* Nor a directory; nor garbage. */
	CHECK_EQ(mkdirat(dfd, MFST_NAME, 0700), 0);
	CHECK_EQ(mfst_read(dfd, &m, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "not a regular file"));
	CHECK_EQ(unlinkat(dfd, MFST_NAME, AT_REMOVEDIR), 0);
	{
		int fd = openat(dfd, MFST_NAME, O_WRONLY | O_CREAT, 0600);
		CHECK(fd >= 0);
		CHECK_EQ(write(fd, "{\"format\":", 10), 10);
		close(fd);
	}
	CHECK_EQ(mfst_read(dfd, &m, err, sizeof(err)), -EINVAL);
	CHECK(strncmp(err, MFST_NAME ": ", strlen(MFST_NAME) + 2) == 0);
	CHECK(m == NULL);
	CHECK_EQ(unlinkat(dfd, MFST_NAME, 0), 0);

	/* Invalid content is refused before anything is created. */
	m0.world_size = 0;
	CHECK_EQ(mfst_write(dfd, &m0), -EINVAL);
	CHECK(faccessat(dfd, MFST_NAME, F_OK, AT_SYMLINK_NOFOLLOW) < 0);
	close(dfd);
	CHECK_EQ(rmdir(dir), 0);
	return 0;
}

/* Format 3: a file's digest is XXH3-128 under its own key, or SHA-256; the
 * key says which, one per file, and XXH3-128 needs format 3. */
#define X32 "0123456789abcdef0123456789abcdef"
static int test_xxh3_digest(void)
{
	struct mfst_file f3[3];
	struct mfst m0 = base(), *m = NULL;
	char *s = NULL, *t, err[256];
	size_t len;
	static const struct {
		const char *from, *to, *why;
	} rej[] = {
		/* the same file with a key of each */
		{ "\"xxh3_128\":\"" X32 "\"", "\"xxh3_128\":\"" X32 "\",\"sha256\":\"" HEXA "\"",
		  "files[0].sha256, xxh3_128: only one digest" },
		{ "\"xxh3_128\":\"" X32 "\"", "\"xxh3_128\":\"" X32 "aa\"",
		  "files[0].xxh3_128: must be 32 lowercase hex digits" },
		{ "\"xxh3_128\":\"" X32 "\"", "\"xxh3_128\":\"" HEXA "\"",
		  "files[0].xxh3_128: must be 32" },
		{ "\"xxh3_128\":\"" X32 "\"", "\"xxh3_128\":\"0123456789ABCDEF0123456789abcdef\"",
		  "files[0].xxh3_128: must be 32" },
		{ ",\"xxh3_128\":\"" X32 "\"", "", "files[0].sha256: missing (nor xxh3_128)" },
		{ "\"format_version\":3", "\"format_version\":2",
		  "files[0].xxh3_128: needs format_version 3" },
	};

	memcpy(f3, files, sizeof(f3));
	f3[0].digest = (struct digest){ DIGEST_XXH3_128, X32 };
	m0.format_version = 3;
	m0.files = f3;
	CHECK_EQ(mfst_dump(&m0, &s, &len), 0);
	CHECK(strstr(s, "\"size\":200,\"xxh3_128\":\"" X32 "\"}"));
	CHECK(strstr(s, "\"size\":200,\"sha256\":\"" HEXB "\"}"));   /* file 1: SHA-256 */
	CHECK_EQ(mfst_parse(s, len, &m, err, sizeof(err)), 0);
	CHECK_EQ(m->format_version, 3);
	CHECK_EQ(m->files[0].digest.alg, DIGEST_XXH3_128);
	CHECK(strcmp(m->files[0].digest.hex, X32) == 0);
	CHECK_EQ(m->files[1].digest.alg, DIGEST_SHA256);
	CHECK(strcmp(m->files[1].digest.hex, HEXB) == 0);
	mfst_free(m);
	for (size_t i = 0; i < sizeof(rej) / sizeof(rej[0]); i++) {
		m = NULL;
		CHECK((t = subst(s, rej[i].from, rej[i].to)) != NULL);
		err[0] = '\0';
		if (mfst_parse(t, strlen(t), &m, err, sizeof(err)) != -EINVAL ||
		    !strstr(err, rej[i].why)) {
			fprintf(stderr, "    rej[%zu]: err '%s', wanted '%s'\n", i, err, rej[i].why);
			free(t);
			free(s);
			return 1;
		}
		free(t);
	}
	free(s);
	/* nor is one written: XXH3-128 in a format-2 manifest */
	m0.format_version = 2;
	CHECK_EQ(mfst_dump(&m0, &s, &len), -EINVAL);
	return 0;
}

/* The fast tensor-table reader and jansson alone agree: the same result,
 * the same error, the same manifest (its dump); ckptd's own manifests are
 * read by the fast one. */
static int agree(const char *json, int fast)
{
	struct mfst *a = NULL, *b = NULL;
	char ea[256] = "", eb[256] = "", *da = NULL, *db = NULL;
	size_t la = 0, lb = 0;
	unsigned long before = mfst_parse_fast_count;
	int ra, rb, ok;

	if (!json)
		return 0;
	ra = mfst_parse(json, strlen(json), &a, ea, sizeof(ea));
	if ((mfst_parse_fast_count != before) != fast) {
		fprintf(stderr, "    fast reader %s: %.200s\n", fast ? "not used" : "used", json);
		mfst_free(a);
		return 0;
	}
	mfst_parse_fast = 0;
	rb = mfst_parse(json, strlen(json), &b, eb, sizeof(eb));
	mfst_parse_fast = 1;
	ok = ra == rb && !strcmp(ea, eb) &&
	     (ra < 0 || (mfst_dump(a, &da, &la) == 0 && mfst_dump(b, &db, &lb) == 0 &&
			 la == lb && !memcmp(da, db, la)));
	if (!ok)
		fprintf(stderr, "    %d '%s' against jansson's %d '%s'\n", ra, ea, rb, eb);
	free(da);
	free(db);
	mfst_free(a);
	mfst_free(b);
	return ok;
}

static int test_fast_agrees(void)
{
	char *s = base_json();
	static const char *const slow[][2] = {
		{ "\"name\":\"w\"", "\"name\":\"w\",\"x\":1" },          /* a key it ignores */
		{ "\"name\":\"w\"", "\"name\":\"w\",\"name\":\"v\"" }, /* twice */
		{ "\"name\":\"w\"", "\"name\": \"w\"" },                  /* white space */
		{ "\"name\":\"w\"", "\"name\":\"\\u0077\"" },           /* an escape */
		{ "\"name\":\"w\"", "\"name\":1" },
		{ "\"name\":\"w\",", "" },                                   /* missing */
		{ "\"rank\":0", "\"rank\":100000" },
		{ "\"rank\":0", "\"rank\":-1" },
		{ "\"rank\":0", "\"rank\":0.0" },
		{ "\"begin\":128", "\"begin\":0128" },
		{ "\"begin\":128", "\"begin\":99999999999999999999" },
		{ "\"dtype\":\"F32\"", "\"dtype\":\"F32F32F32\"" },
		{ "\"dtype\":\"F32\"", "\"dtype\":\"Q4\"" },
		{ "\"shape\":[4,4]", "\"shape\":[4,4,1,1,1,1,1,1,1]" },
		{ "\"shape\":[4,4]", "\"shape\":[4,-4]" },
		{ "\"end\":192}", "\"end\":200}" },                         /* the rules */
		{ "\"blobs\":[", "\"blobs\":[," },                          /* broken after */
		{ "\"tensors\":[{", "\"tensors\":[]x,\"y\":[{" },            /* after the table */
		{ "\"tensors\":[{", "\"tensors\":[{}]x,\"y\":[{" },
		{ "\"blobs\":[", "\"tensors\":[],\"blobs\":[" },           /* twice */
		{ "\"tensors\":[", "\"tensors\" :[" },
		{ "\"status\":\"committed\"", "\"status\":\"committed\",\"status\":\"x\"" },
		{ "\"step\":500", "\"step\":\"500\"" },
		{ "\"name\":\"w\"", "\"name\":\"w\xc3\x28\"" },          /* not UTF-8 */
		{ "\"name\":\"w\"", "\"name\":\"\xed\xa0\x80\"" },      /* a surrogate */
		{ "\"group\":\"model\"", "\"grou\":\"model\"" },            /* near a key */
		{ "\"group\":\"model\"", "\"groupx\":\"model\"" },
	};

	CHECK(s != NULL);
	CHECK(agree(s, 1));
	{
		char *t = subst(s, "\"name\":\"w\"", "\"name\":\"caf\xc3\xa9\"");
		CHECK(agree(t, 1));
		free(t);
		t = subst(s, "\"tensors\":[{", "\"tensors\":[],\"xtensors\":[{");
		CHECK(agree(t, 1));                /* an empty table, an unknown key */
		free(t);
	}
	for (size_t i = 0; i < sizeof(slow) / sizeof(slow[0]); i++) {
		char *t = subst(s, slow[i][0], slow[i][1]);
		CHECK(t != NULL);
		if (!agree(t, 0)) {
			fprintf(stderr, "    case %zu\n", i);
			free(t);
			free(s);
			return 1;
		}
		free(t);
	}
	free(s);
	return 0;
}

static const struct test tests[] = {
	{ "format2", test_format2 },
	{ "dump_format", test_dump_format },
	{ "roundtrip", test_roundtrip },
	{ "dump_escapes", test_dump_escapes },
	{ "forward_compatible", test_forward_compatible },
	{ "rejects", test_rejects },
	{ "xxh3_digest", test_xxh3_digest },
	{ "dump_refuses_invalid", test_dump_refuses_invalid },
	{ "fixture_v1", test_fixture_v1 },
	{ "fixture_v99", test_fixture_v99 },
	{ "write_read", test_write_read },
	{ "fast_agrees", test_fast_agrees },
	{ "object", test_object },
};

TEST_MAIN(tests)
