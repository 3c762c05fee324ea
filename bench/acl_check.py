"""Cost of one ACL decision on the request path (`RequestContext.authorize` -> `Authorizer.authorize`):
cached (what a steady heartbeat pays, twice) and uncached (the first time a principal asks), with
`--acls` ACLs in force (a mix of literal, prefixed and wildcard ones over topics and groups).

    .venv/bin/python bench/acl_check.py [--acls 1000] [--calls 1000000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from cohort.security import acls as A  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--acls", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        auth = A.Authorizer(tmp)
        bindings = []
        for i in range(args.acls):
            kind = (A.TOPIC, A.GROUP)[i % 2]
            pattern = (A.LITERAL, A.PREFIXED)[i % 3 == 0]
            bindings.append(A.AclBinding(kind, f"app{i}-", pattern, f"User:u{i % 50}", "*", (A.READ, A.DESCRIBE)[i % 2], A.ALLOW))
        bindings.append(A.AclBinding(A.TOPIC, "*", A.LITERAL, "User:*", "*", A.DESCRIBE, A.ALLOW))
        auth.create(bindings)
        principals = [f"User:u{i}" for i in range(50)]
        start = time.perf_counter()
        n = 0
        for i in range(2000):
            auth._cache.clear()
            auth.authorize(principals[i % 50], "10.0.0.1", A.READ, A.GROUP, f"app{i}-group")
            n += 1
        uncached = (time.perf_counter() - start) / n * 1e6
        auth.authorize("User:u7", "10.0.0.1", A.READ, A.GROUP, "app7-group")
        check = auth.authorize
        start = time.perf_counter()
        for _ in range(args.calls):
            check("User:u7", "10.0.0.1", A.READ, A.GROUP, "app7-group")
        cached = (time.perf_counter() - start) / args.calls * 1e6
    print(f"{len(bindings)} ACLs: cached decision {cached:.3f} us, uncached {uncached:.1f} us")


if __name__ == "__main__":
    main()
