/* test_plan.c - plan_rsave (daemon/plan.c): a session's registered tensors
 * and blobs become one safetensors shard per group (groups sorted, tensors
 * in registration order), blob files holding copies, segments that cover
 * every file exactly, and chunks in file order; the headers parse and
 * agree with the tensor table the manifest is built from; the layout is
 * kept from save to save until the registrations change. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testhelp.h"
#include "plan.h"
#include "safet.h"
#include "session.h"

/* Test doubles of session.c's region references (the real ones live with
 * the sessions, which this test does not build): count the references. */
void region_ref(struct region_ref *rg)   { rg->refs++; }
void region_unref(struct region_ref *rg) { if (rg) rg->refs--; }

#define NT 5

struct fixture {
	struct session    s;
	struct region_ref rg[2];
	struct reg_tensor t[NT];
	struct blob       b[2];
	uint8_t           mem[2][8192];
	uint8_t           blobdata[2][100];
};

/* Tensors registered as optim.m, model.w, model.b (region 1), optim.v,
 * model.empty (0 bytes); blobs rng (100 bytes) and sched (0 bytes). */
static void fixture(struct fixture *f)
{
	static const struct { const char *g, *n; int ndim; int64_t d0, d1; int reg;
			      uint64_t off; } spec[NT] = {
		{ "optim", "m", 1, 256, 0, 0, 0 },
		{ "model", "w", 2, 16, 16, 0, 1024 },
		{ "model", "b", 1, 16, 0, 1, 0 },
		{ "optim", "v", 1, 256, 0, 1, 1024 },
		{ "model", "empty", 2, 0, 3, 0, 0 },
	};

	memset(f, 0, sizeof(*f));
	for (int r = 0; r < 2; r++) {
		f->rg[r].id = (uint64_t)r + 1;
		f->rg[r].r.base = f->mem[r];
		f->rg[r].r.size = sizeof(f->mem[r]);
		for (size_t i = 0; i < sizeof(f->mem[r]); i++)
			f->mem[r][i] = (uint8_t)(i * 31 + r);
	}
	for (int i = 0; i < NT; i++) {
		struct reg_tensor *t = &f->t[i];
		t->group = (char *)spec[i].g;
		t->name = (char *)spec[i].n;
		strcpy(t->dtype, "F32");
		t->ndim = spec[i].ndim;
		t->shape[0] = spec[i].d0;
		t->shape[1] = spec[i].d1;
		t->nbytes = 4 * (uint64_t)spec[i].d0 * (uint64_t)(spec[i].ndim == 2 ? spec[i].d1 : 1);
		t->rg = &f->rg[spec[i].reg];
		t->offset = spec[i].off;
	}
	memset(f->blobdata[0], 'r', sizeof(f->blobdata[0]));
	f->b[0] = (struct blob){ "rng", f->blobdata[0], 100 };
	f->b[1] = (struct blob){ "sched", f->blobdata[1], 0 };
	f->s.rank = 3;
	f->s.tensors = f->t;
	f->s.ntensors = NT;
	f->s.blobs = f->b;
	f->s.nblobs = 2;
}

static void unplan(struct rsave *rs)
{
	for (size_t i = 0; i < rs->nregions; i++)
		region_unref(rs->regions[i]);
	rs->staging_fd = -1;
	plan_free(rs);
}

static int test_files_and_tensors(void)
{
	struct fixture f;
	struct rsave rs;
	char msg[256] = "";

	fixture(&f);
	memset(&rs, 0, sizeof(rs));
	CHECK_EQ(plan_rsave(&rs, &f.s, 4096, msg, sizeof(msg)), 0);
	CHECK_EQ(rs.rank, 3);
	CHECK_EQ(rs.nfiles, 4);
	CHECK(strcmp(rs.files[0].path, "model/rank_00003.safetensors") == 0);
	CHECK(strcmp(rs.files[1].path, "optim/rank_00003.safetensors") == 0);
	CHECK(strcmp(rs.files[2].path, "extra/rank_00003/rng") == 0);
	CHECK(strcmp(rs.files[3].path, "extra/rank_00003/sched") == 0);
	/* tensors by group, registration order inside a group */
	CHECK_EQ(rs.ntensors, NT);
	CHECK(strcmp(rs.tensors[0].name, "w") == 0 && rs.tensors[0].file == 0);
	CHECK(strcmp(rs.tensors[1].name, "b") == 0 && rs.tensors[1].file == 0);
	CHECK(strcmp(rs.tensors[2].name, "empty") == 0 && rs.tensors[2].file == 0);
	CHECK(strcmp(rs.tensors[3].name, "m") == 0 && rs.tensors[3].file == 1);
	CHECK(strcmp(rs.tensors[4].name, "v") == 0 && rs.tensors[4].file == 1);
	CHECK_EQ(rs.nblobs, 2);
	CHECK(strcmp(rs.blobs[0].name, "rng") == 0 && rs.blobs[0].file == 2);
	CHECK_EQ(rs.files[2].size, 100);
	CHECK_EQ(rs.files[3].size, 0);
	/* both regions referenced, once each */
	CHECK_EQ(rs.nregions, 2);
	CHECK_EQ(f.rg[0].refs, 1);
	CHECK_EQ(f.rg[1].refs, 1);
	CHECK_EQ(rs.bytes_total, rs.files[0].size + rs.files[1].size + 100);
	unplan(&rs);
	plan_forget(&f.s);
	CHECK_EQ(f.rg[0].refs, 0);
	CHECK_EQ(f.rg[1].refs, 0);
	return 0;
}

/* Each shard's header (its first segment) parses, names the tensors with
 * the byte ranges the tensor table says, and the segments tile the file. */
static int check_layout(const struct rsave *rs, size_t nshards)
{
	for (size_t i = 0; i < rs->nfiles; i++) {
		const struct wfile *w = &rs->files[i];
		uint64_t at = 0;
		for (size_t k = 0; k < w->nsegs; k++) {
			CHECK_EQ(w->segs[k].off, at);      /* contiguous, no gap */
			CHECK(w->segs[k].len > 0);         /* empty tensors have none */
			at += w->segs[k].len;
		}
		CHECK_EQ(at, w->size);
	}
	for (size_t i = 0; i < nshards; i++) {
		const struct wfile *w = &rs->files[i];
		struct safet_header *h = NULL;
		size_t need = 0;
		char err[256];
		CHECK(w->segs[0].src && !w->segs[0].gm);      /* the header */
		CHECK_EQ(safet_header_parse(w->segs[0].src, w->segs[0].len, w->size, &h, &need,
					    err, sizeof(err)), 0);
		for (size_t k = 0; k < rs->ntensors; k++) {
			const struct rs_tensor *t = &rs->tensors[k];
			int found = 0;
			if (t->file != i)
				continue;
			for (size_t e = 0; e < h->ntensors; e++)
				if (!strcmp(h->tensors[e].name, t->name)) {
					CHECK_EQ(h->data_start + h->tensors[e].begin, t->begin);
					CHECK_EQ(h->data_start + h->tensors[e].end, t->end);
					found = 1;
				}
			CHECK(found);
		}
		safet_header_free(h);
	}
	return 0;
}

static int test_headers_and_segments(void)
{
	struct fixture f;
	struct rsave rs;
	char msg[256] = "";

	fixture(&f);
	memset(&rs, 0, sizeof(rs));
	CHECK_EQ(plan_rsave(&rs, &f.s, 4096, msg, sizeof(msg)), 0);
	CHECK_EQ(check_layout(&rs, 2), 0);
	/* model.w's segment points at its bytes in region 0 at offset 1024 */
	CHECK(rs.files[0].segs[1].src == f.mem[0] + 1024);
	CHECK_EQ(rs.files[0].segs[1].len, 16 * 16 * 4);
	unplan(&rs);
	plan_forget(&f.s);
	return 0;
}

/* The layout is kept while the registrations stay and made again when they
 * change; a save planned from the old layout keeps it.  A header holds
 * nothing of the step: two saves of the same tensors have the same bytes
 * (incremental saves link such files). */
static int test_kept_until_changed(void)
{
	struct fixture f;
	struct rsave a, b, c;
	char msg[256] = "";

	fixture(&f);
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	memset(&c, 0, sizeof(c));
	CHECK_EQ(plan_rsave(&a, &f.s, 4096, msg, sizeof(msg)), 0);
	CHECK_EQ(plan_rsave(&b, &f.s, 4096, msg, sizeof(msg)), 0);
	CHECK(b.tensors == a.tensors);
	CHECK_EQ(b.files[0].segs[0].len, a.files[0].segs[0].len);
	CHECK(memcmp(b.files[0].segs[0].src, a.files[0].segs[0].src, a.files[0].segs[0].len) == 0);
	CHECK(!memmem(a.files[0].segs[0].src, a.files[0].segs[0].len, "step", 4));
	CHECK_EQ(check_layout(&b, 2), 0);
	CHECK_EQ(f.rg[0].refs, 2);

	/* model.w becomes 8x16 (treg_replace moves treg_gen on) */
	f.t[1].shape[0] = 8;
	f.t[1].nbytes = 8 * 16 * 4;
	f.s.treg_gen++;
	CHECK_EQ(plan_rsave(&c, &f.s, 4096, msg, sizeof(msg)), 0);
	CHECK(c.tensors != a.tensors);
	CHECK_EQ(c.tensors[0].shape[0], 8);
	CHECK_EQ(c.tensors[0].end - c.tensors[0].begin, 8 * 16 * 4);
	CHECK(memmem(c.files[0].segs[0].src, c.files[0].segs[0].len, "\"shape\":[8,16]", 14));
	CHECK_EQ(check_layout(&c, 2), 0);
	/* a and b still read the layout they were planned from */
	CHECK(strcmp(a.tensors[0].name, "w") == 0);
	CHECK_EQ(a.tensors[0].end - a.tensors[0].begin, 16 * 16 * 4);
	CHECK_EQ(check_layout(&a, 2), 0);
	unplan(&a);
	unplan(&b);
	unplan(&c);
	plan_forget(&f.s);
	CHECK_EQ(f.rg[0].refs, 0);
	CHECK_EQ(f.rg[1].refs, 0);
	return 0;
}

/* CKPT_FROZEN tensors go in their group's frozen shard, after the group's
 * other tensors' shard; a group with frozen tensors only has that one. */
static int test_frozen_shard(void)
{
	struct fixture f;
	struct rsave rs;
	char msg[256] = "";

	fixture(&f);
	f.t[1].frozen = 1;                 /* model.w */
	f.t[0].frozen = f.t[3].frozen = 1; /* optim, all of it */
	memset(&rs, 0, sizeof(rs));
	CHECK_EQ(plan_rsave(&rs, &f.s, 4096, msg, sizeof(msg)), 0);
	CHECK_EQ(rs.nfiles, 5);
	CHECK(strcmp(rs.files[0].path, "model/rank_00003.safetensors") == 0);
	CHECK(strcmp(rs.files[1].path, "model/rank_00003.frozen.safetensors") == 0);
	CHECK(strcmp(rs.files[2].path, "optim/rank_00003.frozen.safetensors") == 0);
	CHECK(strcmp(rs.tensors[0].name, "b") == 0 && rs.tensors[0].file == 0);
	CHECK(strcmp(rs.tensors[1].name, "empty") == 0 && rs.tensors[1].file == 0);
	CHECK(strcmp(rs.tensors[2].name, "w") == 0 && rs.tensors[2].file == 1);
	CHECK(strcmp(rs.tensors[3].name, "m") == 0 && rs.tensors[3].file == 2);
	CHECK_EQ(check_layout(&rs, 3), 0);
	unplan(&rs);
	plan_forget(&f.s);
	return 0;
}

/* Chunks: ceil(size / chunk) per file, in file order, each naming its file;
 * a blob is a copy (the trainer may replace it before it is written). */
static int test_chunks_and_blob_copy(void)
{
	struct fixture f;
	struct rsave rs;
	char msg[256] = "";
	uint64_t c = 0;

	fixture(&f);
	memset(&rs, 0, sizeof(rs));
	CHECK_EQ(plan_rsave(&rs, &f.s, 4096, msg, sizeof(msg)), 0);
	for (size_t i = 0; i < rs.nfiles; i++) {
		CHECK_EQ(rs.files[i].first_chunk, c);
		CHECK_EQ(rs.files[i].nchunks, (rs.files[i].size + 4095) / 4096);
		for (uint64_t k = 0; k < rs.files[i].nchunks; k++) {
			CHECK_EQ(rs.chunks[c + k].file, i);
			CHECK_EQ(rs.chunks[c + k].pool_idx, -1);
		}
		c += rs.files[i].nchunks;
	}
	CHECK_EQ(rs.nchunks, c);
	CHECK_EQ(rs.files[3].nchunks, 0);              /* the empty blob */
	memset(f.blobdata[0], 'X', sizeof(f.blobdata[0]));
	CHECK_EQ(rs.files[2].owned[0], 'r');
	CHECK(rs.files[2].segs[0].src == rs.files[2].owned);
	unplan(&rs);
	plan_forget(&f.s);
	return 0;
}

static int test_nothing_registered(void)
{
	struct fixture f;
	struct rsave rs;
	char msg[256] = "";

	fixture(&f);
	f.s.ntensors = 0;
	f.s.nblobs = 0;
	memset(&rs, 0, sizeof(rs));
	CHECK_EQ(plan_rsave(&rs, &f.s, 4096, msg, sizeof(msg)), -ENODATA);
	CHECK(strstr(msg, "nothing to save"));
	CHECK_EQ(f.rg[0].refs, 0);
	/* blobs only: one file per blob, no shard */
	f.s.nblobs = 2;
	CHECK_EQ(plan_rsave(&rs, &f.s, 4096, msg, sizeof(msg)), 0);
	CHECK_EQ(rs.nfiles, 2);
	CHECK_EQ(rs.ntensors, 0);
	CHECK_EQ(rs.nregions, 0);
	unplan(&rs);
	plan_forget(&f.s);
	return 0;
}

/* Two groups registered interleaved in one region (a0 b0 a1 b1 ...): the
 * chunks are claimed in the order of the trainer memory they read, the
 * header-only chunks last. */
static int test_claim_order(void)
{
	static uint8_t mem[8 * 4096];
	static char names[8][8];
	struct region_ref rg = { .id = 1 };
	struct reg_tensor t[8];
	struct session s;
	struct rsave rs;
	char msg[256] = "";
	static const uint32_t want[] = { 1, 6, 2, 7, 3, 8, 4, 9, 0, 5 };

	memset(&s, 0, sizeof(s));
	memset(t, 0, sizeof(t));
	rg.r.base = mem;
	rg.r.size = sizeof(mem);
	rg.r.fd = -1;
	for (int i = 0; i < 8; i++) {
		snprintf(names[i], sizeof(names[i]), "%c%d", i % 2 ? 'b' : 'a', i / 2);
		t[i].group = i % 2 ? "b" : "a";
		t[i].name = names[i];
		strcpy(t[i].dtype, "F32");
		t[i].ndim = 1;
		t[i].shape[0] = 1024;
		t[i].nbytes = 4096;
		t[i].rg = &rg;
		t[i].offset = (uint64_t)i * 4096;
	}
	s.tensors = t;
	s.ntensors = 8;
	memset(&rs, 0, sizeof(rs));
	CHECK_EQ(plan_rsave(&rs, &s, 4096, msg, sizeof(msg)), 0);
	CHECK_EQ(rs.nchunks, 10);           /* a header chunk and 4 per file */
	CHECK(rs.claim_order != NULL);
	for (int k = 0; k < 10; k++)
		CHECK_EQ(rs.claim_order[k], want[k]);
	CHECK_EQ(check_layout(&rs, 2), 0);
	unplan(&rs);
	plan_forget(&s);
	CHECK_EQ(rg.refs, 0);
	return 0;
}

static const struct test tests[] = {
	{ "files_and_tensors", test_files_and_tensors },
	{ "headers_and_segments", test_headers_and_segments },
	{ "chunks_and_blob_copy", test_chunks_and_blob_copy },
	{ "nothing_registered", test_nothing_registered },
	{ "kept_until_changed", test_kept_until_changed },
	{ "claim_order", test_claim_order },
	{ "frozen_shard", test_frozen_shard },
};

TEST_MAIN(tests)
