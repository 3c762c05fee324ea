"""The sans-IO SASL pieces: the authenticator's state machine, PLAIN, SCRAM against stored keys
(with scramp's client), the credential store's AlterUserScramCredentials rules and durability,
JAAS users, listener parsing and the certificate principal mapping."""

import json
import os
import stat

import pytest
import scramp

from cohort.config import Config, ConfigError
from cohort.security import credentials as cr
from cohort.security.sasl import (
    SASL_HANDSHAKE,
    UNSUPPORTED_SASL_MECHANISM,
    AuthenticationFailed,
    Authenticator,
    IllegalState,
    State,
    mechanism_factory,
    plain_users_from_jaas,
)
from cohort.security.tls import PrincipalMapper, subject_dn
from cohort.server import listeners


def store_with(tmp_path, user="alice", password="alice-secret", mechanism="SCRAM-SHA-512", iterations=4096):
    store = cr.CredentialStore(str(tmp_path))
    salt = os.urandom(16)
    assert store.alter([], [(user, cr.MECHANISM_IDS[mechanism], iterations, salt,
                             cr.salted_password(mechanism, password, salt, iterations))]) == {user: (0, None)}
    return store


def scram_exchange(auth, user, password, mechanism="SCRAM-SHA-512"):
    client = scramp.ScramClient([mechanism], user, password)
    server_first = auth.token(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = auth.token(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # the client checks the server's signature too
    return auth


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_against_stored_keys(tmp_path, mechanism):
    store = store_with(tmp_path, mechanism=mechanism)
    auth = Authenticator(("PLAIN", mechanism), mechanism_factory({}, store))
    auth.api_versions()
    assert auth.handshake(mechanism, 1) == 0 and auth.state is State.AUTHENTICATE
    scram_exchange(auth, "alice", "alice-secret", mechanism)
    assert auth.complete and auth.principal == "alice"
    raw = open(os.path.join(str(tmp_path), cr.STORE_FILE)).read()
    assert "alice-secret" not in raw  # only salt, StoredKey and ServerKey are kept
    assert stat.S_IMODE(os.stat(os.path.join(str(tmp_path), cr.STORE_FILE)).st_mode) == 0o600


def test_scram_wrong_password_and_unknown_user_fail_alike(tmp_path):
    store = store_with(tmp_path)
    messages = []
    for user, password in (("alice", "wrong"), ("mallory", "x")):
        auth = Authenticator(("SCRAM-SHA-512",), mechanism_factory({}, store))
        auth.handshake("SCRAM-SHA-512", 1)
        with pytest.raises(AuthenticationFailed) as exc:
            scram_exchange(auth, user, password)
        messages.append(str(exc.value))
    assert messages[0] == messages[1] == ("Authentication failed during authentication due to invalid credentials "
                                          "with SASL mechanism SCRAM-SHA-512")


def test_plain(tmp_path):
    users = plain_users_from_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                                  'username="admin" password="admin-secret" user_admin="admin-secret" user_bob="b\\"ob";')
    assert users == {"admin": "admin-secret", "bob": 'b"ob'}
    auth = Authenticator(("PLAIN",), mechanism_factory(users, cr.CredentialStore(str(tmp_path))))
    assert auth.handshake("PLAIN", 0) == 0 and auth.raw_tokens
    assert auth.token(b"\0bob\0b\"ob") == b"" and auth.principal == "bob"
    for token, message in ((b"\0bob\0nope", "Invalid username or password"), (b"\0eve\0x", "Invalid username or password"),
                           (b"garbage", "expected 3 tokens"), (b"admin\0bob\0b\"ob", "authorization id")):
        fresh = Authenticator(("PLAIN",), mechanism_factory(users, cr.CredentialStore(str(tmp_path))))
        fresh.handshake("PLAIN", 1)
        with pytest.raises(AuthenticationFailed, match=message):
            fresh.token(token)


def test_state_machine_allows_only_the_handshake_apis(tmp_path):
    auth = Authenticator(("PLAIN",), mechanism_factory({}, cr.CredentialStore(str(tmp_path))))
    with pytest.raises(IllegalState):
        auth.check_request(3)  # Metadata before authenticating
    auth.api_versions()
    with pytest.raises(IllegalState):
        auth.api_versions()  # only once
    assert auth.handshake("SCRAM-SHA-256", 1) == UNSUPPORTED_SASL_MECHANISM
    assert auth.state is State.HANDSHAKE
    assert auth.handshake("PLAIN", 1) == 0
    with pytest.raises(IllegalState):
        auth.check_request(SASL_HANDSHAKE)


def test_credential_store_rules_and_durability(tmp_path):
    store = store_with(tmp_path)
    salt, salted = b"s" * 16, b"p" * 64
    result = store.alter([("alice", 2), ("nobody", 1)], [("alice", 2, 4096, salt, salted), ("bob", 1, 100, salt, salted),
                                                          ("carol", 9, 4096, salt, salted), ("", 1, 4096, salt, salted),
                                                          ("dave", 1, 20000, salt, salted), ("erin", 1, 8192, salt, salted)])
    assert result == {"alice": (cr.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
                      "nobody": (cr.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
                      "bob": (cr.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
                      "carol": (cr.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
                      "": (cr.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
                      "dave": (cr.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
                      "erin": (0, None)}
    again = cr.CredentialStore(str(tmp_path))  # what a restart reads
    assert again.users() == {"alice": [("SCRAM-SHA-512", 4096)], "erin": [("SCRAM-SHA-256", 8192)]}
    assert again.alter([("erin", 1)], []) == {"erin": (0, None)}
    assert cr.CredentialStore(str(tmp_path)).lookup("erin", "SCRAM-SHA-256") is None


def test_listeners_in_kafkas_syntax():
    config = Config({"listeners": "PLAINTEXT://127.0.0.1:9092,EXTERNAL://0.0.0.0:9094",
                     "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:SASL_SSL",
                     "advertised.listeners": "EXTERNAL://broker.example:19094",
                     "listener.name.external.ssl.client.auth": "required",
                     "listener.name.external.plain.sasl.jaas.config": "x"})
    got = listeners.parse(config)
    assert [(l.name, l.protocol, l.host, l.port, l.advertised_host, l.advertised_port) for l in got] == [
        ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092, "", 0), ("EXTERNAL", "SASL_SSL", "0.0.0.0", 9094, "broker.example", 19094)]
    assert config.for_listener("EXTERNAL", "ssl.client.auth") == "required"
    assert config.for_listener("PLAINTEXT", "ssl.client.auth") == "none"
    assert config.for_listener("EXTERNAL", "sasl.jaas.config", "PLAIN") == "x"
    with pytest.raises(ConfigError):
        listeners.parse(Config({"listeners": "INTERNAL://:9092"}))  # not in the protocol map
    with pytest.raises(ConfigError):
        listeners.parse(Config({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}))
    with pytest.raises(ConfigError):
        Config({"listener.name.x.no.such.setting": "1"})
    default = listeners.parse(Config({"listener.host": "127.0.0.1", "listener.port": 0}))
    assert [(l.name, l.protocol, l.port) for l in default] == [("PLAINTEXT", "PLAINTEXT", 0)]


def test_principal_mapping_rules():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),), (("commonName", "svc-orders"),))}
    dn = subject_dn(cert)
    assert dn == "CN=svc-orders,O=Acme\\, Inc,C=US"
    assert PrincipalMapper("DEFAULT").name(dn) == dn
    rules = PrincipalMapper("RULE:^CN=([a-z-]+),O=.*$/$1/U,DEFAULT")
    assert rules.name(dn) == "SVC-ORDERS"
    assert rules.name("OU=x") == "OU=x"  # falls through to DEFAULT
    with pytest.raises(ValueError):
        PrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=nobody")
    with pytest.raises(ConfigError):
        PrincipalMapper("RULE:broken")


def unsecured_jwt(claims, header=None):
    import base64
    import json

    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc(header or {'alg': 'none'})}.{enc(claims)}."


def oauth_message(token, authzid=""):
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def test_oauthbearer_unsecured_jws():
    from cohort.security.sasl import OAuthBearerServer

    now = 1_700_000_000
    make = lambda **opts: OAuthBearerServer(opts, clock=lambda: now)  # noqa: E731
    ok = make()
    assert ok.step(oauth_message(unsecured_jwt({"sub": "alice", "exp": now + 60, "iat": now}))) == b""
    assert ok.principal == "alice"
    for claims, header in (({"sub": "alice", "exp": now - 1}, None),  # expired
                           ({"sub": "alice"}, None),  # exp is required
                           ({"sub": " ", "exp": now + 60}, None),  # blank principal
                           ({"sub": "alice", "exp": now + 60}, {"alg": "HS256"}),  # must be unsecured
                           ({"sub": "alice", "exp": now + 60, "iat": now + 30}, None)):  # issued in the future
        server = make()
        challenge = server.step(oauth_message(unsecured_jwt(claims, header)))
        assert json.loads(challenge) == {"status": "invalid_token"} and not server.complete
        with pytest.raises(AuthenticationFailed):
            server.step(b"\x01")  # Kafka: the failure comes after the client acknowledges the challenge
    scoped = make(unsecuredValidatorRequiredScope="read write")
    challenge = scoped.step(oauth_message(unsecured_jwt({"sub": "alice", "exp": now + 60, "scope": "read"})))
    assert json.loads(challenge) == {"status": "insufficient_scope", "scope": "read write"}
    other = make()
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        other.step(oauth_message(unsecured_jwt({"sub": "alice", "exp": now + 60}), authzid="bob"))


def test_scram_accepts_librdkafkas_repeated_client_nonce_as_kafka_does(tmp_path):
    """librdkafka < 2.6.1 sends r=<client nonce><client nonce + server nonce>; Kafka's
    ScramSaslServer checks endsWith, so such clients (Debian's kcat) authenticate."""
    import base64
    import hashlib
    import hmac

    store = store_with(tmp_path)
    for proof_ok in (True, False):
        auth = Authenticator(("SCRAM-SHA-512",), mechanism_factory({}, store))
        auth.handshake("SCRAM-SHA-512", 1)
        cnonce = "abcdefghijklmnop"
        first_bare = f"n=alice,r={cnonce}"
        server_first = auth.token(("n,," + first_bare).encode()).decode()
        attrs = dict(kv.split("=", 1) for kv in server_first.split(","))
        salted = cr.salted_password("SCRAM-SHA-512", "alice-secret" if proof_ok else "wrong",
                                    base64.b64decode(attrs["s"]), int(attrs["i"]))
        without_proof = f"c=biws,r={cnonce}{attrs['r']}"
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", hashlib.sha512).digest()
        signature = hmac.new(hashlib.sha512(client_key).digest(), auth_message, hashlib.sha512).digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
        if proof_ok:
            final = auth.token(f"{without_proof},p={proof}".encode())
            assert final.startswith(b"v=") and auth.complete and auth.principal == "alice"
        else:
            with pytest.raises(AuthenticationFailed):
                auth.token(f"{without_proof},p={proof}".encode())
