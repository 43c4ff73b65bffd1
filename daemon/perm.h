/* perm.h - who may read a job's files on disk (README.md "The root, jobs,
 * and who sees what": readable by the job's owner and ckptd only).  ckptd owns every file it writes; a job
 * directory gets a POSIX ACL that lets its owner read and list it (and,
 * inherited, everything ckptd later creates inside) and nobody else but
 * ckptd: no group, no other.  No capability is needed: ckptd owns the
 * directory it sets the ACL on. */
#ifndef CKPT_PERM_H
#define CKPT_PERM_H

#include <sys/stat.h>
#include <sys/types.h>

/* Restrict the job directory jobfd to ckptd and owner (read-only for the
 * owner, inherited by what is created inside).  A file system without
 * POSIX ACLs gets mode 0700 (ckptd only; the owner reads through ckptd)
 * and -EOPNOTSUPP.  0 or -errno. */
int perm_job_dir(int jobfd, uid_t owner);

/* Could ckptd have made it?  Owned by ckptd's user and writable by no one
 * else (no group or other write bit).  A file or directory under the root
 * that is not is someone else's: never read as ckptd's, never written
 * into (README.md "The root, jobs, and who sees what"). */
int perm_is_ours(const struct stat *st);

/* The same as a sentence for an error: "owned by uid 1001, not ckptd's
 * uid 998" or "writable by group and others (mode 0777)". */
void perm_why_not_ours(const struct stat *st, char *buf, size_t len);

#endif
