#!/usr/bin/env python3
"""A deliberately misbehaving extrun plugin for the sandbox tests.

Each intent misbehaves in one way during `handle`. It takes its framing from
SDKs/python/extrun_plugin.py (the test copies it beside this file), but runs
its own loop: its answers are not a handler's (some never come, one is a
300 MB frame written by hand).
"""
import json
import os
import sys
import time

sys.dont_write_bytecode = True
# The module is in the plugin's folder. A test links this script from outside it, and Python
# looks for modules beside the file a link leads to, where the sandbox shows only the file.
sys.path.insert(0, os.environ.get("EXTRUN_PLUGIN_DIR", "."))
import extrun_plugin as extrun  # noqa: E402

IN, OUT = 3, 4
channel = extrun.Channel(IN, OUT)


def read_message():
    message = channel.receive()
    if message is None:
        sys.exit(0)
    return message


def send(message):
    channel.send(message)


def answer(request, result):
    send({"jsonrpc": "2.0", "id": request["id"], "result": result})


def success(request, **properties):
    answer(request, {"code": "success", "properties": properties})
    return True


def misbehave(intent, params, request):
    if intent == "NeverAnswer":
        while True:
            time.sleep(1)
    if intent == "Spin":
        while True:
            pass
    if intent == "ForkBomb":
        while True:
            try:
                os.fork()
            except OSError:
                pass
    if intent == "OpenSocket":
        import socket
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(("127.0.0.1", 9))
        return success(request)
    if intent == "ExecShell":
        os.execv("/bin/sh", ["sh", "-c", "echo escaped"])
    if intent == "Ptrace":
        import ctypes
        ctypes.CDLL(None, use_errno=True).ptrace(0, 0, 0, 0)  # PTRACE_TRACEME
        return success(request)
    if intent == "Unshare":
        import ctypes
        ctypes.CDLL(None, use_errno=True).unshare(0x40000000)  # CLONE_NEWNET
        return success(request)
    if intent == "FloodStdout":
        chunk = b"x" * 65535 + b"\n"
        for _ in range(800):  # about 50 MB
            os.write(1, chunk)
        return success(request, flooded="stdout")
    if intent == "FloodStderr":
        chunk = b"e" * 65535 + b"\n"
        for _ in range(800):
            os.write(2, chunk)
        return success(request, flooded="stderr")
    if intent == "HugeResponse":
        # Announce a 300 MB frame, then start sending it.
        os.write(OUT, b"Content-Length: 314572800\r\n\r\n")
        chunk = b" " * (1 << 20)
        for _ in range(300):
            os.write(OUT, chunk)
        return
    if intent == "Daemonize":
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(120)
                os._exit(0)
            os._exit(0)
        time.sleep(0.2)
        return success(request, daemonized=True)
    if intent == "WriteBigFile":
        with open("big.bin", "wb") as f:
            f.write(b"\0" * (int(params.get("megabytes", 1)) << 20))
        return success(request)
    if intent == "ProgressThenAnswer":
        for _ in range(int(params.get("steps", 3))):
            time.sleep(0.6)
            send({"jsonrpc": "2.0", "method": "progress", "params": {"fraction": 0.5}})
        return success(request, done=True)
    if intent == "RewriteOwnManifest":
        # A plugin that is the host's user could make itself another owner for its next run.
        manifest = os.path.join(os.environ.get("EXTRUN_PLUGIN_DIR", "."), "manifest.json")
        return success(request, result=json.dumps({manifest: attempt(lambda: append(manifest))}))
    if intent == "WhoAmI":
        info = os.stat(".")
        return success(request, result=json.dumps({"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
                                                   "groups": os.getgroups(), "scratchOwner": info.st_uid,
                                                   "scratchMode": oct(info.st_mode & 0o7777)}))
    if intent == "ReadSecrets":
        # The store and the keys by path: absolute, and through the parent's and
        # the host's /proc entries (cwd and root), which lead outside a mount namespace.
        home, host = params["path"], int(params.get("pid", 0))
        ppid = os.getppid()
        targets = []
        for base in [home, "/proc/%d/root%s" % (ppid, home), "/proc/%d/root%s" % (host, home), "/proc/1/root%s" % home]:
            targets += [base + "/store.sqlite", base + "/keys", base + "/policy.json"]
        for base in ["/proc/%d/cwd" % ppid, "/proc/%d/cwd" % host]:
            targets += [base + "/store.sqlite", base + "/keys"]
        results = {}
        for path in targets:
            results[path] = attempt(lambda path=path: read_anything(path))
        return success(request, result=json.dumps(results))
    if intent == "WriteHome":
        home = params["path"]
        results = {}
        for path in [home + "/planted", home + "/keys/planted.key", home + "/containers/planted"]:
            results[path] = attempt(lambda path=path: write_new(path))
        results[home + "/store.sqlite"] = attempt(lambda: append(home + "/store.sqlite"))
        return success(request, result=json.dumps(results))
    if intent == "ReadContainer":
        path = params["path"]
        results = {path: attempt(lambda: read_anything(path)),
                   os.path.dirname(path): attempt(lambda: os.listdir(os.path.dirname(path)))}
        return success(request, result=json.dumps(results))
    if intent == "PtraceAttach":
        import ctypes
        ctypes.CDLL(None, use_errno=True).ptrace(16, int(params["pid"]), 0, 0)  # PTRACE_ATTACH
        return success(request, result="attached")
    if intent == "SignalHost":
        import signal
        host = int(params["pid"])
        results = {}
        for name, sig in [("SIGSTOP", signal.SIGSTOP), ("SIGKILL", signal.SIGKILL)]:
            results["kill(%d, %s)" % (host, name)] = attempt(lambda sig=sig: os.kill(host, sig))
        results["kill(-%d, SIGKILL)" % host] = attempt(lambda: os.kill(-host, signal.SIGKILL))
        results["kill(-1, 0)"] = attempt(lambda: os.kill(-1, 0))
        results["pidfd_send_signal(host)"] = attempt(lambda: pidfd_kill(host))
        # Its own child may be signalled.
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        os.kill(child, signal.SIGKILL)
        _, status = os.waitpid(child, 0)
        results["own child"] = "killed by %d" % os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exited"
        return success(request, result=json.dumps(results))
    if intent == "EscapeScratch":
        # chown and chmod: out of its scratch directory, and making it hard to remove.
        here = os.getcwd()
        results = {"chown . root": attempt(lambda: os.chown(here, 0, 0)),
                   "chmod .. 777": attempt(lambda: os.chmod(os.path.dirname(here), 0o777)),
                   "chown .. self": attempt(lambda: os.chown(os.path.dirname(here), os.getuid(), os.getgid())),
                   "write ..": attempt(lambda: write_new(os.path.dirname(here) + "/planted"))}
        os.makedirs("locked/deeper", exist_ok=True)
        write_new("locked/deeper/file")
        os.chmod("locked/deeper/file", 0o4755)
        results["setuid file"] = attempt(lambda: os.chmod("locked/deeper/file", 0o4755))
        os.chmod("locked/deeper", 0o000)
        os.chmod("locked", 0o500)
        write_new("readonly")
        os.chmod("readonly", 0o400)
        results["chmod . 000"] = attempt(lambda: os.chmod(here, 0o000))
        return success(request, result=json.dumps(results), scratch=here)
    if intent == "Terminal":
        # The terminal of whoever started the host: /dev/tty, then any pseudo-terminal by name.
        results = {"session leader": os.getsid(0) == os.getpid()}
        stolen = []

        def use(fd):
            os.write(fd, b"PLUGIN WAS HERE\r\n")
            import select
            if select.select([fd], [], [], 1.5)[0]:
                stolen.append(os.read(fd, 100).decode(errors="replace"))
            os.close(fd)

        results["/dev/tty"] = attempt(lambda: use(os.open("/dev/tty", os.O_RDWR | os.O_NONBLOCK)))
        try:
            names = [n for n in os.listdir("/dev/pts") if n.isdigit()]
            results["/dev/pts"] = names
        except OSError as error:
            import errno as errno_names
            names = []
            results["/dev/pts"] = errno_names.errorcode.get(error.errno, str(error.errno))
        for name in names:
            results["/dev/pts/" + name] = attempt(
                lambda name=name: use(os.open("/dev/pts/" + name, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)))
        return success(request, result=json.dumps(results), stolen="stolen=" + "|".join(stolen))
    if intent == "SignalOwner":
        # fcntl's and ioctl's command is 32 bits for the kernel: the upper 32 set must not pass the filter.
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        r, w = os.pipe()
        results = {}

        def call(number, fd, command, argument):
            if libc.syscall(ctypes.c_long(number), ctypes.c_long(fd), ctypes.c_long(command), ctypes.c_long(argument)) < 0:
                raise OSError(ctypes.get_errno(), "refused")

        high = 1 << 32
        owner = (ctypes.c_int * 2)(1, int(params.get("pid", 1)))  # F_OWNER_PID
        for name, command, argument in [
            ("F_SETOWN", 8, int(params.get("pid", 1))), ("F_SETOWN|1<<32", 8 | high, int(params.get("pid", 1))),
            ("F_SETOWN_EX|1<<32", 15 | high, ctypes.addressof(owner)), ("F_SETPIPE_SZ", 1031, 1 << 20),
            ("F_SETPIPE_SZ|1<<32", 1031 | high, 1 << 20),
        ]:
            results[name] = attempt(lambda command=command, argument=argument: call(72, r, command, argument))  # fcntl
        pid = ctypes.c_int(int(params.get("pid", 1)))
        results["FIOSETOWN|1<<32"] = attempt(lambda: call(16, r, 0x8901 | high, ctypes.addressof(pid)))  # ioctl
        # F_SETSIG and O_ASYNC are harmless without an owner.
        results["F_SETSIG"] = attempt(lambda: call(72, r, 10, 9))
        results["O_ASYNC"] = attempt(lambda: call(72, r, 4, os.O_ASYNC))
        os.write(w, b"x")
        return success(request, result=json.dumps(results))
    if intent == "OtherABI":
        import ctypes
        import mmap
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        if params.get("path") == "x32":
            libc.syscall(ctypes.c_long(0x40000000 | 39))  # getpid, x32
            return success(request, result="x32 call returned")
        # getpid through int 0x80: mov eax, 20; int 0x80; ret
        code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"
        page = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                         prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        page.write(code)
        address = ctypes.addressof(ctypes.c_char.from_buffer(page))
        ctypes.CFUNCTYPE(ctypes.c_int)(address)()
        return success(request, result="int 0x80 returned")
    if intent == "ProcessControl":
        # Calls on another process's limits and scheduling, aimed at `pid` (the host), and at itself.
        import threading
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        target = int(params.get("pid", 1))
        high = 1 << 32
        results = {}

        def call(number, *arguments):
            if libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in arguments]) < 0:
                raise OSError(ctypes.get_errno(), "refused")

        no_file_size = (ctypes.c_ulong * 2)(0, (1 << 64) - 1)  # RLIMIT_FSIZE 0: SIGXFSZ at the next write
        one_cpu = ctypes.c_ulong(1)
        idle = (ctypes.c_int * 1)(0)
        for name, number, arguments in [
            ("prlimit64(host, FSIZE, 0)", 302, (target, 1, ctypes.addressof(no_file_size), 0)),
            ("prlimit64(host|1<<32, FSIZE, 0)", 302, (target | high, 1, ctypes.addressof(no_file_size), 0)),
            ("setpriority(PRIO_PROCESS, host)", 141, (0, target, 10)),
            ("setpriority(PRIO_USER, 0)", 141, (2, 0, 10)),
            ("sched_setaffinity(host)", 203, (target, 8, ctypes.addressof(one_cpu))),
            ("sched_setscheduler(host, SCHED_IDLE)", 144, (target, 5, ctypes.addressof(idle))),
            ("ioprio_set(PROCESS, host, idle)", 251, (1, target, 3 << 13)),
            ("ioprio_set(USER, 0, idle)", 251, (3, 0, 3 << 13)),
        ]:
            results[name] = attempt(lambda number=number, arguments=arguments: call(number, *arguments))
        # On itself, by 0 and by its own thread id (what pthread_setaffinity_np passes): allowed.
        own_files = (ctypes.c_ulong * 2)(64, 64)
        results["prlimit64(0, NOFILE, 64)"] = attempt(lambda: call(302, 0, 7, ctypes.addressof(own_files), 0))
        results["setpriority(PRIO_PROCESS, 0)"] = attempt(lambda: call(141, 0, 0, 19))
        results["sched_setaffinity(own tid)"] = attempt(
            lambda: call(203, threading.get_native_id(), 8, ctypes.addressof(one_cpu)))
        return success(request, result=json.dumps(results))
    if intent == "KernelBudgets":
        # Kernel memory or machine-wide budgets no limit of the run counts.
        import ctypes
        import socket
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        how = params["path"]
        if how == "sem":
            libc.syscall(ctypes.c_long(64), ctypes.c_long(0), ctypes.c_long(32000), ctypes.c_long(0o1600))  # semget
            return success(request, result="semget returned")
        if how == "aio":
            context = ctypes.c_ulong(0)
            libc.syscall(ctypes.c_long(206), ctypes.c_long(4096), ctypes.c_long(ctypes.addressof(context)))  # io_setup
            return success(request, result="io_setup returned")
        if how == "fanotify":
            libc.syscall(ctypes.c_long(300), ctypes.c_long(0x200), ctypes.c_long(0))  # fanotify_init
            return success(request, result="fanotify_init returned")
        results = {}
        high = 1 << 32
        a, b = socket.socketpair()
        size = ctypes.c_int(4 << 20)
        for name, level, option in [("SO_SNDBUF", 1, 7), ("SO_RCVBUF", 1, 8), ("SO_SNDBUFFORCE", 1, 32),
                                    ("SO_RCVBUFFORCE", 1, 33), ("SO_SNDBUF|1<<32", 1 | high, 7 | high)]:
            def set_buffer(level=level, option=option):
                if libc.syscall(ctypes.c_long(54), ctypes.c_long(a.fileno()), ctypes.c_long(level), ctypes.c_long(option),
                                ctypes.c_long(ctypes.addressof(size)), ctypes.c_long(4)) < 0:
                    raise OSError(ctypes.get_errno(), "setsockopt")
            results[name] = attempt(set_buffer)
        results["SO_KEEPALIVE"] = attempt(lambda: a.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
        o_tmpfile = 0o20000000 | os.O_DIRECTORY
        def raw_open():  # open itself (the C library's open is openat)
            fd = libc.syscall(ctypes.c_long(2), ctypes.c_char_p(b"."), ctypes.c_long(o_tmpfile | os.O_RDWR), ctypes.c_long(0o600))
            if fd < 0:
                raise OSError(ctypes.get_errno(), "open")
            os.close(fd)
        results["open(O_TMPFILE)"] = attempt(raw_open)
        results["openat(O_TMPFILE)"] = attempt(lambda: os.close(os.open(".", o_tmpfile | os.O_RDWR, 0o600, dir_fd=os.open(".", os.O_RDONLY))))
        import tempfile
        results["tempfile.TemporaryFile"] = attempt(lambda: tempfile.TemporaryFile(dir=".").write(b"x"))
        # Queued signals: RLIMIT_SIGPENDING.
        import signal
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
        queued = 0
        value = ctypes.c_void_p(0)
        while queued < 100000 and libc.sigqueue(os.getpid(), int(signal.SIGRTMIN), value) == 0:
            queued += 1
        results["queued"] = str(queued)
        import errno as errno_names
        results["sigqueue"] = errno_names.errorcode.get(ctypes.get_errno(), "ok")
        return success(request, result=json.dumps(results))
    if intent == "ForkMemory":
        # `steps` children, each holding `megabytes` of private memory (each under the cap), for 1.5 s.
        children, size = int(params.get("steps", 20)), int(params.get("megabytes", 20)) << 20
        ready_r, ready_w = os.pipe()
        pids = []
        for _ in range(children):
            pid = os.fork()
            if pid == 0:
                os.close(ready_r)
                held = bytearray(size)
                held[::4096] = b"\x01" * len(range(0, size, 4096))  # every page touched
                os.write(ready_w, b"y")
                time.sleep(30)
                os._exit(0)
            pids.append(pid)
        os.close(ready_w)
        ready = 0
        while ready < children and os.read(ready_r, 1):
            ready += 1
        time.sleep(1.5)
        for pid in pids:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        return success(request, result=json.dumps({"children": ready}))
    if intent == "PageTables":
        # A read-only private mapping is not what RLIMIT_DATA counts; one read per 2 MiB of
        # it costs the kernel a 4 KiB page table: `megabytes` GiB make megabytes * 2 MiB of them.
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        size = int(params.get("megabytes", 64)) << 30
        address = libc.mmap(None, size, 1, 0x02 | 0x20 | 0x4000, -1, 0)  # PROT_READ; MAP_PRIVATE|ANONYMOUS|NORESERVE
        if address is None or address == ctypes.c_void_p(-1).value:
            return success(request, result="mmap failed")
        libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(size), 15)  # MADV_NOHUGEPAGE
        total = 0
        for offset in range(0, size, 2 << 20):
            total += ctypes.c_char.from_address(address + offset).value[0]
        time.sleep(1)
        pte = [line for line in open("/proc/self/status") if line.startswith("VmPTE")]
        return success(request, result="".join(pte).strip())
    if intent == "HoldUnlinked":
        # `steps` files of `megabytes` MiB in its scratch directory, unlinked and held open:
        # disk the folder's walk does not see.
        held = []
        for index in range(int(params.get("steps", 4))):
            fd = os.open("unlinked-%d" % index, os.O_CREAT | os.O_RDWR, 0o600)
            os.unlink("unlinked-%d" % index)
            os.posix_fallocate(fd, 0, int(params.get("megabytes", 4)) << 20)
            held.append(fd)
        time.sleep(3)
        return success(request, result="held %d" % len(held))
    if intent == "Inotify":
        # inotify instances until refused: a budget of its user's.
        import ctypes
        import errno as errno_names
        libc = ctypes.CDLL(None, use_errno=True)
        made = 0
        while made < 10000 and libc.inotify_init1(os.O_CLOEXEC) >= 0:
            made += 1
        refused = errno_names.errorcode.get(ctypes.get_errno(), "?")
        return success(request, result=json.dumps({"instances": made, "refused": refused}))
    if intent == "HoldMemory":
        # Ways to hold memory that RLIMIT_DATA does not count.
        import ctypes
        import mmap
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        size = int(params.get("megabytes", 200)) << 20
        how = params["path"]
        if how == "shared":
            held = mmap.mmap(-1, size)  # MAP_SHARED | MAP_ANONYMOUS
            for _ in range(size >> 20):
                held.write(b"x" * (1 << 20))
        elif how == "memfd":
            fd = os.memfd_create("held")
            os.ftruncate(fd, size)
            held = mmap.mmap(fd, size)
            for _ in range(size >> 20):
                held.write(b"x" * (1 << 20))
        elif how == "sysv":
            libc.shmget(0, size, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
        elif how == "growsdown":
            address = libc.mmap(None, size, 3, 0x22 | 0x100, -1, 0)  # MAP_PRIVATE | MAP_ANONYMOUS | MAP_GROWSDOWN
            if address in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), "mmap")
            ctypes.memset(address, 1, size)
        return success(request, held=how)
    if intent == "AllocateOnce":
        # One malloc past the cap, refused: then abort() without a word, as C code does.
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = [ctypes.c_size_t]
        if not libc.malloc(int(params.get("megabytes", 200)) << 20):
            os.abort()
        return success(request, allocated=True)
    if intent == "AllocateSmall":
        # 1 MiB at a time, every page written, until malloc fails: then abort() without a word.
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = [ctypes.c_size_t]
        libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        for _ in range(int(params.get("megabytes", 200))):
            block = libc.malloc(1 << 20)
            if not block:
                os.abort()
            libc.memset(block, 0x5A, 1 << 20)
        return success(request, allocated=True)
    if intent == "DeepScratch":
        # Folders nested past PATH_MAX, one closed to everyone, links out of the scratch directory.
        here = os.getcwd()
        os.symlink("/etc", "escape")
        os.symlink(os.environ.get("EXTRUN_PLUGIN_DIR", "/"), "plugin")
        fd = os.open(".", os.O_RDONLY)
        for level in range(int(params.get("steps", 30))):
            name = ("d%03d" % level) + "x" * 240
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "wb") as f:
            f.write(b"x" * 4096)
        os.symlink("/etc/passwd", "passwd-link", dir_fd=fd)
        os.chmod(fd, 0o000)
        os.close(fd)
        return success(request, scratch=here)
    if intent == "ManyFiles":
        count = int(params.get("steps", 100))
        for i in range(count):
            open("f%06d" % i, "wb").close()
        return success(request, made=count)
    if intent == "Reach":
        # Outside its run: a world-writable folder of the host's, another folder, an abstract socket.
        import socket
        results = {"write /run/lock": attempt(lambda: (write_new("/run/lock/extrun-reach-%d" % os.getpid()),
                                                       os.unlink("/run/lock/extrun-reach-%d" % os.getpid()))),
                   "list /var/log": attempt(lambda: os.listdir("/var/log")),
                   "read /usr/bin/env": attempt(lambda: read_anything("/usr/bin/env"))}
        try:
            with open("/proc/1/cmdline", "rb") as f:
                results["/proc/1/cmdline"] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError as error:
            results["/proc/1/cmdline"] = str(error)
        try:
            # The host's sockets (its abstract listener among them) are those of its network namespace.
            results["/proc/net/unix"] = "shows the host's socket" if params["path"] in open("/proc/net/unix").read() else "own"
        except OSError as error:
            results["/proc/net/unix"] = str(error)
        try:
            results["/proc/net/dev"] = " ".join(sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:]))
        except OSError as error:
            results["/proc/net/dev"] = str(error)

        def connect_abstract():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect("\0" + params["path"])
            finally:
                s.close()
        results["abstract socket"] = attempt(connect_abstract)
        return success(request, result=json.dumps(results))
    if intent == "NamedSockets":
        # Named AF_UNIX sockets of the host's (the system's D-Bus, docker.sock, /dev/log): a
        # listening stream socket and a bound datagram one at paths the test made, world-writable.
        import socket
        folder = params["path"]

        def connect_stream():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(os.path.join(folder, "stream.sock"))
            finally:
                s.close()

        def send_datagram():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                s.sendto(b"from the plugin", os.path.join(folder, "dgram.sock"))
            finally:
                s.close()

        def send_from_pair():
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                a.sendto(b"from the plugin", os.path.join(folder, "dgram.sock"))
            finally:
                a.close()
                b.close()

        def stream_pair():
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            a.sendall(b"x")
            assert b.recv(1) == b"x"
            a.close()
            b.close()
        results = {"connect stream": attempt(connect_stream), "sendto datagram": attempt(send_datagram),
                   "sendto from a datagram pair": attempt(send_from_pair), "stream pair": attempt(stream_pair)}
        return success(request, result=json.dumps(results))
    if intent == "FillFolder":
        # Write up to `megabytes` into a file in `path` (a memory filesystem or a scratch folder).
        target = os.path.join(params["path"], "extrun-filled-%d" % os.getpid())
        written = 0
        outcome = "ok"
        try:
            with open(target, "wb") as f:
                chunk = b"x" * (1 << 20)
                for _ in range(int(params.get("megabytes", 200))):
                    f.write(chunk)
                    f.flush()
                    written += len(chunk)
        except OSError as error:
            import errno as errno_names
            outcome = errno_names.errorcode.get(error.errno, str(error.errno))
        return success(request, result=json.dumps({"written": written, "outcome": outcome, "path": target}))
    answer(request, {"code": "failure"})


def attempt(action):
    """"ok" or the errno's name: what an attempt came to."""
    import errno as errno_names
    try:
        action()
        return "ok"
    except OSError as error:
        return errno_names.errorcode.get(error.errno, str(error.errno))


def read_anything(path):
    if os.path.isdir(path):
        os.listdir(path)
    else:
        with open(path, "rb") as f:
            f.read(16)


def write_new(path):
    with open(path, "wb") as f:
        f.write(b"planted")


def append(path):
    with open(path, "ab") as f:
        f.write(b"garbage")


def pidfd_kill(pid):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(434, pid, 0)  # pidfd_open
    if fd < 0:
        raise OSError(ctypes.get_errno(), "pidfd_open")
    if libc.syscall(424, fd, 9, None, 0) != 0:  # pidfd_send_signal(SIGKILL)
        raise OSError(ctypes.get_errno(), "pidfd_send_signal")


def main():
    while True:
        message = read_message()
        method = message.get("method")
        if "id" not in message:
            continue
        params = message.get("params") or {}
        if method == "initialize":
            answer(message, {"protocolVersion": 1, "plugin": {"id": "test.hostile", "version": "1"},
                             "intents": INTENTS})
        elif method == "resolve":
            name = params["parameter"]
            value = params["parameters"].get(name)
            answer(message, {"result": "success", "value": value} if value is not None else {"result": "notRequired"})
        elif method == "confirm":
            answer(message, {"code": "ready"})
        elif method == "handle":
            misbehave(params["intent"], params["parameters"], message)
        else:
            send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no " + method}})


INTENTS = ["NeverAnswer", "Spin", "ForkBomb", "OpenSocket", "ExecShell", "Ptrace", "Unshare", "FloodStdout",
           "FloodStderr", "HugeResponse", "Daemonize", "WriteBigFile", "ProgressThenAnswer", "ReadSecrets", "WriteHome",
           "ReadContainer", "PtraceAttach", "SignalHost", "EscapeScratch", "WhoAmI", "RewriteOwnManifest", "Terminal",
           "SignalOwner", "OtherABI", "HoldMemory", "FillFolder", "AllocateOnce", "DeepScratch", "ManyFiles", "Reach", "NamedSockets", "AllocateSmall",
           "ProcessControl", "KernelBudgets", "ForkMemory", "PageTables", "HoldUnlinked", "Inotify"]

if __name__ == "__main__":
    main()
