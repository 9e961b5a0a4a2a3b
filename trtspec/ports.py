"""Local ports: the loopback address every server binds by default, free ports, and who holds a busy one.

Shared by the launchers of tritonserver (trtspec/triton/server.py) and of a local NVIDIA Dynamo deployment
(trtspec/dynamo/launch.py): a busy port is refused before anything starts, naming the port and its owner. Linux only
(/proc). Standard library only.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from trtspec.errors import UsageError

HOST = "127.0.0.1"


def check_ports_free(ports: dict[str, int], host: str = HOST) -> None:
    """Refuse ports another process listens on, or one port given twice: UsageError naming the option (a key of
    `ports`, e.g. `--http-port`), the port and its owner. Run before anything starts."""
    for name, port in ports.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host if host else "", port))
            except OSError:
                owner = port_owner(port)
                who = f"pid {owner[0]} ({owner[1]})" if owner else "another process"
                option = name.split(" ", 1)[0]
                raise UsageError(f"{name}={port}: the port is in use by {who}",
                                 hint=f"stop that process, or pick another port ({option})") from None
    if len(set(ports.values())) < len(ports):
        raise UsageError(f"ports {' '.join(f'{k}={v}' for k, v in ports.items())} must differ",
                         hint="give each endpoint its own port")


def free_ports(count: int, *, below: int | None = None) -> list[int]:
    """`count` distinct free ports on 127.0.0.1 (held open together while choosing, then released); with `below`,
    ports under it (the kernel's ephemeral range starts at 32768: some servers take only smaller ones)."""
    import random

    socks: list[socket.socket] = []
    try:
        while len(socks) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((HOST, 0 if below is None else random.randrange(10000, below)))
            except OSError:
                s.close()
                continue
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_owner(port: int) -> tuple[int, str] | None:
    """(pid, command line) of the process listening on TCP `port`, from Linux /proc; None when unknown."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                inodes.add(fields[9])
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                    return int(proc.name), cmdline[:120]
        except OSError:
            continue
    return None


def process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None
