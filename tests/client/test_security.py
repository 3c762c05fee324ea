"""cohort.client over TLS and SASL against a cohort broker: SCRAM-SHA-512 over SASL_SSL, PLAIN
over SASL_PLAINTEXT, a client certificate over SSL, and the refusals: a wrong password, a
mechanism the listener does not offer, a certificate the client does not trust."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka.admin import AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from cohort.client import Consumer
from cohort.client.connection import AuthenticationError, KafkaConnectionError
from cohort.security.testcerts import make_pki
from cohort_testing import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret";')


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    base = tmp_path_factory.mktemp("client-secure")
    pki = make_pki(str(base / "pki"))
    srv = ServerProcess(
        base / "data",
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        f"ssl.keystore.location={pki.server}", f"ssl.truststore.location={pki.ca}",
        "listener.name.ssl.ssl.client.auth=required",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
        "group.consumer.heartbeat.interval.ms=300", "group.consumer.min.heartbeat.interval.ms=100",
        log_path=str(base / "server.log")).start()
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{srv.ports['PLAINTEXT']}"})
    upsert = UserScramCredentialUpsertion("app", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"app-secret")
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(10)
    for f in admin.create_topics([NewTopic("sec", 2)]).values():
        f.result(10)
    srv.pki = pki
    yield srv
    assert srv.stop() == 0


def consume_one_group(srv, listener: str, **security) -> set:
    async def go():
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{srv.ports[listener]}", "group.id": f"sec-{listener}",
                      "auto.offset.reset": "earliest", **security})
        c.subscribe(["sec"])
        await c.start()
        try:
            for _ in range(200):
                if len(c.assignment()) == 2:
                    return c.assignment()
                await asyncio.sleep(0.05)
            raise AssertionError("no assignment over " + listener)
        finally:
            await c.close()
    return asyncio.run(asyncio.wait_for(go(), 60))


def test_scram_sha_512_over_sasl_ssl(secure):
    got = consume_one_group(secure, "SASL_SSL", **{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                                  "sasl.username": "app", "sasl.password": "app-secret",
                                                  "ssl.ca.location": secure.pki.ca})
    assert len(got) == 2


def test_plain_over_sasl_plaintext(secure):
    got = consume_one_group(secure, "SASL_PLAINTEXT", **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                                        "sasl.username": "alice", "sasl.password": "alice-secret"})
    assert len(got) == 2


def test_a_client_certificate_over_ssl(secure):
    cert, key = secure.pki.client("svc-client")
    got = consume_one_group(secure, "SSL", **{"security.protocol": "SSL", "ssl.ca.location": secure.pki.ca,
                                             "ssl.certificate.location": cert, "ssl.key.location": key})
    assert len(got) == 2


@pytest.mark.parametrize("listener, settings, error, match", [
    ("SASL_SSL", {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "app",
                  "sasl.password": "wrong"}, AuthenticationError, "invalid credentials"),
    ("SASL_PLAINTEXT", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                        "sasl.password": "wrong"}, AuthenticationError, "Invalid username or password"),
    ("SASL_PLAINTEXT", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
                        "sasl.password": "alice-secret"}, AuthenticationError, "does not offer SASL SCRAM-SHA-256"),
    ("SSL", {"security.protocol": "SSL"}, KafkaConnectionError, "certificate verify failed"),  # the test CA is not trusted
])
def test_refusals_are_clear_errors(secure, listener, settings, error, match):
    if listener == "SASL_SSL":
        settings = {**settings, "ssl.ca.location": secure.pki.ca}
    with pytest.raises(error, match=match):
        consume_one_group(secure, listener, **settings)


def test_bad_security_settings_are_refused_when_the_consumer_is_made():
    with pytest.raises(ValueError, match="security.protocol must be one of"):
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "security.protocol": "TLS"})
    with pytest.raises(ValueError, match="SASL needs sasl.username and sasl.password"):
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "security.protocol": "SASL_PLAINTEXT"})
