"""The seccomp filter (bwrap --seccomp): classic BPF refusing what the namespaces do not
cover (Unix sockets, io_uring, new user namespaces, the kernel keyrings)."""

from __future__ import annotations

import platform
import struct
from typing import Any

# Per machine: the audit arch and the numbers of the calls the filter looks at.
_SYSCALLS: dict[str, dict[str, Any]] = {
    "x86_64": {
        "arch": 0xC000003E,
        "socket": 41,
        "clone": 56,
        "denied": (248, 249, 250, 272),  # add_key, request_key, keyctl, unshare
    },
    "aarch64": {
        "arch": 0xC00000B7,
        "socket": 198,
        "clone": 220,
        "denied": (217, 218, 219, 97),
    },
}
_IO_URING = (425, 426, 427)  # the same on every machine
_CLONE3 = 435
_EPERM, _ENOSYS, _EAFNOSUPPORT, _AF_UNIX = 1, 38, 97, 1
_CLONE_NEWUSER = 0x10000000
_X32_BIT = 0x40000000
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06


def _assemble(items: list[tuple]) -> bytes:
    """Classic BPF from (code, jt, jf, k) with jump targets given as label names (None: the
    next instruction) and ("label", name) markers."""
    labels, pos = {}, 0
    for item in items:
        if item[0] == "label":
            labels[item[1]] = pos
        else:
            pos += 1
    out, pos = [], 0
    for item in items:
        if item[0] == "label":
            continue
        code, jt, jf, k = item

        def offset(target: str | None, here: int = pos) -> int:
            return 0 if target is None else labels[target] - here - 1

        out.append(struct.pack("=HBBI", code, offset(jt), offset(jf), k))
        pos += 1
    return b"".join(out)


def seccomp_program(machine: str | None = None) -> bytes | None:
    """A seccomp filter (bwrap --seccomp) refusing what the namespaces do not cover:

    - Unix-domain sockets (docker.sock, the D-Bus session bus or an agent socket would open a
      way out of the sandbox) and io_uring (it can make sockets past the filter);
    - new user namespaces (unshare, clone with CLONE_NEWUSER; clone3 says ENOSYS so the C
      library falls back to clone): a kernel attack surface the command has no use for;
    - the kernel keyrings (shared across namespaces).

    Other machines get None (and bwrap's --disable-userns instead)."""
    name = (machine or platform.machine()).lower()
    name = {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)
    if name not in _SYSCALLS:
        return None
    calls = _SYSCALLS[name]
    items: list[tuple] = [
        (_LD, None, None, 4),  # seccomp_data.arch
        (_JEQ, None, "eperm", calls["arch"]),  # another ABI (e.g. i386 on x86_64): refuse
        (_LD, None, None, 0),  # seccomp_data.nr
    ]
    if name == "x86_64":
        items.append((_JGE, "eperm", None, _X32_BIT))  # the x32 ABI
    for nr in (*calls["denied"], *_IO_URING):
        items.append((_JEQ, "eperm", None, nr))
    items += [
        (_JEQ, "enosys", None, _CLONE3),
        (_JEQ, "clone", None, calls["clone"]),
        (_JEQ, "socket", "allow", calls["socket"]),
        ("label", "socket"),
        (_LD, None, None, 16),  # args[0] (low 32 bits): the address family
        (_JEQ, "noaf", "allow", _AF_UNIX),
        ("label", "clone"),
        (_LD, None, None, 16),  # args[0]: the clone flags
        (_JSET, "eperm", "allow", _CLONE_NEWUSER),
        ("label", "allow"),
        (_RET, None, None, _RET_ALLOW),
        ("label", "eperm"),
        (_RET, None, None, _RET_ERRNO | _EPERM),
        ("label", "noaf"),
        (_RET, None, None, _RET_ERRNO | _EAFNOSUPPORT),
        ("label", "enosys"),
        (_RET, None, None, _RET_ERRNO | _ENOSYS),
    ]
    return _assemble(items)
