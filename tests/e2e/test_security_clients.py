"""TLS and SASL with real clients over real sockets: confluent-kafka over SASL_SSL with
SCRAM-SHA-512 (the user created over the wire with AlterUserScramCredentials) running a KIP-848
group; a wrong password; kafka-python and aiokafka over SASL_PLAINTEXT PLAIN and over SSL with a
client certificate; what a connection may send before it authenticates; owner-only files."""

import asyncio
import os
import socket
import stat
import struct
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from cohort.security.testcerts import make_pki
from cohort_testing import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    base = tmp_path_factory.mktemp("secure")
    pki = make_pki(str(base / "pki"))
    srv = ServerProcess(
        base / "data",
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        f"ssl.keystore.location={pki.server}",
        f"ssl.truststore.location={pki.ca}",
        "listener.name.ssl.ssl.client.auth=required",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,OAUTHBEARER",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
        "group.consumer.heartbeat.interval.ms=300", "group.consumer.min.heartbeat.interval.ms=100",
        "num.partitions=2",
        log_path=str(base / "server.log")).start()
    srv.pki = pki
    srv.data = str(base / "data")
    yield srv
    assert srv.stop() == 0, f"unclean shutdown, see {base / 'server.log'}"


def addr(srv, listener):
    return f"127.0.0.1:{srv.ports[listener]}"


def scram_conf(srv, user, password, mechanism="SCRAM-SHA-512"):
    return {"bootstrap.servers": addr(srv, "SASL_SSL"), "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password, "ssl.ca.location": srv.pki.ca}


def add_scram_user(srv, user, password):
    """Through the PLAINTEXT listener, as an operator would with kafka-configs --add-config."""
    a = AdminClient({"bootstrap.servers": addr(srv, "PLAINTEXT")})
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())
    for fut in a.alter_user_scram_credentials([upsert]).values():
        fut.result(10)
    described = a.describe_user_scram_credentials([user])[user].result(10)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_512, 4096)]


def test_scram_sha_512_over_sasl_ssl_with_a_kip848_group(secure):
    add_scram_user(secure, "orders-app", "orders-secret")
    conf = scram_conf(secure, "orders-app", "orders-secret")
    a = AdminClient(conf)
    a.create_topics([NewTopic("secure-orders", num_partitions=2, replication_factor=1)])["secure-orders"].result(10)
    p = ck.Producer(conf)
    for i in range(20):
        p.produce("secure-orders", key=b"%d" % i, value=b"v%d" % i)
    assert p.flush(15) == 0
    c = ck.Consumer({**conf, "group.id": "secure-group", "group.protocol": "consumer", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    try:
        c.subscribe(["secure-orders"])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
                c.commit(message=m, asynchronous=False)
        assert sorted(got) == sorted(b"v%d" % i for i in range(20))
        groups = a.describe_consumer_groups(["secure-group"])["secure-group"].result(10)
        assert groups.group_id == "secure-group" and len(groups.members) == 1
    finally:
        c.close()


def test_wrong_password_is_an_authentication_failure_within_a_second(secure):
    add_scram_user(secure, "bob", "right")
    errors = []
    p = ck.Producer({**scram_conf(secure, "bob", "wrong"), "error_cb": errors.append})
    start = time.monotonic()
    while not errors and time.monotonic() - start < 5:
        p.poll(0.05)
    elapsed = time.monotonic() - start
    assert errors and errors[0].code() == ck.KafkaError._AUTHENTICATION, errors
    assert "invalid credentials" in errors[0].str() and elapsed < 1.0, (elapsed, errors[0].str())


def test_kafka_python_over_sasl_plaintext_plain(secure, caplog):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaError

    common = {"bootstrap_servers": addr(secure, "SASL_PLAINTEXT"), "security_protocol": "SASL_PLAINTEXT",
              "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}
    producer = KafkaProducer(**common)
    producer.send("kp-plain", b"hello", partition=0).get(timeout=10)
    producer.close()
    consumer = KafkaConsumer(**common, auto_offset_reset="earliest", consumer_timeout_ms=5000)
    consumer.assign([TopicPartition("kp-plain", 0)])
    assert [m.value for m in consumer] == [b"hello"]
    consumer.close()
    bad = None
    with pytest.raises(KafkaError) as exc:
        bad = KafkaProducer(**{**common, "sasl_plain_password": "nope"}, max_block_ms=3000)
        bad.send("kp-plain", b"x").get(timeout=5)
    if bad is not None:
        bad.close(timeout=1)
    # kafka-python reports the broker's answer (error 58 and its message) and then gives up bootstrapping
    assert "Authentication failed: Invalid username or password" in caplog.text, repr(exc.value)


def test_aiokafka_over_ssl_with_a_client_certificate(secure):
    import ssl

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    cert, key = secure.pki.client("svc-reports")
    ctx = ssl.create_default_context(cafile=secure.pki.ca)
    ctx.load_cert_chain(cert, key)

    async def scenario():
        producer = AIOKafkaProducer(bootstrap_servers=addr(secure, "SSL"), security_protocol="SSL", ssl_context=ctx)
        await producer.start()
        try:
            await producer.send_and_wait("aio-ssl", b"over tls", partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=addr(secure, "SSL"), security_protocol="SSL", ssl_context=ctx,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([TopicPartition("aio-ssl", 0)])
            msg = await asyncio.wait_for(consumer.getone(), 15)
            assert msg.value == b"over tls"
        finally:
            await consumer.stop()

    asyncio.run(scenario())
    # without a client certificate the TLS handshake itself is refused (ssl.client.auth=required)
    bare = ssl.create_default_context(cafile=secure.pki.ca)
    with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=5) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            with bare.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(struct.pack(">ihhih", 10, 18, 0, 1, -1))
                if not tls.recv(4):
                    raise ConnectionError("closed")


def test_only_handshake_apis_before_authentication(secure):
    # Metadata as the first request on a SASL listener: closed, nothing answered
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=5) as s:
        s.sendall(struct.pack(">ihhih", 12, 3, 0, 7, -1) + struct.pack(">i", -1))
        assert s.recv(4) == b""
    # a frame above sasl.server.max.receive.size before authenticating: closed
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=5) as s:
        s.sendall(struct.pack(">i", 600_000))
        assert s.recv(4) == b""


def test_data_directory_is_owner_only(secure):
    assert stat.S_IMODE(os.stat(secure.data).st_mode) == 0o700
    for root, dirs, names in os.walk(secure.data):
        for name in names:
            mode = stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode)
            assert mode & 0o077 == 0, f"{name} is {oct(mode)}"


def test_oauthbearer_unsecured_jwt_with_confluent_kafka(secure):
    base = {"bootstrap.servers": addr(secure, "SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True}
    p = ck.Producer({**base, "sasl.oauthbearer.config": "principal=dev-user lifeSeconds=600"})
    delivered = []
    p.produce("oauth-topic", value=b"token ok", on_delivery=lambda err, m: delivered.append(err))
    assert p.flush(15) == 0 and delivered[0] is None
    errors = []
    expired = ck.Producer({**base, "sasl.oauthbearer.config": "principal=dev-user lifeSeconds=1", "error_cb": errors.append})
    time.sleep(1.5)  # the token librdkafka made is now expired when it connects
    start = time.monotonic()
    while not errors and time.monotonic() - start < 5:
        expired.poll(0.05)
    assert errors and errors[0].code() == ck.KafkaError._AUTHENTICATION, errors
    assert "invalid_token" in errors[0].str(), errors[0].str()  # the broker's JSON challenge


def test_kip368_reauthentication(tmp_path):
    srv = ServerProcess(tmp_path / "data", "listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=PLAIN",
                        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
                        "connections.max.reauth.ms=1500", log_path=str(tmp_path / "server.log")).start()
    try:
        conf = {"bootstrap.servers": f"127.0.0.1:{srv.ports['SASL_PLAINTEXT']}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"}
        errors = []
        p = ck.Producer({**conf, "error_cb": errors.append})
        delivered = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # keeps one connection busy across three session lifetimes
            p.produce("reauth", value=b"x", on_delivery=lambda err, m: delivered.append(err))
            p.poll(0.1)
        assert p.flush(10) == 0 and delivered and all(e is None for e in delivered), delivered[:3]
        log_text = open(tmp_path / "server.log").read()
        assert log_text.count("re-authenticated") >= 2, "librdkafka did not re-authenticate"
        assert "expired" not in log_text and not [e for e in errors if e.code() == ck.KafkaError._AUTHENTICATION]

        # a client that does not re-authenticate is cut off at its first request after the session ends
        with socket.create_connection(("127.0.0.1", srv.ports["SASL_PLAINTEXT"]), timeout=5) as s:
            from kio.index import load_request_schema

            from cohort.protocol.codec import encode_request
            from cohort.protocol.entities import build

            def send(api, version, body, corr):
                s.sendall(encode_request(api, version, corr, "raw", body))
                size = struct.unpack(">i", s.recv(4))[0]
                data = b""
                while len(data) < size:
                    data += s.recv(size - len(data))
                return data

            send(17, 1, build(load_request_schema(17, 1), mechanism="PLAIN"), 1)
            send(36, 1, build(load_request_schema(36, 1), auth_bytes=b"\0alice\0alice-secret"), 2)
            api_versions = build(load_request_schema(18, 3), client_software_name="raw", client_software_version="1")
            send(18, 3, api_versions, 3)  # inside the session: answered
            time.sleep(1.7)
            s.sendall(encode_request(18, 3, 4, "raw", api_versions))
            assert s.recv(4) == b""  # after it: closed
    finally:
        assert srv.stop() == 0


NODE_DIR = os.path.join(os.path.dirname(__file__), "node")


def test_kcat_and_kafkajs_over_sasl_ssl_scram(secure):
    import json
    import shutil
    import subprocess

    assert shutil.which("kcat"), "kcat is missing: run `make e2e-tools`"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "kafkajs")), "kafkajs is missing: run `make e2e-tools`"
    add_scram_user(secure, "tools", "tools-secret")
    bootstrap = addr(secure, "SASL_SSL")
    kcat = ["kcat", "-b", bootstrap, "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
            "-X", "sasl.username=tools", "-X", "sasl.password=tools-secret", "-X", f"ssl.ca.location={secure.pki.ca}"]
    subprocess.run(kcat + ["-P", "-t", "kcat-secure", "-p", "0"], input=b"one\ntwo\nthree\n", check=True, timeout=30)
    out = subprocess.run(kcat + ["-C", "-t", "kcat-secure", "-p", "0", "-o", "beginning", "-e", "-q"],
                         capture_output=True, check=True, timeout=30).stdout
    assert out.split() == [b"one", b"two", b"three"]
    wrong = subprocess.run(kcat[:-4] + ["-X", "sasl.password=nope", "-X", f"ssl.ca.location={secure.pki.ca}", "-L"],
                           capture_output=True, timeout=30)
    assert wrong.returncode != 0 and b"Authentication failed" in wrong.stderr + wrong.stdout

    node = subprocess.run(["node", os.path.join(NODE_DIR, "secure.js"), bootstrap, secure.pki.ca, "tools", "tools-secret",
                           "kafkajs-secure", "5"], capture_output=True, text=True, timeout=60)
    assert node.returncode == 0, node.stdout + node.stderr
    assert sorted(json.loads(node.stdout.strip().splitlines()[-1])["read"]) == [f"k{i}" for i in range(5)]
    bad = subprocess.run(["node", os.path.join(NODE_DIR, "secure.js"), bootstrap, secure.pki.ca, "tools", "nope",
                          "kafkajs-secure", "1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "SASL SCRAM SHA512 authentication failed" in bad.stdout, bad.stdout


def test_kafka_python_over_ssl_with_a_client_certificate_and_aiokafka_over_plain(secure, caplog):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    cert, key = secure.pki.client("svc-python")
    tls = {"bootstrap_servers": addr(secure, "SSL"), "security_protocol": "SSL", "ssl_cafile": secure.pki.ca,
           "ssl_certfile": cert, "ssl_keyfile": key, "ssl_check_hostname": False}
    producer = KafkaProducer(**tls)
    producer.send("kp-ssl", b"certified", partition=0).get(timeout=10)
    producer.close()
    consumer = KafkaConsumer(**tls, auto_offset_reset="earliest", consumer_timeout_ms=5000)
    consumer.assign([TopicPartition("kp-ssl", 0)])
    assert [m.value for m in consumer] == [b"certified"]
    consumer.close()

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTP

    plain = {"bootstrap_servers": addr(secure, "SASL_PLAINTEXT"), "security_protocol": "SASL_PLAINTEXT",
             "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}

    async def scenario():
        p = AIOKafkaProducer(**plain)
        await p.start()
        try:
            await p.send_and_wait("aio-plain", b"plain ok", partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(**plain, auto_offset_reset="earliest")
        await c.start()
        try:
            c.assign([AioTP("aio-plain", 0)])
            assert (await asyncio.wait_for(c.getone(), 15)).value == b"plain ok"
        finally:
            await c.stop()
        bad = AIOKafkaProducer(**{**plain, "sasl_plain_password": "nope"})
        with pytest.raises(Exception) as exc:
            await bad.start()
        await bad.stop()
        return exc.value

    failure = asyncio.run(scenario())
    # aiokafka logs the broker's answer (error 58 and its message), then reports it cannot bootstrap
    assert "Invalid username or password" in caplog.text, repr(failure)
