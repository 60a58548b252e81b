"""Test traffic goes only to loopback: a guard around socket connects for the unit tests.

Installed in the pytest process by tests/unit/conftest.py and, through PYTHONPATH, in every
Python subprocess a test starts with the inherited environment (the stand-ins, the resolver,
ansible's modules), because this file is a ``sitecustomize``. A connect or sendto to an address
outside loopback and the unix domain (and SPARK_NETGUARD_ALLOW, comma-separated networks, empty
by default: a test that needs its own sim's subnet sets it) is refused before any packet
leaves (PermissionError) and written to $SPARK_NETGUARD_LOG, so the test that caused it
fails even when the code under test swallows the error.
"""

from __future__ import annotations

import ipaddress
import os
import socket

_REAL_CONNECT = socket.socket.connect
_REAL_CONNECT_EX = socket.socket.connect_ex
_REAL_SENDTO = socket.socket.sendto


def _allowed_networks():
    nets = []
    for text in os.environ.get("SPARK_NETGUARD_ALLOW", "").split(","):
        text = text.strip()
        if text:
            nets.append(ipaddress.ip_network(text, strict=False))
    return nets


def outside(address) -> str | None:
    """The host of ``address`` when it is neither loopback nor allowed, else None.

    ``address`` is what socket.connect takes: a (host, port[, ...]) tuple for AF_INET/AF_INET6,
    a path or bytes for AF_UNIX. A host that is a name, not a literal, counts as outside unless
    it is ``localhost``: resolving it already asks a name server.
    """
    if not isinstance(address, tuple) or not address:
        return None
    host = address[0]
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    host = str(host).split("%", 1)[0]
    if host in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback):
        return None
    if any(ip in net for net in _allowed_networks()):
        return None
    return host


def _refuse(host, address):
    log = os.environ.get("SPARK_NETGUARD_LOG")
    if log:
        try:
            with open(log, "a", encoding="utf-8") as handle:
                handle.write("%d %s %r\n" % (os.getpid(), host, address))
        except OSError:
            pass
    raise PermissionError("netguard: test traffic goes only to loopback; refused a connection to %r" % (address,))


def _connect(self, address):
    host = outside(address) if self.family in (socket.AF_INET, socket.AF_INET6) else None
    if host is not None:
        _refuse(host, address)
    return _REAL_CONNECT(self, address)


def _connect_ex(self, address):
    host = outside(address) if self.family in (socket.AF_INET, socket.AF_INET6) else None
    if host is not None:
        _refuse(host, address)
    return _REAL_CONNECT_EX(self, address)


def _sendto(self, data, *args):
    address = args[-1] if args else None
    host = outside(address) if self.family in (socket.AF_INET, socket.AF_INET6) else None
    if host is not None:
        _refuse(host, address)
    return _REAL_SENDTO(self, data, *args)


def install() -> None:
    socket.socket.connect = _connect
    socket.socket.connect_ex = _connect_ex
    socket.socket.sendto = _sendto


if os.environ.get("SPARK_NETGUARD_LOG"):
    install()
