#define _GNU_SOURCE
#include "CExtrunStoreShims.h"

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
