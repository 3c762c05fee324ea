"""One asyncio connection to one broker: TLS and SASL (PLAIN, SCRAM-SHA-256/512) when asked for,
pipelined requests, responses matched by correlation id, and the broker's API versions, read
once with ApiVersions."""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
from dataclasses import dataclass
from typing import Any, Mapping

from cohort.protocol.codec import decode_response, encode_request
from cohort.protocol.entities import build
from cohort.protocol.versions import request_schema

_SIZE = struct.Struct(">i")
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class AuthenticationError(RuntimeError):
    """The broker refused the SASL handshake or the credentials."""


@dataclass(frozen=True)
class Security:
    """How to reach brokers: `security.protocol`, and the `ssl.*` and `sasl.*` settings
    (librdkafka's names)."""

    protocol: str = "PLAINTEXT"
    context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "Security":
        protocol = str(config.get("security.protocol") or "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise ValueError(f"security.protocol must be one of {', '.join(PROTOCOLS)}")
        context = None
        if protocol.endswith("SSL"):
            context = ssl.create_default_context(cafile=config.get("ssl.ca.location"))
            if str(config.get("ssl.endpoint.identification.algorithm") or "https").lower() == "none":
                context.check_hostname = False
            if config.get("ssl.certificate.location"):
                context.load_cert_chain(config["ssl.certificate.location"], config.get("ssl.key.location"),
                                        config.get("ssl.key.password"))
        mechanism = None
        if protocol.startswith("SASL"):
            mechanism = str(config.get("sasl.mechanism") or "PLAIN").upper()
            if mechanism not in MECHANISMS:
                raise ValueError(f"sasl.mechanism must be one of {', '.join(MECHANISMS)}")
            if not config.get("sasl.username") or config.get("sasl.password") is None:
                raise ValueError("SASL needs sasl.username and sasl.password")
        return cls(protocol, context, mechanism, config.get("sasl.username"), config.get("sasl.password"))


class KafkaConnectionError(ConnectionError):
    """The connection to a broker failed or closed; what was in flight on it is lost."""


class UnsupportedVersionError(RuntimeError):
    """The broker does not serve a version of an API this client needs."""


class BrokerConnection:
    """Requests go out in order on one socket; each awaits its own response."""

    def __init__(self, host: str, port: int, client_id: str, node_id: int = -1) -> None:
        self.host, self.port, self.client_id, self.node_id = host, port, client_id, node_id
        self.versions: dict[int, tuple[int, int]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, tuple[asyncio.Future, int, int]] = {}
        self._correlation = itertools.count(1)
        self._reading: asyncio.Task | None = None
        self._closed = False

    @classmethod
    async def open(cls, host: str, port: int, client_id: str, node_id: int = -1, timeout: float = 10.0,
                   security: Security = Security()) -> "BrokerConnection":
        conn = cls(host, port, client_id, node_id)
        try:
            conn._reader, conn._writer = await asyncio.wait_for(asyncio.open_connection(
                host, port, ssl=security.context, server_hostname=host if security.context else None), timeout)
        except (OSError, asyncio.TimeoutError) as exc:  # ssl.SSLError is an OSError
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc}") from None
        conn._reading = asyncio.get_running_loop().create_task(conn._read_loop())
        try:
            resp = await conn.request(API_VERSIONS, 3, client_software_name="cohort-client",
                                      client_software_version="1")
            if resp.error_code:
                raise UnsupportedVersionError(f"{host}:{port} refused ApiVersions v3 (error {int(resp.error_code)})")
            conn.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            if security.mechanism is not None:
                await conn._authenticate(security)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _authenticate(self, security: Security) -> None:
        """SaslHandshake v1, then SaslAuthenticate: one round for PLAIN, two for SCRAM."""
        resp = await self.request(SASL_HANDSHAKE, 1, mechanism=security.mechanism)
        if resp.error_code:
            raise AuthenticationError(f"{self.host}:{self.port} does not offer SASL {security.mechanism} "
                                      f"(it offers {', '.join(resp.mechanisms) or 'none'})")

        async def exchange(data: bytes) -> bytes:
            answer = await self.request(SASL_AUTHENTICATE, 2, auth_bytes=data)
            if answer.error_code:
                raise AuthenticationError(answer.error_message or f"SASL authentication failed ({int(answer.error_code)})")
            return bytes(answer.auth_bytes)

        user, password = security.username or "", security.password or ""
        if security.mechanism == "PLAIN":
            await exchange(b"\0" + user.encode() + b"\0" + password.encode())
            return
        import scramp

        client = scramp.ScramClient([security.mechanism], user, password)
        server_first = await exchange(client.get_client_first().encode())
        try:
            client.set_server_first(server_first.decode())
            server_final = await exchange(client.get_client_final().encode())
            client.set_server_final(server_final.decode())
        except scramp.ScramException as exc:
            raise AuthenticationError(f"SCRAM with {self.host}:{self.port}: {exc}") from None

    def supports(self, api_key: int, version: int) -> bool:
        lo, hi = self.versions.get(api_key, (0, -1))
        return lo <= version <= hi

    def pick(self, api_key: int, *versions: int) -> int:
        """The first of `versions` (the client's preference order) the broker serves."""
        for v in versions:
            if self.supports(api_key, v):
                return v
        raise UnsupportedVersionError(f"{self.host}:{self.port} serves none of versions {versions} of API {api_key}")

    async def request(self, api_key: int, version: int, body: Any = None, **fields: Any) -> Any:
        """Send one request (a body, or the fields of one) and await its decoded response."""
        if self._closed or self._writer is None:
            raise KafkaConnectionError(f"the connection to {self.host}:{self.port} is closed")
        if body is None:
            body = build(request_schema(api_key, version), **fields)
        correlation = next(self._correlation)
        future = asyncio.get_running_loop().create_future()
        self._pending[correlation] = (future, api_key, version)
        try:
            self._writer.write(encode_request(api_key, version, correlation, self.client_id, body))
        except OSError as exc:
            self._fail(KafkaConnectionError(str(exc)))
        return await future

    async def _read_loop(self) -> None:
        reader = self._reader
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                frame = await reader.readexactly(size)
                (correlation,) = _SIZE.unpack_from(frame, 0)
                entry = self._pending.pop(correlation, None)
                if entry is None:
                    raise KafkaConnectionError(f"a response to unknown correlation id {correlation}")
                future, api_key, version = entry
                try:
                    _, body = decode_response(api_key, version, frame)
                except Exception as exc:  # noqa: BLE001 - handed to the waiting caller
                    if not future.done():
                        future.set_exception(exc)
                    continue
                if not future.done():
                    future.set_result(body)
        except (asyncio.IncompleteReadError, OSError, KafkaConnectionError) as exc:
            self._fail(exc if isinstance(exc, KafkaConnectionError)
                       else KafkaConnectionError(f"{self.host}:{self.port} closed the connection"))
        except asyncio.CancelledError:
            self._fail(KafkaConnectionError("the connection was closed"))
            raise

    def _fail(self, exc: Exception) -> None:
        self._closed = True
        pending, self._pending = self._pending, {}
        for future, _, _ in pending.values():
            if not future.done():
                future.set_exception(exc)
        if self._writer is not None:
            self._writer.close()

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
            try:
                await self._reading
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing anyway
                pass
        self._fail(KafkaConnectionError("the connection was closed"))
        if self._writer is not None:
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
