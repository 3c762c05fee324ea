"""`cohort acls` and `cohort users` against a running broker, as an operator would run them."""

import subprocess
import sys

import pytest

from cohort_testing import ServerProcess

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli")
    srv = ServerProcess(base / "data", "authorizer.class.name=cohort", "super.users=User:ANONYMOUS",
                        log_path=str(base / "server.log")).start()
    yield srv
    assert srv.stop() == 0


def cohort(*args, stdin=None):
    r = subprocess.run([sys.executable, "-m", "cohort", *args], capture_output=True, text=True, input=stdin, timeout=60)
    return r.returncode, r.stdout, r.stderr


def test_acls_add_list_remove(broker):
    b = ("--bootstrap-server", broker.bootstrap)
    code, out, err = cohort("acls", "add", *b, "--allow-principal", "User:alice", "--operation", "Read",
                            "--operation", "Describe", "--topic", "orders")
    assert code == 0, err
    code, out, err = cohort("acls", "add", *b, "--allow-principal", "User:alice", "--operation", "Read", "--group", "orders-",
                            "--resource-pattern-type", "prefixed")
    assert code == 0, err
    code, out, _ = cohort("acls", "list", *b, "--topic", "orders")
    assert "resourceType=TOPIC, name=orders, patternType=LITERAL" in out
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in out
    assert "operation=DESCRIBE" in out and "GROUP" not in out
    code, out, _ = cohort("acls", "list", *b)
    assert "name=orders-, patternType=PREFIXED" in out
    code, out, err = cohort("acls", "remove", *b, "--allow-principal", "User:alice", "--operation", "Describe", "--topic", "orders")
    assert code == 0 and "operation=DESCRIBE" in out, err
    code, out, _ = cohort("acls", "list", *b, "--topic", "orders")
    assert "operation=READ" in out and "operation=DESCRIBE" not in out
    code, _, err = cohort("acls", "add", *b, "--allow-principal", "alice", "--operation", "Read", "--topic", "x")
    assert code == 2 and err.count("\n") == 1 and "User:name" in err
    code, _, err = cohort("acls", "add", *b, "--allow-principal", "User:a", "--operation", "Fly", "--topic", "x")
    assert code == 2 and "unknown operation" in err


def test_users_add_list_remove(broker, tmp_path):
    b = ("--bootstrap-server", broker.bootstrap)
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    code, out, err = cohort("users", "add", *b, "--user", "alice", "--password-file", str(secret))
    assert code == 0, err
    code, out, err = cohort("users", "add", *b, "--user", "bob", "--mechanism", "SCRAM-SHA-256", "--iterations", "4096",
                            "--password-file", "-", stdin="pw\n")
    assert code == 0, err
    code, out, _ = cohort("users", "list", *b)
    assert "alice: SCRAM-SHA-512 (iterations 8192)" in out and "bob: SCRAM-SHA-256 (iterations 4096)" in out
    assert "s3cret" not in out
    code, out, err = cohort("users", "add", *b, "--user", "carol", "--iterations", "100", "--password-file", str(secret))
    assert code == 1 and "Too few iterations" in err
    code, _, err = cohort("users", "remove", *b, "--user", "alice")
    assert code == 0, err
    code, out, _ = cohort("users", "list", *b)
    assert "alice" not in out and "bob" in out
