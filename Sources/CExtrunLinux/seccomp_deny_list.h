#ifndef EXTRUN_SECCOMP_DENY_LIST_H
#define EXTRUN_SECCOMP_DENY_LIST_H

// System calls a plugin never makes, in one place: seccomp_policy_linux.c denies each
// of them in extrun's filter (docs/sandbox.md, "The seccomp filter", lists them with the
// reason for each), and Benchmarks/driver/mkseccomp.c includes this file for the filter
// it gives bubblewrap in Scripts/bench, so that both deny the same calls.

static const char *const extrun_denied_syscalls[] = {
    // Looking into or controlling other processes.
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "process_madvise", "kcmp",
    // Filesystems and mounts.
    "mount", "umount2", "pivot_root", "fsopen", "fsmount", "fsconfig", "fspick", "move_mount", "open_tree",
    "mount_setattr", "open_by_handle_at", "quotactl", "quotactl_fd", "swapon", "swapoff", "chroot",
    // The machine itself.
    "reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "iopl", "ioperm",
    "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "vhangup", "syslog", "uselib",
    "lookup_dcookie",
    // Kernel attack surface no plugin needs.
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key",
    // Namespaces.
    "unshare", "setns",
    // Running another program (execve itself is allowed once, see below).
    "execveat",
    // Memory that RLIMIT_DATA does not count (docs/sandbox.md, "Memory"): memory files,
    // secret memory, System V shared memory and message queues.
    "memfd_create", "memfd_secret", "shmget", "shmat", "msgget",
    // The rest of System V IPC: semaphore arrays are kernel memory no limit counts (a 32000-
    // semaphore array is ~2 MiB of slab), and without an IPC namespace the ids name the
    // user's other programs' objects (semctl IPC_RMID, msgctl, shmctl).
    "semget", "semop", "semtimedop", "semctl", "msgsnd", "msgrcv", "msgctl", "shmctl",
    // Budgets of the whole machine or user that no limit of the run's bounds: Linux AIO
    // contexts (fs.aio-max-nr, machine-wide) and fanotify groups.
    "io_setup", "io_submit", "io_getevents", "io_pgetevents", "io_destroy", "io_cancel", "fanotify_init",
    NULL,
};

#endif
