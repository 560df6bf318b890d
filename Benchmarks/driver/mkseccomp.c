// mkseccomp: writes a seccomp BPF program for `bwrap --seccomp FD` that denies
// what extrun's filter denies, so that bubblewrap runs the plugin with a
// filter of the same size and kind (Scripts/bench's bwrap comparison).
//
// Usage: mkseccomp OUT.bpf
//
// The list mirrors Sources/CExtrunLinux/seccomp_policy_linux.c (denied calls,
// sockets other than AF_UNIX, clone with namespace flags, clone3 → ENOSYS,
// TIOCSTI/TIOCLINUX). It differs in two ways: forbidden calls kill the process
// (bwrap has no supervisor to notify), and execve is not pinned to one pointer
// (bwrap execs the plugin itself after installing the filter).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *const denied[] = {
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "process_madvise", "kcmp",
    "mount", "umount2", "pivot_root", "fsopen", "fsmount", "fsconfig", "fspick", "move_mount", "open_tree",
    "mount_setattr", "open_by_handle_at", "quotactl", "quotactl_fd", "swapon", "swapoff", "chroot",
    "reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "iopl", "ioperm",
    "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "vhangup", "syslog", "uselib",
    "lookup_dcookie", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "keyctl", "add_key", "request_key", "unshare", "setns", "execveat", NULL,
};

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: mkseccomp OUT.bpf\n");
        return 2;
    }
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == NULL) return 1;
    int rc = 0;
    for (const char *const *name = denied; *name != NULL && rc == 0; name++) {
        int nr = seccomp_syscall_resolve_name(*name);
        if (nr != __NR_SCMP_ERROR) rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, nr, 0);
    }
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX));
    const unsigned long flags[] = {CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWCGROUP};
    for (size_t i = 0; rc == 0 && i < sizeof flags / sizeof flags[0]; i++) {
        rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, flags[i], flags[i]));
    }
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, TIOCSTI));
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, TIOCLINUX));
    if (rc != 0) {
        fprintf(stderr, "mkseccomp: %s\n", strerror(-rc));
        return 1;
    }
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || seccomp_export_bpf(ctx, fd) != 0) {
        perror("mkseccomp");
        return 1;
    }
    close(fd);
    seccomp_release(ctx);
    return 0;
}
