"""SASL on a listener, as Kafka's SaslServerAuthenticator runs it: a sans-IO state machine.

The server feeds it what arrives before authentication completes and sends what it answers:

* INITIAL: ApiVersions (once) or SaslHandshake; anything else closes the connection.
* HANDSHAKE (after ApiVersions): SaslHandshake only.
* AUTHENTICATE: with a v1 handshake every token arrives in a SaslAuthenticate request; with a
  v0 handshake tokens arrive raw (4-byte length, then the bytes) and challenges leave the same way.
* COMPLETE: the principal is known; normal requests are served.

Mechanisms: PLAIN (users from the listener's JAAS options, compared in constant time),
SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802 through the scramp library, against the credential
store) and OAUTHBEARER with Kafka's unsecured JWS validation (development only). A failure is SASL_AUTHENTICATION_FAILED with Kafka's message; SCRAM hides whether the
user exists behind one generic text.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hmac
import json
import re
import logging
import os
import time
from typing import Callable, Mapping, Protocol

import scramp

from cohort.security.credentials import HASHES, CredentialStore

_log = logging.getLogger("cohort.security")
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


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
        # Kafka's server nonce: 130 random bits in base 36. scramp's default nonce may contain '='
        # and '/', which librdkafka before 2.1 (kcat on Debian 12 ships 2.0.2) garbles, failing
        # the exchange with "Server nonce doesn't match".
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info, s_nonce=_base36_nonce())
        self._round = 0
        self._user: str | None = None
        self._cred = None
        self.principal: str | None = None

    def _auth_info(self, username: str):
        cred = self.store.lookup(username, self.mechanism)
        if cred is None:
            raise scramp.ScramException("unknown user")
        self._user = username
        self._cred = cred
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    @property
    def complete(self) -> bool:
        return self.principal is not None

    def _suffix_nonce_final(self, client_final: str) -> bytes:
        """The client-final check Kafka's ScramSaslServer makes: the nonce must *end with* the
        server-first nonce. librdkafka before 2.6.1 repeats its client nonce in front of it
        (confluentinc/librdkafka#4895; Debian 12's kcat links 2.0.2), which scramp, following
        RFC 5802 to the letter, refuses; Kafka accepts it, so cohort verifies such a message
        itself, against the message as the client signed it."""
        fields = client_final.split(",")
        nonce = next((f[2:] for f in fields if f.startswith("r=")), "")
        full = str(self._server.nonce)
        if not fields[-1].startswith("p=") or nonce == full or not nonce.endswith(full) or self._cred is None:
            raise self._failed()
        without_proof = client_final[: client_final.rindex(",p=")]
        auth_message = f"{self._server.client_first_bare},{self._server.server_first},{without_proof}".encode()
        h = HASHES[self.mechanism]
        signature = hmac.new(self._cred.stored_key, auth_message, h).digest()
        proof = base64.b64decode(fields[-1][2:])
        if len(proof) != len(signature):
            raise self._failed()
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(h(client_key).digest(), self._cred.stored_key):
            raise self._failed()
        return b"v=" + base64.b64encode(hmac.new(self._cred.server_key, auth_message, h).digest())

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
                try:
                    self._server.set_client_final(text)
                    final = self._server.get_server_final().encode()
                except scramp.ScramException:
                    final = self._suffix_nonce_final(text)
                self.principal = self._user
                return final
        except AuthenticationFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - scramp raises several types; the client learns nothing more
            _log.debug("SCRAM exchange failed in round %d: %s", self._round, exc)
            raise self._failed() from None
        raise self._failed()


def _base36_nonce() -> str:
    n = int.from_bytes(os.urandom(17), "big") >> 6  # 130 bits
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = []
    while n:
        n, r = divmod(n, 36)
        out.append(digits[r])
    return "".join(reversed(out)) or "0"


def _scram_authzid(client_first: str) -> str | None:
    """The ``a=`` authzid of a client-first message, if any."""
    gs2 = client_first.split(",", 2)
    if len(gs2) < 3 or not gs2[1].startswith("a="):
        return None
    return gs2[1][2:].replace("=2C", ",").replace("=3D", "=")


class OAuthBearerServer:
    """OAUTHBEARER (RFC 7628) with Kafka's *unsecured* JWS validation, for development only:
    the token is not signed (``alg`` must be ``none``), so anyone can claim any principal. A
    failure is reported as Kafka does it: first a JSON challenge, and only after the client's
    ``\x01`` answer SASL_AUTHENTICATION_FAILED."""

    _TOKEN = re.compile(r"^[-_~+/.a-zA-Z0-9]+=*$")

    def __init__(self, options: Mapping[str, str], clock: Callable[[], float] = time.time) -> None:
        self.principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub")
        self.scope_claim = options.get("unsecuredValidatorScopeClaimName", "scope")
        self.required_scope = options.get("unsecuredValidatorRequiredScope", "").split()
        self.skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0)
        self.clock = clock
        self.principal: str | None = None
        self.expiry_ms: float | None = None  # the token's exp, once accepted
        self._error: str | None = None
        self._exp = 0.0

    @property
    def complete(self) -> bool:
        return self.principal is not None

    def step(self, token: bytes) -> bytes:
        if self._error is not None:
            if token == b"\x01":
                raise AuthenticationFailed(self._error)
            raise AuthenticationFailed("Authentication failed: unexpected response after an error challenge")
        try:
            authzid, bearer = self._parse(token)
            principal = self._validate(bearer)
        except _InvalidToken as exc:
            self._error = json.dumps({"status": exc.status, **({"scope": exc.scope} if exc.scope else {})},
                                     separators=(", ", ":"))
            return self._error.encode()
        if authzid and authzid != principal:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is different "
                                       "from the token's principal name")
        self.principal = principal
        self.expiry_ms = self._exp * 1000
        return b""

    @staticmethod
    def _parse(message: bytes) -> tuple[str | None, str]:
        text = message.decode("utf-8", "replace")
        gs2, sep, rest = text.partition("\x01")
        if not sep or not gs2.startswith("n,") or not rest.endswith("\x01\x01"):
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
        authzid = gs2[2:].rstrip(",")
        authzid = authzid[2:] if authzid.startswith("a=") else None
        pairs = dict(kv.partition("=")[::2] for kv in rest[:-2].split("\x01") if kv)
        scheme, _, token = pairs.get("auth", "").partition(" ")
        if scheme.lower() != "bearer" or not OAuthBearerServer._TOKEN.match(token):
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message: no bearer token")
        return authzid, token

    def _validate(self, token: str) -> str:
        parts = token.split(".")
        if len(parts) != 3 or not parts[0] or not parts[1]:
            raise _InvalidToken("invalid_token")
        if parts[2]:
            raise _InvalidToken("invalid_token")  # unsecured: the signature must be empty
        try:
            header = json.loads(_b64url(parts[0]))
            claims = json.loads(_b64url(parts[1]))
        except (ValueError, binascii.Error):
            raise _InvalidToken("invalid_token") from None
        if not isinstance(header, dict) or header.get("alg") != "none" or not isinstance(claims, dict):
            raise _InvalidToken("invalid_token")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise _InvalidToken("invalid_token")
        now = self.clock() * 1000
        exp, iat = claims.get("exp"), claims.get("iat")
        if not isinstance(exp, (int, float)) or isinstance(exp, bool) or now - self.skew_ms >= exp * 1000:
            raise _InvalidToken("invalid_token")
        if iat is not None and (not isinstance(iat, (int, float)) or iat * 1000 > now + self.skew_ms or exp <= iat):
            raise _InvalidToken("invalid_token")
        scope = claims.get(self.scope_claim, [])
        scopes = scope.split() if isinstance(scope, str) else list(scope) if isinstance(scope, list) else []
        missing = [s for s in self.required_scope if s not in scopes]
        if missing:
            raise _InvalidToken("insufficient_scope", " ".join(self.required_scope))
        self._exp = exp
        return principal


class _InvalidToken(Exception):
    def __init__(self, status: str, scope: str | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.scope = scope


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


_JAAS_OPTION = re.compile(r'([A-Za-z_][\w.-]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def jaas_options(jaas: str) -> dict[str, str]:
    """``key="value"`` options of a JAAS line."""
    return {m.group(1): m.group(2).replace('\\"', '"') for m in _JAAS_OPTION.finditer(jaas)}


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

    def __init__(self, enabled: tuple[str, ...], make: Callable[[str], Mechanism],
                 reauthenticating: tuple[str, str] | None = None) -> None:
        self.enabled = enabled
        self._make = make
        # KIP-368: (mechanism, principal) of the session being renewed; neither may change
        self.reauthenticating = reauthenticating
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
        if self.reauthenticating is not None and mechanism != self.reauthenticating[0]:
            raise AuthenticationFailed(f"SASL mechanism {mechanism} is not the mechanism of the session being "
                                       f"re-authenticated ({self.reauthenticating[0]})")
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
            if self.reauthenticating is not None and self._mechanism.principal != self.reauthenticating[1]:
                raise AuthenticationFailed(f"Cannot change principals during re-authentication from "
                                           f"User:{self.reauthenticating[1]}: User:{self._mechanism.principal}")
            self.principal = self._mechanism.principal
            self.state = State.COMPLETE
        return challenge

    def credential_lifetime_ms(self, now_ms: float) -> float | None:
        """How long the credential stays valid (an OAUTHBEARER token's ``exp``), if it expires."""
        expiry = getattr(self._mechanism, "expiry_ms", None)
        return None if expiry is None else max(expiry - now_ms, 0)


def mechanism_factory(plain_users: Mapping[str, str], store: CredentialStore,
                      oauth_options: Mapping[str, str] | None = None) -> Callable[[str], Mechanism]:
    def make(name: str) -> Mechanism:
        if name == "PLAIN":
            return PlainServer(plain_users)
        if name == "OAUTHBEARER":
            return OAuthBearerServer(oauth_options or {})
        if name in HASHES:
            return ScramServer(name, store)
        raise ValueError(f"SASL mechanism {name} is not supported")

    return make
