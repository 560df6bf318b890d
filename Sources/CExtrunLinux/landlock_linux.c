#define _GNU_SOURCE
#include "CExtrunSandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

// Landlock (docs/sandbox.md, "Landlock"): a layer of its own, which needs neither root
// nor a user namespace. The plugin may read and execute the system's folders and its
// own, read and write its scratch directory (and the run's /tmp, /var/tmp, /dev/shm),
// and nothing else; no TCP; no abstract Unix socket and no signal outside its run.
// Runs in the plugin's process before exec: plain system calls only.

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

// Debian 12's headers predate most of these.
#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_RULE_PATH_BENEATH 1
#define LL_FS_EXECUTE (1ULL << 0)
#define LL_FS_WRITE_FILE (1ULL << 1)
#define LL_FS_READ_FILE (1ULL << 2)
#define LL_FS_READ_DIR (1ULL << 3)
#define LL_FS_REMOVE_DIR (1ULL << 4)
#define LL_FS_REMOVE_FILE (1ULL << 5)
#define LL_FS_MAKE_CHAR (1ULL << 6)
#define LL_FS_MAKE_DIR (1ULL << 7)
#define LL_FS_MAKE_REG (1ULL << 8)
#define LL_FS_MAKE_SOCK (1ULL << 9)
#define LL_FS_MAKE_FIFO (1ULL << 10)
#define LL_FS_MAKE_BLOCK (1ULL << 11)
#define LL_FS_MAKE_SYM (1ULL << 12)
#define LL_FS_REFER (1ULL << 13)     // ABI 2
#define LL_FS_TRUNCATE (1ULL << 14)  // ABI 3
#define LL_FS_IOCTL_DEV (1ULL << 15) // ABI 5
#define LL_NET_BIND_TCP (1ULL << 0)  // ABI 4
#define LL_NET_CONNECT_TCP (1ULL << 1)
#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)  // ABI 6
#define LL_SCOPE_SIGNAL (1ULL << 1)

struct ll_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

struct ll_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

int extrun_landlock_abi(void) {
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
    return abi < 0 ? 0 : (int)abi;
}

static uint64_t fs_rights(int abi) {
    uint64_t all = (LL_FS_MAKE_SYM << 1) - 1;
    if (abi >= 2) all |= LL_FS_REFER;
    if (abi >= 3) all |= LL_FS_TRUNCATE;
    if (abi >= 5) all |= LL_FS_IOCTL_DEV;
    return all;
}

int extrun_landlock_restrict(const struct extrun_sandbox_request *request, int private_temporary) {
    int abi = extrun_landlock_abi();
    if (abi <= 0) return 0;  // not available: nothing to do (the host says so in --verbose)
    uint64_t all = fs_rights(abi);
    uint64_t read_exec = LL_FS_EXECUTE | LL_FS_READ_FILE | LL_FS_READ_DIR;
    struct ll_ruleset_attr attr = {all, 0, 0};
    size_t size = sizeof(uint64_t);
    if (abi >= 4) {
        attr.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;  // no rule: no TCP at all
        size = 2 * sizeof(uint64_t);
    }
    if (abi >= 6) {
        attr.scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL;
        size = sizeof attr;
    }
    int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
    if (ruleset < 0) return -1;
    for (int i = 0; i < request->landlock_count; i++) {
        int kind = request->landlock_kinds[i];
        if (kind == EXTRUN_LANDLOCK_PRIVATE_TEMPORARY && !private_temporary) continue;
        int fd = open(request->landlock_paths[i], O_PATH | O_CLOEXEC);
        if (fd < 0) continue;  // not on this machine (say /lib32)
        struct ll_path_beneath_attr rule;
        rule.parent_fd = fd;
        switch (kind) {
        case EXTRUN_LANDLOCK_READ_EXECUTE: rule.allowed_access = read_exec; break;
        case EXTRUN_LANDLOCK_DEVICES:
            rule.allowed_access = LL_FS_READ_FILE | LL_FS_WRITE_FILE | LL_FS_READ_DIR | (abi >= 5 ? LL_FS_IOCTL_DEV : 0) |
                                  (abi >= 3 ? LL_FS_TRUNCATE : 0);
            break;
        default: rule.allowed_access = all; break;
        }
        // A file (the executable) takes only the rights that apply to files.
        long rc = syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &rule, 0);
        if (rc != 0 && errno == EINVAL) {
            rule.allowed_access &= LL_FS_EXECUTE | LL_FS_READ_FILE | LL_FS_WRITE_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV;
            rc = syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &rule, 0);
        }
        int saved = errno;
        close(fd);
        if (rc != 0) {
            close(ruleset);
            errno = saved;
            return -1;
        }
    }
    long rc = syscall(SYS_landlock_restrict_self, ruleset, 0);
    int saved = errno;
    close(ruleset);
    errno = saved;
    return rc == 0 ? 1 : -1;
}
