/* stream_accept.c - ckpt_save_stream()'s contract on the paths around
 * ckptd's acceptance, against the real ckptd on the CUDA driver simulator
 * (build/cudasim).  libckpt's two stream operations (record "ready" on the
 * stream, make the stream wait on its gate) are wrapped through
 * ckpt__stream_ops by stand-ins that fail on demand and otherwise call the
 * real ones; everything else is the real library.
 *
 *   stream_accept SOCKET JOB
 * Prints "ok" and exits 0, or names the broken promise and exits 1.
 * Checked:
 *   - record fails (before anything is sent): a negative errno, *ticket
 *     untouched, no save made, the ring slot given back (more failures
 *     than the ring has slots still leave room for a good save);
 *   - everything works: 0, a ticket that commits;
 *   - the stream cannot wait after ckptd accepted: CKPT_UNORDERED with
 *     the ticket, a message that says to wait for CKPT_STAGED, and the
 *     save commits like any other;
 *   - more unordered saves than ring slots: each slot comes back once its
 *     save is STAGED.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_DRIVER_LOADER
#include "ckpt.h"
#include "ckpt_int.h"       /* ckpt__stream_ops: the test's seam */
#include "cuda_api.h"

static int record_err;          /* 0: the stand-in "records" */
static int wait_err;            /* 0: the stand-in "waits" */
static int n_record, n_wait;

static int fake_record(struct gpu_ring *r, unsigned slot, void *stream,
		       struct gpu_ring_save *out, char *err, size_t errlen)
{
	n_record++;
	if (record_err) {
		snprintf(err, errlen, "test: cudaEventRecord failed");
		return record_err;
	}
	return gpu_ring_record(r, slot, stream, out, err, errlen);
}

static int fake_wait(struct gpu_ring *r, unsigned slot, uint32_t seq, void *stream,
		     char *err, size_t errlen)
{
	n_wait++;
	if (wait_err) {
		snprintf(err, errlen, "test: cuStreamWaitValue32 failed");
		return wait_err;
	}
	return gpu_ring_wait(r, slot, seq, stream, err, errlen);
}

/* A current context on device 0, as a trainer has: the saves use its
 * legacy default stream. */
static int cuda_context(void)
{
	struct cuda_driver cu;
	CUcontext ctx;
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h || cuda_driver_load(h, &cu) || cu.cuInit(0) ||
	    cu.cuDevicePrimaryCtxRetain(&ctx, 0) || cu.cuCtxSetCurrent(ctx))
		return -1;
	return 0;
}

#define CHECK(cond, ...) do { if (!(cond)) { \
	fprintf(stderr, "FAIL line %d: ", __LINE__); \
	fprintf(stderr, __VA_ARGS__); \
	fprintf(stderr, " (last error: %s)\n", ckpt_last_error(c)); \
	exit(1); } } while (0)

int main(int argc, char **argv)
{
	const uint64_t none = UINT64_MAX;
	int64_t shape[1] = { 1 << 18 };
	struct ckpt_times tm;
	ckpt_client *c = NULL;
	uint64_t ticket, step = 0;
	float *w;
	int r;

	if (argc != 3) {
		fprintf(stderr, "usage: stream_accept SOCKET JOB\n");
		return 2;
	}
	if (cuda_context() < 0) {
		fprintf(stderr, "no CUDA driver (run with the simulator: "
			"LD_LIBRARY_PATH=build/cudasim)\n");
		return 1;
	}
	ckpt__stream_ops.record = fake_record;
	ckpt__stream_ops.wait = fake_wait;
	r = ckpt_connect(argv[1], argv[2], 0, 1, &c);
	CHECK(r == 0, "connect: %d", r);
	w = ckpt_alloc(c, sizeof(float) << 18);
	CHECK(w, "alloc");
	for (int i = 0; i < 1 << 18; i++)
		w[i] = (float)i;
	r = ckpt_register(c, "model", "w", w, CKPT_F32, 1, shape);
	CHECK(r == 0, "register: %d", r);

	/* record fails: nothing accepted, ticket untouched, slot given back */
	record_err = -EIO;
	for (int i = 0; i < GPU_CLIENT_RING + 2; i++) {
		ticket = none;
		r = ckpt_save_stream(c, ++step, (void *)0x1, &ticket);
		CHECK(r == -EIO, "record failure returned %d, not -EIO", r);
		CHECK(ticket == none, "record failure set the ticket to %" PRIu64,
		      ticket);
		CHECK(strstr(ckpt_last_error(c), "cudaEventRecord"),
		      "record failure's message");
	}
	CHECK(n_wait == 0, "stream wait tried after a failed record");
	record_err = 0;

	/* all well */
	ticket = none;
	r = ckpt_save_stream(c, ++step, (void *)0x1, &ticket);
	CHECK(r == 0, "ordered stream save returned %d", r);
	CHECK(ticket != none, "ordered stream save left the ticket unset");
	r = ckpt_wait(c, ticket, CKPT_COMMITTED, 60000);
	CHECK(r == 0, "ordered stream save: wait %d", r);

	/* accepted, then the stream cannot wait: the ticket still comes back */
	wait_err = -EINVAL;
	ticket = none;
	r = ckpt_save_stream(c, ++step, (void *)0x1, &ticket);
	CHECK(r == CKPT_UNORDERED, "unordered stream save returned %d, not "
	      "CKPT_UNORDERED", r);
	CHECK(ticket != none, "unordered stream save kept its ticket");
	CHECK(strstr(ckpt_last_error(c), "accepted") &&
	      strstr(ckpt_last_error(c), "CKPT_STAGED") &&
	      strstr(ckpt_last_error(c), "cuStreamWaitValue32"),
	      "unordered stream save's message");
	r = ckpt_wait(c, ticket, CKPT_STAGED, 60000);
	CHECK(r == 0, "unordered stream save: wait STAGED %d", r);
	r = ckpt_wait(c, ticket, CKPT_COMMITTED, 60000);
	CHECK(r == 0, "unordered stream save: wait COMMITTED %d", r);
	r = ckpt_times(c, ticket, &tm);
	CHECK(r == 0 && tm.bytes >= sizeof(float) << 18,
	      "unordered stream save: times %d, %" PRIu64 " bytes", r, tm.bytes);

	/* more unordered saves than slots: each slot is reaped at STAGED */
	for (int i = 0; i < 2 * GPU_CLIENT_RING + 1; i++) {
		ticket = none;
		r = ckpt_save_stream(c, ++step, (void *)0x1, &ticket);
		CHECK(r == CKPT_UNORDERED, "unordered save %d returned %d", i, r);
		r = ckpt_wait(c, ticket, CKPT_COMMITTED, 60000);
		CHECK(r == 0, "unordered save %d: wait %d", i, r);
	}
	printf("ok: last step %" PRIu64 "\n", step);
	ckpt_close(c);
	return 0;
}
