#define _GNU_SOURCE
#include "CExtrunSandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

// The run's scratch directory, by descriptor: what it holds (the disk quota, counted
// by the supervisor while the plugin runs and once after it) and its removal (by the
// host). Only openat/fstatat/unlinkat from a directory's descriptor: no path is ever
// longer than one name, and no symbolic link is followed. Plain system calls and no
// malloc: the count runs in the supervisor, forked from a multi-threaded host.

struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

static int is_dot(const char *name) { return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')); }

enum { MAX_DEPTH = 256 };

/// Adds what folder `fd` holds to `usage`; stops early once past `limits`. 0, or -1 (errno).
static int count_folder(int fd, int depth, struct extrun_disk_usage *usage, uint64_t max_bytes, uint64_t max_files) {
    if (depth > MAX_DEPTH) {
        usage->too_deep = 1;
        return 0;
    }
    char buffer[8192];
    for (;;) {
        long n = syscall(SYS_getdents64, fd, buffer, sizeof buffer);
        if (n < 0) return -1;
        if (n == 0) return 0;
        for (long at = 0; at < n;) {
            struct linux_dirent64 *entry = (struct linux_dirent64 *)(buffer + at);
            at += entry->d_reclen;
            if (is_dot(entry->d_name)) continue;
            struct stat info;
            if (fstatat(fd, entry->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
            usage->files += 1;
            usage->bytes += (uint64_t)info.st_blocks * 512;
            if ((max_bytes && usage->bytes > max_bytes) || (max_files && usage->files > max_files)) return 0;
            if (S_ISDIR(info.st_mode)) {
                int child = openat(fd, entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (child < 0) continue;  // a folder the plugin closed to itself: its entries are not counted
                int rc = count_folder(child, depth + 1, usage, max_bytes, max_files);
                close(child);
                if (rc != 0) return rc;
                if (usage->too_deep || (max_bytes && usage->bytes > max_bytes) || (max_files && usage->files > max_files)) return 0;
            }
        }
    }
}

int extrun_disk_usage(int folder_fd, uint64_t max_bytes, uint64_t max_files, struct extrun_disk_usage *usage) {
    memset(usage, 0, sizeof *usage);
    int fd = openat(folder_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = count_folder(fd, 0, usage, max_bytes, max_files);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/// Writes "NAME: reason" into `failure`.
static void describe_failure(char *failure, size_t size, const char *name, int error) {
    if (failure == NULL || size == 0) return;
    size_t at = 0;
    const char *reason = strerror(error);
    for (const char *p = name; *p && at + 1 < size; p++) failure[at++] = *p;
    for (const char *p = ": "; *p && at + 1 < size; p++) failure[at++] = *p;
    for (const char *p = reason; *p && at + 1 < size; p++) failure[at++] = *p;
    failure[at] = '\0';
}

int extrun_remove_tree(const char *path, char *failure, size_t failure_size) {
    if (failure && failure_size) failure[0] = '\0';
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        if (errno == EACCES && chmod(path, 0700) == 0) fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            describe_failure(failure, failure_size, path, errno);
            return -1;
        }
    }
    long depth = 0;
    char buffer[8192];
    // Each pass empties one folder: entries are removed; a folder that is not empty is
    // entered (and scanned from its start); an emptied folder is left for its parent,
    // whose scan is started again and removes it. A failure ends the walk.
    for (long steps = 0; steps < 100000000L; steps++) {
        (void)fchmod(fd, 0700);  // a folder the plugin made unwritable (not needed by root)
        if (lseek(fd, 0, SEEK_SET) != 0) break;
        int entered = 0;
        for (;;) {
            long n = syscall(SYS_getdents64, fd, buffer, sizeof buffer);
            if (n < 0) {
                describe_failure(failure, failure_size, "a folder", errno);
                close(fd);
                return -1;
            }
            if (n == 0) break;
            for (long at = 0; at < n && !entered; at += ((struct linux_dirent64 *)(buffer + at))->d_reclen) {
                struct linux_dirent64 *entry = (struct linux_dirent64 *)(buffer + at);
                if (is_dot(entry->d_name)) continue;
                int is_folder = entry->d_type == DT_DIR;
                if (entry->d_type == DT_UNKNOWN) {
                    struct stat info;
                    is_folder = fstatat(fd, entry->d_name, &info, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(info.st_mode);
                }
                if (!is_folder) {
                    if (unlinkat(fd, entry->d_name, 0) != 0 && errno != ENOENT) {
                        describe_failure(failure, failure_size, entry->d_name, errno);
                        close(fd);
                        return -1;
                    }
                    continue;
                }
                if (unlinkat(fd, entry->d_name, AT_REMOVEDIR) == 0 || errno == ENOENT) continue;
                if (errno != ENOTEMPTY && errno != EEXIST && errno != EACCES && errno != EPERM) {
                    describe_failure(failure, failure_size, entry->d_name, errno);
                    close(fd);
                    return -1;
                }
                (void)fchmodat(fd, entry->d_name, 0700, 0);
                int child = openat(fd, entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (child < 0) {
                    describe_failure(failure, failure_size, entry->d_name, errno);
                    close(fd);
                    return -1;
                }
                close(fd);
                fd = child;
                depth++;
                entered = 1;
            }
            if (entered) break;
        }
        if (entered) continue;
        // This folder is empty now.
        if (depth == 0) break;
        int parent = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        close(fd);
        if (parent < 0) {
            describe_failure(failure, failure_size, "..", errno);
            return -1;
        }
        fd = parent;
        depth--;
    }
    close(fd);
    if (rmdir(path) != 0) {
        describe_failure(failure, failure_size, path, errno);
        return -1;
    }
    struct stat left;
    if (lstat(path, &left) == 0) {
        describe_failure(failure, failure_size, path, EEXIST);
        return -1;
    }
    return 0;
}
