"""A raw-socket HTTP/1.1 upstream on loopback that misbehaves on cue.

The request's JSON ``model`` picks the behaviour (anything else answers a small fixed
completion, fast, with keep-alive, so it can serve fuzz runs):

    cut-stream   SSE headers, two content events ("Hello wor"), then a TCP reset
    stall-stream SSE headers, one event, then silence (the proxy's read timeout fires)
    slow-stream  one SSE event every 50 ms for 10 s; notes when the proxy hangs up
    cut-body     JSON headers with a Content-Length of 400, 20 bytes, then a reset
    burst-stream BURST one-word events 1 ms apart, each its own write, then ``[DONE]``
    late-close   SSE headers, one event and ``[DONE]``, then 2 s before the stream ends
    reset-next   the fixed completion with keep-alive; the connection's next request is
                 never read: once its bytes arrive the socket closes (a reset), as a
                 server's idle timeout firing just as a request comes in does
    drop-next    the fixed completion with keep-alive; the connection's next request is
                 read (and recorded), then the socket closes cleanly with no answer

Every request is recorded (method, target, headers, body) in ``received``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

OK_BODY = (b'{"id":"chatcmpl-raw","object":"chat.completion","created":1,"model":"m",'
           b'"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},'
           b'"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,'
           b'"total_tokens":4}}')


def _event(text: str) -> bytes:
    data = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    line = b"data: " + json.dumps(data).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(line), line)


BURST = 400
SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n")


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


@dataclass
class RawUpstream:
    received: list[Request] = field(default_factory=list)
    by_id: dict[str, bytes] = field(default_factory=dict)  # x-fuzz-id header → body
    hung_up: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf, then = b"", ""
        with conn, contextlib.suppress(OSError):
            while True:
                if then == "reset-next":
                    if buf or conn.recv(1, socket.MSG_PEEK):
                        _reset(conn)  # the request's bytes sit unread
                    return
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
                if headers.get("transfer-encoding") == "chunked":
                    body = b""
                    while True:
                        while b"\r\n" not in buf:
                            buf += conn.recv(65536) or b"\r\n\r\n0\r\n"
                        size_line, buf = buf.split(b"\r\n", 1)
                        size = int(size_line.split(b";")[0] or b"0", 16)
                        buf = self._fill(conn, buf, size + 2)
                        body, buf = body + buf[:size], buf[size + 2:]
                        if size == 0:
                            break
                else:
                    size = int(headers.get("content-length", "0"))
                    buf = self._fill(conn, buf, size)
                    body, buf = buf[:size], buf[size:]
                self.received.append(Request(method, target, headers, body))
                if "x-fuzz-id" in headers:
                    self.by_id[headers["x-fuzz-id"]] = body
                if then == "drop-next":
                    return
                then = _model(body)
                if not self._answer(conn, body):
                    return

    @staticmethod
    def _fill(conn: socket.socket, buf: bytes, size: int) -> bytes:
        while len(buf) < size:
            data = conn.recv(65536)
            if not data:
                raise ConnectionResetError
            buf += data
        return buf

    def _answer(self, conn: socket.socket, body: bytes) -> bool:
        model = _model(body)
        if model == "cut-stream":
            conn.sendall(SSE_HEAD + _event("Hello") + _event(" wor"))
            time.sleep(0.05)
            _reset(conn)
            return False
        if model == "stall-stream":
            conn.sendall(SSE_HEAD + _event("Hello"))
            time.sleep(3)
            return False
        if model == "slow-stream":
            conn.sendall(SSE_HEAD)
            try:
                for _ in range(200):
                    conn.sendall(_event("tick "))
                    time.sleep(0.05)
            except OSError:
                self.hung_up.set()
            return False
        if model == "burst-stream":
            conn.sendall(SSE_HEAD)
            for i in range(BURST):
                conn.sendall(_event(f"w{i} "))
                time.sleep(0.001)
            done = b"data: [DONE]\n\n"
            conn.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            return True
        if model == "late-close":
            done = b"data: [DONE]\n\n"
            conn.sendall(SSE_HEAD + _event("Hello") + b"%x\r\n%s\r\n" % (len(done), done))
            time.sleep(2)
            with contextlib.suppress(OSError):
                conn.sendall(b"0\r\n\r\n")
            return False
        if model == "cut-body":
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: 400\r\n\r\n" + OK_BODY[:20])
            time.sleep(0.05)
            _reset(conn)
            return False
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(OK_BODY), OK_BODY))
        return True


def _model(body: bytes) -> str:
    try:
        model = json.loads(body).get("model") if body else None
    except (ValueError, AttributeError):
        model = None
    return model if isinstance(model, str) else ""


def _reset(conn: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a crashed or cut-off peer does."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def start() -> Any:
    return RawUpstream()
