// mkseccomp: writes a seccomp BPF program for `bwrap --seccomp FD` that denies
// what extrun's filter denies, so that bubblewrap runs the plugin with a
// filter of the same size and kind (Scripts/bench's bwrap comparison).
//
// Usage: mkseccomp OUT.bpf
//
// The denied calls are Sources/CExtrunLinux/seccomp_deny_list.h, included; the other
// rules mirror seccomp_policy_linux.c (sockets other than AF_UNIX, connect and
// datagram sockets, clone with namespace flags, clone3 → ENOSYS, TIOCSTI/TIOCLINUX). It differs in two ways: forbidden calls kill the process
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

// The deny list itself is extrun's own, included rather than copied.
#include "../../Sources/CExtrunLinux/seccomp_deny_list.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: mkseccomp OUT.bpf\n");
        return 2;
    }
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == NULL) return 1;
    int rc = 0;
    for (const char *const *name = extrun_denied_syscalls; *name != NULL && rc == 0; name++) {
        int nr = seccomp_syscall_resolve_name(*name);
        if (nr != __NR_SCMP_ERROR) rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, nr, 0);
    }
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX));
    const unsigned long flags[] = {CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWCGROUP};
    for (size_t i = 0; rc == 0 && i < sizeof flags / sizeof flags[0]; i++) {
        rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, flags[i], flags[i]));
    }
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    // No connect and no AF_UNIX datagram sockets (named sockets of the host's), as extrun's.
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(connect), 0);
    const int datagram_types[] = {SOCK_DGRAM, SOCK_RAW};
    for (size_t i = 0; rc == 0 && i < sizeof datagram_types / sizeof datagram_types[0]; i++) {
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 2, SCMP_A0(SCMP_CMP_EQ, AF_UNIX),
                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, (scmp_datum_t)datagram_types[i]));
        if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socketpair), 1,
                                           SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, (scmp_datum_t)datagram_types[i]));
    }
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
