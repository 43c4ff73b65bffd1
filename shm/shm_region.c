/* shm_region.c - sealed memfd regions shared between a trainer and ckptd.
 *
 * Linked into the client library too: never logs, never aborts. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm_region.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* memfd_create rejects names longer than 249 bytes; the name is only a label. */
#define SHM_NAME_MAX 249

static size_t page_size(void)
{
	long ps = sysconf(_SC_PAGESIZE);
	return ps > 0 ? (size_t)ps : 4096;
}

int shm_region_create(const char *name, size_t size, struct shm_region *out)
{
	char label[SHM_NAME_MAX + 1];
	size_t ps = page_size(), len;
	void *base;
	int fd, ret;

	if (!out || size == 0)
		return -EINVAL;
	if (size > (size_t)INT64_MAX - ps)
		return -ENOMEM;
	len = (size + ps - 1) & ~(ps - 1);

	snprintf(label, sizeof(label), "%s", name && *name ? name : "ckpt");
	fd = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0) {
		ret = -errno;
		goto out_close_fd;
	}
	base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = -errno;
		goto out_close_fd;
	}
	/* Allocate and map every page here, in the trainer that owns the
	 * memory, in one call: ckptd then only maps pages that exist when it
	 * populates its own mapping (6x cheaper than allocating and zeroing
	 * them on its loop thread), and the trainer's first writes take no
	 * faults.  Best effort: pages not populated fault in on first touch. */
	(void)madvise(base, len, MADV_POPULATE_WRITE);
	/* Sealed last: from here the size can never change, so neither we nor
	 * the daemon can ever take SIGBUS on a mapping of it. */
	if (fcntl(fd, F_ADD_SEALS, SHM_REQUIRED_SEALS) < 0) {
		ret = -errno;
		goto out_unmap;
	}

	out->fd = fd;
	out->base = base;
	out->size = len;
	return 0;

out_unmap:
	munmap(base, len);
out_close_fd:
	close(fd);
	return ret;
}

/* Map the pages the trainer has written now, when it allocates, rather
 * than one fault at a time inside its first save's stall; best effort.
 * Only those: faulting in a hole would allocate memory charged to ckptd
 * (a never-written 3 GiB region made ckptd 3 GiB larger).  Returns 1 when
 * the whole region was data and is mapped (on a shared mapping a read
 * populate maps the pages writable too), 0 otherwise. */
static int populate_data(int fd, uint8_t *base, size_t size)
{
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
	off_t at = 0, end;
	int whole = 1;

	while ((size_t)at < size) {
		off_t data = lseek(fd, at, SEEK_DATA);
		if (data < 0) {
			if (errno == EINVAL)    /* no SEEK_DATA here: all is data */
				return madvise(base, size, MADV_POPULATE_READ) == 0;
			return 0;               /* ENXIO: no data after at */
		}
		whole &= data == at;
		at = data;
		if ((end = lseek(fd, at, SEEK_HOLE)) < 0 || (size_t)end > size)
			end = (off_t)size;
		if (madvise(base + at, (size_t)(end - at), MADV_POPULATE_READ) < 0)
			whole = 0;
		at = end;
	}
	return whole;
}

int shm_region_adopt(int fd, size_t expect_size, struct shm_region *out,
		     char *msg, size_t msglen)
{
	const char *reason;
	struct stat st;
	void *base;
	int seals, ret;

	if (fd < 0) {
		if (msg && msglen)
			snprintf(msg, msglen, "invalid file descriptor");
		return -EBADF;
	}
	if (!out) {
		reason = "no region to fill";
		ret = -EINVAL;
		goto out_close_fd;
	}
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		reason = "cannot stat fd";
		goto out_close_fd;
	}
	if (!S_ISREG(st.st_mode)) {
		reason = "not a regular file";
		ret = -EBADF;
		goto out_close_fd;
	}
	/* Only shmem/hugetlbfs files know about seals; any other regular
	 * file answers EINVAL. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0) {
		ret = -errno;
		reason = "cannot read memfd seals";
		if (ret == -EINVAL) {
			ret = -EBADF;
			reason = "not a memfd";
		}
		goto out_close_fd;
	}
	/* Without these seals the client could shrink the file under our
	 * mapping and crash the daemon with SIGBUS. */
	if ((seals & SHM_REQUIRED_SEALS) != SHM_REQUIRED_SEALS) {
		reason = "memfd not sealed against resizing";
		ret = -EPERM;
		goto out_close_fd;
	}
	if (st.st_size <= 0 || (uint64_t)st.st_size != (uint64_t)expect_size) {
		reason = st.st_size <= 0 ? "memfd is empty"
					 : "memfd size does not match";
		ret = -EINVAL;
		goto out_close_fd;
	}
	/* A write seal would make the shared read-write map fail; say why
	 * instead of passing on a bare EPERM from mmap. */
	if (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) {
		reason = "memfd is write-sealed";
		ret = -EPERM;
		goto out_close_fd;
	}
	base = mmap(NULL, expect_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = -errno;
		reason = ret == -EPERM ? "memfd is write-sealed"
				       : "cannot map memfd";
		goto out_close_fd;
	}

	out->mapped = populate_data(fd, base, expect_size);
	out->fd = fd;
	out->base = base;
	out->size = expect_size;
	return 0;

out_close_fd:
	close(fd);
	if (msg && msglen)
		snprintf(msg, msglen, "%s", reason);
	return ret;
}

/* A region owns its fd only once mapped: every region this file hands out
 * is complete, so a zeroed one (fd 0, base NULL) must not close stdin. */
void shm_region_release(struct shm_region *r)
{
	if (!r)
		return;
	if (r->base) {
		munmap(r->base, r->size);
		if (r->fd >= 0)
			close(r->fd);
	}
	r->base = NULL;
	r->size = 0;
	r->fd = -1;
}
