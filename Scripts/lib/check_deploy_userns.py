# Scripts/check-deploy: runs argv[1:] as uid 0 of a new user namespace with a new mount
# namespace, as a pod with hostUsers: false runs its containers: capabilities count in that
# namespace only, the mounts made outside it are locked (the runtime's masks of /proc stay),
# mknod of devices is refused. The map is the identity on 0..65535, written by root outside,
# so that the files of this machine keep their owners (a pod's idmapped root file system
# does the same for its image).
import ctypes
import os
import sys

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
go_read, go_write = os.pipe()
ready_read, ready_write = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(go_write)
    os.close(ready_read)
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        sys.stderr.write("unshare(CLONE_NEWUSER | CLONE_NEWNS): %s\n" % os.strerror(ctypes.get_errno()))
        os._exit(90)
    os.write(ready_write, b"x")
    os.read(go_read, 1)
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    os.execvp(sys.argv[1], sys.argv[1:])
os.close(go_read)
os.close(ready_write)
if os.read(ready_read, 1) != b"x":
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
for name in ("uid_map", "gid_map"):
    with open("/proc/%d/%s" % (pid, name), "w") as f:
        f.write("0 0 65536\n")
os.write(go_write, b"x")
# The caller's SIGTERM goes to the command (the service's graceful stop).
import signal
signal.signal(signal.SIGTERM, lambda number, frame: os.kill(pid, signal.SIGTERM))
while True:
    try:
        _, status = os.waitpid(pid, 0)
        break
    except InterruptedError:
        continue
sys.exit(os.waitstatus_to_exitcode(status))
