/* test_cudasim.c - checks of the CUDA driver simulator itself against the
 * semantics cuda.h documents: cyclic GEQ and the other wait flags, hardware
 * queue aliasing, implicit synchronisation, asynchronous copies, the legacy
 * stream, IPC memory and events and VMM fds across processes, device
 * renumbering, and the watchdog.  Every check runs in a fresh child process
 * (the driver reads its environment once); cross-process peers are this
 * program re-executed ("peer ..." arguments).  Loads the simulator with
 * dlopen (CKPT_CUDASIM_LIB, default build/cudasim/libcuda.so.1). */
#define CUDA_DRIVER_LOADER
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../daemon/cuda_api.h"
#include "../unit/testhelp.h"

static struct cuda_driver cu;
static CUcontext ctx;
static char self[4096];

static int load(void)
{
	const char *lib = getenv("CKPT_CUDASIM_LIB");
	void *h = dlopen(lib ? lib : "build/cudasim/libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	const char *miss;
	if (!h) {
		fprintf(stderr, "    %s\n", dlerror());
		return -1;
	}
	if ((miss = cuda_driver_load(h, &cu))) {
		fprintf(stderr, "    the simulator lacks %s\n", miss);
		return -1;
	}
	if (cu.cuInit(0) || cu.cuDevicePrimaryCtxRetain(&ctx, 0) || cu.cuCtxSetCurrent(ctx))
		return -1;
	return 0;
}

static void msleep(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

/* Run fn in a child with env ("K=V K=V"); its exit status is the result. */
static int isolated(int (*fn)(void), const char *env)
{
	pid_t pid = fork();
	int st;
	if (pid == 0) {
		char buf[512], *tok, *save = NULL;
		snprintf(buf, sizeof(buf), "%s", env ? env : "");
		for (tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
			putenv(strdup(tok));
		_exit(load() < 0 ? 1 : fn());
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return 1;
	if (WIFSIGNALED(st)) {
		fprintf(stderr, "    child died of signal %d\n", WTERMSIG(st));
		return 1;
	}
	return WEXITSTATUS(st);
}

/* A pinned host word a stream can wait on. */
static uint32_t *word_new(CUdeviceptr *d)
{
	void *p = NULL;
	if (cu.cuMemHostAlloc(&p, 64, CU_MEMHOSTALLOC_DEVICEMAP) ||
	    cu.cuMemHostGetDevicePointer_v2(d, p, 0))
		return NULL;
	*(volatile uint32_t *)p = 0;
	return p;
}

/* Does a wait (flags, value) on a word holding w pass?  Asked of the
 * simulator: arm, record an event behind, look at it after a while. */
static int passes(uint32_t w, uint32_t value, unsigned flags, CUstream s, CUevent e,
		  volatile uint32_t *word, CUdeviceptr d, uint32_t release)
{
	int r;
	*word = w;
	if (cu.cuStreamWaitValue32_v2(s, d, value, flags) || cu.cuEventRecord(e, s))
		return -1;
	msleep(100);
	r = cu.cuEventQuery(e) == CUDA_SUCCESS;
	*word = release;                   /* unblock, whatever the case */
	cu.cuEventSynchronize(e);
	return r;
}

static int t_wait_flags(void)
{
	CUstream s;
	CUevent e;
	CUdeviceptr d;
	volatile uint32_t *w = word_new(&d);

	CHECK(w && !cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) && !cu.cuEventCreate(&e, 0));
	/* GEQ is cyclic: (int32_t)(*addr - value) >= 0 */
	CHECK_EQ(passes(5, 5, CU_STREAM_WAIT_VALUE_GEQ, s, e, w, d, 5), 1);
	CHECK_EQ(passes(6, 5, CU_STREAM_WAIT_VALUE_GEQ, s, e, w, d, 6), 1);
	CHECK_EQ(passes(4, 5, CU_STREAM_WAIT_VALUE_GEQ, s, e, w, d, 5), 0);
	CHECK_EQ(passes(UINT32_MAX, 5, CU_STREAM_WAIT_VALUE_GEQ, s, e, w, d, 5), 0);
	CHECK_EQ(passes(2, UINT32_MAX, CU_STREAM_WAIT_VALUE_GEQ, s, e, w, d, 2), 1);
	CHECK_EQ(passes(5, 0x80000005u, CU_STREAM_WAIT_VALUE_GEQ, s, e, w, d, 0x80000005u), 0);
	CHECK_EQ(passes(3, 4, CU_STREAM_WAIT_VALUE_EQ, s, e, w, d, 4), 0);
	CHECK_EQ(passes(4, 4, CU_STREAM_WAIT_VALUE_EQ, s, e, w, d, 4), 1);
	CHECK_EQ(passes(0x10, 0x01, CU_STREAM_WAIT_VALUE_AND, s, e, w, d, 1), 0);
	CHECK_EQ(passes(0x11, 0x01, CU_STREAM_WAIT_VALUE_AND, s, e, w, d, 1), 1);
	CHECK_EQ(passes(UINT32_MAX, 0, CU_STREAM_WAIT_VALUE_NOR, s, e, w, d, 0), 0);
	CHECK_EQ(passes(0xfffffffeu, 0, CU_STREAM_WAIT_VALUE_NOR, s, e, w, d, 0), 1);
	/* a write on another stream releases the wait */
	{
		CUstream s2;
		*w = 0;
		CHECK(!cu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
		CHECK(!cu.cuStreamWaitValue32_v2(s, d, 9, CU_STREAM_WAIT_VALUE_GEQ));
		CHECK(!cu.cuEventRecord(e, s));
		CHECK(!cu.cuStreamWriteValue32_v2(s2, d, 9, 0));
		CHECK(!cu.cuEventSynchronize(e));
		CHECK_EQ(*w, 9);
	}
	return 0;
}

/* Streams beyond CUDA_DEVICE_MAX_CONNECTIONS share hardware queues: with
 * 2 queues (legacy on 0), streams 1 and 3 share queue 1, and a wait on
 * stream 1 holds up stream 3's copy; stream 2 (queue 0) runs on. */
static int aliasing(int expect_blocked)
{
	CUstream s1, s2, s3;
	CUevent e2, e3;
	CUdeviceptr d, dev;
	volatile uint32_t *w = word_new(&d);
	static char host[4096];

	CHECK(w && !cu.cuMemAlloc_v2(&dev, 4096));
	CHECK(!cu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
	CHECK(!cu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
	CHECK(!cu.cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
	CHECK(!cu.cuEventCreate(&e2, 0) && !cu.cuEventCreate(&e3, 0));
	CHECK(!cu.cuStreamWaitValue32_v2(s1, d, 1, CU_STREAM_WAIT_VALUE_GEQ));
	CHECK(!cu.cuMemcpyDtoHAsync_v2(host, dev, sizeof(host), s2));
	CHECK(!cu.cuEventRecord(e2, s2));
	CHECK(!cu.cuMemcpyDtoHAsync_v2(host, dev, sizeof(host), s3));
	CHECK(!cu.cuEventRecord(e3, s3));
	CHECK(!cu.cuEventSynchronize(e2));
	msleep(200);
	CHECK_EQ(cu.cuEventQuery(e3) == CUDA_ERROR_NOT_READY, expect_blocked);
	*w = 1;
	CHECK(!cu.cuEventSynchronize(e3));
	return 0;
}

static int t_queue_aliasing(void) { return aliasing(1); }
static int t_queue_no_aliasing(void) { return aliasing(0); }

static volatile uint32_t *g_word;
static _Atomic int g_released;    /* read by the main thread: no GPU in between for TSan */

static void *release_later(void *arg)
{
	(void)arg;
	msleep(200);
	g_released = 1;
	*g_word = 1;
	return NULL;
}

/* cuMemHostAlloc / cuMemHostRegister / cuMemFree wait for all
 * outstanding work. */
static int t_implicit_sync(void)
{
	CUstream s;
	CUdeviceptr d;
	pthread_t t;
	void *p;
	static char buf[8192] __attribute__((aligned(4096)));

	CHECK((g_word = word_new(&d)) && !cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(!cu.cuStreamWaitValue32_v2(s, d, 1, CU_STREAM_WAIT_VALUE_GEQ));
	pthread_create(&t, NULL, release_later, NULL);
	CHECK(!cu.cuMemHostAlloc(&p, 4096, 0));
	CHECK_EQ(g_released, 1);             /* it could only return after */
	pthread_join(t, NULL);
	g_released = 0;
	*g_word = 0;
	CHECK(!cu.cuStreamWaitValue32_v2(s, d, 1, CU_STREAM_WAIT_VALUE_GEQ));
	pthread_create(&t, NULL, release_later, NULL);
	CHECK(!cu.cuMemHostRegister_v2(buf, sizeof(buf), 0));
	CHECK_EQ(g_released, 1);
	pthread_join(t, NULL);
	/* cuMemFree too */
	{
		CUdeviceptr dev;
		CHECK(!cu.cuMemAlloc_v2(&dev, 4096));
		g_released = 0;
		*g_word = 0;
		CHECK(!cu.cuStreamWaitValue32_v2(s, d, 1, CU_STREAM_WAIT_VALUE_GEQ));
		pthread_create(&t, NULL, release_later, NULL);
		CHECK(!cu.cuMemFree_v2(dev));
		CHECK_EQ(g_released, 1);
		pthread_join(t, NULL);
	}
	return 0;
}

/* An async copy lands later: reading early shows the old bytes. */
static int t_async_copy(void)
{
	static uint8_t src[1 << 16], dst[1 << 16];
	CUdeviceptr dev;
	CUstream s;

	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 7 + 1);
	CHECK(!cu.cuMemAlloc_v2(&dev, sizeof(src)) && !cu.cuStreamCreate(&s, 0));
	CHECK(!cu.cuMemcpyHtoDAsync_v2(dev, src, sizeof(src), s));
	CHECK(!cu.cuMemcpyDtoHAsync_v2(dst, dev, sizeof(dst), s));
	CHECK_EQ(dst[5], 0);                 /* 2 x 300 ms have not passed */
	CHECK(!cu.cuStreamSynchronize(s));
	CHECK(!memcmp(src, dst, sizeof(src)));
	/* out of range and host pointers are refused */
	CHECK_EQ(cu.cuMemcpyDtoHAsync_v2(dst, dev + 1, sizeof(dst), s), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cu.cuMemcpyDtoHAsync_v2(dst, (CUdeviceptr)(uintptr_t)src, 16, s),
		 CUDA_ERROR_INVALID_VALUE);
	return 0;
}

/* CKPT_CUDASIM_STICKY_COPY=2: the second device-to-host copy faults with
 * CUDA_ERROR_ILLEGAL_ADDRESS, and every call on the context returns it
 * until cuDevicePrimaryCtxReset; streams made before the reset are gone. */
static int t_sticky(void)
{
	CUstream s, s2;
	CUdeviceptr d, d2;
	uint8_t buf[64];
	CUdevice dv;

	CHECK(!cu.cuDeviceGet(&dv, 0) && !cu.cuMemAlloc_v2(&d, 64));
	CHECK(!cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(!cu.cuMemcpyDtoHAsync_v2(buf, d, 64, s));
	CHECK_EQ(cu.cuMemcpyDtoHAsync_v2(buf, d, 64, s), CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK_EQ(cu.cuMemcpyDtoHAsync_v2(buf, d, 64, s), CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK_EQ(cu.cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK_EQ(cu.cuStreamCreate(&s2, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK_EQ(cu.cuMemAlloc_v2(&d2, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK(!cu.cuDevicePrimaryCtxReset_v2(dv));
	CHECK_EQ(cu.cuMemcpyDtoHAsync_v2(buf, d, 64, s), CUDA_ERROR_INVALID_HANDLE);
	CHECK(!cu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
	CHECK(!cu.cuMemcpyDtoHAsync_v2(buf, d, 64, s2) && !cu.cuStreamSynchronize(s2));
	return 0;
}

/* The legacy default stream waits for blocking streams, not for
 * non-blocking ones. */
static int t_legacy_stream(void)
{
	CUstream blk, nb;
	CUevent e;
	CUdeviceptr d, dev;
	volatile uint32_t *w = word_new(&d);

	CHECK(w && !cu.cuMemAlloc_v2(&dev, 64) && !cu.cuEventCreate(&e, 0));
	CHECK(!cu.cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
	CHECK(!cu.cuStreamWaitValue32_v2(nb, d, 1, CU_STREAM_WAIT_VALUE_GEQ));
	CHECK(!cu.cuMemsetD32Async(dev, 7, 16, NULL));
	CHECK(!cu.cuEventRecord(e, NULL));
	CHECK(!cu.cuEventSynchronize(e));    /* not held up by nb */
	CHECK(!cu.cuStreamCreate(&blk, 0));
	*w = 0;
	CHECK(!cu.cuStreamWaitValue32_v2(blk, d, 2, CU_STREAM_WAIT_VALUE_GEQ));
	CHECK(!cu.cuEventRecord(e, NULL));
	msleep(200);
	CHECK_EQ(cu.cuEventQuery(e), CUDA_ERROR_NOT_READY);   /* held up by blk */
	*w = 2;
	CHECK(!cu.cuEventSynchronize(e));
	return 0;
}

static int t_renumbering(void)
{
	CUuuid u0, u1;
	int n;
	CHECK(!cu.cuDeviceGetCount(&n));
	CHECK_EQ(n, 2);
	CHECK(!cu.cuDeviceGetUuid_v2(&u0, 0) && !cu.cuDeviceGetUuid_v2(&u1, 1));
	CHECK_EQ((uint8_t)u0.bytes[15], 2);   /* CUDA_VISIBLE_DEVICES=2,0,9,1 */
	CHECK_EQ((uint8_t)u1.bytes[15], 0);   /* ends at the invalid 9 */
	return 0;
}

/* --- across processes ------------------------------------------------------- */

static void hex(const void *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", ((const uint8_t *)b)[i]);
}

static void unhex(const char *s, void *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		sscanf(s + 2 * i, "%2x", &v);
		((uint8_t *)b)[i] = (uint8_t)v;
	}
}

/* Run "self peer <what> <arg>" with stdin/stdout pipes. */
static pid_t peer(const char *what, const char *arg, int *to, int *from)
{
	int a[2], b[2];
	pid_t pid;
	if (pipe(a) < 0 || pipe(b) < 0)
		return -1;
	if ((pid = fork()) == 0) {
		dup2(a[0], 0);
		dup2(b[1], 1);
		execl(self, self, "peer", what, arg, (char *)NULL);
		_exit(127);
	}
	close(a[0]);
	close(b[1]);
	*to = a[1];
	*from = b[0];
	return pid;
}

static int peer_status(pid_t pid)
{
	int st;
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static int t_ipc_mem(void)
{
	static uint8_t pat[8192], back[8192];
	CUipcMemHandle h;
	CUdeviceptr dev, other;
	char hx[129], c;
	int to, from;
	pid_t pid;

	for (size_t i = 0; i < sizeof(pat); i++)
		pat[i] = (uint8_t)(i ^ 0x5a);
	CHECK(!cu.cuMemAlloc_v2(&dev, sizeof(pat)));
	CHECK(!cu.cuMemcpyHtoD_v2(dev, pat, sizeof(pat)));
	CHECK(!cu.cuIpcGetMemHandle(&h, dev));
	/* not in the exporting process */
	CHECK_EQ(cu.cuIpcOpenMemHandle_v2(&other, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
		 CUDA_ERROR_INVALID_CONTEXT);
	hex(&h, sizeof(h), hx);
	CHECK((pid = peer("ipcmem", hx, &to, &from)) > 0);
	CHECK_EQ(read(from, &c, 1), 1);     /* the peer checked and rewrote it */
	CHECK_EQ(peer_status(pid), 0);
	CHECK(!cu.cuMemcpyDtoH_v2(back, dev, sizeof(back)));
	for (size_t i = 0; i < sizeof(pat); i++)
		CHECK_EQ(back[i], (uint8_t)~pat[i]);
	close(to);
	close(from);
	return 0;
}

static int peer_ipcmem(const char *arg)
{
	static uint8_t got[8192];
	CUipcMemHandle h;
	CUdeviceptr p;
	unhex(arg, &h, sizeof(h));
	if (cu.cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ||
	    cu.cuMemcpyDtoH_v2(got, p, sizeof(got)))
		return 2;
	for (size_t i = 0; i < sizeof(got); i++) {
		if (got[i] != (uint8_t)(i ^ 0x5a))
			return 3;
		got[i] = (uint8_t)~got[i];
	}
	if (cu.cuMemcpyHtoD_v2(p, got, sizeof(got)) || cu.cuIpcCloseMemHandle(p))
		return 4;
	return write(1, "k", 1) == 1 ? 0 : 5;
}

/* The peer sees our event pending, tells us, then waits on it from a
 * stream of its own until we release the wait in front of the record. */
static int t_ipc_event(void)
{
	CUipcEventHandle h;
	CUevent e;
	CUstream s;
	CUdeviceptr d;
	volatile uint32_t *w = word_new(&d);
	char hx[129], c;
	int to, from;
	pid_t pid;

	CHECK(w && !cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK_EQ(cu.cuEventCreate(&e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
	CHECK(!cu.cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
	CHECK(!cu.cuIpcGetEventHandle(&h, e));
	CHECK(!cu.cuStreamWaitValue32_v2(s, d, 1, CU_STREAM_WAIT_VALUE_GEQ));
	CHECK(!cu.cuEventRecord(e, s));
	hex(&h, sizeof(h), hx);
	CHECK((pid = peer("ipcevent", hx, &to, &from)) > 0);
	CHECK_EQ(read(from, &c, 1), 1);
	CHECK_EQ(c, 'p');                    /* pending, as seen by the peer */
	*w = 1;
	CHECK_EQ(write(to, "go", 2), 2);
	CHECK_EQ(peer_status(pid), 0);
	close(to);
	close(from);
	return 0;
}

static int peer_ipcevent(const char *arg)
{
	CUipcEventHandle h;
	CUevent e, mine;
	CUstream s;
	char buf[2];
	unhex(arg, &h, sizeof(h));
	if (cu.cuIpcOpenEventHandle(&e, h) || cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) ||
	    cu.cuEventCreate(&mine, CU_EVENT_DISABLE_TIMING))
		return 2;
	if (cu.cuEventQuery(e) != CUDA_ERROR_NOT_READY)
		return 3;
	if (cu.cuStreamWaitEvent(s, e, 0) || cu.cuEventRecord(mine, s))
		return 4;
	msleep(100);
	if (cu.cuEventQuery(mine) != CUDA_ERROR_NOT_READY)
		return 5;                    /* our stream must wait for theirs */
	if (write(1, "p", 1) != 1 || read(0, buf, 2) != 2)
		return 6;
	return cu.cuEventSynchronize(mine) || cu.cuEventQuery(e) ? 7 : 0;
}

/* VMM memory travels as a POSIX fd and maps in the peer. */
static int t_vmm_fd(void)
{
	CUmemAllocationProp prop = { 0 };
	CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
				CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemGenericAllocationHandle hdl, nofd, back;
	CUdeviceptr va, base;
	size_t g, sz;
	int fd, to, from, bad;
	char arg[32], c;
	static uint8_t pat[4096];
	pid_t pid;

	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	CHECK(!cu.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK(!cu.cuMemCreate(&nofd, g, &prop, 0));
	CHECK_EQ(cu.cuMemExportToShareableHandle(&bad, nofd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
						 0), CUDA_ERROR_INVALID_VALUE);
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CHECK(!cu.cuMemCreate(&hdl, g, &prop, 0));
	CHECK(!cu.cuMemAddressReserve(&va, 2 * g, 0, 0, 0));
	CHECK(!cu.cuMemMap(va + g, g, 0, hdl, 0));
	/* mapped but not accessible until cuMemSetAccess */
	CHECK_EQ(cu.cuMemcpyHtoD_v2(va + g, pat, sizeof(pat)), CUDA_ERROR_INVALID_VALUE);
	CHECK(!cu.cuMemSetAccess(va + g, g, &acc, 1));
	memset(pat, 0xab, sizeof(pat));
	CHECK(!cu.cuMemcpyHtoD_v2(va + g + 4096, pat, sizeof(pat)));
	CHECK(!cu.cuMemGetAddressRange_v2(&base, &sz, va + g + 100));
	CHECK(base == va + g && sz == g);
	CHECK(!cu.cuMemRetainAllocationHandle(&back, (void *)(uintptr_t)(va + g + 5)));
	CHECK(back == hdl);
	CHECK(!cu.cuMemExportToShareableHandle(&fd, hdl, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CHECK(fcntl(fd, F_SETFD, 0) == 0);   /* the peer inherits it */
	snprintf(arg, sizeof(arg), "%d", fd);
	CHECK((pid = peer("vmm", arg, &to, &from)) > 0);
	CHECK_EQ(read(from, &c, 1), 1);
	CHECK_EQ(peer_status(pid), 0);
	return 0;
}

static int peer_vmm(const char *arg)
{
	CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
				CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	static uint8_t got[4096];
	int fd = atoi(arg), pfd;
	size_t g = 2u << 20;

	if (cu.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
					      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return 2;
	close(fd);
	if (cu.cuMemAddressReserve(&va, g, 0, 0, 0) || cu.cuMemMap(va, g, 0, h, 0) ||
	    cu.cuMemRelease(h) || cu.cuMemSetAccess(va, g, &acc, 1) ||
	    cu.cuMemcpyDtoH_v2(got, va + 4096, sizeof(got)))
		return 3;
	for (size_t i = 0; i < sizeof(got); i++)
		if (got[i] != 0xab)
			return 4;
	/* a plain memfd is not GPU memory */
	pfd = memfd_create("not-gpu", 0);
	if (ftruncate(pfd, g) < 0 ||
	    cu.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)pfd,
					      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) !=
	    CUDA_ERROR_INVALID_VALUE)
		return 5;
	return write(1, "k", 1) == 1 ? 0 : 6;
}

/* A stream blocked past CKPT_CUDASIM_HANG_MS aborts the process with a
 * message naming the stream and what it waits for. */
static int hang_child(void)
{
	CUstream s;
	CUdeviceptr d;
	volatile uint32_t *w = word_new(&d);
	if (!w || cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) ||
	    cu.cuStreamWaitValue32_v2(s, d, 3, CU_STREAM_WAIT_VALUE_GEQ))
		return 2;
	*w = UINT32_MAX;                     /* "release everything": it does not */
	cu.cuStreamSynchronize(s);
	return 3;
}

static int t_watchdog(void)
{
	char out[8192];
	int p[2], st;
	ssize_t n, got = 0;
	pid_t pid;

	CHECK(pipe(p) == 0);
	if ((pid = fork()) == 0) {
		dup2(p[1], 2);
		putenv("CKPT_CUDASIM_HANG_MS=300");
		_exit(load() < 0 ? 1 : hang_child());
	}
	close(p[1]);
	while ((n = read(p[0], out + got, sizeof(out) - 1 - (size_t)got)) > 0)
		got += n;
	out[got] = '\0';
	close(p[0]);
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
	CHECK(strstr(out, "HANG"));
	CHECK(strstr(out, "cuStreamWaitValue32 GEQ 0x3"));
	CHECK(strstr(out, "cuStreamSynchronize"));
	return 0;
}

/* A long wait is no hang while another simulated process of the session
 * gets work done (a save staging for long): a stream waits 1.2 s on a
 * word of a shared page, past a 400 ms watchdog, while a second process
 * copies, then opens it with a CPU store (as ckptd opens a gate). */
static volatile uint32_t *shared_word;
static int long_wait_child(void)
{
	CUstream s;
	CUdeviceptr d;
	if (cu.cuMemHostRegister_v2((void *)shared_word, 4096, CU_MEMHOSTREGISTER_DEVICEMAP) ||
	    cu.cuMemHostGetDevicePointer_v2(&d, (void *)shared_word, 0) ||
	    cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) ||
	    cu.cuStreamWaitValue32_v2(s, d, 1, CU_STREAM_WAIT_VALUE_GEQ))
		return 2;
	return cu.cuStreamSynchronize(s) ? 3 : 0;
}
static int busy_child(void)
{
	CUdeviceptr d;
	uint64_t t0 = 0;
	struct timespec ts;
	if (cu.cuMemAlloc_v2(&d, 1 << 16))
		return 2;
	do {
		if (cu.cuMemsetD32Async(d, 7, 1 << 14, NULL) || cu.cuCtxSynchronize())
			return 3;
		msleep(20);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		if (!t0)
			t0 = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	} while ((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 - t0 < 1200);
	*shared_word = 1;
	return 0;
}
static int t_watchdog_progress(void)
{
	int st;
	pid_t waiter, busy;

	shared_word = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(shared_word != MAP_FAILED);
	*shared_word = 0;
	putenv("CKPT_CUDASIM_HANG_MS=400");
	if ((waiter = fork()) == 0)
		_exit(load() < 0 ? 1 : long_wait_child());
	if ((busy = fork()) == 0)
		_exit(load() < 0 ? 1 : busy_child());
	CHECK(waitpid(busy, &st, 0) == busy && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(waitpid(waiter, &st, 0) == waiter);
	CHECK(!WIFSIGNALED(st));             /* the watchdog let it be */
	CHECK_EQ(WEXITSTATUS(st), 0);
	munmap((void *)shared_word, 4096);
	unsetenv("CKPT_CUDASIM_HANG_MS");
	return 0;
}

#define ISO(name, env) static int name##_iso(void) { return isolated(name, env); }
ISO(t_wait_flags, NULL)
ISO(t_queue_aliasing, "CUDA_DEVICE_MAX_CONNECTIONS=2")
ISO(t_queue_no_aliasing, "CUDA_DEVICE_MAX_CONNECTIONS=8")
ISO(t_implicit_sync, NULL)
ISO(t_async_copy, "CKPT_CUDASIM_OP_US=300000")
ISO(t_legacy_stream, NULL)
ISO(t_renumbering, "CKPT_CUDASIM_GPUS=3 CUDA_VISIBLE_DEVICES=2,0,9,1")
ISO(t_ipc_mem, NULL)
ISO(t_ipc_event, NULL)
ISO(t_vmm_fd, NULL)
ISO(t_sticky, "CKPT_CUDASIM_STICKY_COPY=2")

static const struct test tests[] = {
	{ "wait_value_flags_geq_is_cyclic", t_wait_flags_iso },
	{ "streams_past_max_connections_share_a_queue", t_queue_aliasing_iso },
	{ "streams_within_max_connections_do_not", t_queue_no_aliasing_iso },
	{ "host_alloc_register_and_free_synchronise", t_implicit_sync_iso },
	{ "async_copies_land_later", t_async_copy_iso },
	{ "legacy_stream_implicit_sync", t_legacy_stream_iso },
	{ "cuda_visible_devices_renumbers", t_renumbering_iso },
	{ "ipc_memory_across_processes", t_ipc_mem_iso },
	{ "ipc_event_across_processes", t_ipc_event_iso },
	{ "vmm_fd_across_processes", t_vmm_fd_iso },
	{ "sticky_error_until_primary_ctx_reset", t_sticky_iso },
	{ "watchdog_aborts_a_hung_stream", t_watchdog },
	{ "watchdog_spares_a_long_wait_while_others_progress", t_watchdog_progress },
};

int main(int argc, char **argv)
{
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0)
		self[n] = '\0';
	if (argc == 4 && !strcmp(argv[1], "peer")) {
		if (load() < 0)
			return 1;
		if (!strcmp(argv[2], "ipcmem"))
			return peer_ipcmem(argv[3]);
		if (!strcmp(argv[2], "ipcevent"))
			return peer_ipcevent(argv[3]);
		if (!strcmp(argv[2], "vmm"))
			return peer_vmm(argv[3]);
		return 1;
	}
	return test_main(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
