// gpu_trainer.cu - the GPU end-to-end check (run by tests/gpu/run.sh).
//
// Registers cudaMalloc tensors and one VMM tensor (cuMemCreate with POSIX
// fd handles, two physical chunks mapped back to back: what PyTorch's
// expandable_segments does) of several dtypes, >= 1 GiB in all, with a
// running ckptd.  Then:
//   1. floor: plain cudaMemcpyAsync device->pinned host and back;
//   2. save 1 on an idle GPU: staging bandwidth, CPU time in
//      ckpt_save_stream (the trainer's stall), how long the training
//      stream was held (the training-stream delay);
//   3. save 2 while a kernel keeps rewriting other buffers (on a second
//      stream: on the training stream itself it would be ordered before
//      or after the save by construction), with the "optimizer step" that
//      overwrites every registered tensor queued on the training stream
//      right after ckpt_save_stream: the checkpoint must hold the values
//      from before it;
//   4. zero the tensors, restore step 2, check bit-exactness on the GPU,
//      restore bandwidth; then restore step 1 and check it too.
// Prints "RESULT key value" lines and exits 0 only if everything matched.
//
//   gpu_trainer SOCKET [MiB [die]]   (default 1280 MiB of tensors;
//   "die": SIGKILL itself right after ckpt_save_stream)
#include <cuda.h>
#include <signal.h>
#include <unistd.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
	exit(2); } } while (0)
#define CU(x) do { CUresult e_ = (x); if (e_ != CUDA_SUCCESS) { const char *s_ = "?"; \
	cuGetErrorString(e_, &s_); fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_); \
	exit(2); } } while (0)
#define CP(x) do { int r_ = (x); if (r_ < 0) { \
	fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #x, ckpt_strerror(r_), \
		ckpt_last_error(c)); exit(1); } } while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__device__ __forceinline__ unsigned mix(unsigned long long i, unsigned seed)
{
	unsigned long long x = i * 0x9e3779b97f4a7c15ull + seed * 0xbf58476d1ce4e5b9ull;
	x ^= x >> 31; x *= 0x94d049bb133111ebull; x ^= x >> 29;
	return (unsigned)x;
}

__global__ void fill(unsigned *p, size_t n, unsigned seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = mix(i, seed);
}

__global__ void check(const unsigned *p, size_t n, unsigned seed, unsigned long long *bad)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		if (p[i] != mix(i, seed))
			atomicAdd(bad, 1ull);
}

// "other buffers": keeps the SMs and memory busy for a while
__global__ void churn(float *p, size_t n, int rounds)
{
	for (int r = 0; r < rounds; r++)
		for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
		     i += (size_t)gridDim.x * blockDim.x)
			p[i] = p[i] * 0.999f + 1.0f;
}

struct tensor {
	const char *group, *name;
	ckpt_dtype dtype;
	size_t esize, bytes;
	void *p;
};

int main(int argc, char **argv)
{
	const char *sock = argc > 1 ? argv[1] : NULL;
	size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 1280;
	ckpt_client *c = NULL;
	int dev = 0, failed = 0;

	CK(cudaSetDevice(dev));
	CU(cuInit(0));
	cudaStream_t ts, other;
	CK(cudaStreamCreateWithFlags(&ts, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));

	// tensors: 40% F32, 10% BF16, 10% I64, 5% U8 with cudaMalloc; 35% F16 VMM
	size_t unit = (mib << 20) / 100 / 4096 * 4096;
	struct tensor t[] = {
		{ "model", "layers.0.weight", CKPT_F32, 4, unit * 40, NULL },
		{ "model", "layers.0.bias_bf16", CKPT_BF16, 2, unit * 10, NULL },
		{ "optim", "step_counts", CKPT_I64, 8, unit * 10, NULL },
		{ "optim", "mask", CKPT_U8, 1, unit * 5, NULL },
		{ "model", "embed.vmm_f16", CKPT_F16, 2, 0, NULL },
	};
	const int nt = sizeof(t) / sizeof(t[0]);
	for (int i = 0; i < nt - 1; i++)
		CK(cudaMalloc(&t[i].p, t[i].bytes));

	// VMM: two physical chunks, exportable as POSIX fds, mapped back to back
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	size_t gran = 0;
	CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	size_t vchunk = ((unit * 35 / 2) + gran - 1) / gran * gran;
	size_t vbytes = 2 * vchunk;
	CUdeviceptr va;
	CU(cuMemAddressReserve(&va, vbytes, 0, 0, 0));
	for (int k = 0; k < 2; k++) {
		CUmemGenericAllocationHandle h;
		CU(cuMemCreate(&h, vchunk, &prop, 0));
		CU(cuMemMap(va + k * vchunk, vchunk, 0, h, 0));
		CU(cuMemRelease(h));
	}
	CUmemAccessDesc acc;
	memset(&acc, 0, sizeof(acc));
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CU(cuMemSetAccess(va, vbytes, &acc, 1));
	// the tensor starts inside chunk 0 and ends inside chunk 1
	t[nt - 1].p = (void *)(va + 4096);
	t[nt - 1].bytes = vbytes - 2 * 4096;

	size_t total = 0;
	for (int i = 0; i < nt; i++)
		total += t[i].bytes;
	printf("RESULT tensor_bytes %zu\n", total);

	// --- the floor: plain pinned copies --------------------------------------
	size_t fb = t[0].bytes;
	void *host;
	cudaEvent_t e0, e1;
	float ms;
	CK(cudaHostAlloc(&host, fb, cudaHostAllocDefault));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int w = 0; w < 2; w++) {       // second round is the measurement
		CK(cudaEventRecord(e0, ts));
		CK(cudaMemcpyAsync(host, t[0].p, fb, cudaMemcpyDeviceToHost, ts));
		CK(cudaEventRecord(e1, ts));
		CK(cudaEventSynchronize(e1));
	}
	CK(cudaEventElapsedTime(&ms, e0, e1));
	double d2h = fb / (ms / 1e3) / 1e9;
	for (int w = 0; w < 2; w++) {
		CK(cudaEventRecord(e0, ts));
		CK(cudaMemcpyAsync(t[0].p, host, fb, cudaMemcpyHostToDevice, ts));
		CK(cudaEventRecord(e1, ts));
		CK(cudaEventSynchronize(e1));
	}
	CK(cudaEventElapsedTime(&ms, e0, e1));
	double h2d = fb / (ms / 1e3) / 1e9;
	CK(cudaFreeHost(host));
	printf("RESULT floor_d2h_GBps %.2f\nRESULT floor_h2d_GBps %.2f\n", d2h, h2d);

	// --- connect and register -------------------------------------------------
	if (ckpt_connect(sock, "gputest", 0, 1, &c) < 0) {
		fprintf(stderr, "ckpt_connect failed\n");
		return 1;
	}
	for (int i = 0; i < nt; i++) {
		int64_t n = (int64_t)(t[i].bytes / t[i].esize);
		CP(ckpt_register(c, t[i].group, t[i].name, t[i].p, t[i].dtype, 1, &n));
	}
	if (argc > 3 && !strcmp(argv[3], "die")) {
		// a trainer killed while ckptd copies from its memory: ckptd must
		// neither hang nor crash (run.sh checks it keeps serving)
		for (int i = 0; i < nt; i++)
			fill<<<1024, 256, 0, ts>>>((unsigned *)t[i].p, t[i].bytes / 4, 1);
		uint64_t tk;
		CP(ckpt_save_stream(c, 1, ts, &tk));
		printf("dying with save %llu in flight\n", (unsigned long long)tk);
		fflush(stdout);
		kill(getpid(), SIGKILL);
	}
	// re-registering the same allocation reuses its region
	{
		int64_t n = 1024;
		CP(ckpt_register(c, "model", "layers.0.weight.head", t[0].p, CKPT_F32, 1, &n));
	}

	// --- save 1: idle GPU --------------------------------------------------------
	for (int i = 0; i < nt; i++)
		fill<<<1024, 256, 0, ts>>>((unsigned *)t[i].p, t[i].bytes / 4, 100 + i);
	CK(cudaStreamSynchronize(ts));
	uint64_t tk1, tk2;
	CK(cudaEventRecord(e0, ts));
	double c0 = now_s();
	CP(ckpt_save_stream(c, 1, ts, &tk1));
	double stall1 = now_s() - c0;
	CK(cudaEventRecord(e1, ts));           // runs once "done" has passed
	CP(ckpt_wait(c, tk1, CKPT_STAGED, 120000));
	CK(cudaEventSynchronize(e1));
	CK(cudaEventElapsedTime(&ms, e0, e1));
	struct ckpt_times tm;
	CP(ckpt_times(c, tk1, &tm));
	double stage_bw = (double)total / (tm.staged_us / 1e6) / 1e9;
	printf("RESULT staged_ms %.1f\nRESULT staging_GBps %.2f\n", tm.staged_us / 1e3, stage_bw);
	printf("RESULT staging_vs_floor %.2f\n", stage_bw / d2h);
	printf("RESULT trainer_stall_ms %.3f\n", stall1 * 1e3);
	printf("RESULT stream_delay_ms %.1f\n", ms);
	CP(ckpt_wait(c, tk1, CKPT_COMMITTED, 120000));

	// --- save 2: under load, optimizer step queued right behind it --------------
	for (int i = 0; i < nt; i++)
		fill<<<1024, 256, 0, ts>>>((unsigned *)t[i].p, t[i].bytes / 4, 200 + i);
	CK(cudaStreamSynchronize(ts));
	size_t ob = 512u << 20;
	float *obuf;
	CK(cudaMalloc(&obuf, ob));
	CK(cudaMemsetAsync(obuf, 0, ob, other));
	churn<<<264, 256, 0, other>>>(obuf, ob / 4, 40);
	c0 = now_s();
	CP(ckpt_save_stream(c, 2, ts, &tk2));
	double stall2 = now_s() - c0;
	for (int i = 0; i < nt; i++)       // the optimizer step: must wait
		fill<<<1024, 256, 0, ts>>>((unsigned *)t[i].p, t[i].bytes / 4, 300 + i);
	double c1 = now_s();
	CP(ckpt_wait(c, tk2, CKPT_COMMITTED, 180000));
	CK(cudaDeviceSynchronize());
	printf("RESULT trainer_stall_under_load_ms %.3f\n", stall2 * 1e3);
	CP(ckpt_times(c, tk2, &tm));
	printf("RESULT staged_under_load_ms %.1f (host waited %.1f ms for COMMITTED)\n",
	       tm.staged_us / 1e3, (now_s() - c1) * 1e3);

	// the optimizer step did run after the copy
	unsigned long long *bad, nbad;
	CK(cudaMalloc(&bad, sizeof(*bad)));
	CK(cudaMemset(bad, 0, sizeof(*bad)));
	for (int i = 0; i < nt; i++)
		check<<<1024, 256>>>((const unsigned *)t[i].p, t[i].bytes / 4, 300 + i, bad);
	CK(cudaMemcpy(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost));
	if (nbad) {
		printf("FAIL the optimizer step did not land (%llu words)\n", nbad);
		failed = 1;
	}

	// --- restore into zeroed tensors -------------------------------------------------
	for (int step = 2; step >= 1; step--) {
		for (int i = 0; i < nt; i++)
			CK(cudaMemset(t[i].p, 0, t[i].bytes));
		CK(cudaDeviceSynchronize());
		uint64_t got = 0;
		c0 = now_s();
		CP(ckpt_restore(c, step, 0, &got));
		double rs = now_s() - c0;
		CK(cudaMemset(bad, 0, sizeof(*bad)));
		for (int i = 0; i < nt; i++)
			check<<<1024, 256>>>((const unsigned *)t[i].p, t[i].bytes / 4,
					     (step == 2 ? 200 : 100) + i, bad);
		CK(cudaMemcpy(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost));
		printf("RESULT restore_step%d_GBps %.2f\n", step, total / rs / 1e9);
		if (step == 2)
			printf("RESULT restore_vs_h2d_floor %.2f\n", total / rs / 1e9 / h2d);
		if (got != (uint64_t)step || nbad) {
			printf("FAIL restore of step %d: got step %llu, %llu words differ\n", step,
			       (unsigned long long)got, nbad);
			failed = 1;
		} else {
			printf("RESULT restore_step%d bit-exact (%zu bytes, %d tensors incl. VMM)\n",
			       step, total, nt);
		}
	}
	ckpt_close(c);
	printf(failed ? "FAIL gpu_trainer\n" : "PASS gpu_trainer\n");
	return failed;
}
