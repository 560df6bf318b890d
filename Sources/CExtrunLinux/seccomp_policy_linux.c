#define _GNU_SOURCE
#include "CExtrunSandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/audit.h>
#include <linux/seccomp.h>

/// System calls a plugin never makes (seccomp_deny_list.h). Each one is denied by the
/// action the caller chooses: a notification to the supervisor (which kills the plugin
/// and reports the call) or an immediate kill of the process.
#include "seccomp_deny_list.h"

/// Calls that send a signal to another process, thread or process group. Without
/// a pid namespace the plugin could name any process of its user with them, so
/// with `check_signals` the supervisor decides each one (its own processes only).
static const int signal_syscalls[] = {
    SYS_kill, SYS_tkill, SYS_tgkill, SYS_rt_sigqueueinfo, SYS_rt_tgsigqueueinfo,
#ifdef SYS_pidfd_send_signal
    SYS_pidfd_send_signal,
#else
    424,
#endif
};

/// Calls that change another process's limits, priority, scheduling, CPUs or memory
/// placement, named by pid (argument 0; 0 is the caller). Without a pid namespace the
/// plugin could name the host with them (prlimit64 setting its RLIMIT_FSIZE to 0 kills it
/// with SIGXFSZ at its next write), so with `check_signals` a call naming a pid goes to the
/// supervisor, which lets it go on for the run's own processes only (EPERM otherwise).
static const int process_syscalls[] = {
    SYS_prlimit64, SYS_sched_setaffinity, SYS_sched_setscheduler, SYS_sched_setparam,
#ifdef SYS_sched_setattr
    SYS_sched_setattr,
#else
    314,
#endif
    SYS_migrate_pages, SYS_move_pages,
};

int extrun_syscall_controls_process(int nr) {
    for (size_t i = 0; i < sizeof process_syscalls / sizeof process_syscalls[0]; i++) {
        if (process_syscalls[i] == nr) return 1;
    }
    return nr == SYS_setpriority || nr == SYS_ioprio_set;
}

int extrun_syscall_sends_signal(int nr) {
    for (size_t i = 0; i < sizeof signal_syscalls / sizeof signal_syscalls[0]; i++) {
        if (signal_syscalls[i] == nr) return 1;
    }
    return 0;
}

/// The kernel reads fcntl's and ioctl's command as 32 bits.
#define CMD_MASK 0xffffffffUL

#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef F_SETPIPE_SZ
#define F_SETPIPE_SZ 1031
#endif

/// O_TMPFILE's own bit (O_TMPFILE is it with O_DIRECTORY).
#define EXTRUN_O_TMPFILE_BIT 020000000

static const unsigned long namespace_clone_flags[] = {
    CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWCGROUP,
};

int extrun_seccomp_build(const char *exec_path, int notify, int check_signals, void **program_out) {
    *program_out = NULL;
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == NULL) return -ENOMEM;
    uint32_t deny = notify ? SCMP_ACT_NOTIFY : SCMP_ACT_KILL_PROCESS;
    int rc = 0;

    for (const char *const *name = extrun_denied_syscalls; *name != NULL && rc == 0; name++) {
        int nr = seccomp_syscall_resolve_name(*name);
        if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
        rc = seccomp_rule_add(ctx, deny, nr, 0);
    }
    // Sockets: only AF_UNIX (no network).
    if (rc == 0) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX));
    // Named AF_UNIX sockets (a path: the system's D-Bus, docker.sock, /dev/log) are reachable
    // wherever the plugin can see their path, which Landlock does not control before ABI 8:
    // no connect (the plugin's channels are inherited descriptors; socketpair still works),
    // and no datagram socket, which reaches a named one with sendto/sendmsg without connect
    // (an AF_UNIX SOCK_RAW is a datagram socket too). EACCES, as for a socket file one may not write.
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(connect), 0);
    static const int datagram_types[] = {SOCK_DGRAM, SOCK_RAW};
    for (size_t i = 0; rc == 0 && i < sizeof datagram_types / sizeof datagram_types[0]; i++) {
        // (The type is an int for the kernel, its low 4 bits the type, the rest flags.)
        scmp_datum_t type = (scmp_datum_t)datagram_types[i];
        // (AF_UNIX only here: another family is a violation by the rule above.)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 2, SCMP_A0(SCMP_CMP_EQ, AF_UNIX),
                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, type));
        if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socketpair), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, type));
    }
    // clone with a namespace flag. clone3 passes its flags in memory, which a
    // filter cannot read: it fails with ENOSYS so that the C library falls back to clone.
    for (size_t i = 0; rc == 0 && i < sizeof namespace_clone_flags / sizeof namespace_clone_flags[0]; i++) {
        unsigned long flag = namespace_clone_flags[i];
        rc = seccomp_rule_add(ctx, deny, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
    }
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    // Typing into the controlling terminal of the person who started the host.
    if (rc == 0) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, CMD_MASK, TIOCSTI));
    if (rc == 0) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, CMD_MASK, TIOCLINUX));
    // execve only with the host's own pointer to the plugin's path: the exec that
    // starts the plugin passes; after it, that address belongs to no mapping the
    // plugin knows (the host's address space is randomized), so any later execve is denied.
    if (rc == 0) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(execve), 1, SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)(uintptr_t)exec_path));
    // Signals: the supervisor checks the target (and answers EPERM or lets the call go on).
    // pidfd_send_signal is refused instead (ENOSYS: C libraries fall back to kill): its
    // target is a descriptor, which another thread can swap between the check and the call.
    for (size_t i = 0; rc == 0 && notify && check_signals && i < sizeof signal_syscalls / sizeof signal_syscalls[0]; i++) {
        int nr = signal_syscalls[i];
        rc = seccomp_rule_add(ctx, nr == signal_syscalls[5] ? SCMP_ACT_ERRNO(ENOSYS) : SCMP_ACT_NOTIFY, nr, 0);
    }
    // Calls on another process's limits and scheduling (see process_syscalls): a pid other
    // than 0 goes to the supervisor. (A 64-bit comparison: a pid with upper bits set goes
    // there too, and the supervisor reads it as the int the kernel reads.) setpriority and
    // ioprio_set name a process, a process group or a user: anything but "this process" goes.
    for (size_t i = 0; rc == 0 && notify && check_signals && i < sizeof process_syscalls / sizeof process_syscalls[0]; i++) {
        rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, process_syscalls[i], 1, SCMP_A0(SCMP_CMP_NE, 0));
    }
    if (rc == 0 && notify && check_signals) rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(setpriority), 1, SCMP_A0(SCMP_CMP_NE, PRIO_PROCESS));
    if (rc == 0 && notify && check_signals) rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(setpriority), 1, SCMP_A1(SCMP_CMP_NE, 0));
    if (rc == 0 && notify && check_signals) rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(ioprio_set), 1, SCMP_A0(SCMP_CMP_NE, 1));  // IOPRIO_WHO_PROCESS
    if (rc == 0 && notify && check_signals) rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(ioprio_set), 1, SCMP_A1(SCMP_CMP_NE, 0));
    // Socket buffers are kernel memory no limit counts: they stay at their default size
    // (net.core.wmem_default/rmem_default). level and optname are ints: masked comparisons.
    static const int buffer_options[] = {SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE};
    for (size_t i = 0; rc == 0 && i < sizeof buffer_options / sizeof buffer_options[0]; i++) {
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(setsockopt), 2, SCMP_A1(SCMP_CMP_MASKED_EQ, CMD_MASK, SOL_SOCKET),
                              SCMP_A2(SCMP_CMP_MASKED_EQ, CMD_MASK, (scmp_datum_t)buffer_options[i]));
    }
    // A file with no name (O_TMPFILE) holds disk the scratch quota cannot see: refused with
    // EOPNOTSUPP, the kernel's answer where a filesystem lacks it (C libraries and Python fall
    // back to a named file). openat2 passes its flags in memory a filter cannot read: ENOSYS,
    // so that C libraries use openat.
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EOPNOTSUPP), SCMP_SYS(open), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, EXTRUN_O_TMPFILE_BIT, EXTRUN_O_TMPFILE_BIT));
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EOPNOTSUPP), SCMP_SYS(openat), 1, SCMP_A2(SCMP_CMP_MASKED_EQ, EXTRUN_O_TMPFILE_BIT, EXTRUN_O_TMPFILE_BIT));
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0);
    // Signals without a signal call: a descriptor's owner gets SIGIO (or the signal F_SETSIG
    // names) when it becomes ready, checked by uid only. Setting an owner is refused (EPERM).
    // fcntl's and ioctl's command is an int for the kernel: every comparison on it is masked
    // to 32 bits, or F_SETOWN | (1 << 32) would pass the rule and still be F_SETOWN.
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fcntl), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, CMD_MASK, F_SETOWN));
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fcntl), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, CMD_MASK, F_SETOWN_EX));
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, CMD_MASK, FIOSETOWN));
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, CMD_MASK, SIOCSPGRP));
    // Pipe buffers are kernel memory no limit counts: they stay at their default size
    // (EPERM, which is what the kernel answers past its own maximum).
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fcntl), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, CMD_MASK, F_SETPIPE_SZ));
    // Mappings RLIMIT_DATA does not count: shared anonymous memory, and MAP_GROWSDOWN
    // (accounted as stack). A violation naming the flag.
    if (rc == 0) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(mmap), 1,
                                       SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_TYPE | MAP_ANONYMOUS, MAP_SHARED | MAP_ANONYMOUS));
    if (rc == 0) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(mmap), 1,
                                       SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_TYPE | MAP_ANONYMOUS, MAP_SHARED_VALIDATE | MAP_ANONYMOUS));
    if (rc == 0) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(mmap), 1, SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_GROWSDOWN, MAP_GROWSDOWN));
    // Large private anonymous mappings (what malloc asks for a big block) go to the
    // supervisor, which notes one the cap will refuse and lets the call go on: the
    // evidence that a death that follows is the memory cap's, whatever was sampled.
    if (rc == 0 && notify) {
        // (Writable only: a PROT_NONE reservation, such as a malloc arena's, is not counted.)
        rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(mmap), 3, SCMP_A1(SCMP_CMP_GE, EXTRUN_LARGE_MAPPING_BYTES),
                              SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_WRITE, PROT_WRITE),
                              SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_TYPE | MAP_ANONYMOUS | MAP_GROWSDOWN, MAP_PRIVATE | MAP_ANONYMOUS));
    }
    // Calls through another ABI (int 0x80: i386; the x32 bit): the filter's rules name
    // x86_64 numbers only, so every such call is denied, and reported with its ABI.
    if (rc == 0) rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, deny);
    if (rc != 0) {
        seccomp_release(ctx);
        return rc;
    }

    int fd = memfd_create("extrun-seccomp", MFD_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        seccomp_release(ctx);
        return rc;
    }
    rc = seccomp_export_bpf(ctx, fd);
    seccomp_release(ctx);
    if (rc != 0) {
        close(fd);
        return rc;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    if (size <= 0 || lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return -EIO;
    }
    char *buffer = malloc((size_t)size);
    if (buffer == NULL) {
        close(fd);
        return -ENOMEM;
    }
    off_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buffer + got, (size_t)(size - got));
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            free(buffer);
            close(fd);
            return -EIO;
        }
        got += n;
    }
    close(fd);
    *program_out = buffer;
    return (int)(size / 8);  // sizeof(struct sock_filter)
}

const char *extrun_syscall_name(int nr) { return extrun_syscall_name_abi(EXTRUN_ABI_NATIVE, nr); }

int extrun_is_large_private_mapping(const struct seccomp_data *data) {
    return extrun_syscall_abi(data->arch, data->nr) == EXTRUN_ABI_NATIVE && data->nr == SCMP_SYS(mmap) &&
           data->args[1] >= EXTRUN_LARGE_MAPPING_BYTES && (data->args[2] & PROT_WRITE) &&
           (data->args[3] & (MAP_TYPE | MAP_ANONYMOUS | MAP_GROWSDOWN)) == (MAP_PRIVATE | MAP_ANONYMOUS);
}

int extrun_syscall_abi(uint32_t arch, int nr) {
#if defined(__x86_64__)
    if (arch == AUDIT_ARCH_I386) return EXTRUN_ABI_I386;
    if (arch == AUDIT_ARCH_X86_64) return (nr & 0x40000000) ? EXTRUN_ABI_X32 : EXTRUN_ABI_NATIVE;
    return EXTRUN_ABI_OTHER;
#else
    (void)nr;
    return arch == (uint32_t)seccomp_arch_native() ? EXTRUN_ABI_NATIVE : EXTRUN_ABI_OTHER;
#endif
}

const char *extrun_syscall_name_abi(int abi, int nr) {
    // seccomp_syscall_resolve_num_arch returns a malloc'd copy; keep a small cache-free copy for Swift.
    static __thread char name[64];
    uint32_t arch = abi == EXTRUN_ABI_I386 ? SCMP_ARCH_X86 : abi == EXTRUN_ABI_X32 ? SCMP_ARCH_X32 : SCMP_ARCH_NATIVE;
    if (abi == EXTRUN_ABI_OTHER) return NULL;
    char *resolved = seccomp_syscall_resolve_num_arch(arch, nr);
    if (resolved == NULL && abi == EXTRUN_ABI_X32) resolved = seccomp_syscall_resolve_num_arch(arch, nr & ~0x40000000);
    if (resolved == NULL) return NULL;
    size_t i = 0;
    for (; resolved[i] != '\0' && i < sizeof name - 1; i++) name[i] = resolved[i];
    name[i] = '\0';
    free(resolved);
    return name;
}

int extrun_seccomp_notify_supported(void) {
    // SECCOMP_GET_NOTIF_SIZES exists exactly when user notification does.
    struct seccomp_notif_sizes sizes;
    return syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) == 0;
}
