"""SASL on a listener, as Kafka's SaslServerAuthenticator runs it: a sans-IO state machine.

The server feeds it what arrives before authentication completes and sends what it answers:

* INITIAL: ApiVersions (once) or SaslHandshake; anything else closes the connection.
* HANDSHAKE (after ApiVersions): SaslHandshake only.
* AUTHENTICATE: with a v1 handshake every token arrives in a SaslAuthenticate request; with a
  v0 handshake tokens arrive raw (4-byte length, then the bytes) and challenges leave the same way.
* COMPLETE: the principal is known; normal requests are served.

Mechanisms: PLAIN (users from the listener's JAAS options, compared in constant time) and
SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802 through the scramp library, against the credential
store). A failure is SASL_AUTHENTICATION_FAILED with Kafka's message; SCRAM hides whether the
user exists behind one generic text.
"""

from __future__ import annotations

import enum
import hmac
import re
from typing import Callable, Mapping, Protocol

import scramp

from cohort.security.credentials import HASHES, CredentialStore

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class AuthenticationFailed(Exception):
    """The exchange failed; the message goes to the client verbatim."""


class IllegalState(Exception):
    """A request the current state does not allow; the connection closes."""


class Mechanism(Protocol):
    principal: str | None

    def step(self, token: bytes) -> bytes | None:
        """The challenge for ``token`` (None: nothing to send); raises AuthenticationFailed."""

    @property
    def complete(self) -> bool: ...


class PlainServer:
    """RFC 4616: ``[authzid] NUL user NUL password``."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users
        self.principal: str | None = None

    @property
    def complete(self) -> bool:
        return self.principal is not None

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self.users.get(user)
        # compare even for an unknown user, so timing does not tell whether it exists
        ok = hmac.compare_digest(password.encode(), (expected if expected is not None else "\0" + password).encode())
        if not ok or expected is None:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is different from username")
        self.principal = user
        return b""


class ScramServer:
    """RFC 5802 server side (two rounds) over stored keys; ``scramp`` does the message work."""

    def __init__(self, mechanism: str, store: CredentialStore) -> None:
        self.mechanism = mechanism
        self.store = store
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info)
        self._round = 0
        self._user: str | None = None
        self.principal: str | None = None

    def _auth_info(self, username: str):
        cred = self.store.lookup(username, self.mechanism)
        if cred is None:
            raise scramp.ScramException("unknown user")
        self._user = username
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    @property
    def complete(self) -> bool:
        return self.principal is not None

    def _failed(self) -> AuthenticationFailed:
        return AuthenticationFailed("Authentication failed during authentication due to invalid credentials with "
                                    f"SASL mechanism {self.mechanism}")

    def step(self, token: bytes) -> bytes:
        self._round += 1
        try:
            text = token.decode("utf-8")
            if self._round == 1:
                authzid = _scram_authzid(text)
                self._server.set_client_first(text)
                if authzid is not None and authzid != self._user:
                    raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                               "different from username")
                return self._server.get_server_first().encode()
            if self._round == 2:
                self._server.set_client_final(text)
                final = self._server.get_server_final().encode()
                self.principal = self._user
                return final
        except AuthenticationFailed:
            raise
        except Exception:  # noqa: BLE001 - scramp raises several types; the client learns nothing more
            raise self._failed() from None
        raise self._failed()


def _scram_authzid(client_first: str) -> str | None:
    """The ``a=`` authzid of a client-first message, if any."""
    gs2 = client_first.split(",", 2)
    if len(gs2) < 3 or not gs2[1].startswith("a="):
        return None
    return gs2[1][2:].replace("=2C", ",").replace("=3D", "=")


_JAAS_USER = re.compile(r'user_([^=\s]+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def plain_users_from_jaas(jaas: str) -> dict[str, str]:
    """``user_<name>="<password>"`` options of a PlainLoginModule JAAS line."""
    return {m.group(1): m.group(2).replace('\\"', '"').replace("\\\\", "\\") for m in _JAAS_USER.finditer(jaas)}


class State(enum.Enum):
    INITIAL = "initial"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"


class Authenticator:
    """One connection's SASL exchange. Transition rules, top to bottom:

    INITIAL --ApiVersions--> HANDSHAKE --SaslHandshake(enabled)--> AUTHENTICATE
    INITIAL --SaslHandshake(enabled)--> AUTHENTICATE
    AUTHENTICATE --token, mechanism complete--> COMPLETE
    any --SaslHandshake(not enabled)--> failed (UNSUPPORTED_SASL_MECHANISM, then closed)
    any --token refused--> failed (SASL_AUTHENTICATION_FAILED, then closed)
    """

    def __init__(self, enabled: tuple[str, ...], make: Callable[[str], Mechanism]) -> None:
        self.enabled = enabled
        self._make = make
        self.state = State.INITIAL
        self.raw_tokens = False  # a v0 handshake: tokens travel without Kafka headers
        self.mechanism_name: str | None = None
        self._mechanism: Mechanism | None = None
        self.principal: str | None = None

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    def check_request(self, api_key: int) -> None:
        """Raise IllegalState unless ``api_key`` may arrive now (not for AUTHENTICATE, where
        another API gets an ILLEGAL_SASL_STATE answer before the connection closes)."""
        if self.state is State.INITIAL and api_key in (API_VERSIONS, SASL_HANDSHAKE):
            return
        if self.state is State.HANDSHAKE and api_key == SASL_HANDSHAKE:
            return
        if self.state is State.AUTHENTICATE and api_key == SASL_AUTHENTICATE and not self.raw_tokens:
            return
        raise IllegalState(f"api_key={api_key} is not allowed during SASL {self.state.value} "
                           "(wrong security protocol or not a Kafka client?)")

    def api_versions(self) -> None:
        self.check_request(API_VERSIONS)
        self.state = State.HANDSHAKE

    def handshake(self, mechanism: str, version: int) -> int:
        """The error code to answer SaslHandshake with (0, or UNSUPPORTED_SASL_MECHANISM after
        which the connection closes)."""
        self.check_request(SASL_HANDSHAKE)
        if mechanism not in self.enabled:
            return UNSUPPORTED_SASL_MECHANISM
        self.mechanism_name = mechanism
        self._mechanism = self._make(mechanism)
        self.raw_tokens = version == 0
        self.state = State.AUTHENTICATE
        return 0

    def token(self, data: bytes) -> bytes | None:
        """Evaluate one client token: the challenge to send back; raises AuthenticationFailed."""
        if self.state is not State.AUTHENTICATE or self._mechanism is None:
            raise IllegalState("a SASL token before the handshake")
        challenge = self._mechanism.step(data)
        if self._mechanism.complete:
            self.principal = self._mechanism.principal
            self.state = State.COMPLETE
        return challenge


def mechanism_factory(plain_users: Mapping[str, str], store: CredentialStore) -> Callable[[str], Mechanism]:
    def make(name: str) -> Mechanism:
        if name == "PLAIN":
            return PlainServer(plain_users)
        if name in HASHES:
            return ScramServer(name, store)
        raise ValueError(f"SASL mechanism {name} is not supported")

    return make
