/* sim_watchdog.c - cudasim's hang watchdog: a process whose hardware
 * queue or host wait has been stuck longer than CKPT_CUDASIM_HANG_MS while
 * no simulated process of its session got anything done (a save staging
 * for long is not a deadlock) logs what every queue runs and aborts, as a
 * real GPU would wait forever.  A TEST DOUBLE, not a driver. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"

/* host-side waits the watchdog watches */
#define MAX_HOST_WAITS 64
static struct { _Atomic uint64_t since; char what[240]; } hw[MAX_HOST_WAITS];
static pthread_mutex_t hw_lock = PTHREAD_MUTEX_INITIALIZER;   /* claiming, reading what */
static __thread int hw_slot = -1;

/* Operations completed by every simulated process of this session (a test
 * run: ckptd and its trainers, whatever process groups `timeout` gave
 * them), in a small shared file: a wait is a hang only once none of them
 * has got anything done for CKPT_CUDASIM_HANG_MS.  Files of sessions whose
 * leader is gone are removed when the next one is made. */
#define PROGRESS_DIR "/dev/shm"
static _Atomic uint64_t progress_local, *progress = &progress_local;

static void progress_sweep(void)
{
	char pre[48];
	struct dirent *e;
	DIR *d = opendir(PROGRESS_DIR);
	int sid;

	if (!d)
		return;
	snprintf(pre, sizeof(pre), "cudasim-progress-%u-", (unsigned)getuid());
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, pre, strlen(pre)) &&
		    (sid = atoi(e->d_name + strlen(pre))) > 0 &&
		    kill(sid, 0) < 0 && errno == ESRCH)
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
}

static void progress_open(void)
{
	char path[96];
	void *m;
	int fd;

	progress_sweep();
	snprintf(path, sizeof(path), PROGRESS_DIR "/cudasim-progress-%u-%d",
		 (unsigned)getuid(), (int)getsid(0));
	if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
		return;                  /* this process alone, then */
	if (ftruncate(fd, 4096) == 0 &&
	    (m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) != MAP_FAILED)
		progress = m;
	close(fd);
}

void sim_hang(const char *who, uint64_t ms)
{
	if (ms)
		sim_log("HANG: %s has been blocked for %llu ms, and no process of its "
			"session got anything done for CKPT_CUDASIM_HANG_MS=%u; "
			"a real GPU would wait forever here", who, (unsigned long long)ms,
			sim.hang_ms);
	else
		sim_log("HANG: %s (CKPT_CUDASIM_STRICT_SYNC=1): it waits until that stream "
			"is released, or forever", who);
	sim_queues_log();
	pthread_mutex_lock(&hw_lock);
	for (int i = 0; i < MAX_HOST_WAITS; i++)
		if (hw[i].since)
			sim_log("  waiting for the GPU: %s", hw[i].what);
	pthread_mutex_unlock(&hw_lock);
	abort();
}

void sim_progress(void)
{
	atomic_fetch_add(progress, 1);
}

static void *watchdog(void *arg)
{
	uint64_t seen = atomic_load(progress), moved = sim_now_ms();

	(void)arg;
	for (;;) {
		struct timespec ts = { 0, 50 * 1000000 };
		uint64_t now, p, ms;
		char stuck[256];
		nanosleep(&ts, NULL);
		now = sim_now_ms();
		if ((p = atomic_load(progress)) != seen) {
			seen = p;
			moved = now;
		}
		if (now - moved <= sim.hang_ms)
			continue;            /* something somewhere still moves */
		if ((ms = sim_queue_stuck(now, sim.hang_ms, stuck, sizeof(stuck))))
			sim_hang(stuck, ms);
		for (int i = 0; i < MAX_HOST_WAITS; i++) {
			uint64_t since = atomic_load(&hw[i].since);
			char who[sizeof(hw[i].what)];
			if (!since || now - since <= sim.hang_ms)
				continue;
			pthread_mutex_lock(&hw_lock);
			memcpy(who, hw[i].what, sizeof(who));
			pthread_mutex_unlock(&hw_lock);
			sim_hang(who, now - since);
		}
	}
	return NULL;
}

static void watchdog_spawn(void)
{
	pthread_t t;
	pthread_attr_t a;

	progress_open();
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_create(&t, &a, watchdog, NULL);
	pthread_attr_destroy(&a);
}

void sim_watchdog_start(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, watchdog_spawn);
}

/* A slot is claimed under hw_lock, so its text is never written while
 * another thread owns it or the watchdog reads it. */
void sim_host_wait_begin(const char *what)
{
	pthread_mutex_lock(&hw_lock);
	for (int i = 0; i < MAX_HOST_WAITS && hw_slot < 0; i++)
		if (!atomic_load(&hw[i].since)) {
			snprintf(hw[i].what, sizeof(hw[i].what), "the host thread in %s", what);
			atomic_store(&hw[i].since, sim_now_ms());
			hw_slot = i;
		}
	pthread_mutex_unlock(&hw_lock);
}

void sim_host_wait_end(void)
{
	if (hw_slot >= 0)
		hw[hw_slot].since = 0;
	hw_slot = -1;
}
