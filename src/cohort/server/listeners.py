"""Listeners in Kafka's syntax: ``listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094``,
named listeners mapped to a protocol by ``listener.security.protocol.map``, the addresses given
to clients by ``advertised.listeners``, and per-listener settings
(``listener.name.<name>.<setting>``, ``listener.name.<name>.<mechanism>.<setting>``).

Without ``listeners`` there is one PLAINTEXT listener on ``listener.host``:``listener.port``
(``--host`` / ``--port``), advertised as ``advertised.host``:``advertised.port``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cohort.config import Config, ConfigError, declare

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

declare("listeners", str, "", "Listeners in Kafka's syntax, `NAME://host:port` comma-separated (e.g. "
        "`PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094`); port 0 picks a free port. Empty: one "
        "PLAINTEXT listener on `listener.host`:`listener.port`.", group="security")
declare("advertised.listeners", str, "", "Addresses given to clients per listener, `NAME://host:port` "
        "(a client is told the address of the listener it connected to). Empty: each listener's own.",
        group="security")
declare("listener.security.protocol.map", str, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "Protocol of each listener name, `NAME:PROTOCOL` comma-separated (protocols: PLAINTEXT, SSL, "
        "SASL_PLAINTEXT, SASL_SSL).", group="security")
declare("controller.listener.names", str, "", "Listeners of a KRaft controller, comma-separated. cohort has "
        "no controller: the listeners named here are not opened (so Kafka's own server.properties, which "
        "defines a CONTROLLER listener, starts cohort with its client listeners only).", group="security")
declare("sasl.enabled.mechanisms", str, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", "SASL mechanisms a SASL listener "
        "offers (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, and OAUTHBEARER with unsecured tokens, for "
        "development only); set per listener with "
        "`listener.name.<name>.sasl.enabled.mechanisms`. Kafka's default is GSSAPI, which cohort does not "
        "support.", group="security")
declare("sasl.jaas.config", str, "", "JAAS options of a mechanism; only read with a listener and mechanism "
        "prefix, as in Kafka: `listener.name.<name>.plain.sasl.jaas.config=org.apache.kafka.common.security."
        "plain.PlainLoginModule required user_alice=\"alice-secret\";` defines PLAIN users.",
        group="security", sensitive=True)
declare("sasl.server.max.receive.size", int, 524288, "Largest frame accepted before authentication "
        "completes; a larger one closes the connection.", minimum=1, group="security")
declare("connection.failed.authentication.delay.ms", int, 100, "After a failed authentication the error "
        "is sent at once and the connection is closed this much later (slows password guessing).",
        minimum=0, group="security")
declare("connections.max.reauth.ms", int, 0, "KIP-368: a SASL session lasts this long (and no longer than an "
        "OAUTHBEARER token), then the client must re-authenticate on the same connection or it is closed at its "
        "next request. 0: sessions do not expire. Can be set per listener and mechanism.", minimum=0,
        group="security")
declare("ssl.keystore.type", str, "PEM", "Only PEM (a file, or inline PEM) is supported.", choices=("PEM",),
        group="security")
declare("ssl.keystore.location", str, "", "PEM file with the listener's certificate chain and private key.",
        group="security")
declare("ssl.keystore.certificate.chain", str, "", "Inline PEM certificate chain (instead of a file).",
        group="security")
declare("ssl.keystore.key", str, "", "Inline PEM private key (instead of a file).", group="security",
        sensitive=True)
declare("ssl.key.password", str, "", "Password of an encrypted private key.", group="security", sensitive=True)
declare("ssl.truststore.type", str, "PEM", "Only PEM is supported.", choices=("PEM",), group="security")
declare("ssl.truststore.location", str, "", "PEM file of the CA certificates client certificates must chain "
        "to.", group="security")
declare("ssl.truststore.certificates", str, "", "Inline PEM CA certificates (instead of a file).",
        group="security")
declare("ssl.client.auth", str, "none", "Client certificates: `none`, `requested` or `required`. On a "
        "SASL_SSL listener only a listener-prefixed value applies, as in Kafka.",
        choices=("none", "requested", "required"), group="security")
declare("ssl.enabled.protocols", str, "TLSv1.2,TLSv1.3", "TLS versions accepted.", group="security")
declare("ssl.cipher.suites", str, "", "TLS 1.2 cipher suites in OpenSSL's names (empty: Python's defaults).",
        group="security")
declare("ssl.principal.mapping.rules", str, "DEFAULT", "Maps a client certificate's subject (RFC 2253) to "
        "the principal name: `RULE:regex/replacement/[L|U]` and `DEFAULT`, comma-separated; the first "
        "rule matching the whole subject wins.", group="security")

_LISTENER = re.compile(r"^([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)$")


@dataclass(frozen=True, slots=True)
class Listener:
    name: str  # upper-case, as Kafka normalises it
    protocol: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int  # 0: the port bound

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def _parse_endpoints(text: str, what: str) -> list[tuple[str, str, int]]:
    out = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        m = _LISTENER.match(item)
        if m is None:
            raise ConfigError(f"{what}: expected NAME://host:port, got {item!r}")
        out.append((m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))))
    return out


def parse(config: Config) -> list[Listener]:
    """The broker's listeners (ConfigError on a bad definition)."""
    protocols: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in config["listener.security.protocol.map"].split(","))):
        name, sep, proto = item.partition(":")
        if not sep or proto.strip().upper() not in PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: expected NAME:PROTOCOL, got {item!r}")
        protocols[name.strip().upper()] = proto.strip().upper()
    if not config["listeners"]:
        host = config["advertised.host"] or ""
        return [Listener("PLAINTEXT", "PLAINTEXT", config["listener.host"], config["listener.port"], host,
                         config["advertised.port"])]
    endpoints = _parse_endpoints(config["listeners"], "listeners")
    names = [e[0] for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"listeners: each listener name may appear once, got {names}")
    advertised = {n: (h, p) for n, h, p in _parse_endpoints(config["advertised.listeners"], "advertised.listeners")}
    unknown = set(advertised) - set(names)
    if not set(names) - {n.strip().upper() for n in config["controller.listener.names"].split(",")}:
        raise ConfigError("listeners: every listener is a controller listener; cohort needs one for clients")
    if unknown:
        raise ConfigError(f"advertised.listeners names listeners that do not exist: {sorted(unknown)}")
    controllers = {n.strip().upper() for n in config["controller.listener.names"].split(",") if n.strip()}
    out = []
    for name, host, port in endpoints:
        if name in controllers:
            continue
        if name not in protocols:
            raise ConfigError(f"listener {name} is not in listener.security.protocol.map")
        adv_host, adv_port = advertised.get(name, ("", 0))
        out.append(Listener(name, protocols[name], host, port, adv_host, adv_port))
    return out
