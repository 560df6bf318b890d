#define _GNU_SOURCE
#include "CExtrunSandbox.h"
#include "sandbox_support_linux.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <stdint.h>
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

#define EXTRUN_INOTIFY_INSTANCES_TEXT "16"
#define EXTRUN_INOTIFY_WATCHES_TEXT "8192"

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
    // inotify instances and watches are counted per user and per user namespace, up each
    // namespace's limits: lowered in the run's (where this process has every capability
    // until it execs), a run holds at most these of its user's budget (128 instances here,
    // which one plugin could otherwise take whole). Best effort: a kernel without them goes on.
    (void)write_text_file("/proc/sys/user/max_inotify_instances", EXTRUN_INOTIFY_INSTANCES_TEXT);
    (void)write_text_file("/proc/sys/user/max_inotify_watches", EXTRUN_INOTIFY_WATCHES_TEXT);
    return 0;
}

/// The machine's empty network namespace for plugins of root hosts, pinned by a bind mount
/// (as `ip netns add` does): creating one per run costs ~0.4 ms (the kernel sets up every
/// network subsystem for it), joining this one a few microseconds.
static const char shared_network_namespace[] = "/run/extrun/netns";

/// Joins the shared empty network namespace, making and pinning it first if no root host
/// has yet (under an exclusive lock). Root only, before the mount namespace is made (the
/// pin is a mount of the host's). 0, or -1 and errno (the caller then makes one of its own).
static int join_shared_network_namespace(void) {
    int fd = open(shared_network_namespace, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        // setns checks that it is a network namespace (EINVAL otherwise).
        int joined = setns(fd, CLONE_NEWNET);
        close(fd);
        if (joined == 0) return 0;
    }
    if (mkdir("/run/extrun", 0700) != 0 && errno != EEXIST) return -1;
    int lock = open("/run/extrun/netns.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lock < 0) return -1;
    int result = -1;
    if (flock(lock, LOCK_EX) != 0) goto done;
    // Another host may have made it while this one waited.
    fd = open(shared_network_namespace, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        int joined = setns(fd, CLONE_NEWNET);
        close(fd);
        if (joined == 0) {
            result = 0;
            goto done;
        }
    }
    // A new one (only a loopback, down), pinned by binding this process's at the path.
    if (unshare(CLONE_NEWNET) != 0) goto done;
    int file = open(shared_network_namespace, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0444);
    if (file < 0) goto done;
    close(file);
    if (mount("/proc/self/ns/net", shared_network_namespace, NULL, MS_BIND, NULL) != 0) goto done;
    result = 0;
done:;
    int saved = errno;
    close(lock);  // releases the lock
    errno = saved;
    return result;
}

int extrun_enter_namespaces(int wanted) {
    int active = 0;
    // A root host's plugins share one empty network namespace (see above); without root,
    // or if it cannot be had, the run makes one of its own with the others below.
    if ((wanted & EXTRUN_NS_NET) && (wanted & EXTRUN_NS_NET_SHARED) && geteuid() == 0 &&
        join_shared_network_namespace() == 0) {
        active |= EXTRUN_NS_NET | EXTRUN_NS_NET_SHARED;
        wanted &= ~EXTRUN_NS_NET;
    }
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
    // All in one call: the kernel makes them together.
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

/// "size=N,nr_inodes=M,mode=0700" for the run's memory filesystem (its folders are 1777).
static void memory_mount_options(char *buffer, size_t size, uint64_t bytes, uint64_t inodes) {
    size_t at = 0;
    buffer[0] = '\0';
    extrun_append_text(buffer, size, &at, "size=");
    extrun_append_int(buffer, size, &at, (long)bytes);
    extrun_append_text(buffer, size, &at, ",nr_inodes=");
    extrun_append_int(buffer, size, &at, (long)inodes);
    extrun_append_text(buffer, size, &at, ",mode=0700");
}

/// Whether `path` is a directory.
static int is_directory(const char *path) {
    struct stat info;
    return stat(path, &info) == 0 && S_ISDIR(info.st_mode);
}

/// A /dev of the run's own, and the run's memory filesystem at /dev/shm, /tmp and /var/tmp.
///
/// /dev: an empty tmpfs with only null, full, random, urandom and tty bound from the
/// host's (no /dev/pts: no terminal of anyone's by name; no /dev/zero: its shared
/// mappings are shared anonymous memory), and the links fd, stdin, stdout, stderr.
/// The memory filesystem: one tmpfs of `bytes` and `inodes`, whose folders are bound
/// at /dev/shm, /tmp and /var/tmp, so that all three together hold at most `bytes`;
/// it goes with the namespace. 0, or -1 and errno.
static int private_dev_and_temporary(uint64_t bytes, uint64_t inodes) {
    static const char *const devices[] = {"null", "full", "random", "urandom", "tty"};
    enum { DEVICE_COUNT = sizeof devices / sizeof devices[0] };
    int fds[DEVICE_COUNT];
    for (int i = 0; i < DEVICE_COUNT; i++) {
        char path[32] = "/dev/";
        size_t at = strlen(path);
        extrun_append_text(path, sizeof path, &at, devices[i]);
        fds[i] = open(path, O_PATH | O_CLOEXEC);
    }
    int result = -1;
    if (mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64") != 0) goto done;
    for (int i = 0; i < DEVICE_COUNT; i++) {
        if (fds[i] < 0) continue;
        char path[32] = "/dev/";
        size_t at = strlen(path);
        extrun_append_text(path, sizeof path, &at, devices[i]);
        // Root (outside a user namespace) makes the device node itself, with the host's
        // numbers: cheaper than a bind mount each. In a user namespace mknod is refused
        // (EPERM), and the host's node is bound instead.
        struct stat device;
        if (fstat(fds[i], &device) == 0 && S_ISCHR(device.st_mode) &&
            mknod(path, S_IFCHR | 0666, device.st_rdev) == 0 && chmod(path, 0666) == 0) {
            continue;
        }
        int made = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
        if (made < 0) goto done;
        close(made);
        char source[64];
        fd_path(source, sizeof source, fds[i]);
        if (mount(source, path, NULL, MS_BIND, NULL) != 0) goto done;
    }
    if (symlink("/proc/self/fd", "/dev/fd") != 0 || symlink("/proc/self/fd/0", "/dev/stdin") != 0 ||
        symlink("/proc/self/fd/1", "/dev/stdout") != 0 || symlink("/proc/self/fd/2", "/dev/stderr") != 0) {
        goto done;
    }
    if (bytes > 0) {
        char options[96];
        memory_mount_options(options, sizeof options, bytes, inodes);
        static const char *const stage = "/dev/.extrun-memory";
        if (mkdir(stage, 0700) != 0 || mkdir("/dev/shm", 0755) != 0) goto done;
        if (mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, options) != 0) goto done;
        static const char *const places[][2] = {
            {"/dev/.extrun-memory/shm", "/dev/shm"}, {"/dev/.extrun-memory/tmp", "/tmp"}, {"/dev/.extrun-memory/var-tmp", "/var/tmp"},
        };
        for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
            if (!is_directory(places[i][1])) continue;
            if (mkdir(places[i][0], 01777) != 0 || chmod(places[i][0], 01777) != 0) goto done;
            if (mount(places[i][0], places[i][1], NULL, MS_BIND, NULL) != 0) goto done;
        }
        // The stage stays mounted (its root is 0700 and Landlock does not list it): unmounting
        // it would wait for an RCU grace period, about a millisecond per launch here.
    }
    if (mount(NULL, "/dev", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) != 0) goto done;
    result = 0;
done:;
    int saved = errno;
    for (int i = 0; i < DEVICE_COUNT; i++) {
        if (fds[i] >= 0) close(fds[i]);
    }
    errno = saved;
    return result;
}

/// Makes `path` and the folders down to it (mode 0755) where they are missing: a
/// folder to hide that was under /tmp or /var/tmp is on the run's memory filesystem now.
static int make_folders(const char *path) {
    char buffer[4096];
    size_t length = strlen(path);
    if (length >= sizeof buffer) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buffer, path, length + 1);
    for (size_t at = 1; at <= length; at++) {
        if (buffer[at] == '/' || buffer[at] == '\0') {
            char saved = buffer[at];
            buffer[at] = '\0';
            if (mkdir(buffer, 0755) != 0 && errno != EEXIST) return -1;
            buffer[at] = saved;
        }
    }
    return 0;
}

int extrun_hide_directories(const char *const *hide, int hide_count, const char *const *reveal, const char *const *targets,
                            const int *writable, int reveal_count, uint64_t memory_bytes, uint64_t memory_inodes, int private_dev) {
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return -1;
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
    if (private_dev && private_dev_and_temporary(memory_bytes, memory_inodes) != 0) goto done;
    for (int h = 0; h < hide_count; h++) {
        if (make_folders(hide[h]) != 0) goto done;
    }
    for (int h = 0; h < hide_count; h++) {
        if (mount("tmpfs", hide[h], "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=256") != 0) goto done;
    }
    for (int i = 0; i < count; i++) {
        const char *path = targets[i];
        const char *cover = NULL;
        for (int h = 0; h < hide_count; h++) {
            if (is_inside(path, hide[h])) cover = hide[h];
        }
        // Or on the run's own /tmp, /var/tmp or /dev/shm (a plugin installed there).
        static const char *const replaced[] = {"/tmp", "/var/tmp", "/dev/shm"};
        for (size_t r = 0; cover == NULL && private_dev && r < sizeof replaced / sizeof replaced[0]; r++) {
            if (is_inside(path, replaced[r])) cover = replaced[r];
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
