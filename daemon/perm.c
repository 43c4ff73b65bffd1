/* perm.c - owner-only access to a job directory through POSIX ACLs.  See
 * perm.h.  The ACL is written as the kernel's xattr (no libacl needed). */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "perm.h"

/* include/uapi/linux/posix_acl_xattr.h and posix_acl.h */
#define ACL_XATTR_VERSION 2
#define TAG_USER_OBJ  0x01
#define TAG_USER      0x02
#define TAG_GROUP_OBJ 0x04
#define TAG_MASK      0x10
#define TAG_OTHER     0x20
#define NO_ID         0xffffffffu

struct acl_entry {
	uint16_t tag, perm;
	uint32_t id;
} __attribute__((packed));

struct acl {
	uint32_t version;
	struct acl_entry e[5];
} __attribute__((packed));

static void put(struct acl *a, int *n, uint16_t tag, uint16_t perm, uint32_t id)
{
	a->e[*n].tag = htole16(tag);
	a->e[*n].perm = htole16(perm);
	a->e[*n].id = htole32(id);
	(*n)++;
}

/* Does the directory carry exactly this ACL already? */
static int acl_is(int fd, const char *xattr, const struct acl *want, size_t len)
{
	struct acl have;

	return fgetxattr(fd, xattr, &have, sizeof(have)) == (ssize_t)len &&
	       !memcmp(&have, want, len);
}

int perm_job_dir(int jobfd, uid_t owner)
{
	struct acl a = { .version = htole32(ACL_XATTR_VERSION) };
	size_t len;
	int n = 0;

	/* entries sorted by tag, then id, as the kernel requires: ckptd
	 * (the file owner) everything, the job's owner read and list,
	 * the group and others nothing */
	put(&a, &n, TAG_USER_OBJ, 7, NO_ID);
	if (owner != geteuid() && owner != 0)
		put(&a, &n, TAG_USER, 5, (uint32_t)owner);
	put(&a, &n, TAG_GROUP_OBJ, 0, NO_ID);
	put(&a, &n, TAG_MASK, 5, NO_ID);
	put(&a, &n, TAG_OTHER, 0, NO_ID);
	len = sizeof(a.version) + (size_t)n * sizeof(a.e[0]);
	if (acl_is(jobfd, "system.posix_acl_default", &a, len) &&
	    acl_is(jobfd, "system.posix_acl_access", &a, len))
		return 0;               /* closed already: nothing to write */
	/* the default ACL first: the directory is closed once both are set */
	if (fsetxattr(jobfd, "system.posix_acl_default", &a, len, 0) < 0 ||
	    fsetxattr(jobfd, "system.posix_acl_access", &a, len, 0) < 0) {
		int r = errno == ENOTSUP ? -EOPNOTSUPP : -errno;
		if (fchmod(jobfd, 0700) < 0)
			return -errno;
		return r;
	}
	return 0;
}

int perm_is_ours(const struct stat *st)
{
	return st->st_uid == geteuid() && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

void perm_why_not_ours(const struct stat *st, char *buf, size_t len)
{
	if (st->st_uid != geteuid())
		snprintf(buf, len, "owned by uid %u, not ckptd's uid %u",
			 (unsigned)st->st_uid, (unsigned)geteuid());
	else
		snprintf(buf, len, "writable by %s (mode %04o)",
			 (st->st_mode & S_IWGRP) && (st->st_mode & S_IWOTH) ? "group and others" :
			 st->st_mode & S_IWGRP ? "its group" : "others",
			 (unsigned)(st->st_mode & 07777));
}
