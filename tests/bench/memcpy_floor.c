/* memcpy_floor.c - the memory-copy floor for the trainer's stall: how long
 * this machine takes to copy N bytes the way ckptd must: from a trainer's
 * shared memory (a memfd, as ckpt_alloc() makes, written through one
 * mapping and read through a second one populated with MADV_POPULATE_READ,
 * as ckptd maps it) into pre-faulted, huge-page advised anonymous memory
 * (as ckptd's staging pool is), on 1 and on T threads, with glibc's memcpy
 * and with ckptd's own copy (shm_pool_copy: streaming stores).
 *
 *   memcpy_floor BYTES [THREADS] [REPEATS]
 *
 * Prints one JSON object: the best time of REPEATS copies per thread count
 * (t1_s, tn_s: the better of the two copies; per copy too).
 * Exit 0, or 1 with a message on stderr.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "shm_pool.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

struct part {
	uint8_t       *dst;
	const uint8_t *src;
	size_t         len;
	pthread_barrier_t *go;
	int            stream;     /* shm_pool_copy instead of memcpy */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *copy_part(void *arg)
{
	struct part *p = arg;

	pthread_barrier_wait(p->go);
	if (p->stream)
		shm_pool_copy(p->dst, p->src, p->len);
	else
		memcpy(p->dst, p->src, p->len);
	return NULL;
}

/* One copy of len bytes split over nthreads (the caller is one of them). */
static double copy_once(uint8_t *dst, const uint8_t *src, size_t len,
			unsigned nthreads, int stream)
{
	pthread_t tid[64];
	struct part part[64];
	pthread_barrier_t go;
	size_t per = (len / nthreads + 4095) & ~(size_t)4095, off = 0;
	double t0, t1;

	pthread_barrier_init(&go, NULL, nthreads + 1);
	for (unsigned i = 0; i < nthreads; i++) {
		size_t n = off + per > len ? len - off : per;
		part[i] = (struct part){ dst + off, src + off, n, &go, stream };
		off += n;
		pthread_create(&tid[i], NULL, copy_part, &part[i]);
	}
	t0 = now_s();
	pthread_barrier_wait(&go);
	for (unsigned i = 0; i < nthreads; i++)
		pthread_join(tid[i], NULL);
	t1 = now_s();
	pthread_barrier_destroy(&go);
	return t1 - t0;
}

int main(int argc, char **argv)
{
	size_t len;
	unsigned threads, reps;
	uint8_t *trainer, *src, *dst;
	double best[2][2] = { { 1e9, 1e9 }, { 1e9, 1e9 } };   /* [stream][n threads] */
	int fd;

	if (argc < 2) {
		fprintf(stderr, "usage: memcpy_floor BYTES [THREADS] [REPEATS]\n");
		return 1;
	}
	len = strtoull(argv[1], NULL, 10);
	threads = argc > 2 ? (unsigned)atoi(argv[2]) : 2;
	reps = argc > 3 ? (unsigned)atoi(argv[3]) : 5;
	if (len == 0 || threads == 0 || threads > 64 || reps == 0) {
		fprintf(stderr, "memcpy_floor: bad arguments\n");
		return 1;
	}
	fd = memfd_create("memcpy_floor", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)len) < 0) {
		perror("memcpy_floor: memfd");
		return 1;
	}
	trainer = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (trainer == MAP_FAILED || dst == MAP_FAILED) {
		perror("memcpy_floor: mmap");
		return 1;
	}
	(void)madvise(dst, len, MADV_HUGEPAGE);
	if (madvise(dst, len, MADV_POPULATE_WRITE) < 0)
		memset(dst, 0, len);
	for (size_t i = 0; i < len / 8; i++)      /* the trainer writes, non-zero */
		((uint64_t *)trainer)[i] = i * 0x9e3779b97f4a7c15ull;
	/* ckptd's own mapping of the same memfd, populated as at REGION_ADD */
	src = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (src == MAP_FAILED) {
		perror("memcpy_floor: mmap");
		return 1;
	}
	if (madvise(src, len, MADV_POPULATE_READ) < 0)
		for (size_t i = 0; i < len; i += 4096)
			(void)((volatile uint8_t *)src)[i];

	for (unsigned r = 0; r < reps; r++)
		for (int stream = 0; stream < 2; stream++)
			for (int multi = 0; multi < 2; multi++) {
				double t = copy_once(dst, src, len, multi ? threads : 1, stream);
				if (t < best[stream][multi])
					best[stream][multi] = t;
			}
	double best1 = best[0][0] < best[1][0] ? best[0][0] : best[1][0];
	double bestn = best[0][1] < best[1][1] ? best[0][1] : best[1][1];
	printf("{\"bytes\": %zu, \"threads\": %u, \"repeats\": %u, "
	       "\"t1_s\": %.6f, \"tn_s\": %.6f, \"gbps1\": %.3f, \"gbpsn\": %.3f, "
	       "\"memcpy_t1_s\": %.6f, \"memcpy_tn_s\": %.6f, "
	       "\"stream_t1_s\": %.6f, \"stream_tn_s\": %.6f}\n",
	       len, threads, reps, best1, bestn, len / best1 / 1e9, len / bestn / 1e9,
	       best[0][0], best[0][1], best[1][0], best[1][1]);
	munmap(src, len);
	munmap(trainer, len);
	munmap(dst, len);
	close(fd);
	return 0;
}
