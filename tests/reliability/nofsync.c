/* nofsync.c - LD_PRELOAD shim for the power-loss campaign's negative
 * control: fsync, fdatasync, syncfs and sync_file_range succeed without
 * doing anything, so a "power loss" snapshot must catch lost data. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/types.h>

int fsync(int fd) { (void)fd; return 0; }
int fdatasync(int fd) { (void)fd; return 0; }
int syncfs(int fd) { (void)fd; return 0; }
int sync_file_range(int fd, off_t off, off_t n, unsigned int flags)
{ (void)fd; (void)off; (void)n; (void)flags; return 0; }
