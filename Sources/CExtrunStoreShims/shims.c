#define _GNU_SOURCE
#include "CExtrunStoreShims.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

long extrun_openat2(int dirfd, const char *path, void *how, size_t size) {
    return syscall(SYS_openat2, dirfd, path, how, size);
}

int extrun_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    return renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
}

int extrun_statx(int dirfd, const char *path, int flags, unsigned int mask, void *buffer) {
    return statx(dirfd, path, flags, mask, (struct statx *)buffer);
}

#ifndef SYS_faccessat2
#define SYS_faccessat2 439
#endif

int extrun_thread_fs_credentials(unsigned int uid, unsigned int gid, const unsigned int *groups, size_t count) {
    if (syscall(SYS_setgroups, count, groups) != 0) return -1;
    syscall(SYS_setfsgid, gid);
    if ((unsigned int)syscall(SYS_setfsgid, -1) != gid) {
        errno = EPERM;
        return -1;
    }
    syscall(SYS_setfsuid, uid);
    if ((unsigned int)syscall(SYS_setfsuid, -1) != uid) {
        errno = EPERM;
        return -1;
    }
    return 0;
}

int extrun_thread_groups(unsigned int *groups, int capacity) {
    return (int)syscall(SYS_getgroups, capacity, groups);
}

unsigned int extrun_thread_fsuid(void) {
    return (unsigned int)syscall(SYS_setfsuid, -1);
}

int extrun_faccessat_fs(int dirfd, const char *path, int mode, int flags) {
    return (int)syscall(SYS_faccessat2, dirfd, path, mode, AT_EACCESS | flags);
}

int extrun_sqlite_no_checkpoint_on_close(void *db) {
    return sqlite3_db_config((sqlite3 *)db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)0);
}

// The connection's own busy handler bounds the wait (the caller binds a short
// StoreDeadline): sqlite3_busy_timeout here replaced it, and with it every later wait's
// deadline (the host's StoreDeadline.busyCallback) for the rest of the connection's life.
int extrun_sqlite_checkpoint_truncate(void *db) {
    int log = 0, copied = 0;
    return sqlite3_wal_checkpoint_v2((sqlite3 *)db, "main", SQLITE_CHECKPOINT_TRUNCATE, &log, &copied);
}
