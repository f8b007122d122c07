"""The seccomp filter of the sandbox (sandbox.py): the system calls a tool is refused,
compiled by libseccomp (through the pyseccomp package) into the BPF program that
bwrap's --seccomp reads.

Namespaces and dropped capabilities keep a tool from most of the operator's system,
but not all of the kernel is namespaced: the keyrings (the operator's session keyring
is readable from a user namespace), and a set-uid bit a tool gives a file in the
operator's directory outlives the sandbox. Other calls are refused because a tool
has no use for them and they are where the kernel's exploits have been: io_uring,
userfaultfd, perf events, bpf, the mount API, new namespaces, module loading.

Every call not in DENIED is allowed. The filter covers each ABI the kernel runs on
the machine (x86_64's i386 and x32 entries too: `int 0x80` from a 64-bit program is
an i386 call); a call from any other ABI kills the process (SIGSYS), since the
filter can't judge it and an error on every call would leave a program running
blind. Where libseccomp or pyseccomp is missing, the sandbox is Unavailable: it never
runs without the filter.

Importing pyseccomp costs about 15 ms (it asks ldconfig where libc and libseccomp
are), building the filter 1.5 ms; a process builds it once, and program() can keep
it in a file, keyed by libseccomp's file (its identity: no library is loaded to read
the key), the machine and this module's tables.
"""

import os
import termios
import zlib
from errno import ENOSYS, EPERM

from agentctl.tools.bwrap import Unavailable

NO_SECCOMP = ("the sandbox needs libseccomp (apt-get install libseccomp2) and the "
              "pyseccomp package (pip install pyseccomp)")
MACHINE = os.uname().machine
ARCHES = {"x86_64": ("X86", "X32"), "aarch64": ("ARM",)}   # besides the native one
# libseccomp's attributes of the filter: a call from an ABI it doesn't cover kills the
# process (SECCOMP_RET_KILL_PROCESS); its rules as a binary tree (log n tests a call)
ATTRIBUTES = {"ACT_BADARCH": 0x80000000, "CTL_OPTIMIZE": 2}
S_ISUID, S_ISGID = 0o4000, 0o2000
CLONE_NEW = (0x00020000, 0x02000000, 0x04000000, 0x08000000,    # NS, CGROUP, UTS, IPC,
             0x10000000, 0x20000000, 0x40000000)                # USER, PID, NET
CLONE_FLAGS = 1 if MACHINE.startswith("s390") else 0     # s390 passes the stack first


def _every(errno, names):
    return tuple((name, errno, ()) for name in names.split())


def _setid(name, mode, flags=None):
    """name's calls whose mode (argument `mode`) has a set-uid or set-gid bit; for an
    open, only those that create a file (O_CREAT or O_TMPFILE in argument `flags`)."""
    opens = [()] if flags is None else [((flags, bit, bit),)
                                        for bit in (os.O_CREAT, os.O_TMPFILE)]
    return tuple((name, EPERM, when + ((mode, bit, bit),))
                 for bit in (S_ISUID, S_ISGID) for when in opens)


# (system call, the errno it answers, conditions): each condition (argument, mask,
# value) holds when (argument & mask) == value; a call is refused when all hold.
DENIED = (
    # the kernel keyrings: the operator's session keyring must not be readable
    *_every(EPERM, "keyctl add_key request_key"),
    # io_uring's operations are not system calls, so no filter sees them; ENOSYS makes
    # a program fall back to plain reads and writes
    *_every(ENOSYS, "io_uring_setup io_uring_enter io_uring_register"),
    # the kernel's largest surfaces of attack, of no use to a tool
    *_every(EPERM, "userfaultfd perf_event_open bpf"),
    # mounts: the sandbox's file system is what bwrap made it (umount is i386's)
    *_every(EPERM, "mount umount umount2 pivot_root chroot move_mount open_tree fsopen "
                   "fsconfig fsmount fspick mount_setattr"),
    # namespaces: a new one would undo the sandbox's (and is the way to most of the
    # kernel's code that checks capabilities); clone3 passes its flags in a struct
    # that a filter can't read, and glibc falls back from ENOSYS to clone. (Not
    # CLONE_NEWTIME: in clone's flags 0x80 is the exit signal's, taken off before the
    # kernel looks for namespaces; a time namespace is only clone3's or unshare's.)
    *_every(EPERM, "unshare setns"),
    *(("clone", EPERM, ((CLONE_FLAGS, flag, flag),)) for flag in CLONE_NEW),
    ("clone3", ENOSYS, ()),
    # the machine's own: kernel code, accounting, swap, the kernel log, quotas, ports,
    # terminals; and handles to files by number, the classic container escape
    *_every(EPERM, "kexec_load kexec_file_load init_module finit_module delete_module "
                   "acct swapon swapoff reboot syslog quotactl lookup_dcookie "
                   "name_to_handle_at open_by_handle_at iopl ioperm vhangup fanotify_init "
                   "nfsservctl"),
    # pushing input into a terminal, the operator's if the tool can reach it; the
    # kernel reads the request as 32 bits, so the mask
    *(("ioctl", EPERM, ((1, 0xFFFFFFFF, request),))
      for request in (termios.TIOCSTI, termios.TIOCLINUX)),
    # personality(): Linux's own (0), linux32(1)'s PER_LINUX32 (8) and the query
    # (0xffffffff) only; the rest turn off ASLR or make data executable. libseccomp
    # compares an argument once a rule, so a rule a bit: with bit 31 clear, no bit but
    # 3 may be set; with it set, none may be clear
    *(("personality", EPERM, ((0, 1 << 31 | 1 << bit, value),))
      for bit in range(31) for value in (1 << bit, 1 << 31) if value != 8),
    # a set-uid or set-gid program left in the operator's directory: made by chmod or
    # created so (openat2 passes its mode in a struct: ENOSYS, and programs fall back)
    *_setid("chmod", 1), *_setid("fchmod", 1), *_setid("fchmodat", 2),
    *_setid("fchmodat2", 2), *_setid("mknod", 1), *_setid("mknodat", 2),
    *_setid("creat", 1), *_setid("open", 2, flags=1), *_setid("openat", 3, flags=2),
    ("openat2", ENOSYS, ()),
)

_program = None


def program(cache=None):
    """The filter as bwrap's --seccomp reads it (struct sock_filter[]), built once a
    process; with `cache`, a file that keeps it between processes."""
    global _program
    if _program is None:
        _program = _build() if cache is None else _cached(cache)
    return _program


def _build():
    try:
        import pyseccomp as seccomp  # (start-up: 5 to 25 ms, only for a filter not cached)
    except (ImportError, OSError, RuntimeError) as e:  # RuntimeError: no libseccomp
        raise Unavailable(NO_SECCOMP) from e
    f = seccomp.SyscallFilter(seccomp.ALLOW)
    for name, value in ATTRIBUTES.items():
        f.set_attr(getattr(seccomp.Attr, name), value)
    for arch in ARCHES.get(MACHINE, ()):
        try:
            f.add_arch(getattr(seccomp.Arch, arch))
        except OSError:     # an ABI this libseccomp doesn't know: its calls kill
            pass
    for name, errno, conditions in DENIED:
        number = seccomp.resolve_syscall(seccomp.Arch.NATIVE, name)
        if number == -1:    # a call this libseccomp is older than
            continue
        f.add_rule(seccomp.ERRNO(errno), number,
                   *(seccomp.Arg(arg, seccomp.MASKED_EQ, mask, value)
                     for arg, mask, value in conditions))
    with open(os.memfd_create("agentctl-seccomp"), "w+b") as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


def _key(library):
    """What the program is made of, told without loading libseccomp (ctypes' import alone
    costs 1.5 ms): `library`, the libseccomp file a build loaded, by its identity (an
    upgrade replaces it), the loader's cache and variables (which choose the file), the
    machine and this module's tables; None when the file is gone."""
    try:
        st = os.stat(library)
    except (OSError, TypeError, ValueError):
        return None
    try:
        loader = os.stat("/etc/ld.so.cache").st_mtime_ns
    except OSError:
        loader = 0
    chosen = zlib.crc32(repr([os.environ.get(v) for v in ("LD_LIBRARY_PATH", "LD_PRELOAD")])
                        .encode())
    table = zlib.crc32(repr((DENIED, ARCHES.get(MACHINE), ATTRIBUTES)).encode())
    return "agentctl seccomp: {} {:08x} {}:{}:{}:{} {} {:08x} {}\n".format(
        MACHINE, table, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, loader, chosen,
        library).encode()


def _loaded():
    """The file of the libseccomp this process loaded (pyseccomp's), or None."""
    try:
        with open("/proc/self/maps") as f:
            found = [line.split(None, 5)[5].strip() for line in f
                     if "/libseccomp.so" in line and len(line.split(None, 5)) == 6]
    except OSError:
        return None
    return found[0] if found and "\n" not in found[0] else None


def _cached(path):
    """The program kept at `path` when it is this libseccomp's of these tables (the key
    names the library's file: no library is loaded to tell), else built and kept."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        header, _, bpf = data.partition(b"\n")
        library = os.fsdecode(header.split(b" ", 7)[-1])
        if _key(library) == header + b"\n" and bpf and len(bpf) % 8 == 0:  # whole instructions
            return bpf
    except OSError:
        pass
    built = _build()
    key = _key(_loaded())
    try:
        if key is not None:
            _write(path, key + built)
    except OSError:     # a cache that can't be written costs only the time
        pass
    return built


def _write(path, data):
    """Write atomically: a process reading the cache sees the old file or the new."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    temp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with open(fd, "wb") as f:
            f.write(data)
        os.replace(temp, path)
    except OSError:
        os.unlink(temp)
        raise
