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

/// sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1): closing this connection
/// leaves the write-ahead log for a later checkpoint instead of folding it into the
/// database and syncing (sqlite3_db_config is variadic). Returns SQLite's result code.
int extrun_sqlite_no_checkpoint_on_close(void *db);

/// A TRUNCATE checkpoint (the log copied into the database, then emptied). Waits for other
/// connections through the connection's own busy handler (the caller bounds it). Returns
/// SQLite's result code (SQLITE_BUSY: try another time).
int extrun_sqlite_checkpoint_truncate(void *db);

#endif
