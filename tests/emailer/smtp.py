"""A real SMTP server on loopback for the emailer's tests and benchmark (aiosmtpd).

It records every message it accepts and can be told to refuse a recipient for good (5xx), to
say "try later" (4xx) a number of times, and to go away and come back on the same port.
"""

from __future__ import annotations

import email
import email.policy
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiosmtpd.controller import Controller


@dataclass
class Received:
    recipient: str
    message: Any  # email.message.EmailMessage
    raw: bytes = b""  # the DATA as the server received it


@dataclass
class Recorder:
    """The handler: what arrived, and what to answer."""

    parse: bool = True
    received: list[Received] = field(default_factory=list)
    refuse: dict[str, str] = field(default_factory=dict)
    defer: dict[str, list[str]] = field(default_factory=dict)
    asked: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    count: int = 0
    #: Called with the running count after each accepted message (from the server's thread).
    after_message: Callable[[int], None] | None = None

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: Any
    ) -> str:
        with self.lock:
            self.asked[address] += 1
            if address in self.refuse:
                return self.refuse[address]
            replies = self.defer.get(address)
            if replies:
                return replies.pop(0)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = (
            email.message_from_bytes(envelope.content, policy=email.policy.default)
            if self.parse
            else None
        )
        with self.lock:
            for recipient in envelope.rcpt_tos:
                self.received.append(Received(recipient, parsed, bytes(envelope.content)))
            self.count += len(envelope.rcpt_tos)
            count = self.count
        if self.after_message is not None:
            self.after_message(count)
        return "250 Message accepted for delivery"

    def recipients(self) -> Counter[str]:
        with self.lock:
            return Counter(r.recipient for r in self.received)


class SMTPServer:
    """An aiosmtpd server on 127.0.0.1:``port`` that can be stopped and started again."""

    def __init__(self, port: int, recorder: Recorder | None = None) -> None:
        self.port = port
        self.recorder = recorder or Recorder()
        self.controller: Controller | None = None

    def start(self) -> SMTPServer:
        # server_hostname avoids aiosmtpd's slow getfqdn(); 127.0.0.1, not 0.0.0.0 (#272).
        self.controller = Controller(
            self.recorder, hostname="127.0.0.1", port=self.port, server_hostname="localhost"
        )
        self.controller.start()
        return self

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
