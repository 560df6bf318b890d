#define _GNU_SOURCE
#include "CExtrunSandbox.h"
#include "sandbox_support_linux.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

// The plugin's namespaces: a user namespace for an ordinary user, then pid,
// mount, ipc and network; in the mount namespace, the folders the plugin must
// not see covered by empty read-only tmpfs (docs/sandbox.md, "Privileges").

/// Writes `text` to the file at `path` (for /proc/self/uid_map and friends). 0, or -1 and errno.
static int write_text_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t length = strlen(text);
    ssize_t n = write(fd, text, length);
    int saved = errno;
    close(fd);
    if (n != (ssize_t)length) {
        errno = n < 0 ? saved : EIO;
        return -1;
    }
    return 0;
}

/// "<id> <id> 1\n": maps one id to itself.
static void identity_map(char *buffer, size_t size, long id) {
    size_t at = 0;
    buffer[0] = '\0';
    extrun_append_int(buffer, size, &at, id);
    extrun_append_text(buffer, size, &at, " ");
    extrun_append_int(buffer, size, &at, id);
    extrun_append_text(buffer, size, &at, " 1\n");
}

/// A user namespace in which the host's user is itself (no root inside), so
/// that an ordinary user may create the other namespaces. 0, or -1 and errno.
static int enter_user_namespace(void) {
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (unshare(CLONE_NEWUSER) != 0) return -1;
    // From here on a failure leaves this process in a namespace without its ids: fatal (-2).
    char map[64];
    // setgroups must be denied before an unprivileged process may write gid_map.
    if (write_text_file("/proc/self/setgroups", "deny") != 0 && errno != ENOENT) return -2;
    identity_map(map, sizeof map, uid);
    if (write_text_file("/proc/self/uid_map", map) != 0) return -2;
    identity_map(map, sizeof map, gid);
    if (write_text_file("/proc/self/gid_map", map) != 0) return -2;
    return 0;
}

int extrun_enter_namespaces(int wanted) {
    int active = 0;
    if ((wanted & EXTRUN_NS_USER) && geteuid() != 0) {
        int entered = enter_user_namespace();
        if (entered == 0) {
            active |= EXTRUN_NS_USER;
        } else if (entered == -2) {
            return -1;
        }  // -1: user namespaces are not permitted here; carry on without
    }
    static const struct { int ours; int clone_flag; } kinds[] = {
        {EXTRUN_NS_PID, CLONE_NEWPID}, {EXTRUN_NS_MOUNT, CLONE_NEWNS},
        {EXTRUN_NS_IPC, CLONE_NEWIPC}, {EXTRUN_NS_NET, CLONE_NEWNET},
    };
    int flags = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (wanted & kinds[i].ours) flags |= kinds[i].clone_flag;
    }
    if (flags == 0) return active;
    if (unshare(flags) == 0) return active | (wanted & (EXTRUN_NS_PID | EXTRUN_NS_MOUNT | EXTRUN_NS_IPC | EXTRUN_NS_NET));
    // One at a time: keep those that are allowed.
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if ((wanted & kinds[i].ours) && unshare(kinds[i].clone_flag) == 0) active |= kinds[i].ours;
    }
    return active;
}

/// The bind-mount source for descriptor `fd`: "/proc/self/fd/N".
static void fd_path(char *buffer, size_t size, int fd) {
    size_t at = 0;
    extrun_append_text(buffer, size, &at, "/proc/self/fd/");
    extrun_append_int(buffer, size, &at, fd);
}

/// Whether `path` is strictly inside `folder`.
static int is_inside(const char *path, const char *folder) {
    size_t length = strlen(folder);
    return strncmp(path, folder, length) == 0 && path[length] == '/';
}

int extrun_hide_directories(const char *const *hide, int hide_count, const char *const *reveal, const char *const *targets,
                            const int *writable, int reveal_count) {
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return -1;
    if (hide_count <= 0) return 0;
    enum { MAX_REVEAL = 8 };
    int fds[MAX_REVEAL];
    int count = reveal_count < MAX_REVEAL ? reveal_count : MAX_REVEAL;
    // Open what comes back before it is covered.
    for (int i = 0; i < count; i++) {
        fds[i] = open(reveal[i], O_PATH | O_CLOEXEC);
        if (fds[i] < 0) {
            int saved = errno;
            for (int j = 0; j < i; j++) close(fds[j]);
            errno = saved;
            return -1;
        }
    }
    int result = -1;
    for (int h = 0; h < hide_count; h++) {
        if (mount("tmpfs", hide[h], "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=256") != 0) goto done;
    }
    for (int i = 0; i < count; i++) {
        const char *path = targets[i];
        const char *cover = NULL;
        for (int h = 0; h < hide_count; h++) {
            if (is_inside(path, hide[h])) cover = hide[h];
        }
        if (cover == NULL) {
            errno = EINVAL;
            goto done;
        }
        // The folders down to it, on the tmpfs.
        char target[4096];
        size_t length = strlen(path);
        if (length >= sizeof target) {
            errno = ENAMETOOLONG;
            goto done;
        }
        memcpy(target, path, length + 1);
        struct stat what;
        if (fstat(fds[i], &what) != 0) goto done;
        int is_directory = S_ISDIR(what.st_mode);
        for (size_t at = strlen(cover) + 1; at <= length; at++) {
            if (target[at] == '/' || target[at] == '\0') {
                char saved = target[at];
                target[at] = '\0';
                if (saved == '\0' && !is_directory) {
                    // A file (a plugin's executable reached through a link): an empty file to bind it onto.
                    int made = open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
                    if (made < 0) goto done;
                    close(made);
                } else if (mkdir(target, 0755) != 0 && errno != EEXIST) {
                    goto done;
                }
                target[at] = saved;
            }
        }
        char source[64];
        fd_path(source, sizeof source, fds[i]);
        if (mount(source, target, NULL, MS_BIND | MS_REC, NULL) != 0) goto done;
        if (writable == NULL || !writable[i]) {
            // Read-only (a plugin installed in the home): a plugin that is the host's user
            // must not rewrite its own manifest (its owner, its limits) or executable.
            if (mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0) goto done;
        }
    }
    for (int h = 0; h < hide_count; h++) {
        if (mount(NULL, hide[h], NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) goto done;
    }
    result = 0;
done:;
    int saved = errno;
    for (int i = 0; i < count; i++) close(fds[i]);
    errno = saved;
    return result;
}
