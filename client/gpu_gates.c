/* gpu_gates.c - see gpu_gates.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gate_page.h"
#include "gpu_gates.h"
#include "shm_region.h"

struct gpu_gates {
	const struct cuda_driver *cu;
	struct shm_region shm;               /* the page */
	CUdeviceptr dptr;                    /* its device address */
	_Atomic uint32_t armed[GATE_PAGE_WORDS];
	int      sock;                       /* the watcher's dup; -1: none */
	pthread_mutex_t lock;
	int      watching;                   /* the watcher runs (lock) */
	int      handed;                     /* gpu_gates_close ran (lock) */
	struct gpu_gates *next;              /* retired list */
};

/* Pages of closed connections: unpinning synchronises with the device, so
 * it waits for the next page's pinning, which synchronises anyway. */
static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gpu_gates *retired;

static void gates_free(struct gpu_gates *g)
{
	if (g->shm.base)
		g->cu->cuMemHostUnregister(g->shm.base);
	shm_region_release(&g->shm);
	pthread_mutex_destroy(&g->lock);
	free(g);
}

static void gates_retire(struct gpu_gates *g)
{
	pthread_mutex_lock(&retired_lock);
	g->next = retired;
	retired = g;
	pthread_mutex_unlock(&retired_lock);
}

static void retired_free(void)
{
	struct gpu_gates *list;

	pthread_mutex_lock(&retired_lock);
	list = retired;
	retired = NULL;
	pthread_mutex_unlock(&retired_lock);
	while (list) {
		struct gpu_gates *next = list->next;
		gates_free(list);
		list = next;
	}
}

void gpu_gates_open_all(struct gpu_gates *g)
{
	if (!g)
		return;
	for (unsigned i = 0; i < GATE_PAGE_WORDS; i++) {
		uint32_t v = atomic_load(&g->armed[i]);
		if (v)
			gate_raise(gate_word(g->shm.base, i), v);
	}
}

/* Waits for the end of the connection (POLLRDHUP: ckptd closed its end or
 * died), never reads from it.  Then every gate opens; the page is retired
 * here if the connection was already handed over, else by the closer. */
static void *watch(void *arg)
{
	struct gpu_gates *g = arg;
	struct pollfd p = { .fd = g->sock, .events = POLLRDHUP };
	int handed;

	while (!(p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			break;
	gpu_gates_open_all(g);
	pthread_mutex_lock(&g->lock);
	g->watching = 0;                /* from here the closer leaves sock alone */
	handed = g->handed;
	pthread_mutex_unlock(&g->lock);
	close(g->sock);
	if (handed)
		gates_retire(g);
	return NULL;
}

static int watch_start(struct gpu_gates *g, int sock)
{
	sigset_t all, old;
	pthread_attr_t a;
	pthread_t t;
	int r;

	if ((g->sock = fcntl(sock, F_DUPFD_CLOEXEC, 3)) < 0)
		return -errno;
	/* the trainer's signals are not ours to take */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	g->watching = 1;
	r = -pthread_create(&t, &a, watch, g);
	pthread_attr_destroy(&a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0) {
		g->watching = 0;
		close(g->sock);
		g->sock = -1;
	}
	return r;
}

int gpu_gates_new(const struct cuda_driver *cu, int sock, struct gpu_gates **out,
		  char *err, size_t errlen)
{
	struct gpu_gates *g;
	const char *s = NULL;
	CUresult e;
	int r;

	retired_free();
	if (!(g = calloc(1, sizeof(*g))))
		return -ENOMEM;
	g->cu = cu;
	g->sock = -1;
	pthread_mutex_init(&g->lock, NULL);
	if ((r = shm_region_create("ckpt-gates", GATE_PAGE_WORDS * GATE_WORD_STRIDE * 4,
				   &g->shm)) < 0) {
		snprintf(err, errlen, "cannot make the gate page: %s", strerror(-r));
		goto out_free;
	}
	/* pinned and mapped for the device: streams wait on its words */
	if ((e = cu->cuMemHostRegister_v2(g->shm.base, g->shm.size,
					  CU_MEMHOSTREGISTER_PORTABLE |
					  CU_MEMHOSTREGISTER_DEVICEMAP))) {
		cu->cuGetErrorString(e, &s);
		snprintf(err, errlen, "cannot pin the gate page (cuMemHostRegister): %s "
			 "(CUDA error %d)", s ? s : "?", e);
		r = -ENXIO;
		goto out_release;
	}
	if ((e = cu->cuMemHostGetDevicePointer_v2(&g->dptr, g->shm.base, 0))) {
		cu->cuGetErrorString(e, &s);
		snprintf(err, errlen, "cuMemHostGetDevicePointer (gate page): %s (CUDA error "
			 "%d)", s ? s : "?", e);
		r = -ENXIO;
		goto out_unregister;
	}
	if (sock >= 0 && (r = watch_start(g, sock)) < 0) {
		snprintf(err, errlen, "cannot start the thread that watches the connection "
			 "for the gate page: %s", strerror(-r));
		goto out_unregister;
	}
	*out = g;
	return 0;

out_unregister:
	cu->cuMemHostUnregister(g->shm.base);
out_release:
	shm_region_release(&g->shm);
	g->shm.base = NULL;
out_free:
	gates_free(g);
	return r;
}

int gpu_gates_fd(const struct gpu_gates *g)
{
	return g->shm.fd;
}

void gpu_gates_arm(struct gpu_gates *g, unsigned slot, uint32_t seq)
{
	if (slot < GATE_PAGE_WORDS)
		atomic_store(&g->armed[slot], seq);
}

CUdeviceptr gpu_gates_word(const struct gpu_gates *g, unsigned slot)
{
	return g->dptr + (CUdeviceptr)((uint8_t *)gate_word(g->shm.base, slot) -
				       (uint8_t *)g->shm.base);
}

void gpu_gates_close(struct gpu_gates *g)
{
	int watching;

	if (!g)
		return;
	pthread_mutex_lock(&g->lock);
	watching = g->watching;
	g->handed = 1;
	if (watching)
		shutdown(g->sock, SHUT_WR);     /* ckptd sees the end */
	pthread_mutex_unlock(&g->lock);
	if (!watching) {                        /* no watcher, or it has ended */
		gpu_gates_open_all(g);
		gates_retire(g);
	}
}
