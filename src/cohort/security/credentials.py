"""SCRAM credentials: derived keys only, never a password, kept durably in the data directory.

Kafka's model (``UserScramCredentialRecord``): per user and mechanism the salt, StoredKey,
ServerKey and iteration count. AlterUserScramCredentials sends the *salted password* (the
client salts and iterates); the broker derives the two keys from it and stores those. The store
is one JSON file replaced atomically (temp file, fsync, rename, fsync of the directory) and
readable by the owner only, so a crash at any moment leaves the old or the new set.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from dataclasses import dataclass

from cohort.security import files

MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_IDS = {name: code for code, name in MECHANISMS.items()}
HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
STORE_FILE = "scram-credentials.json"

# Kafka error codes of AlterUserScramCredentials / DescribeUserScramCredentials.
UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def derive(mechanism: str, salted_password: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key")."""
    h = HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", h).digest()
    return ScramCredential(salt, h(client_key).digest(), hmac.new(salted_password, b"Server Key", h).digest(), iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i): what a client computes before AlterUserScramCredentials."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism]().name, password.encode(), salt, iterations)


class CredentialStore:
    """Users' SCRAM credentials by (user, mechanism)."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, STORE_FILE)
        self.directory = directory
        self._creds: dict[tuple[str, str], ScramCredential] = {}
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            raw = {"credentials": []}
        except (ValueError, UnicodeDecodeError) as exc:
            raise OSError(f"{self.path} is not valid JSON ({exc}); refusing to start") from None
        files.warn_if_loose(self.path)
        for c in raw.get("credentials", []):
            self._creds[(c["user"], c["mechanism"])] = ScramCredential(
                base64.b64decode(c["salt"]), base64.b64decode(c["stored_key"]), base64.b64decode(c["server_key"]),
                int(c["iterations"]))

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._creds.get((user, mechanism))

    def users(self) -> dict[str, list[tuple[str, int]]]:
        """user -> [(mechanism, iterations)]"""
        out: dict[str, list[tuple[str, int]]] = {}
        for (user, mech), cred in sorted(self._creds.items()):
            out.setdefault(user, []).append((mech, cred.iterations))
        return out

    def alter(self, deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int, bytes, bytes]]) -> dict[str, tuple[int, str | None]]:
        """Apply AlterUserScramCredentials: per user (error code, message); users with an
        error change nothing, the others are written together."""
        results: dict[str, tuple[int, str | None]] = {}
        seen: dict[str, int] = {}
        for name, *_ in deletions + upsertions:
            seen[name] = seen.get(name, 0) + 1
        updated = dict(self._creds)

        def refused(name: str, mech_id: int) -> tuple[int, str] | None:
            if seen[name] > 1:
                return DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"
            if not name:
                return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
            if mech_id not in MECHANISMS:
                return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
            return None

        for name, mech_id in deletions:
            if name in results:
                continue
            error = refused(name, mech_id)
            if error is None and (name, MECHANISMS[mech_id]) not in updated:
                error = RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
            if error is None:
                del updated[(name, MECHANISMS[mech_id])]
            results[name] = error or (0, None)
        for name, mech_id, iterations, salt, salted in upsertions:
            if name in results:
                continue
            error = refused(name, mech_id)
            if error is None and iterations < MIN_ITERATIONS:
                error = UNACCEPTABLE_CREDENTIAL, "Too few iterations"
            elif error is None and iterations > MAX_ITERATIONS:
                error = UNACCEPTABLE_CREDENTIAL, "Too many iterations"
            elif error is None and (not salt or not salted):
                error = UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
            if error is None:
                mech = MECHANISMS[mech_id]
                updated[(name, mech)] = derive(mech, salted, salt, iterations)
            results[name] = error or (0, None)
        if updated != self._creds:
            self._write(updated)
            self._creds = updated
        return results

    def _write(self, creds: dict[tuple[str, str], ScramCredential]) -> None:
        data = json.dumps({"version": 1, "credentials": [
            {"user": u, "mechanism": m, "salt": base64.b64encode(c.salt).decode(),
             "stored_key": base64.b64encode(c.stored_key).decode(),
             "server_key": base64.b64encode(c.server_key).decode(), "iterations": c.iterations}
            for (u, m), c in sorted(creds.items())]}).encode()
        files.replace_atomically(self.path, data)
