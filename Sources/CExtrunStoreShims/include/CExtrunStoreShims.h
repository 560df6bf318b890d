#ifndef CEXTRUN_STORE_SHIMS_H
#define CEXTRUN_STORE_SHIMS_H

#include <stddef.h>

/// openat2(2) through syscall(2), which Swift cannot call (it is variadic).
/// `how` points to a `struct open_how` of `size` bytes. Returns the new
/// descriptor, or -1 with errno set.
long extrun_openat2(int dirfd, const char *path, void *how, size_t size);

/// renameat2(2); glibc declares it only under _GNU_SOURCE, which Swift's Glibc module lacks.
int extrun_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags);

/// statx(2) into a 256-byte `struct statx`; glibc declares it only under _GNU_SOURCE.
int extrun_statx(int dirfd, const char *path, int flags, unsigned int mask, void *buffer);

/// The calling thread's file system credentials (raw setgroups, setfsgid, setfsuid: they act
/// on this thread only; glibc's setgroups wrapper would change every thread of the process).
/// Sets `count` supplementary groups, then the file system gid and uid; returns 0, or -1 with
/// errno set (the thread's credentials then are whatever the calls before the failure left).
int extrun_thread_fs_credentials(unsigned int uid, unsigned int gid, const unsigned int *groups, size_t count);

/// The calling thread's supplementary groups (raw getgroups); the count, or -1 with errno set.
int extrun_thread_groups(unsigned int *groups, int capacity);

/// The calling thread's file system uid (setfsuid(-1) changes nothing and answers it).
unsigned int extrun_thread_fsuid(void);

/// faccessat2(dirfd, path, mode, AT_EACCESS | flags): checked with the thread's file system
/// uid and gid (setfsuid), not the real ones. 0, or -1 with errno set.
int extrun_faccessat_fs(int dirfd, const char *path, int mode, int flags);

/// sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1): closing this connection
/// leaves the write-ahead log for a later checkpoint instead of folding it into the
/// database and syncing (sqlite3_db_config is variadic). Returns SQLite's result code.
int extrun_sqlite_no_checkpoint_on_close(void *db);

/// A TRUNCATE checkpoint (the log copied into the database, then emptied). Waits for other
/// connections through the connection's own busy handler (the caller bounds it). Returns
/// SQLite's result code (SQLITE_BUSY: try another time).
int extrun_sqlite_checkpoint_truncate(void *db);

#endif
