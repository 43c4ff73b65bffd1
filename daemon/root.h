/* root.h - the checkpoint root is ckptd's own (README.md "The root,
 * jobs, and who sees what"): a directory that is new, empty or already marked as a ckpt root,
 * a marker file that says so, and an exclusive lock file held for the
 * daemon's lifetime, taken before anything under the root is changed. */
#ifndef CKPT_ROOT_H
#define CKPT_ROOT_H

#include <stddef.h>

#define ROOT_MARKER ".ckpt-root"      /* "ckpt root\n": this directory is ckptd's */
#define ROOT_LOCK   ".ckptd.lock"     /* flock()ed; says who holds it */
#define ROOT_MODE   0711              /* users reach their own job, list nothing */

/* May path be ckptd's root?  Changes nothing (ckptd -n).  Yes when it is
 * missing (it will be created), empty (lost+found aside), carries the
 * marker, or holds only job directories of an older ckptd (each with its
 * job.json).  0, or -errno with err saying why not. */
int root_check(const char *path, char *err, size_t errlen);

/* Start-up: create path if missing (parents 0755, the root ROOT_MODE),
 * check it as root_check does, take the lock when lock is set (a cluster
 * takes it on its coordinator, see root_lock), and write the marker.
 * 0 and *rootfd (new), or -errno with err (-EBUSY: another ckptd holds it).
 * Nothing under the root is touched before the lock is held. */
int root_open(const char *path, int lock, int *rootfd, char *err, size_t errlen);

/* Take the root's exclusive lock for the rest of this process (released
 * by root_unlock or at exit).  -EBUSY with err naming the holder when
 * another ckptd (or cluster) has it. */
int root_lock(int rootfd, const char *path, char *err, size_t errlen);
void root_unlock(void);

#endif
