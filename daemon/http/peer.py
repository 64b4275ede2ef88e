"""Which local user owns the other end of a loopback TCP connection (Linux only).

The kernel knows the owner of every socket. For a connection between two processes on this
machine, the daemon asks it about the *client's* socket: the one whose local address is the
request's client address and whose remote address is the daemon's own. The same question,
turned around, lets a client learn who owns the server it connected to.

Two ways to ask, same answer:
- sock_diag over netlink (what `ss` uses): one exact-match lookup in the kernel's socket
  hash, a few microseconds whatever the number of sockets on the machine;
- /proc/net/tcp and /proc/net/tcp6: text listing every socket, read when netlink is not
  available (some container seccomp profiles block it). Its cost grows with the number of
  sockets.

Only ESTABLISHED sockets count: a socket in TIME_WAIT (its owner has closed it) is reported
with uid 0, which must never pass for root. (An accepted socket the server has not picked up
with accept() yet has no inode but the listener's uid; it is ESTABLISHED and counts.)
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import os
import socket
import struct
import sys

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
TCP_ESTABLISHED = 1
NO_COOKIE = 0xFFFFFFFF

Address = tuple[str, int]

# Each lookup may answer: the uid, None (no such established socket), or it may fail.
_netlink: socket.socket | None = None
_netlink_broken = False
_seq = 0


def supported() -> bool:
    """Peer lookups work on Linux with /proc or netlink."""
    return sys.platform.startswith("linux")


@functools.lru_cache(maxsize=256)
def _packed(host: str) -> tuple[int, bytes]:
    """(address family, 16 bytes) of an IP address; IPv4-mapped IPv6 stays IPv6."""
    ip = ipaddress.ip_address(host.split("%", 1)[0])
    if ip.version == 4:
        return socket.AF_INET, ip.packed + bytes(12)
    return socket.AF_INET6, ip.packed


def socket_uid(local: Address, remote: Address) -> int | None:
    """The uid owning the established TCP socket local -> remote on this machine, or None."""
    global _netlink_broken
    if not supported():
        return None
    try:
        family, local_ip = _packed(local[0])
        _, remote_ip = _packed(remote[0])
    except ValueError:
        return None
    if not _netlink_broken:
        try:
            return _netlink_uid(family, local_ip, local[1], remote_ip, remote[1])
        except OSError:
            _close_netlink()
            _netlink_broken = True  # fall back to /proc for the rest of this process
    return proc_uid(local, remote)


def _close_netlink() -> None:
    global _netlink
    if _netlink is not None:
        _netlink.close()
        _netlink = None


def _netlink_uid(family: int, src: bytes, sport: int, dst: bytes, dport: int) -> int | None:
    global _netlink, _seq
    if _netlink is None:
        _netlink = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
        _netlink.settimeout(1.0)
    _seq = (_seq + 1) & 0xFFFFFFFF
    request = (
        struct.pack("=IHHII", 72, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, _seq, 0)
        + struct.pack("=BBBxI", family, socket.IPPROTO_TCP, 0, 0xFFFFFFFF)
        + struct.pack(">HH", sport, dport)
        + src
        + dst
        + struct.pack("=III", 0, NO_COOKIE, NO_COOKIE)
    )
    _netlink.send(request)
    while True:
        reply = _netlink.recv(8192)
        if len(reply) < 20:
            raise OSError(errno.EPROTO, "short sock_diag reply")
        seq = struct.unpack_from("=I", reply, 8)[0]
        if seq == _seq:
            break  # an older, timed-out answer is skipped
    kind = struct.unpack_from("=H", reply, 4)[0]
    if kind == NLMSG_ERROR:
        error = -struct.unpack_from("=i", reply, 16)[0]
        if error in (errno.ENOENT, 0):
            return None
        raise OSError(error, os.strerror(error))
    if kind != SOCK_DIAG_BY_FAMILY or len(reply) < 84:
        raise OSError(errno.EPROTO, "unexpected sock_diag reply")
    if reply[17] != TCP_ESTABLISHED:
        return None
    return struct.unpack_from("=I", reply, 80)[0]


def _proc_hex(family: int, packed: bytes, port: int) -> bytes:
    """An address as /proc/net/tcp{,6} prints it: 32-bit words in host order, then the port."""
    if family == socket.AF_INET:
        words = struct.unpack("=I", packed[:4])
    else:
        words = struct.unpack("=4I", packed)
    return ("".join(f"{w:08X}" for w in words) + f":{port:04X}").encode()


def _forms(host: str) -> list[tuple[str, int, bytes]]:
    """(file, family, packed) where a socket with this address may be listed."""
    family, packed = _packed(host)
    if family == socket.AF_INET:
        mapped = bytes(10) + b"\xff\xff" + packed[:4]
        return [("/proc/net/tcp", family, packed), ("/proc/net/tcp6", socket.AF_INET6, mapped)]
    if packed[:12] == bytes(10) + b"\xff\xff":
        return [("/proc/net/tcp", socket.AF_INET, packed[12:] + bytes(12))]
    return [("/proc/net/tcp6", family, packed)]


def proc_uid(local: Address, remote: Address) -> int | None:
    """socket_uid through /proc/net/tcp and /proc/net/tcp6."""
    try:
        local_forms = _forms(local[0])
        remote_forms = dict((f, (fam, p)) for f, fam, p in _forms(remote[0]))
    except ValueError:
        return None
    for path, family, packed in local_forms:
        if path not in remote_forms:
            continue
        needle = (
            b" "
            + _proc_hex(family, packed, local[1])
            + b" "
            + _proc_hex(family, remote_forms[path][1], remote[1])
            + b" "
        )
        try:
            with open(path, "rb") as f:
                table = f.read()
        except OSError:
            continue
        at = table.find(needle)
        if at < 0:
            continue
        fields = table[at : table.find(b"\n", at)].split()
        # local rem st tx:rx tr:when retrnsmt uid ...
        if len(fields) < 7 or fields[2] != b"01":
            return None
        return int(fields[6])
    return None
