/* io.h - the one small table through which ckptd does file I/O.
 *
 * Two back-ends implement it: io_uring (preferred) and plain pread/pwrite
 * (when io_uring is unavailable, e.g. under Docker's default seccomp).  A
 * fault layer sits in front of whichever is chosen so tests can inject
 * -EIO, -ENOSPC, short writes and failed fsyncs at the Nth operation,
 * io_uring completions included.  Each I/O thread owns one io_ctx.
 */
#ifndef CKPT_IO_H
#define CKPT_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum io_op { IO_WRITE = 1, IO_READ = 2 };

struct io_cqe {
	void   *tag;    /* the caller's tag from submit */
	ssize_t res;    /* bytes transferred, or -errno */
};

struct io_ctx;

struct io_backend {
	const char *name;   /* "io_uring" or "pwrite" */
	int  (*init)(struct io_ctx *c, unsigned depth);
	void (*release)(struct io_ctx *c);
	/* Queue one transfer; may submit at once.  0 or -errno (-EBUSY: the
	 * queue is full, reap first). */
	int  (*submit)(struct io_ctx *c, enum io_op op, int fd, void *buf,
		       size_t len, off_t off, void *tag);
	/* Collect up to max completions; if wait, block for at least one
	 * when any is pending.  Returns the count (0 when nothing pending). */
	int  (*reap)(struct io_ctx *c, struct io_cqe *out, int max, int wait);
};

struct io_ctx {
	const struct io_backend *be;
	unsigned depth;
	unsigned inflight;
	void    *priv;        /* back-end state */
};

/* Choose and initialise a back-end: want is "auto", "io_uring" or "pwrite".
 * "auto" tries io_uring and falls back to pwrite, setting *fell_back (may be
 * NULL) so the caller can log it once.  Returns 0 or -errno. */
int  io_ctx_init(struct io_ctx *c, const char *want, unsigned depth,
		 int *fell_back);
void io_ctx_release(struct io_ctx *c);   /* waits for in-flight I/O */

/* Through the fault layer: */
int  io_submit(struct io_ctx *c, enum io_op op, int fd, void *buf, size_t len,
	       off_t off, void *tag);
int  io_reap(struct io_ctx *c, struct io_cqe *out, int max, int wait);
int  io_fsync(int fd);                       /* 0 or -errno; never retried */
int  io_ftruncate(int fd, off_t len);        /* 0 or -errno */
/* pwrite(2) of all of buf at off, continuing after short writes (an
 * injected one too): 0 or -errno. */
int  io_pwrite(int fd, const void *buf, size_t len, off_t off);
/* A hard link (linkat without following): 0 or -errno. */
int  io_link(int fromdir, const char *from, int todir, const char *to);
/* Make bytes [off, off+len) of dst share src's blocks at the same offsets
 * (FICLONERANGE: a reflink, no byte copied; off and len block-aligned, or
 * len reaching src's end).  0, or -errno: -EOPNOTSUPP, -EXDEV, -EINVAL
 * where the file system cannot; the range is then to be written. */
int  io_clone(int src, int dst, uint64_t off, uint64_t len);
/* Does fd's file share blocks with another file (a clone's, by FIEMAP)?
 * 1, or 0: none, or the file system cannot say (it then has no clones);
 * 1 on any other error.  Not through the fault layer. */
int  io_shares_blocks(int fd);
/* Does the file system of dirfd clone ranges between its files?  Tries it
 * on two unnamed files (O_TMPFILE): 1 or 0.  Not through the fault layer. */
int  io_can_clone(int dirfd);

/* Write a small file atomically through the fault layer: the temp name
 * tmp (ckptd's own: whatever is there, a crash's leftover or a planted
 * link or directory, is removed) is created afresh (O_EXCL|O_NOFOLLOW,
 * mode), written in full (short writes are continued), fsynced and
 * renamed onto name (IO_FILE_REPLACE), or only where name does not exist
 * (IO_FILE_NOREPLACE: -EEXIST, nothing changed); with IO_FILE_SYNC_DIR
 * dirfd is fsynced after the rename.  0 or -errno; before the rename a
 * failure leaves nothing behind.  Never writes through a link. */
#define IO_FILE_REPLACE   0
#define IO_FILE_NOREPLACE 1
#define IO_FILE_SYNC_DIR  2
int  io_write_file(int dirfd, const char *name, const char *tmp, const void *data,
		   size_t len, unsigned flags, mode_t mode);

/* Open a file for writing in dirfd (O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC,
 * mode 0640), trying O_DIRECT first when direct is set.  *is_direct says
 * what was obtained.  Returns the fd or -errno. */
int  io_open_write(int dirfd, const char *name, int direct, int *is_direct);

/* Fault injection, configured once per process from the environment
 * variable CKPT_FAULT (tests only), e.g.
 *   CKPT_FAULT="write:3:-5"    3rd write completes with -EIO
 *   CKPT_FAULT="write:2:short" 2nd write transfers half its length
 *   CKPT_FAULT="fsync:1:-5"    1st fsync fails
 *   CKPT_FAULT="read:4:-5"     4th read fails
 *   CKPT_FAULT="link:1:-18"    1st hard link fails with EXDEV
 *   CKPT_FAULT="clone:2:-95"   2nd range clone fails with EOPNOTSUPP
 * Several rules separated by ','.  Counting is per process.  A rule fires
 * once.  io_fault_fired() counts the faults injected so far. */
int  io_fault_setup(const char *spec);       /* 0 or -EINVAL */
unsigned io_fault_fired(void);

#endif
