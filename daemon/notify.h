/* notify.h - systemd readiness protocol without libsystemd: datagrams to
 * $NOTIFY_SOCKET ("READY=1", "STOPPING=1", "STATUS=..."). */
#ifndef CKPT_NOTIFY_H
#define CKPT_NOTIFY_H

/* Send one state string; a no-op (returns 0) without $NOTIFY_SOCKET.
 * Returns 0 or -errno. */
int notify_send(const char *state);
/* The same with an fd attached (SCM_RIGHTS): "FDSTORE=1\nFDNAME=..." hands
 * it to systemd's fd store, which gives it back at the next start
 * ($LISTEN_FDS, $LISTEN_FDNAMES). */
int notify_send_fd(const char *state, int fd);
/* "STATUS=<formatted text>", the line `systemctl status` shows. */
int notify_statusf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
