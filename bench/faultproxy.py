"""A TCP relay in front of the campaign's PostgreSQL that can be made slow on demand.

The kernel here has no ``netem`` queueing discipline, so a slow database link is made in user
space: every client reaches PostgreSQL through this relay (on the database host's address),
which forwards bytes at once until SIGUSR1, then holds each chunk for the delay written in the
control file (milliseconds) before passing it on, in both directions, until SIGUSR2. Order is
kept: each direction of a connection is one pump, so a held chunk holds the ones behind it.
On SIGHUP it reads the target's port from the target file: new connections go there (a
failover moving the database's address to the promoted standby); open ones are left alone.

    python bench/faultproxy.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT CONTROL_FILE \
        [TARGET_FILE]
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path


class Relay:
    def __init__(self, target: tuple[str, int], control: Path, moves: Path | None) -> None:
        self.target = target
        self.control = control
        self.moves = moves
        self.delay = 0.0

    def move(self) -> None:
        if self.moves is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self.target = (self.target[0], int(self.moves.read_text().strip()))

    def slow(self) -> None:
        try:
            self.delay = float(self.control.read_text().strip() or "0") / 1000
        except (OSError, ValueError):
            self.delay = 0.2

    def fast(self) -> None:
        self.delay = 0.0

    async def pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                if self.delay:
                    await asyncio.sleep(self.delay)
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self.pump(reader, up_writer), self.pump(up_reader, writer))


async def main(argv: list[str]) -> None:
    host, port, target_host, target_port, control, *moves = argv
    relay = Relay((target_host, int(target_port)), Path(control), Path(moves[0]) if moves else None)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, relay.slow)
    loop.add_signal_handler(signal.SIGUSR2, relay.fast)
    loop.add_signal_handler(signal.SIGHUP, relay.move)
    server = await asyncio.start_server(relay.serve, host, int(port), reuse_address=True)
    print("relay ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
