/* shm_region.h - sealed memfd regions: host memory a trainer shares with
 * ckptd.  The client creates and seals; the daemon validates and maps. */
#ifndef CKPT_SHM_REGION_H
#define CKPT_SHM_REGION_H

#include <fcntl.h>
#include <stddef.h>

/* Seals every region must carry: its size can never change under a mapping. */
#define SHM_REQUIRED_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

struct shm_region {
	int    fd;      /* owned */
	void  *base;    /* MAP_SHARED read-write mapping of the whole fd */
	size_t size;    /* bytes mapped (page multiple) */
	int    mapped;  /* daemon side: every page held data when adopted and
			 * was mapped then (writes to it take no faults) */
};

/* Client side: memfd_create + ftruncate(size rounded up to the page size) +
 * mmap + seal.  `name` is only a debugging label.  Returns 0 or -errno;
 * *out is untouched on failure. */
int shm_region_create(const char *name, size_t size, struct shm_region *out);

/* Daemon side: take a received fd (steals it: closed on failure too),
 * check it is a memfd (regular file on tmpfs/hugetlbfs), that it carries
 * SHM_REQUIRED_SEALS, that fstat size == expect_size, then map it.
 * Returns 0, -EBADF (not a regular file / not a memfd), -EPERM (not sealed),
 * -EINVAL (size mismatch or zero), or -errno from mmap.
 * On failure msg (may be NULL) says why; untouched on success. */
int shm_region_adopt(int fd, size_t expect_size, struct shm_region *out,
		     char *msg, size_t msglen);

/* Unmap and close; accepts a zeroed or half-built region. */
void shm_region_release(struct shm_region *r);

#endif
