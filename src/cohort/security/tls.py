"""TLS for SSL and SASL_SSL listeners with Python's ``ssl`` module, from Kafka's settings.

Keys and certificates are PEM: a file (``ssl.keystore.location``, certificate chain and private
key, ``ssl.key.password`` for an encrypted key) or inline (``ssl.keystore.certificate.chain`` and
``ssl.keystore.key``); trusted CAs for client certificates likewise (``ssl.truststore.location``
or ``ssl.truststore.certificates``). JKS and PKCS12 stores are refused with a message saying so.
A client certificate's subject becomes the principal through ``ssl.principal.mapping.rules``.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from typing import Callable

from cohort.config import ConfigError
from cohort.security import files

_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(setting: Callable[[str], object], listener: str) -> ssl.SSLContext:
    """An SSLContext for ``listener``; ``setting(key)`` gives the listener's effective value."""
    kind = str(setting("ssl.keystore.type")).upper()
    if kind != "PEM":
        raise ConfigError(f"listener {listener}: ssl.keystore.type={kind} is not supported; use PEM files or inline PEM")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    location = str(setting("ssl.keystore.location") or "")
    password = str(setting("ssl.key.password") or "") or None
    chain, key = str(setting("ssl.keystore.certificate.chain") or ""), str(setting("ssl.keystore.key") or "")
    try:
        if location:
            files.warn_if_loose(location)
            ctx.load_cert_chain(location, password=password)
        elif chain and key:
            _load_inline(ctx, chain, key, password)
        else:
            raise ConfigError(f"listener {listener}: TLS needs ssl.keystore.location, or ssl.keystore.certificate.chain "
                              "and ssl.keystore.key")
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"listener {listener}: cannot load the key and certificate: {exc}") from None
    versions = [v.strip() for v in str(setting("ssl.enabled.protocols")).split(",") if v.strip()]
    unknown = [v for v in versions if v not in _PROTOCOLS]
    if unknown or not versions:
        raise ConfigError(f"listener {listener}: ssl.enabled.protocols must list TLSv1.2 and/or TLSv1.3, got {versions}")
    ctx.minimum_version = min(_PROTOCOLS[v] for v in versions)
    ctx.maximum_version = max(_PROTOCOLS[v] for v in versions)
    ciphers = str(setting("ssl.cipher.suites") or "")
    if ciphers:
        try:
            ctx.set_ciphers(ciphers.replace(",", ":"))
        except ssl.SSLError as exc:
            raise ConfigError(f"listener {listener}: ssl.cipher.suites: {exc}") from None
    auth = str(setting("ssl.client.auth")).lower()
    if auth not in _CLIENT_AUTH:
        raise ConfigError(f"listener {listener}: ssl.client.auth must be none, requested or required, got {auth!r}")
    ctx.verify_mode = _CLIENT_AUTH[auth]
    if auth != "none":
        trust = str(setting("ssl.truststore.location") or "")
        inline = str(setting("ssl.truststore.certificates") or "")
        try:
            if trust:
                ctx.load_verify_locations(cafile=trust)
            elif inline:
                ctx.load_verify_locations(cadata=inline)
            else:
                raise ConfigError(f"listener {listener}: ssl.client.auth={auth} needs ssl.truststore.location or "
                                  "ssl.truststore.certificates")
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"listener {listener}: cannot load the truststore: {exc}") from None
    return ctx


def _load_inline(ctx: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """ssl loads keys from files only: write the inline PEM to an owner-only temporary file."""
    fd, path = tempfile.mkstemp(prefix="cohort-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(chain.strip() + "\n" + key.strip() + "\n")
        ctx.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


# --- principals -------------------------------------------------------------------------------

_RDN_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
              "stateOrProvinceName": "ST", "localityName": "L", "streetAddress": "STREET", "domainComponent": "DC",
              "userId": "UID"}


def subject_dn(cert: dict) -> str:
    """RFC 2253 form of a peer certificate's subject (most specific first, as Java's
    X500Principal.getName() writes it)."""
    parts = []
    for rdn in reversed(cert.get("subject", ())):
        parts.append("+".join(f"{_RDN_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(parts)


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


class PrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: ``RULE:regex/replacement/[LU]`` and ``DEFAULT``,
    the first rule whose pattern matches the whole DN wins."""

    _RULE = re.compile(r"\s*RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU])?\s*(?:,|$)|\s*DEFAULT\s*(?:,|$)")

    def __init__(self, rules: str) -> None:
        self.rules: list[tuple[re.Pattern, str, str] | None] = []
        pos = 0
        text = rules.strip() or "DEFAULT"
        while pos < len(text):
            m = self._RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ConfigError(f"ssl.principal.mapping.rules: cannot parse {text[pos:]!r}")
            if m.group(0).strip().rstrip(",").strip() == "DEFAULT":
                self.rules.append(None)
            else:
                self.rules.append((re.compile(m.group(1)), re.sub(r"\$(\d)", r"\\\1", m.group(2)), m.group(3) or ""))
            pos = m.end()

    def name(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            pattern, replacement, case = rule
            m = pattern.fullmatch(dn)
            if m:
                out = m.expand(replacement)
                return out.lower() if case == "L" else out.upper() if case == "U" else out
        raise ValueError(f"no ssl.principal.mapping.rules rule matches {dn!r}")
