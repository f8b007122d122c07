"""The sandbox's seccomp filter (agentctl/tools/seccomp.py). Each call it refuses is
made from Python in a bwrap sandbox twice, without the filter and with it: without,
it succeeds, or where the kernel refuses it to any sandbox, the kernel's own answer
shows the call reached it; with, the filter's errno answers. What the kernel answers
alike either way (EPERM for a capability of the host's) is shown on the program
itself, run by a small BPF interpreter, for every ABI the filter covers. Ordinary
programs still run under it; it is built once and cached.
"""

import json
import os
import platform
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
from collections import namedtuple
from pathlib import Path
from errno import EACCES, EINVAL, ENOSYS, ENOTTY, EPERM

import pytest

from agentctl.tools import seccomp
from agentctl.tools.bwrap import Unavailable

from .conftest import ROOT, needs

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="the attempts use x86_64's system call numbers")

PRELUDE = r'''
import ctypes, json, mmap, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def call(nr, *args):
    """A system call by number: its result, or minus its errno."""
    r = libc.syscall(ctypes.c_long(nr),
                     *(ctypes.c_long(a) if isinstance(a, int) else a for a in args))
    return r if r >= 0 else -ctypes.get_errno()

def int80(nr, a, b, c):
    """An i386 system call from this 64-bit process (int 0x80), in machine code."""
    word = lambda n: n.to_bytes(4, "little", signed=n < 0)
    code = (b"\x53" + b"\xb8" + word(nr) + b"\xbb" + word(a) + b"\xb9" + word(b)
            + b"\xba" + word(c) + b"\xcd\x80" + b"\x5b\xc3")
    # push rbx (the caller's); mov eax, ebx, ecx, edx; int 0x80; pop rbx; ret
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    return ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()

def clone(flags, nr=56):
    """clone(2) as fork does it: the child leaves at once."""
    pid = call(nr, flags, 0, 0, 0, 0) if nr == 56 else call(nr, flags, 64)
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0x40000000)    # __WALL
    return pid

buffer = ctypes.create_string_buffer
ring = lambda: call(425, 4, buffer(120))
made = lambda name: open("/tmp/out/" + name, "w").close() or ("/tmp/out/" + name).encode()
fresh = lambda name: ("/tmp/out/" + name).encode()
cwd = -100   # AT_FDCWD

def perf_attr():
    """A count of this task's user-space clock: perf_event_paranoid 2 allows it."""
    attr = bytearray(128)       # PERF_TYPE_SOFTWARE, its size, PERF_COUNT_SW_TASK_CLOCK
    struct.pack_into("<IIQ", attr, 0, 1, 128, 1)
    struct.pack_into("<Q", attr, 40, 1 | 1 << 5 | 1 << 6)  # disabled, exclude kernel, hv
    return buffer(bytes(attr), 128)

def terminal():
    """A pseudo-terminal that is this process's controlling one (TIOCSTI's condition)."""
    os.setsid()
    _, tty = os.openpty()
    call(16, tty, 0x540E, 0)    # TIOCSCTTY
    return tty

def handle(path=None):
    """A file handle's buffer (struct file_handle, 128 bytes); with a path, its handle."""
    h = buffer(8 + 128)
    h[0:4] = (128).to_bytes(4, "little")
    if path is not None:
        os.mkdir(path)
        call(303, cwd, path.encode(), h, buffer(4), 0)
    return h

def mounted(name):
    """A tmpfs mounted on /tmp/name, if mounts are allowed: the path."""
    os.mkdir("/tmp/" + name)
    call(165, b"none", ("/tmp/" + name).encode(), b"tmpfs", 0, None)
    return ("/tmp/" + name).encode()
'''

RUN = PRELUDE + r'''
results = {}
for name, code in json.loads(sys.argv[1]).items():
    read, write = os.pipe()     # each in a child: a call that worked changes the process
    pid = os.fork()
    if pid == 0:
        scope = dict(globals())
        try:
            exec(code, scope)
            out = scope["r"]
        except BaseException as e:
            out = repr(e)
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    with open(read, "rb") as f:
        data = f.read()
    status = os.waitpid(pid, 0)[1]
    results[name] = json.loads(data) if data else f"died: {status:#x}"
print(json.dumps(results))
'''

# code: sets r, >= 0 for success, else -errno; denied: the filter's errno; kernel: the
# errno this kernel answers a sandbox without the filter, where it can't succeed;
# caps: the sandbox keeps its capabilities (in its own user namespace)
Case = namedtuple("Case", "code denied kernel caps", defaults=(EPERM, None, False))
NEWNS, NEWUSER, SIGCHLD = 0x20000, 0x10000000, 17
CLONE_NEW = {"NS": 0x20000, "CGROUP": 0x2000000, "UTS": 0x4000000, "IPC": 0x8000000,
             "USER": 0x10000000, "PID": 0x20000000, "NET": 0x40000000}
OPEN_HOW = "buffer(struct.pack('<QQQ', os.O_CREAT | os.O_WRONLY, 0o4755, 0), 24)"
CASES = {
    "keyctl": Case("r = call(250, 0, -3, 0)"),      # KEYCTL_GET_KEYRING_ID, the session's
    "add_key": Case("r = call(248, b'user', b'agentctl', b'x', 1, -2)"),
    "request_key": Case("call(248, b'user', b'k', b'x', 1, -2); "
                        "r = call(249, b'user', b'k', None, 0)"),
    "io_uring_setup": Case("r = ring()", ENOSYS),
    "io_uring_enter": Case("r = call(426, ring(), 0, 0, 0, None, 0)", ENOSYS),
    "io_uring_register": Case("r = call(427, ring(), 8, buffer(4096), 256)", ENOSYS),  # PROBE
    "userfaultfd": Case("r = call(323, 1)"),        # UFFD_USER_MODE_ONLY
    "perf_event_open": Case("r = call(298, perf_attr(), 0, -1, -1, 0)"),
    # unprivileged_bpf_disabled: every command that works needs CAP_BPF of the host;
    # an unknown one reaches the kernel
    "bpf": Case("r = call(321, 999, None, 0)", kernel=EINVAL),
    "mount": Case("os.mkdir('/tmp/m'); r = call(165, b'none', b'/tmp/m', b'tmpfs', 0, None)",
                  caps=True),
    "umount2": Case("r = call(166, mounted('umount2'), 2)", caps=True),      # MNT_DETACH
    # in a mount namespace of its own (if it may): pivot_root moves every process's root
    "pivot_root": Case(f"call(272, {NEWNS}); p = mounted('pivot'); os.mkdir(p + b'/old'); "
                       "r = call(155, p, p + b'/old')", caps=True),
    "chroot": Case("r = call(161, b'/')", caps=True),
    "open_tree": Case("r = call(428, cwd, b'/tmp', 1)", caps=True),   # OPEN_TREE_CLONE
    "move_mount": Case("os.mkdir('/tmp/moved'); "
                       "r = call(429, call(428, cwd, b'/tmp', 1), b'', cwd, b'/tmp/moved', 4)",
                       caps=True),
    "fsopen": Case("r = call(430, b'tmpfs', 0)", caps=True),
    "fsconfig": Case("r = call(431, call(430, b'tmpfs', 0), 6, None, None, 0)", caps=True),
    "fsmount": Case("f = call(430, b'tmpfs', 0); call(431, f, 6, None, None, 0); "
                    "r = call(432, f, 0, 0)", caps=True),
    "fspick": Case("r = call(433, cwd, b'/tmp', 0)", caps=True),
    "mount_setattr": Case("r = call(442, cwd, b'/tmp', 0, buffer(32), 32)", caps=True),
    "unshare CLONE_NEWUSER": Case(f"r = call(272, {NEWUSER})"),
    "unshare CLONE_NEWNS": Case(f"r = call(272, {NEWNS})", caps=True),
    "setns": Case("r = call(308, os.open('/proc/self/ns/uts', os.O_RDONLY), 0)", caps=True),
    **{f"clone CLONE_NEW{name}": Case(f"r = clone({flag | SIGCHLD})", caps=True)
       for name, flag in CLONE_NEW.items()},
    "clone3": Case(f"r = clone(bytes(struct.pack('<4QQ3Q', 0, 0, 0, 0, {SIGCHLD}, 0, 0, 0)), "
                   "435)", ENOSYS),
    # where a kernel is built without kexec, modules or I/O ports (as this one is), or
    # has no call at all (dcookies and nfsservctl are gone from Linux): ENOSYS
    "kexec_load": Case("r = call(246, 0, 0, None, 0)", kernel=ENOSYS),
    "kexec_file_load": Case("r = call(320, -1, -1, 0, None, 0)", kernel=ENOSYS),
    "init_module": Case("r = call(175, None, 0, b'')", kernel=ENOSYS),
    "finit_module": Case("r = call(313, -1, b'', 0)", kernel=ENOSYS),
    "delete_module": Case("r = call(176, b'x', 0)", kernel=ENOSYS),
    "iopl": Case("r = call(172, 0)", kernel=ENOSYS),
    "ioperm": Case("r = call(173, 0, 1, 0)", kernel=ENOSYS),
    "lookup_dcookie": Case("r = call(212, 0, None, 0)", kernel=ENOSYS),
    "nfsservctl": Case("r = call(180, 0, None, None)", kernel=ENOSYS),
    # past the capability check a bad magic number is EINVAL
    "reboot": Case("r = call(169, 0, 0, 0, None)", kernel=EINVAL, caps=True),
    "quotactl": Case("r = call(179, ctypes.c_uint(0x80000100), None, 0, None)"),  # Q_SYNC
    "name_to_handle_at": Case("r = call(303, cwd, b'/tmp', handle(), buffer(4), 0)"),
    # a directory's, under a mount the sandbox's user namespace owns (newer kernels'
    # rule; an older one refuses it as the filter does)
    "open_by_handle_at": Case("r = call(304, os.open('/tmp', os.O_RDONLY), handle('/tmp/h'), "
                              "os.O_RDONLY | os.O_DIRECTORY)", caps=True),
    "fanotify_init": Case("r = call(300, 0x200, 0)"),     # FAN_REPORT_FID: unprivileged
    "ioctl TIOCSTI": Case("r = call(16, terminal(), 0x5412, b'x')"),
    "ioctl TIOCSTI, high bits": Case("r = call(16, terminal(), 0x100005412, b'x')"),
    "ioctl TIOCLINUX": Case("r = call(16, terminal(), 0x541C, buffer(8))", kernel=ENOTTY),
    "personality ADDR_NO_RANDOMIZE": Case("r = call(135, 0x40000)"),
    "personality bit 31 too": Case("r = call(135, 0x80040000)"),
    "chmod u+s": Case("r = call(90, made('chmod'), 0o4755)"),
    "chmod g+s": Case("r = call(90, made('chmod-g'), 0o2755)"),
    "fchmod": Case("r = call(91, os.open(made('fchmod'), os.O_RDONLY), 0o4755)"),
    "fchmodat": Case("r = call(268, cwd, made('fchmodat'), 0o4755)"),
    "fchmodat2": Case("r = call(452, cwd, made('fchmodat2'), 0o4755, 0)"),
    "mknod": Case("r = call(133, fresh('mknod'), 0o104755, 0)"),
    "mknodat": Case("r = call(259, cwd, fresh('mknodat'), 0o104755, 0)"),
    "creat": Case("r = call(85, fresh('creat'), 0o4755)"),
    "open": Case("r = call(2, fresh('open'), os.O_CREAT | os.O_WRONLY, 0o4755)"),
    "openat": Case("r = call(257, cwd, fresh('openat'), os.O_CREAT | os.O_WRONLY, 0o4755)"),
    "openat O_TMPFILE": Case("r = call(257, cwd, b'/tmp/out', os.O_TMPFILE | os.O_WRONLY, "
                             "0o4755)"),
    "openat2": Case(f"r = call(437, cwd, fresh('openat2'), {OPEN_HOW}, 24)", ENOSYS),
    "i386 keyctl": Case("r = int80(288, 0, -3, 0)"),
    # most kernels have no x32 (CONFIG_X86_X32_ABI): ENOSYS, but the filter is asked
    # before the kernel's table
    "x32 keyctl": Case(f"r = call({0x40000000 | 250}, 0, -3, 0)", kernel=ENOSYS),
}
SETID = ("chmod", "chmod-g", "fchmod", "fchmodat", "fchmodat2", "mknod", "mknodat",
         "creat", "open", "openat")
ALLOWED = {     # the filter is narrow: these work under it
    "chmod 0755": "r = call(90, made('plain'), 0o755)",
    "openat 0644": "r = call(257, cwd, fresh('new'), os.O_CREAT | os.O_WRONLY, 0o644)",
    "clone": f"r = clone({SIGCHLD})",
    "personality PER_LINUX32": "r = call(135, 8)",
    "personality query": "r = call(135, 0xffffffff)",
    "personality PER_LINUX": "r = call(135, 0)",
    "ioctl TIOCGWINSZ": "r = call(16, terminal(), 0x5413, buffer(8))",
}


def bwrap(argv, filtered, caps=False, out=None):
    """argv run in a sandbox as sandbox.py makes it, with the filter or without."""
    args = [needs("bwrap", "bubblewrap"), "--unshare-all", "--unshare-user",
            "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
            "--tmpfs", "/tmp", *(["--cap-add", "ALL"] if caps else ["--cap-drop", "ALL"])]
    if out is not None:
        args += ["--bind", str(out), "/tmp/out"]
    with tempfile.TemporaryFile() as f:
        if filtered:
            f.write(seccomp.program())
            f.seek(0)
            args += ["--seccomp", str(f.fileno())]
        return subprocess.run(args + ["--", *argv], pass_fds=(f.fileno(),), text=True,
                              capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every attempt's result: by (capabilities, filtered), by name; and the places the
    attempts made their files in."""
    found, outs = {}, {}
    for caps in (False, True):
        attempts = {name: case.code for name, case in CASES.items() if case.caps == caps}
        if not caps:
            attempts.update({f"allowed {name}": code for name, code in ALLOWED.items()})
        for filtered in (False, True):
            out = tmp_path_factory.mktemp("out")
            if not caps:    # where the set-uid attempts made their files
                outs[filtered] = out
            done = bwrap([sys.executable, "-c", RUN, json.dumps(attempts)], filtered, caps,
                         out)
            assert done.returncode == 0, done.stderr
            found[caps, filtered] = json.loads(done.stdout)
    return found, outs


SYSCTLS = {     # where a kernel may be set to refuse a call to any sandbox
    "io_uring": "kernel/io_uring_disabled", "perf_event_open": "kernel/perf_event_paranoid",
    "userfaultfd": "vm/unprivileged_userfaultfd"}


def skip_without_ia32(answer):
    if answer == -ENOSYS or isinstance(answer, str):    # or died of it
        pytest.skip(f"the kernel has no IA32 emulation: int 0x80 answers {answer}")


@pytest.mark.parametrize("name", CASES)
def test_refused(results, name):
    case = CASES[name]
    without, with_ = (results[0][case.caps, filtered][name] for filtered in (False, True))
    if name == "i386 keyctl":
        skip_without_ia32(without)
    assert with_ == -case.denied
    sysctl = next((path for prefix, path in SYSCTLS.items() if name.startswith(prefix)), "")
    if without == with_ or sysctl and without in (-EPERM, -EACCES):
        why = sysctl and f"{sysctl} = {Path('/proc/sys', sysctl).read_text().strip()}"
        pytest.skip(f"the kernel refuses it to a sandbox itself ({why or 'a capability'}): "
                    "test_every_refusal_in_every_abi shows the filter's refusal")
    assert isinstance(without, int) and (without >= 0 or without == -(case.kernel or 0)), \
        without


@pytest.mark.parametrize("name", ALLOWED)
def test_allowed(results, name):
    assert results[0][False, True][f"allowed {name}"] >= 0


def test_no_setid_program_is_left(results):
    """Without the filter, the set-uid files are there for the operator to find."""
    modes = {filtered: {name: os.stat(results[1][filtered] / name).st_mode
                        for name in SETID if (results[1][filtered] / name).exists()}
             for filtered in (False, True)}
    assert all(mode & (stat.S_ISUID | stat.S_ISGID) for mode in modes[False].values())
    assert set(modes[False]) == set(SETID)
    assert not any(mode & (stat.S_ISUID | stat.S_ISGID) for mode in modes[True].values())


def test_i386_keyring_is_the_same(results):
    """int 0x80 reached the i386 table: it found the keyring the 64-bit call found."""
    found = results[0][False, False]
    skip_without_ia32(found["i386 keyctl"])
    assert found["i386 keyctl"] == found["keyctl"] > 0


ORDINARY = {    # glibc's threads and posix_spawn try clone3 first, then fall back
    "sh": ["sh", "-c", "echo ok"],
    "python": [sys.executable, "-c", "import subprocess, threading; t = threading.Thread("
               "target=lambda: subprocess.run(['true'], check=True)); t.start(); t.join(); "
               "print(subprocess.run(['echo', 'ok'], capture_output=True, text=True).stdout)"],
    "git": ["sh", "-c", "cd /tmp && git init -q r && cd r && git -c user.name=a "
            "-c user.email=a@b commit -q --allow-empty -m x && git log --format=%s | "
            "grep -q x && echo ok"],
}


@pytest.mark.parametrize("name", ORDINARY)
def test_ordinary_programs_run(name):
    if name == "git":
        needs("git", "git")
    done = bwrap(ORDINARY[name], filtered=True)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


# The program itself, run as the kernel runs it, for what a sandbox can't show: the
# calls the kernel refuses alike either way, and the ABIs this kernel lacks (x32).
AUDIT_ARCH = {"X86_64": 0xC000003E, "X86": 0x40000003, "X32": 0xC000003E}
ALLOW, KILL_PROCESS = 0x7FFF0000, 0x80000000
JUMPS = {0x15: int.__eq__, 0x25: int.__gt__, 0x35: int.__ge__, 0x45: int.__and__}


def verdict(arch, nr, *args):
    """The filter's answer to a call: its classic BPF run on the call's seccomp_data,
    with the instructions libseccomp writes."""
    data = struct.pack("<IIQ6Q", nr & 0xFFFFFFFF, AUDIT_ARCH.get(arch, arch), 0,
                       *(args + (0,) * (6 - len(args))))
    code, a, pc = list(struct.iter_unpack("<HBBI", seccomp.program())), 0, 0
    while True:
        op, jt, jf, k = code[pc]
        pc += 1
        if op == 0x20:      # ld [k]
            a = struct.unpack_from("<I", data, k)[0]
        elif op == 0x54:    # and #k
            a &= k
        elif op == 0x05:    # ja
            pc += k
        elif op in JUMPS:
            pc += jt if JUMPS[op](a, k) else jf
        elif op == 0x06:    # ret #k
            return k
        else:
            raise AssertionError(f"an instruction the interpreter lacks: {op:#x}")


def number(arch, name):
    import pyseccomp
    return pyseccomp.resolve_syscall(getattr(pyseccomp.Arch, arch), name)


@pytest.mark.parametrize("arch", ["X86_64", "X86", "X32"])
def test_every_refusal_in_every_abi(arch):
    """Each row of DENIED, on each ABI that has the call: refused when its conditions
    hold, allowed (where it has conditions) when they don't."""
    checked = set()
    for name, errno, conditions in seccomp.DENIED:
        nr = number(arch, name)
        if nr < 0:      # not a call of this ABI (umount is i386's, kexec_file_load not)
            continue
        args = [0] * 6
        for arg, _, value in conditions:
            args[arg] |= value
        assert verdict(arch, nr, *args) == 0x50000 | errno, (name, conditions)
        if conditions:
            assert verdict(arch, nr) == ALLOW, name
        checked.add(name)
    for name in ("read", "write", "openat", "execve", "mmap", "ioctl", "clone"):
        assert verdict(arch, number(arch, name)) == ALLOW
    assert {"keyctl", "acct", "swapon", "swapoff", "syslog", "vhangup"} <= checked
    assert ("umount" in checked) == (arch == "X86")


def test_another_abi_is_killed():
    assert verdict(0xC00000B7, 56) == KILL_PROCESS      # AUDIT_ARCH_AARCH64's clone


def test_personality_values():
    """Only 0, 8 and the query pass, whatever the other bits (the kernel reads 32 bits)."""
    import random
    values = random.Random(0).sample(range(1 << 32), 2000)
    values += [1 << bit for bit in range(32)] + [0xFFFFFFFF ^ 1 << bit for bit in range(32)]
    for value in values + [0, 8, 0xFFFFFFFF, 1 << 32, 1 << 32 | 8, 0x80040000]:
        allowed = value & 0xFFFFFFFF in (0, 8, 0xFFFFFFFF)
        assert (verdict("X86_64", 135, value) == ALLOW) == allowed, hex(value)
        assert (verdict("X86", 136, value & 0xFFFFFFFF) == ALLOW) == allowed, hex(value)


def test_terminal_requests_whatever_the_high_bits():
    for request in (0x5412, 0x541C, 0xDEAD00005412):
        assert verdict("X86_64", 16, 0, request) == 0x50000 | EPERM
    assert verdict("X86_64", 16, 0, 0x5413) == ALLOW       # TIOCGWINSZ


CACHED = ("import sys; from agentctl.tools import seccomp; "
          "print(seccomp.program(sys.argv[1]).hex(), 'pyseccomp' in sys.modules, "
          "'ctypes' in sys.modules)")


def cached(path, env=None):
    """program(path) in a fresh interpreter: the program, and whether it imported pyseccomp
    (and so ctypes)."""
    done = subprocess.run([sys.executable, "-c", CACHED, str(path)], cwd=ROOT, text=True,
                          capture_output=True, timeout=60, check=True, env=env)
    program, imported, loaded = done.stdout.split()
    assert loaded == imported       # the cache's key loads no library
    return bytes.fromhex(program), imported == "True"


def key():
    seccomp.program()       # (pyseccomp's import loaded libseccomp)
    return seccomp._key(seccomp._loaded())


def test_cache(tmp_path):
    path = tmp_path / "cache" / "seccomp.bpf"
    assert cached(path) == (seccomp.program(), True)
    written = path.stat()
    assert stat.S_IMODE(written.st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert cached(path) == (seccomp.program(), False)
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (written.st_ino,
                                                             written.st_mtime_ns)
    assert os.listdir(path.parent) == ["seccomp.bpf"]
    assert path.read_bytes() == key() + seccomp.program()
    # another libseccomp's (or table's) program, and a torn one: built again
    for stale in (b"agentctl seccomp: libseccomp 0.0.0 x86_64 00000000\n" + bytes(8),
                  key().replace(b"seccomp: ", b"seccomp: x") + seccomp.program(),
                  key() + bytes(3)):
        path.write_bytes(stale)
        assert cached(path) == (seccomp.program(), True)
        assert path.read_bytes() == key() + seccomp.program()
    # the loader told to choose another library: built again
    assert cached(path, env=dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))) == \
        (seccomp.program(), True)


@pytest.fixture
def fresh(monkeypatch):
    """program() as a new process would run it, pyseccomp not yet imported."""
    monkeypatch.setattr(seccomp, "_program", None)
    monkeypatch.delitem(sys.modules, "pyseccomp", raising=False)
    return monkeypatch


def test_a_call_libseccomp_does_not_know_is_passed_over(monkeypatch):
    monkeypatch.setattr(seccomp, "DENIED", seccomp.DENIED + (("no_such_call", EPERM, ()),))
    assert seccomp._build() == seccomp.program()


def test_without_pyseccomp(fresh):
    fresh.setitem(sys.modules, "pyseccomp", None)
    with pytest.raises(Unavailable, match=r"pip install pyseccomp"):
        seccomp.program()


def test_without_libseccomp(fresh, tmp_path):
    """Not even a cached program is used: libseccomp's file is the cache's key, and the
    cache's is gone (a library removed, or upgraded: another file)."""
    import ctypes
    import ctypes.util
    built = seccomp._build()
    library = tmp_path / "libseccomp.so.2"
    shutil.copy(seccomp._loaded(), library)
    cache = tmp_path / "seccomp.bpf"
    cache.write_bytes(seccomp._key(str(library)) + built)
    library.unlink()
    fresh.delitem(sys.modules, "pyseccomp")

    class CDLL(ctypes.CDLL):
        def __init__(self, name, *args, **kwargs):
            if name and "seccomp" in name:
                raise OSError(f"{name}: cannot open shared object file")
            super().__init__(name, *args, **kwargs)
    find = ctypes.util.find_library
    fresh.setattr(ctypes, "CDLL", CDLL)
    fresh.setattr(ctypes.util, "find_library", lambda name: None if name == "seccomp"
                  else find(name))
    for path in (None, cache):
        with pytest.raises(Unavailable, match=r"apt-get install libseccomp2"):
            seccomp.program(path)
