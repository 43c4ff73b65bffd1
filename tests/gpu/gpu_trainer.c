/* gpu_trainer.c - a test trainer on the CUDA driver API only (libcuda.so.1
 * through dlopen, no runtime, no nvcc): the same program runs against the
 * CUDA driver simulator in `make test` and on a real GPU (tests/gpu/run.sh).
 * Tensors live in cudaMalloc-style memory (cuMemAlloc, shared by IPC
 * handle) and in VMM memory (cuMemCreate with POSIX fds, two chunks back to
 * back, as PyTorch's expandable segments).  The "kernels" are copies and
 * memsets queued on the training stream.
 *
 *   gpu_trainer SOCKET JOB MODE [ARG]
 *   roundtrip            save with ckpt_save_stream, overwrite the tensors
 *                        on the stream right after (the optimizer step),
 *                        check the checkpoint holds the old values (the
 *                        stream waited for STAGED), zero the tensors,
 *                        restore, check bit for bit; prints figures
 *   overlap N            N saves queued on the stream back to back, each
 *                        after a kernel writing its own value; every step
 *                        checked after restore
 *   sequential N         N saves one after another (slots reused);
 *                        GPU_TRAINER_RETRY=1: a save failing with ENXIO
 *                        (ckptd reset a faulted context) is retried once
 *   restore N            restore step N (saved by "sequential") and check it
 *   close N              N saves queued, then ckpt_close at once: the
 *                        stream must still drain
 *   die                  SIGKILL itself right after ckpt_save_stream
 *   hold FILE            queue a save behind a wait on a host word (its
 *                        "ready" is not reached: ckptd cannot stage it),
 *                        print "armed", go on once FILE exists
 *   orphan FILE          the same, but by the time FILE exists ckptd is
 *                        gone (the test killed it): the stream must run on
 *                        (libckpt opens its gates when the connection
 *                        ends), the save must fail
 *   managed              registering managed memory must be refused with
 *                        a message that says so
 *   empty                zero-element CUDA tensors (a NULL pointer, as
 *                        PyTorch gives an empty CUDA tensor, and the end of
 *                        a cuMemAlloc block) register, save and restore
 *   deferred FIFO        a save with CKPT_GATE_LATER while ckptd's stager is
 *                        held at its failpoint (CKPT_FAILPOINT=stage.chunk,
 *                        CKPT_FAILPOINT_HOLD=FIFO, stage_threads 1): the
 *                        "forward" queued after the save must run while the
 *                        save is not staged; the "optimizer step" queued
 *                        after ckpt_gate_stream must not; then FIFO lets
 *                        ckptd go on and the checkpoint must hold the values
 *                        from before the step.  GPU_TRAINER_GATE=now gates
 *                        at once (ckpt_save_stream): the forward is then
 *                        held, and this mode fails (the test's control).
 *                        GPU_TRAINER_ORPHAN=FILE: with the step queued,
 *                        print "armed" and wait for FILE (the test kills
 *                        ckptd first): the stream must run on, the save fail
 *   many N               N small tensors (GPU_TRAINER_TENSOR_BYTES, default
 *                        4096, each GPU_TRAINER_GAP bytes apart, default 0,
 *                        as a caching allocator packs them) in one
 *                        allocation: stage them, print the staging time
 *                        next to one plain copy of the same bytes (the
 *                        floor), restore and check bit for bit;
 *                        GPU_TRAINER_GAP=torch: PyTorch's caching allocator's
 *                        layout instead (random sizes up to about
 *                        TENSOR_BYTES, each block rounded up to 512 bytes,
 *                        now and then a freed block between; every gap
 *                        byte a poison pattern, 0xdeadbeef words, that no
 *                        tensor holds)
 * Environment: GPU_TRAINER_DEVICE (ordinal, default 0), GPU_TRAINER_MIB
 * (tensor MiB, default 8), GPU_TRAINER_MEM (ipc, vmm or both; default both),
 * GPU_TRAINER_GLOBAL=1 (register them as global tensors, ckpt_register_global:
 * restores then go through the resharding reader's copies to the GPU).
 * Prints "ok ..." and "RESULT key value" lines; exit 0 only if all matched. */
#define CUDA_DRIVER_LOADER
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "cuda_api.h"

static struct cuda_driver cu;
static ckpt_client *c;

#define CU(x) do { CUresult e_ = (x); if (e_) { const char *s_ = "?"; \
	cu.cuGetErrorString(e_, &s_); fprintf(stderr, "%s:%d: %s: %s (%d)\n", __FILE__, \
	__LINE__, #x, s_, e_); exit(2); } } while (0)
#define CP(x) do { int r_ = (x); if (r_ < 0) { fprintf(stderr, "%s:%d: %s: %s (%s)\n", \
	__FILE__, __LINE__, #x, ckpt_strerror(r_), ckpt_last_error(c)); exit(1); } } while (0)
#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); \
	exit(1); } while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct tensor {
	const char *group, *name;
	CUdeviceptr p;
	size_t bytes;
};

static struct tensor T[4];
static int nt;
static char **many_names;    /* "many" mode: tensor names (owned) */
static CUstream st;

static void add(const char *g, const char *n, CUdeviceptr p, size_t bytes)
{
	int64_t shape[1] = { (int64_t)(bytes / 4) };
	struct ckpt_layout l = { { shape[0] }, { 0 }, 0, 1 };
	T[nt] = (struct tensor){ g, n, p, bytes };
	if (getenv("GPU_TRAINER_GLOBAL") && atoi(getenv("GPU_TRAINER_GLOBAL")))
		CP(ckpt_register_global(c, g, n, (void *)(uintptr_t)p, CKPT_I32, 1, shape, &l));
	else
		CP(ckpt_register(c, g, n, (void *)(uintptr_t)p, CKPT_I32, 1, shape));
	nt++;
}

static void setup(size_t mib, const char *mem)
{
	size_t half = (mib << 20) / 2;
	int dev = getenv("GPU_TRAINER_DEVICE") ? atoi(getenv("GPU_TRAINER_DEVICE")) : 0;
	CUcontext ctx;
	CUdevice d;

	CU(cu.cuInit(0));
	CU(cu.cuDeviceGet(&d, dev));
	CU(cu.cuDevicePrimaryCtxRetain(&ctx, d));
	CU(cu.cuCtxSetCurrent(ctx));
	CU(cu.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	if (strcmp(mem, "vmm")) {              /* cudaMalloc-style: one allocation */
		CUdeviceptr a;
		CU(cu.cuMemAlloc_v2(&a, half + 8192));
		add("model", "w0", a + 4096, half / 2);
		add("model", "w1", a + 4096 + half / 2, half / 2);
	}
	if (strcmp(mem, "ipc")) {              /* VMM: two chunks back to back */
		CUmemAllocationProp prop = { 0 };
		CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, dev },
					CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
		CUmemGenericAllocationHandle h[2];
		CUdeviceptr va;
		size_t g, chunk;

		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		/* GPU_TRAINER_VMM_HANDLES=8: FABRIC only, as PyTorch may make */
		prop.requestedHandleTypes = getenv("GPU_TRAINER_VMM_HANDLES") ?
			atoi(getenv("GPU_TRAINER_VMM_HANDLES")) :
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop.location.id = dev;
		CU(cu.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
		chunk = (half / 2 + g - 1) / g * g;
		CU(cu.cuMemAddressReserve(&va, 2 * chunk, 0, 0, 0));
		for (int i = 0; i < 2; i++) {
			CU(cu.cuMemCreate(&h[i], chunk, &prop, 0));
			CU(cu.cuMemMap(va + i * chunk, chunk, 0, h[i], 0));
			CU(cu.cuMemSetAccess(va + i * chunk, chunk, &acc, 1));
		}
		/* straddles the chunk boundary */
		add("optim", "m", va + chunk - half / 4, half / 2);
		add("optim", "v", va + chunk + half / 4, half / 4);
	}
}

/* the "kernels": write value v into every tensor, on the stream */
static void kernel_fill(uint32_t v)
{
	for (int i = 0; i < nt; i++)
		CU(cu.cuMemsetD32Async(T[i].p, v, T[i].bytes / 4, st));
}

static void check_fill(uint32_t v, const char *what)
{
	for (int i = 0; i < nt; i++) {
		uint32_t *h = malloc(T[i].bytes);
		CU(cu.cuMemcpyDtoH_v2(h, T[i].p, T[i].bytes));
		for (size_t k = 0; k < T[i].bytes / 4; k++)
			if (h[k] != v)
				FAIL("%s: %s/%s word %zu is 0x%08x, expected 0x%08x", what,
				     T[i].group, T[i].name, k, h[k], v);
		free(h);
	}
}

static uint64_t save_stream(uint64_t step)
{
	uint64_t t;
	int r;
	/* at most 8 stream saves stage at once: wait for room */
	while ((r = ckpt_save_stream(c, step, st, &t)) == -EBUSY)
		usleep(1000);
	if (r < 0 || r == CKPT_UNORDERED)
		FAIL("ckpt_save_stream(%llu): %d %s", (unsigned long long)step, r,
		     ckpt_last_error(c));
	return t;
}

static void restore_check(uint64_t step, uint32_t v)
{
	uint64_t got;
	kernel_fill(0);
	CU(cu.cuStreamSynchronize(st));
	CP(ckpt_restore(c, (int64_t)step, 0, &got));
	if (got != step)
		FAIL("restored step %llu, asked %llu", (unsigned long long)got,
		     (unsigned long long)step);
	check_fill(v, "after restore");
}

static uint32_t val(uint64_t step)
{
	return 0x51000000u | (uint32_t)step * 0x00010101u;
}

/* The floor: plain copies of every tensor to pinned host memory and back
 * on one stream, as fast as this process can do them. */
static void floors(size_t total)
{
	CUstream fs;
	uint8_t *pin;
	double t0, d2h, h2d;
	size_t off = 0;

	CU(cu.cuStreamCreate(&fs, CU_STREAM_NON_BLOCKING));
	CU(cu.cuMemHostAlloc((void **)&pin, total, 0));
	for (int rep = 0; rep < 2; rep++) {        /* the first pass warms up */
		t0 = now_s();
		off = 0;
		for (int i = 0; i < nt; off += T[i].bytes, i++)
			CU(cu.cuMemcpyDtoHAsync_v2(pin + off, T[i].p, T[i].bytes, fs));
		CU(cu.cuStreamSynchronize(fs));
		d2h = now_s() - t0;
	}
	t0 = now_s();
	off = 0;
	for (int i = 0; i < nt; off += T[i].bytes, i++)
		CU(cu.cuMemcpyHtoDAsync_v2(T[i].p, pin + off, T[i].bytes, fs));
	CU(cu.cuStreamSynchronize(fs));
	h2d = now_s() - t0;
	CU(cu.cuMemFreeHost(pin));
	CU(cu.cuStreamDestroy_v2(fs));
	printf("RESULT floor_d2h_GBps %.3f\n", total / d2h / 1e9);
	printf("RESULT floor_h2d_GBps %.3f\n", total / h2d / 1e9);
}

/* Let a stager held at a failpoint go on (fail.h: write, close). */
static void release_hold(const char *fifo)
{
	FILE *f = fopen(fifo, "w");
	if (f) {
		fputs("go\n", f);
		fclose(f);
	}
}

/* Wait up to ms for event e; 1 if it completed. */
static int event_within(CUevent e, int ms)
{
	for (int i = 0; i < ms; i++) {
		CUresult r = cu.cuEventQuery(e);
		if (r == 0)
			return 1;
		if (r != CUDA_ERROR_NOT_READY)
			CU(r);
		usleep(1000);
	}
	return 0;
}

static int deferred(const char *fifo)
{
	const char *g = getenv("GPU_TRAINER_GATE");
	int now = g && !strcmp(g, "now");
	size_t act_words = 256 << 10;
	char held[4096];
	CUdeviceptr act;
	CUevent fwd, opt;
	uint64_t t;
	int r;

	snprintf(held, sizeof(held), "%s.held", fifo);
	CU(cu.cuMemAlloc_v2(&act, act_words * 4));
	CU(cu.cuEventCreate(&fwd, CU_EVENT_DISABLE_TIMING));
	CU(cu.cuEventCreate(&opt, CU_EVENT_DISABLE_TIMING));
	kernel_fill(val(1));
	CU(cu.cuStreamSynchronize(st));
	if (now)
		t = save_stream(1);
	else if ((r = ckpt_save_stream_flags(c, 1, st, CKPT_GATE_LATER, &t)) != 0)
		FAIL("ckpt_save_stream_flags: %d %s", r, ckpt_last_error(c));
	/* the next forward pass: activations only, not the saved tensors */
	CU(cu.cuMemsetD32Async(act, 0xf0f0f0f0u, act_words, st));
	CU(cu.cuEventRecord(fwd, st));
	for (int i = 0; access(held, F_OK) != 0; i++) {
		if (i == 10000)
			FAIL("ckptd's stager never reached the failpoint stage.chunk");
		usleep(1000);
	}
	if (!event_within(fwd, 3000)) {
		release_hold(fifo);
		FAIL("the forward pass queued after the save did not run while ckptd "
		     "was staging (%s)", now ? "gated at once, as expected" :
		     "CKPT_GATE_LATER gated the stream");
	}
	if ((r = ckpt_wait(c, t, CKPT_STAGED, 0)) != -EAGAIN) {
		release_hold(fifo);
		FAIL("the save is %s while ckptd's stager is held", r ? "failed" : "STAGED");
	}
	printf("ok the forward pass ran while the save was staging\n");
	CP(ckpt_gate_stream(c, t, st));
	CP(ckpt_gate_stream(c, t, st));            /* idempotent */
	kernel_fill(0x0bad0bad);                   /* the optimizer step */
	CU(cu.cuEventRecord(opt, st));
	if (event_within(opt, 300)) {
		release_hold(fifo);
		FAIL("the optimizer step queued after ckpt_gate_stream ran before the "
		     "save was STAGED");
	}
	printf("ok the optimizer step waits at the gate while the save is staging\n");
	if ((g = getenv("GPU_TRAINER_ORPHAN"))) {
		/* the test kills ckptd now, then makes the file */
		printf("armed\n");
		fflush(stdout);
		while (access(g, F_OK) != 0)
			usleep(10000);
		/* hangs (the simulator's watchdog aborts us) if the gate stays shut */
		CU(cu.cuStreamSynchronize(st));
		check_fill(0x0bad0bad, "after ckptd died");
		if ((r = ckpt_wait(c, t, CKPT_STAGED, -1)) >= 0)
			FAIL("the save of a dead ckptd reports %d", r);
		printf("ok ckptd died with a deferred gate armed: the stream ran on, the "
		       "save failed (%s)\n", ckpt_strerror(r));
		return 0;
	}
	release_hold(fifo);
	CP(ckpt_wait(c, t, CKPT_COMMITTED, -1));
	if (!event_within(opt, 10000))
		FAIL("the optimizer step did not run after STAGED (the gate stayed shut)");
	check_fill(0x0bad0bad, "after the optimizer step");
	CP(ckpt_gate_stream(c, t, st));            /* staged: queues nothing */
	restore_check(1, val(1));
	printf("ok the checkpoint holds the values from before the optimizer step\n");
	return 0;
}

static int roundtrip(void)
{
	size_t total = 0;
	uint8_t **ref = calloc((size_t)nt, sizeof(*ref));
	struct ckpt_times tm;
	uint64_t t, got;
	double t0, stall, held, rt;
	CUevent e;

	for (int i = 0; i < nt; i++) {
		ref[i] = malloc(T[i].bytes);
		for (size_t k = 0; k < T[i].bytes; k++)
			ref[i][k] = (uint8_t)(rand() >> 7);
		CU(cu.cuMemcpyHtoDAsync_v2(T[i].p, ref[i], T[i].bytes, st));
		total += T[i].bytes;
	}
	CU(cu.cuStreamSynchronize(st));
	CU(cu.cuEventCreate(&e, 0));
	floors(total);
	t0 = now_s();
	t = save_stream(1);
	stall = now_s() - t0;
	/* the optimizer step, queued right after: runs only once STAGED */
	kernel_fill(0xdeadbeef);
	CU(cu.cuEventRecord(e, st));
	CU(cu.cuEventSynchronize(e));
	held = now_s() - t0;
	CP(ckpt_wait(c, t, CKPT_COMMITTED, -1));
	CP(ckpt_times(c, t, &tm));
	check_fill(0xdeadbeef, "after the optimizer step");
	/* zero, restore, bit for bit */
	kernel_fill(0);
	CU(cu.cuStreamSynchronize(st));
	t0 = now_s();
	CP(ckpt_restore(c, 1, 0, &got));
	rt = now_s() - t0;
	for (int i = 0; i < nt; i++) {
		uint8_t *h = malloc(T[i].bytes);
		CU(cu.cuMemcpyDtoH_v2(h, T[i].p, T[i].bytes));
		if (memcmp(h, ref[i], T[i].bytes))
			FAIL("%s/%s differs after restore (the checkpoint missed the values "
			     "from before the optimizer step, or restore is not bit-exact)",
			     T[i].group, T[i].name);
		free(h);
	}
	printf("ok the checkpoint holds the values from before the optimizer step\n");
	printf("ok restore into device memory is bit-exact (%d tensors)\n", nt);
	printf("RESULT bytes %zu\n", total);
	printf("RESULT trainer_stall_ms %.3f\n", stall * 1e3);
	printf("RESULT stream_held_ms %.3f\n", held * 1e3);
	printf("RESULT staging_GBps %.3f\n", tm.staged_us ? total / (tm.staged_us * 1e3) : 0);
	printf("RESULT restore_GBps %.3f\n", total / rt / 1e9);
	return 0;
}

static int overlap(int n)
{
	uint64_t *t = calloc((size_t)n + 1, sizeof(*t));
	for (int k = 1; k <= n; k++) {
		kernel_fill(val((uint64_t)k));
		t[k] = save_stream((uint64_t)k);
	}
	kernel_fill(0xfeedf00d);
	CU(cu.cuStreamSynchronize(st));
	for (int k = 1; k <= n; k++)
		CP(ckpt_wait(c, t[k], CKPT_COMMITTED, -1));
	check_fill(0xfeedf00d, "after the last kernel");
	for (int k = 1; k <= n; k++)
		restore_check((uint64_t)k, val((uint64_t)k));
	printf("ok %d overlapping stream saves, each holds its own step's values\n", n);
	return 0;
}

static int sequential(int n)
{
	int retries = getenv("GPU_TRAINER_RETRY") ? 1 : 0;
	uint64_t skipped = 0, first = 1;   /* step numbers of failed saves; k = 1's */
	for (int k = 1; k <= n; k++) {
		uint64_t t;
		int r;
		kernel_fill(val((uint64_t)k));
		t = save_stream((uint64_t)k + skipped);
		/* a failed copy fails STAGED (it never reaches the tensors'
		 * next step) */
		r = ckpt_wait(c, t, CKPT_STAGED, -1);
		if (r == -ENXIO && retries-- > 0) {   /* as the next step */
			printf("retrying step %d: %s\n", k--, ckpt_last_error(c));
			skipped++;
			continue;
		}
		CP(r);
		CP(ckpt_wait(c, t, CKPT_COMMITTED, -1));
		if (k == 1)
			first = 1 + skipped;
	}
	restore_check((uint64_t)n + skipped, val((uint64_t)n));
	restore_check(first, val(1));
	printf("ok %d stream saves one after another (ring slots reused)\n", n);
	return 0;
}

static int close_inflight(int n)
{
	for (int k = 1; k <= n; k++) {
		kernel_fill(val((uint64_t)k));
		save_stream((uint64_t)k);
	}
	kernel_fill(0x0c105ed0);
	ckpt_close(c);
	c = NULL;
	/* hangs (and the simulator's watchdog aborts us) if a gate stays shut */
	CU(cu.cuStreamSynchronize(st));
	check_fill(0x0c105ed0, "after close");
	printf("ok ckpt_close with %d stream saves in flight: the stream drained\n", n);
	return 0;
}

/* "many N": the per-copy cost of many small tensors.  The floor is one
 * pinned device-to-host copy of all their bytes: what staging would cost
 * if nothing were paid per tensor. */
#define POISON 0xdeadbeefu

static int many(int n)
{
	size_t tb = getenv("GPU_TRAINER_TENSOR_BYTES") ?
		    strtoul(getenv("GPU_TRAINER_TENSOR_BYTES"), NULL, 10) : 4096;
	const char *gs = getenv("GPU_TRAINER_GAP") ? getenv("GPU_TRAINER_GAP") : "0";
	int torch = !strcmp(gs, "torch");
	size_t gap = torch ? 0 : strtoul(gs, NULL, 10);
	size_t total = 0, span = 0, *at, *len;
	uint8_t *ref, *back, *pin;
	struct ckpt_times tm;
	CUdeviceptr a;
	CUstream fs;
	double t0, floor_s = 0, save_s;
	uint64_t t, got;

	if (n <= 0 || !tb || tb % 4)
		FAIL("many: need N > 0 and GPU_TRAINER_TENSOR_BYTES a multiple of 4");
	at = calloc((size_t)n, sizeof(*at));
	len = calloc((size_t)n, sizeof(*len));
	srand(getenv("GPU_TRAINER_SEED") ? (unsigned)atoi(getenv("GPU_TRAINER_SEED")) : 1);
	for (int i = 0; i < n; i++) {
		len[i] = torch ? 4 * (1 + (size_t)rand() % (tb / 2)) : tb;
		at[i] = span;
		span += torch ? ((len[i] + 511) & ~(size_t)511) +
				(rand() % 8 == 0 ? 512 * (size_t)(1 + rand() % 4) : 0)
			      : tb + gap;
		total += len[i];
	}
	ref = malloc(span);
	back = malloc(span);
	many_names = calloc((size_t)n, sizeof(*many_names));
	for (size_t k = 0; k < span / 4; k++)
		((uint32_t *)ref)[k] = POISON;
	for (int i = 0; i < n; i++)
		for (size_t k = 0; k < len[i] / 4; k++) {
			uint32_t w = (uint32_t)rand() * 2654435761u;
			((uint32_t *)(ref + at[i]))[k] = w == POISON ? 0 : w;
		}
	CU(cu.cuMemAlloc_v2(&a, span));
	CU(cu.cuMemcpyHtoD_v2(a, ref, span));
	for (int i = 0; i < n; i++) {
		int64_t shape[1] = { (int64_t)(len[i] / 4) };
		char nm[32];
		snprintf(nm, sizeof(nm), "t%06d", i);
		many_names[i] = strdup(nm);
		CP(ckpt_register(c, "model", many_names[i], (void *)(uintptr_t)(a + at[i]),
				 CKPT_I32, 1, shape));
	}
	CU(cu.cuStreamCreate(&fs, CU_STREAM_NON_BLOCKING));
	CU(cu.cuMemHostAlloc((void **)&pin, total, 0));
	for (int rep = 0; rep < 2; rep++) {        /* the first pass warms up */
		t0 = now_s();
		CU(cu.cuMemcpyDtoHAsync_v2(pin, a, total, fs));
		CU(cu.cuStreamSynchronize(fs));
		floor_s = now_s() - t0;
	}
	CU(cu.cuMemFreeHost(pin));
	CU(cu.cuStreamDestroy_v2(fs));
	CU(cu.cuStreamSynchronize(st));
	t0 = now_s();
	t = save_stream(1);
	CP(ckpt_wait(c, t, CKPT_STAGED, -1));
	save_s = now_s() - t0;
	CP(ckpt_wait(c, t, CKPT_COMMITTED, -1));
	CP(ckpt_times(c, t, &tm));
	CU(cu.cuMemsetD32Async(a, 0, span / 4, st));
	CU(cu.cuStreamSynchronize(st));
	CP(ckpt_restore(c, 1, 0, &got));
	CU(cu.cuMemcpyDtoH_v2(back, a, span));
	for (int i = 0; i < n; i++)
		if (memcmp(back + at[i], ref + at[i], len[i]))
			FAIL("many: tensor %d of %d differs after restore", i, n);
	printf("ok %d tensors, %zu bytes in a span of %zu, staged and restored bit for bit\n",
	       n, total, span);
	printf("RESULT tensors %d\n", n);
	printf("RESULT bytes %zu\n", total);
	printf("RESULT floor_one_copy_ms %.3f\n", floor_s * 1e3);
	printf("RESULT staged_ms %.3f\n", tm.staged_us / 1e3);
	printf("RESULT save_to_staged_ms %.3f\n", save_s * 1e3);
	printf("RESULT staged_over_floor %.2f\n", tm.staged_us / 1e3 / (floor_s * 1e3));
	return 0;
}

int main(int argc, char **argv)
{
	const char *mem = getenv("GPU_TRAINER_MEM") ? getenv("GPU_TRAINER_MEM") : "both";
	size_t mib = getenv("GPU_TRAINER_MIB") ? strtoul(getenv("GPU_TRAINER_MIB"), NULL, 10) : 8;
	void *h;
	const char *miss;

	if (argc < 4) {
		fprintf(stderr, "usage: gpu_trainer SOCKET JOB roundtrip|overlap N|sequential N|"
			"close N|die\n");
		return 2;
	}
	if (!(h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) ||
	    (miss = cuda_driver_load(h, &cu))) {
		fprintf(stderr, "no usable libcuda.so.1\n");
		return 77;
	}
	CP(ckpt_connect(argv[1], argv[2], 0, 1, &c));
	if (!strcmp(argv[3], "many") && argc > 4) {
		CUcontext ctx;
		CUdevice d;
		CU(cu.cuInit(0));
		CU(cu.cuDeviceGet(&d, getenv("GPU_TRAINER_DEVICE") ?
				  atoi(getenv("GPU_TRAINER_DEVICE")) : 0));
		CU(cu.cuDevicePrimaryCtxRetain(&ctx, d));
		CU(cu.cuCtxSetCurrent(ctx));
		CU(cu.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
		return many(atoi(argv[4]));
	}
	setup(mib ? mib : 8, mem);
	if (!strcmp(argv[3], "roundtrip"))
		return roundtrip();
	if (!strcmp(argv[3], "overlap") && argc > 4)
		return overlap(atoi(argv[4]));
	if (!strcmp(argv[3], "sequential") && argc > 4)
		return sequential(atoi(argv[4]));
	if (!strcmp(argv[3], "restore") && argc > 4) {
		restore_check((uint64_t)atoi(argv[4]), val((uint64_t)atoi(argv[4])));
		printf("ok step %s restored into device memory\n", argv[4]);
		return 0;
	}
	if (!strcmp(argv[3], "close") && argc > 4)
		return close_inflight(atoi(argv[4]));
	if (!strcmp(argv[3], "deferred") && argc > 4)
		return deferred(argv[4]);
	if ((!strcmp(argv[3], "hold") || !strcmp(argv[3], "orphan")) && argc > 4) {
		volatile uint32_t *w;
		CUdeviceptr dw;
		uint64_t t;
		int r;
		CU(cu.cuMemHostAlloc((void **)&w, 64, CU_MEMHOSTALLOC_DEVICEMAP));
		CU(cu.cuMemHostGetDevicePointer_v2(&dw, (void *)w, 0));
		*w = 0;
		CU(cu.cuStreamWaitValue32_v2(st, dw, 1, CU_STREAM_WAIT_VALUE_GEQ));
		kernel_fill(val(1));
		t = save_stream(1);
		kernel_fill(0x0bad0bad);            /* the optimizer step */
		printf("armed\n");
		fflush(stdout);
		while (access(argv[4], F_OK) != 0)
			usleep(10000);
		*w = 1;
		if (!strcmp(argv[3], "hold")) {
			CP(ckpt_wait(c, t, CKPT_COMMITTED, -1));
			restore_check(1, val(1));
			printf("ok a save held behind its stream finished after the wait\n");
			return 0;
		}
		/* hangs (the simulator's watchdog aborts us) if the gate stays shut */
		CU(cu.cuStreamSynchronize(st));
		check_fill(0x0bad0bad, "after ckptd died");
		if ((r = ckpt_wait(c, t, CKPT_STAGED, -1)) >= 0)
			FAIL("the save of a dead ckptd reports %d", r);
		printf("ok ckptd died with a stream save armed: the stream ran on, "
		       "the save failed (%s)\n", ckpt_strerror(r));
		ckpt_close(c);
		return 0;
	}
	if (!strcmp(argv[3], "managed")) {
		int64_t shape[1] = { 1024 };
		CUdeviceptr m;
		CU(cu.cuMemAllocManaged(&m, 4096, 1));
		if (ckpt_register(c, "model", "managed", (void *)(uintptr_t)m, CKPT_I32, 1,
				  shape) != -EOPNOTSUPP ||
		    !strstr(ckpt_last_error(c), "managed memory (cudaMallocManaged)"))
			FAIL("managed memory: %s", ckpt_last_error(c));
		printf("ok managed memory refused: %s\n", ckpt_last_error(c));
		return 0;
	}
	if (!strcmp(argv[3], "empty")) {
		int64_t zero[2] = { 0, 7 };
		CUdeviceptr a;
		uint64_t t, got;
		CU(cu.cuMemAlloc_v2(&a, 4096));
		CP(ckpt_register(c, "model", "empty_null", NULL, CKPT_F32, 1, zero));
		CP(ckpt_register(c, "model", "empty_end", (void *)(uintptr_t)(a + 4096),
				 CKPT_F32, 2, zero));
		kernel_fill(val(1));
		t = save_stream(1);
		CP(ckpt_wait(c, t, CKPT_COMMITTED, -1));
		kernel_fill(0);
		CU(cu.cuStreamSynchronize(st));
		CP(ckpt_restore(c, 1, 0, &got));
		check_fill(val(1), "after restore");
		printf("ok zero-element CUDA tensors saved and restored\n");
		return 0;
	}
	if (!strcmp(argv[3], "die")) {
		kernel_fill(val(1));
		save_stream(1);
		kill(getpid(), SIGKILL);
	}
	fprintf(stderr, "unknown mode %s\n", argv[3]);
	return 2;
}
