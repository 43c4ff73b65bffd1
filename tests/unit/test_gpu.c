/* test_gpu.c - the CUDA source without a GPU: the dlopen fallback, the
 * allocation cache (address reuse), the ring and gate page on both sides, the wire
 * encoding of CUDA registrations (libckpt's encoder against ckptd's
 * decoder).  CUDA itself is replaced by `fake_ops`, a test double of the
 * gpu_ops table whose "device memory" is host memory; the real table only
 * runs on a GPU machine (tests/gpu/run.sh). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../fdcount.h"
#include "gate_page.h"
#include "gpu.h"
#include "gpu_client.h"
#include "gpu_wire.h"
#include "hex.h"
#include "shm_region.h"
#include "testhelp.h"

/* --- the test double ------------------------------------------------------ */

static const uint8_t UUID0[16] = { 0x5e, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f, 0x70,
				   0x81, 0x92, 0xa3, 0xb4, 0xc5, 0xd6, 0xe7, 0xf8 };
static const uint8_t UUID_OTHER[16] = { 1 };

static struct {
	int ipc_open, ipc_close, vmm_reserve, vmm_map, vmm_free, copies, waits;
	int ev_open, ev_close;
	void *last_wait_ev;
	size_t vmm_freed_mapped;
	int not_ready;
} F;

static int f_device_of(const uint8_t u[16])
{
	return memcmp(u, UUID0, 16) ? -ENODEV : 0;
}
static int f_ipc_open(int dev, const uint8_t h[64], void **p, char *m, size_t n)
{
	(void)dev; (void)m; (void)n;
	if (h[0] == 0xee)
		return -EIO;
	F.ipc_open++;
	*p = calloc(1, 8 << 20);          /* lazily zero: the size of a test's largest */
	return 0;
}
static void f_ipc_close(int dev, void *p) { (void)dev; F.ipc_close++; free(p); }
static int f_vmm_reserve(int dev, size_t size, void **va, char *m, size_t n)
{
	(void)dev; (void)m; (void)n;
	F.vmm_reserve++;
	*va = calloc(1, size);
	return 0;
}
static int f_vmm_map(int dev, void *va, size_t off, size_t len, int fd, char *m, size_t n)
{
	(void)dev; (void)va; (void)off; (void)len; (void)m; (void)n;
	close(fd);
	F.vmm_map++;
	return 0;
}
static void f_vmm_free(int dev, void *va, size_t mapped, size_t size)
{
	(void)dev; (void)size;
	F.vmm_free++;
	F.vmm_freed_mapped = mapped;
	free(va);
}
static int f_copy(int dev, void *dst, const void *src, size_t n, int kind, void *ev,
		  char *m, size_t ml)
{
	(void)dev; (void)kind; (void)m; (void)ml;
	F.copies++;
	if (ev)
		return -EINVAL;    /* ckptd's streams never wait on a trainer's event */
	memcpy(dst, src, n);
	return 0;
}
static int f_host_register(void *p, size_t n) { (void)p; (void)n; return 0; }
static void f_host_unregister(void *p) { (void)p; }
static int f_event_open(int dev, const uint8_t h[64], void **ev, char *m, size_t n)
{
	(void)dev; (void)m; (void)n;
	F.ev_open++;
	*ev = malloc(1);
	((uint8_t *)*ev)[0] = h[0];
	return 0;
}
static void f_event_close(void *ev) { if (ev) F.ev_close++; free(ev); }
static int f_event_ready(void *ev, char *m, size_t n)
{
	(void)ev; (void)m; (void)n;
	return F.not_ready ? 0 : 1;
}

static int f_event_wait(void *ev, const atomic_int *cancel, char *m, size_t n)
{
	(void)m; (void)n;
	if (cancel && *cancel)
		return -ECANCELED;
	F.waits++;
	F.last_wait_ev = ev;
	return 0;
}

static const struct gpu_ops fake_ops = {
	.name = "fake", .device_of = f_device_of, .ipc_open = f_ipc_open,
	.ipc_close = f_ipc_close, .vmm_reserve = f_vmm_reserve, .vmm_map = f_vmm_map,
	.vmm_free = f_vmm_free, .copy = f_copy, .event_wait = f_event_wait,
	.event_ready = f_event_ready,
	.host_register = f_host_register, .host_unregister = f_host_unregister,
	.event_open = f_event_open, .event_close = f_event_close,
};

/* A trainer's gate page: a sealed memfd of one page; the fd to send is a
 * duplicate (ckptd steals it), the mapping is the trainer's view. */
static struct shm_region page_new(void)
{
	struct shm_region r = { -1, NULL, 0, 0 };
	if (shm_region_create("gates", (size_t)sysconf(_SC_PAGESIZE), &r) < 0)
		abort();
	return r;
}
static uint32_t word(const struct shm_region *pg, unsigned slot)
{
	return atomic_load(gate_word(pg->base, slot));
}

static void fake_on(void)
{
	memset((void *)&F, 0, sizeof(F));
	gpu_set_ops(&fake_ops);
}

/* --- tests -------------------------------------------------------------------- */

/* This machine has the CUDA toolkit but no driver/GPU (or no CUDA at all):
 * the probe must say "no GPU" with the runtime's reason, and everything
 * must fail cleanly. */
static int test_fallback_no_gpu(void)
{
	char msg[256] = "";
	struct gpu_mem *m = NULL;
	uint8_t key[64] = { 0 };
	int hit = 0, x = 0;
	struct gpu_client_mem cm;

	if (gpu_available())
		SKIP("a GPU is present: the fallback cannot be tested here");
	CHECK(gpu_ops() == NULL);
	CHECK(gpu_reason()[0] != '\0');
	fprintf(stderr, "    ckptd would log: no GPU (%s)\n", gpu_reason());
	CHECK_EQ(gpu_mem_get(1, UUID0, 0x1000, 4096, GPU_MEM_IPC, key, &m, &hit,
			     msg, sizeof(msg)), -EOPNOTSUPP);
	CHECK(m == NULL);
	CHECK(strstr(msg, "no GPU") && strstr(msg, gpu_reason()));
	CHECK_EQ(gpu_host_register(&x, sizeof(x)), -EOPNOTSUPP);
	/* libckpt: host memory is never device memory */
	CHECK_EQ(gpu_client_describe(&x, sizeof(x), &cm), -ENOTSUP);
	return 0;
}

static int test_hex_uuid(void)
{
	char s[41], h[2 * 64 + 1], c[41];
	uint8_t u[16], b[64], k[64];

	for (int i = 0; i < 64; i++)
		k[i] = (uint8_t)(i * 37);
	hex_gpu_uuid_str(UUID0, s);
	hex_gpu_uuid_str(UUID0, c);
	CHECK(strcmp(s, c) == 0);
	CHECK(strcmp(s, "GPU-5e1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8") == 0);
	CHECK_EQ(hex_gpu_uuid_parse(s, u), 0);
	CHECK(memcmp(u, UUID0, 16) == 0);
	CHECK_EQ(hex_gpu_uuid_parse("GPU-5e1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f", u), -EINVAL);
	CHECK_EQ(hex_gpu_uuid_parse("5e1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8xxxx", u), -EINVAL);
	CHECK_EQ(hex_gpu_uuid_parse("GPU-5e1a2b3c+4d5e-6f70-8192-a3b4c5d6e7f8", u), -EINVAL);
	hex_encode(k, 64, h);
	CHECK_EQ(hex_decode(h, b, 64), 0);
	CHECK(memcmp(b, k, 64) == 0);
	h[5] = 'g';
	CHECK_EQ(hex_decode(h, b, 64), -EINVAL);
	CHECK_EQ(hex_decode("abc", b, 2), -EINVAL);
	return 0;
}

static json_t *roundtrip(json_t *o)
{
	char *t = json_dumps(o, JSON_COMPACT);
	json_t *r = t ? json_loads(t, 0, NULL) : NULL;
	free(t);
	json_decref(o);
	return r;
}

static int test_wire_region_ipc(void)
{
	struct gpu_client_export *ex = calloc(1, sizeof(*ex));
	struct gpu_region_desc d;
	char msg[256];
	json_t *j;

	CHECK(ex);
	ex->kind = GPU_CLIENT_IPC;
	memcpy(ex->uuid, UUID0, 16);
	ex->base = 0x7f0000200000ull;
	ex->size = 3ull << 30;
	for (int i = 0; i < 64; i++)
		ex->key[i] = (uint8_t)(255 - i);
	j = roundtrip(gpu_client_region_json(ex, 42, 0, 0));
	CHECK(j);
	CHECK_EQ(gpu_wire_region(j, 0, &d, msg, sizeof(msg)), 0);
	CHECK_EQ(d.region, 42);
	CHECK_EQ(d.kind, GPU_MEM_IPC);
	CHECK_EQ(d.size, 3ull << 30);
	CHECK_EQ(d.base, 0x7f0000200000ull);
	CHECK(memcmp(d.uuid, UUID0, 16) == 0);
	CHECK(memcmp(d.key, ex->key, 64) == 0);
	/* an IPC region never carries descriptors */
	CHECK_EQ(gpu_wire_region(j, 1, &d, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "no file descriptors"));
	json_object_set_new(j, "kind", json_string("managed"));
	CHECK_EQ(gpu_wire_region(j, 0, &d, msg, sizeof(msg)), -EINVAL);
	json_object_set_new(j, "kind", json_string("ipc"));
	json_object_set_new(j, "key", json_string("00ff"));
	CHECK_EQ(gpu_wire_region(j, 0, &d, msg, sizeof(msg)), -EINVAL);
	json_object_set_new(j, "gpu", json_string("GPU-nope"));
	CHECK_EQ(gpu_wire_region(j, 0, &d, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "UUID"));
	json_decref(j);
	free(ex);
	return 0;
}

static int test_wire_region_vmm(void)
{
	struct gpu_client_export *ex = calloc(1, sizeof(*ex));
	struct gpu_region_desc d;
	char msg[256];
	json_t *j;

	CHECK(ex);
	ex->kind = GPU_CLIENT_VMM;
	memcpy(ex->uuid, UUID0, 16);
	ex->base = 0x7f0000000000ull;
	ex->nchunks = 10;
	for (unsigned i = 0; i < 10; i++) {
		ex->chunk[i] = (20ull << 20) * (i + 1);
		ex->size += ex->chunk[i];
		ex->fds[i] = -1;
	}
	/* first message: chunks 0..7 at 0 */
	j = roundtrip(gpu_client_region_json(ex, 7, 0, 8));
	CHECK(j);
	CHECK_EQ(gpu_wire_region(j, 8, &d, msg, sizeof(msg)), 0);
	CHECK_EQ(d.kind, GPU_MEM_VMM);
	CHECK_EQ(d.at, 0);
	CHECK_EQ(d.nchunks, 8);
	CHECK_EQ(d.chunk[7], 8 * (20ull << 20));
	CHECK_EQ(d.size, ex->size);
	CHECK_EQ(gpu_wire_region(j, 7, &d, msg, sizeof(msg)), -EINVAL);  /* fds != chunks */
	CHECK(strstr(msg, "file descriptors"));
	json_decref(j);
	/* second: chunks 8..9, at = sum of the first 8 */
	j = roundtrip(gpu_client_region_json(ex, 7, 8, 8));
	CHECK_EQ(gpu_wire_region(j, 2, &d, msg, sizeof(msg)), 0);
	CHECK_EQ(d.nchunks, 2);
	CHECK_EQ(d.at, 36ull * (20ull << 20));
	CHECK_EQ(d.at + d.chunk[0] + d.chunk[1], ex->size);
	/* chunks past the end are refused */
	json_object_set_new(j, "size", json_integer(1000));
	CHECK_EQ(gpu_wire_region(j, 2, &d, msg, sizeof(msg)), -EINVAL);
	json_decref(j);
	free(ex);
	return 0;
}

static int test_wire_save(void)
{
	struct gpu_save_desc d;
	char msg[256], h[129];
	uint8_t ev[64];
	json_t *j;

	memset(ev, 0xab, 64);
	hex_encode(ev, 64, h);
	j = json_pack("{s:s, s:i, s:s, s:I}", "gpu", "GPU-5e1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8",
		      "slot", 3, "ready", h, "seq", (json_int_t)UINT32_MAX);
	CHECK_EQ(gpu_wire_save(j, &d, msg, sizeof(msg)), 0);
	CHECK_EQ(d.slot, 3);
	CHECK_EQ(d.seq, UINT32_MAX);
	CHECK(memcmp(d.ready, ev, 64) == 0);
	CHECK(memcmp(d.uuid, UUID0, 16) == 0);
	json_object_set_new(j, "seq", json_integer((json_int_t)UINT32_MAX + 1));
	CHECK_EQ(gpu_wire_save(j, &d, msg, sizeof(msg)), -EINVAL);
	json_object_del(j, "seq");
	CHECK_EQ(gpu_wire_save(j, &d, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "\"seq\""));
	json_object_set_new(j, "seq", json_integer(7));
	json_object_set_new(j, "slot", json_integer(GPU_RING_SLOTS));
	CHECK_EQ(gpu_wire_save(j, &d, msg, sizeof(msg)), -EINVAL);
	json_decref(j);
	j = json_string("x");
	CHECK_EQ(gpu_wire_save(j, &d, msg, sizeof(msg)), -EINVAL);
	json_decref(j);
	CHECK_EQ(GPU_RING_SLOTS, GPU_CLIENT_RING);
	return 0;
}

/* Same (process, base, handle) shares one mapping; the same base with new
 * handle bytes is a freed-and-reused address: a new mapping, the old one
 * closed only when its last holder lets go. */
static int test_cache_address_reuse(void)
{
	struct gpu_mem *a, *b, *c, *d;
	uint8_t k1[64] = { 1 }, k2[64] = { 2 };
	char msg[256];
	int hit = -1;

	fake_on();
	CHECK_EQ(gpu_mem_get(100, UUID0, 0x10000, 4096, GPU_MEM_IPC, k1, &a, &hit, msg, sizeof(msg)), 0);
	CHECK_EQ(hit, 0);
	CHECK_EQ(gpu_mem_get(100, UUID0, 0x10000, 4096, GPU_MEM_IPC, k1, &b, &hit, msg, sizeof(msg)), 0);
	CHECK_EQ(hit, 1);
	CHECK(a == b);
	CHECK_EQ(F.ipc_open, 1);
	CHECK_EQ(a->refs, 2);
	/* another process at the same address: its own mapping */
	CHECK_EQ(gpu_mem_get(200, UUID0, 0x10000, 4096, GPU_MEM_IPC, k1, &c, &hit, msg, sizeof(msg)), 0);
	CHECK_EQ(hit, 0);
	CHECK(c != a);
	CHECK_EQ(gpu_cache_count(), 2);
	/* address reuse */
	CHECK_EQ(gpu_mem_get(100, UUID0, 0x10000, 4096, GPU_MEM_IPC, k2, &d, &hit, msg, sizeof(msg)), 0);
	CHECK_EQ(hit, 0);
	CHECK(d != a);
	CHECK_EQ(F.ipc_open, 3);
	CHECK_EQ(a->cached, 0);
	CHECK_EQ(gpu_cache_count(), 2);
	gpu_mem_unref(a);
	gpu_mem_unref(b);      /* the old mapping goes with its last holder */
	CHECK_EQ(F.ipc_close, 1);
	gpu_mem_unref(c);
	gpu_mem_unref(d);
	CHECK_EQ(F.ipc_close, 3);
	CHECK_EQ(gpu_cache_count(), 0);
	/* a GPU ckptd cannot see, and a handle the driver refuses */
	CHECK_EQ(gpu_mem_get(100, UUID_OTHER, 0x10000, 4096, GPU_MEM_IPC, k1, &a, &hit, msg, sizeof(msg)), -ENODEV);
	CHECK(strstr(msg, "CUDA_VISIBLE_DEVICES"));
	k1[0] = 0xee;
	CHECK_EQ(gpu_mem_get(100, UUID0, 0x10000, 4096, GPU_MEM_IPC, k1, &a, &hit, msg, sizeof(msg)), -EIO);
	CHECK_EQ(gpu_cache_count(), 0);
	gpu_set_ops(NULL);
	return 0;
}

static int test_vmm_chunks(void)
{
	struct gpu_mem *m;
	uint8_t key[64] = { 9 };
	char msg[256];
	int hit, fd;

	fake_on();
	CHECK_EQ(gpu_mem_get(1, UUID0, 0x20000, 3 << 20, GPU_MEM_VMM, key, &m, &hit, msg, sizeof(msg)), 0);
	CHECK_EQ(gpu_mem_ready(m), 0);
	CHECK((fd = open("/dev/null", O_RDONLY)) >= 0);
	CHECK_EQ(gpu_mem_vmm_add(m, 0, 2 << 20, fd, msg, sizeof(msg)), 0);
	CHECK((fd = open("/dev/null", O_RDONLY)) >= 0);
	/* out of order: refused, fd closed */
	CHECK_EQ(gpu_mem_vmm_add(m, 3 << 20, 1 << 20, fd, msg, sizeof(msg)), -EINVAL);
	CHECK_EQ(fcntl(fd, F_GETFD), -1);
	CHECK((fd = open("/dev/null", O_RDONLY)) >= 0);
	/* past the end */
	CHECK_EQ(gpu_mem_vmm_add(m, 2 << 20, 2 << 20, fd, msg, sizeof(msg)), -EINVAL);
	CHECK((fd = open("/dev/null", O_RDONLY)) >= 0);
	CHECK_EQ(gpu_mem_vmm_add(m, 2 << 20, 1 << 20, fd, msg, sizeof(msg)), 0);
	CHECK_EQ(gpu_mem_ready(m), 1);
	CHECK_EQ(F.vmm_map, 2);
	gpu_mem_unref(m);
	CHECK_EQ(F.vmm_free, 1);
	CHECK_EQ(F.vmm_freed_mapped, 3 << 20);
	gpu_set_ops(NULL);
	return 0;
}

/* Copies go through the table, wait (on the host, once per save) for the
 * save's ready event, give up when the save is cancelled, and stay inside
 * the allocation. */
static int test_copy(void)
{
	struct gpu_mem *m;
	struct gpu_sess *gs = NULL;
	struct gpu_sync *sy, *sy2;
	struct shm_region pg = page_new();
	uint8_t key[64] = { 3 }, ready[64] = { 0x11 }, buf[256], back[256];
	char msg[256];
	int hit;
	atomic_int cancel = 0;

	fake_on();
	CHECK_EQ(gpu_mem_get(1, UUID0, 0x30000, 1 << 16, GPU_MEM_IPC, key, &m, &hit, msg, sizeof(msg)), 0);
	for (int i = 0; i < 256; i++)
		buf[i] = (uint8_t)i;
	CHECK_EQ(gpu_copy_h2d(m, 1000, buf, 256, msg, sizeof(msg)), 0);
	CHECK_EQ(gpu_sess_save(&gs, UUID0, 0, 1, ready, dup(pg.fd), &sy, msg, sizeof(msg)), 0);
	CHECK_EQ(gpu_copy_d2h(m, 1000, back, 128, sy, &cancel, msg, sizeof(msg)), 0);
	CHECK_EQ(gpu_copy_d2h(m, 1128, back + 128, 128, sy, &cancel, msg, sizeof(msg)), 0);
	CHECK(memcmp(buf, back, 256) == 0);
	CHECK_EQ(F.waits, 1);                   /* once per save */
	CHECK(F.last_wait_ev != NULL);
	CHECK_EQ(((uint8_t *)F.last_wait_ev)[0], 0x11);
	CHECK_EQ(gpu_copy_d2h(m, (1 << 16) - 10, back, 11, NULL, NULL, msg, sizeof(msg)), -ERANGE);
	CHECK_EQ(gpu_copy_d2h(m, UINT64_MAX, back, 1, NULL, NULL, msg, sizeof(msg)), -ERANGE);
	/* the trainer died before its stream reached "ready": the save is
	 * cancelled and the copy gives up instead of waiting forever */
	gpu_sync_release(sy);
	CHECK_EQ(gpu_sess_save(&gs, UUID0, 1, 1, ready, -1, &sy2, msg, sizeof(msg)), 0);
	cancel = 1;
	CHECK_EQ(gpu_copy_d2h(m, 0, back, 16, sy2, &cancel, msg, sizeof(msg)), -ECANCELED);
	CHECK_EQ(F.copies, 3);                  /* h2d + 2 d2h: nothing after cancel */
	gpu_sync_unref(sy2);
	gpu_sync_unref(sy);
	gpu_sess_close(gs);
	gpu_mem_unref(m);
	shm_region_release(&pg);
	gpu_set_ops(NULL);
	return 0;
}

/* A chunk of gapped pieces larger than the bridging scratch: when it is
 * full the batch runs and bridging goes on into an empty scratch, a copy
 * per scratchful (not one per piece for the rest of the chunk, which made
 * 16,000 gapped tensors 29x their copy floor on the simulator). */
#define PAST_PIECES 3000
#define PAST_LEN    2048
#define PAST_STRIDE 2560                /* 512-byte gaps: the caching allocator's */
static int test_batch_past_the_scratch(void)
{
	static struct gpu_batch b;
	struct gpu_mem *m;
	uint8_t key[64] = { 6 };
	size_t span = (size_t)PAST_PIECES * PAST_STRIDE;
	uint8_t *src = malloc(span), *back = calloc(PAST_PIECES, PAST_LEN);
	char msg[256];
	int hit;

	CHECK(src && back);
	CHECK(span > GPU_BRIDGE_SCRATCH && span < 2 * GPU_BRIDGE_SCRATCH);
	fake_on();
	CHECK_EQ(gpu_mem_get(1, UUID0, 0x60000, span, GPU_MEM_IPC, key, &m, &hit, msg, sizeof(msg)), 0);
	for (size_t i = 0; i < span; i++)
		src[i] = (uint8_t)(i % 251);
	CHECK_EQ(gpu_copy_h2d(m, 0, src, span, msg, sizeof(msg)), 0);
	F.copies = 0;
	for (int i = 0; i < PAST_PIECES; i++)
		CHECK_EQ(gpu_batch_add(&b, m, (uint64_t)i * PAST_STRIDE, back + (size_t)i * PAST_LEN,
				       PAST_LEN, msg, sizeof(msg)), 0);
	CHECK_EQ(gpu_batch_run(&b, msg, sizeof(msg)), 0);
	CHECK_EQ(F.copies, 2);                  /* 7.3 MiB through a 4 MiB scratch */
	CHECK_EQ(b.bridged, PAST_PIECES - 2);   /* the first of each scratchful starts it */
	for (int i = 0; i < PAST_PIECES; i++)
		CHECK(memcmp(back + (size_t)i * PAST_LEN, src + (size_t)i * PAST_STRIDE, PAST_LEN) == 0);
	gpu_batch_release(&b);
	gpu_mem_unref(m);
	gpu_set_ops(NULL);
	free(src);
	free(back);
	return 0;
}

/* A staging chunk's pieces: those adjacent on both sides become one copy,
 * the others stay apart, the bytes land where they belong (issue 25 item 6:
 * 16,000 small tensors paid a copy and a host round trip each). */
static int test_batch(void)
{
	static struct gpu_batch b;
	struct gpu_mem *m, *m2;
	uint8_t key[64] = { 4 }, key2[64] = { 5 }, src[4096], back[4096];
	char msg[256];
	int hit;

	fake_on();
	CHECK_EQ(gpu_mem_get(1, UUID0, 0x40000, 4096, GPU_MEM_IPC, key, &m, &hit, msg, sizeof(msg)), 0);
	CHECK_EQ(gpu_mem_get(1, UUID0, 0x50000, 4096, GPU_MEM_IPC, key2, &m2, &hit, msg, sizeof(msg)), 0);
	for (int i = 0; i < 4096; i++)
		src[i] = (uint8_t)(i * 7);
	CHECK_EQ(gpu_copy_h2d(m, 0, src, 4096, msg, sizeof(msg)), 0);
	CHECK_EQ(gpu_copy_h2d(m2, 0, src, 4096, msg, sizeof(msg)), 0);
	F.copies = 0;
	memset(back, 0, sizeof(back));
	for (int i = 0; i < 16; i++)            /* 16 tensors back to back */
		CHECK_EQ(gpu_batch_add(&b, m, (uint64_t)i * 64, back + i * 64, 64, msg, sizeof(msg)), 0);
	/* a gap of 1 KiB in the same allocation: bridged through the scratch */
	CHECK_EQ(gpu_batch_add(&b, m, 2048, back + 1024, 64, msg, sizeof(msg)), 0);
	CHECK_EQ(gpu_batch_add(&b, m2, 2112, back + 1088, 64, msg, sizeof(msg)), 0); /* other alloc */
	CHECK_EQ(gpu_batch_add(&b, m2, 0, back + 1152, 0, msg, sizeof(msg)), 0);     /* empty */
	CHECK_EQ(gpu_batch_add(&b, m, 4000, back, 97, msg, sizeof(msg)), -ERANGE);
	CHECK_EQ(b.n, 2);
	CHECK_EQ(b.merged, 15);
	CHECK_EQ(b.bridged, 1);
	CHECK_EQ(F.copies, 0);                  /* queued, not yet copied */
	CHECK_EQ(gpu_batch_run(&b, msg, sizeof(msg)), 0);
	CHECK_EQ(F.copies, 2);
	CHECK(memcmp(back, src, 1024) == 0);
	CHECK(memcmp(back + 1024, src + 2048, 64) == 0);
	CHECK(memcmp(back + 1088, src + 2112, 64) == 0);
	CHECK_EQ(b.n, 0);
	/* more pieces than a batch holds: run as it fills */
	for (int i = 0; i < GPU_BATCH_MAX + 10; i++)
		CHECK_EQ(gpu_batch_add(&b, m, (uint64_t)(i % 2) * 128, back + (size_t)i * 2 % 4000, 1,
				       msg, sizeof(msg)), 0);
	CHECK_EQ(gpu_batch_run(&b, msg, sizeof(msg)), 0);
	gpu_batch_release(&b);
	gpu_mem_unref(m2);
	gpu_mem_unref(m);
	gpu_set_ops(NULL);
	return 0;
}

/* ckptd's side of the ring: the first stream SAVE brings the gate page; a
 * slot is busy until its gate opens, which is a CPU store of exactly the
 * save's number into the trainer's page (seen through the trainer's own
 * mapping); the trainer's event is opened once per handle. */
static int test_daemon_ring(void)
{
	struct gpu_sess *gs = NULL;
	struct gpu_sync *s1, *s2, *s3;
	struct shm_region pg = page_new(), other = page_new();
	uint8_t ready[64];
	char msg[256];

	fake_on();
	memset(ready, 0x22, 64);
	/* no page yet */
	CHECK_EQ(gpu_sess_save(&gs, UUID0, 2, 1, ready, -1, &s1, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "gate page"));
	CHECK_EQ(gpu_sess_save(&gs, UUID0, 2, 1, ready, dup(pg.fd), &s1, msg, sizeof(msg)), 0);
	CHECK(gs);
	CHECK_EQ(word(&pg, 2), 0);      /* the trainer's stream is held */
	/* the slot is pending: re-recording it is refused */
	CHECK_EQ(gpu_sess_save(&gs, UUID0, 2, 2, ready, -1, &s2, msg, sizeof(msg)), -EBUSY);
	/* the same page again is fine (a resend), another page is not */
	CHECK_EQ(gpu_sess_save(&gs, UUID0, 2, 2, ready, dup(other.fd), &s2, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "one gate page"));
	/* staged: the gate opens; idempotent */
	gpu_sync_release(s1);
	gpu_sync_release(s1);
	CHECK_EQ(word(&pg, 2), 1);
	gpu_sync_unref(s1);
	CHECK_EQ(gpu_sess_save(&gs, UUID0, 2, 2, ready, dup(pg.fd), &s2, msg, sizeof(msg)), 0);
	CHECK_EQ(F.ev_open, 1);                 /* same "ready" handle: cached */
	/* a new handle in the slot (the trainer re-created its event) */
	memset(ready, 0x33, 64);
	gpu_sync_unref(s2);                     /* abandoned: opens the gate */
	CHECK_EQ(word(&pg, 2), 2);
	CHECK_EQ(gpu_sess_save(&gs, UUID0, 2, 3, ready, -1, &s3, msg, sizeof(msg)), 0);
	CHECK_EQ(F.ev_open, 2);
	CHECK_EQ(F.ev_close, 1);
	/* bad slot, other GPU */
	CHECK_EQ(gpu_sess_save(&gs, UUID0, GPU_RING_SLOTS, 1, ready, -1, &s1, msg, sizeof(msg)), -EINVAL);
	CHECK_EQ(gpu_sess_save(&gs, UUID_OTHER, 0, 1, ready, -1, &s1, msg, sizeof(msg)), -ENODEV);
	/* not passed yet: stagers are told so without blocking */
	F.not_ready = 1;
	CHECK_EQ(gpu_sync_ready(s3, msg, sizeof(msg)), 0);
	F.not_ready = 0;
	CHECK_EQ(gpu_sync_ready(s3, msg, sizeof(msg)), 1);
	CHECK_EQ(gpu_sync_ready(NULL, msg, sizeof(msg)), 1);
	/* the trainer leaves with s3 pending: its gate opens at exactly the
	 * value it was armed with, the session's events stay until the save
	 * lets go */
	gpu_sess_close(gs);
	CHECK_EQ(word(&pg, 2), 3);
	CHECK_EQ(F.ev_close, 1);
	gpu_sync_unref(s3);
	CHECK_EQ(F.ev_close, 2);
	shm_region_release(&pg);
	shm_region_release(&other);
	gpu_set_ops(NULL);
	return 0;
}

/* Opening a gate never lowers its word in GEQ's cyclic order: a late
 * store of an older number cannot shut a newer save's gate, and the
 * numbers wrap. */
static int test_gate_raise(void)
{
	_Atomic uint32_t w = 5;

	gate_raise(&w, 4);
	CHECK_EQ(w, 5);
	gate_raise(&w, 6);
	CHECK_EQ(w, 6);
	w = 0xfffffffeu;
	gate_raise(&w, 1);                      /* past the wrap: newer */
	CHECK_EQ(w, 1);
	gate_raise(&w, 0xffffffffu);            /* older */
	CHECK_EQ(w, 1);
	return 0;
}

/* ckptd keeps nothing of a session once it and its saves are gone: the
 * gate page is unmapped and its descriptor closed (the old design leaked
 * a gate word per freed gate). */
static int test_daemon_page_no_leak(void)
{
	uint8_t ready[64] = { 0x44 };
	char msg[256];
	int before;

	fake_on();
	before = count_fds();
	for (int i = 0; i < 200; i++) {
		struct gpu_sess *gs = NULL;
		struct gpu_sync *sy;
		struct shm_region pg = page_new();
		CHECK_EQ(gpu_sess_save(&gs, UUID0, (unsigned)i % GPU_RING_SLOTS, 1, ready,
				       dup(pg.fd), &sy, msg, sizeof(msg)), 0);
		if (i % 2)
			gpu_sync_unref(sy);             /* staged before the trainer left */
		gpu_sess_close(gs);
		if (i % 2 == 0)
			gpu_sync_unref(sy);             /* the save outlived its session */
		CHECK_EQ(word(&pg, (unsigned)i % GPU_RING_SLOTS), 1);
		shm_region_release(&pg);
	}
	CHECK_EQ(count_fds(), before);
	CHECK_EQ(F.ev_open, F.ev_close);
	gpu_set_ops(NULL);
	return 0;
}

/* libckpt's side: 8 slots, none reused while busy, round robin. */
static int test_client_ring(void)
{
	struct gpu_ring r;
	int s[GPU_CLIENT_RING];

	gpu_ring_init(&r);
	CHECK_EQ(r.dev, -1);
	for (int i = 0; i < GPU_CLIENT_RING; i++) {
		s[i] = gpu_ring_acquire(&r);
		CHECK_EQ(s[i], i);
		gpu_ring_bind(&r, (unsigned)s[i], 100 + i);
	}
	CHECK_EQ(gpu_ring_busy(&r), GPU_CLIENT_RING);
	CHECK_EQ(gpu_ring_acquire(&r), -EBUSY);
	gpu_ring_release(&r, 5);
	CHECK_EQ(r.ticket[5], 0);
	CHECK_EQ(gpu_ring_acquire(&r), 5);
	CHECK_EQ(gpu_ring_acquire(&r), -EBUSY);
	gpu_ring_release(&r, 1);
	gpu_ring_release(&r, 6);
	CHECK_EQ(gpu_ring_acquire(&r), 6);   /* round robin from after 5 */
	CHECK_EQ(gpu_ring_acquire(&r), 1);
	gpu_ring_destroy(&r);                 /* no events: harmless */
	return 0;
}

static const struct test tests[] = {
	{ "fallback_no_gpu", test_fallback_no_gpu },
	{ "hex_uuid", test_hex_uuid },
	{ "wire_region_ipc", test_wire_region_ipc },
	{ "wire_region_vmm", test_wire_region_vmm },
	{ "wire_save", test_wire_save },
	{ "cache_address_reuse", test_cache_address_reuse },
	{ "vmm_chunks", test_vmm_chunks },
	{ "copy", test_copy },
	{ "batch", test_batch },
	{ "batch_past_the_scratch", test_batch_past_the_scratch },
	{ "daemon_ring", test_daemon_ring },
	{ "gate_raise", test_gate_raise },
	{ "daemon_page_no_leak", test_daemon_page_no_leak },
	{ "client_ring", test_client_ring },
};

TEST_MAIN(tests)
