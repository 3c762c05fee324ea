"""`cohort transactions` against `cohort serve`: a producer leaves a transaction open; list,
describe and describe-producers show it, abort by its start offset writes the ABORT marker (the
partition is stable again and read_committed moves past it), and errors are one line."""

from __future__ import annotations

import argparse
import json

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cohort_testing import ServerProcess
from cohort.tooling import transactions_cli


def run(capsys, *argv):
    parser = argparse.ArgumentParser()
    transactions_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["transactions", *argv])
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.timeout(90)
def test_see_and_abort_a_hanging_transaction(tmp_path, capsys):
    srv = ServerProcess(tmp_path / "data", log_path=str(tmp_path / "server.log"))
    (tmp_path / "data").mkdir()
    srv.start()
    producer = None
    try:
        b = ["--bootstrap-server", srv.bootstrap]
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        admin.create_topics([NewTopic("h", 1)])["h"].result(20)
        producer = ck.Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "hanging"})
        producer.init_transactions(20)
        producer.begin_transaction()
        producer.produce("h", value=b"x", partition=0)
        assert producer.flush(20) == 0

        code, out, _ = run(capsys, "list", *b, "--output", "json")
        assert code == 0
        assert [(r["transactionalid"], r["transactionstate"]) for r in json.loads(out)] == [("hanging", "Ongoing")]
        code, out, _ = run(capsys, "describe", "--transactional-id", "hanging", *b, "--output", "json")
        assert code == 0 and json.loads(out)[0]["topicpartitions"] == "h-0"
        code, out, _ = run(capsys, "describe-producers", "--topic", "h", "--partition", "0", *b, "--output", "json")
        assert code == 0 and json.loads(out)[0]["currenttransactionstartoffset"] == 0

        code, out, _ = run(capsys, "abort", "--topic", "h", "--partition", "0", "--start-offset", "0", *b)
        assert code == 0 and out.startswith("Aborted the transaction of producer")
        code, out, _ = run(capsys, "describe-producers", "--topic", "h", "--partition", "0", *b, "--output", "json")
        assert json.loads(out)[0]["currenttransactionstartoffset"] == "None"
        reader = ck.Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "r", "isolation.level": "read_committed"})
        try:  # the marker made the partition stable: read_committed's latest is its end (record + marker)
            assert reader.get_watermark_offsets(ck.TopicPartition("h", 0), timeout=10) == (0, 2)
        finally:
            reader.close()

        code, out, err = run(capsys, "abort", "--topic", "h", "--partition", "0", "--start-offset", "0", *b)
        assert (code, out) == (1, "") and err == "cohort transactions abort: error: no open transaction starts at offset 0 of h-0\n"
        code, _, err = run(capsys, "describe", "--transactional-id", "nope", *b)
        assert code == 1 and err.startswith("cohort transactions describe: error: TRANSACTIONAL_ID_NOT_FOUND")
        code, _, err = run(capsys, "abort", "--topic", "h", "--partition", "0", "--producer-id", "1", *b)
        assert code == 2 and "--producer-id and --producer-epoch go together" in err
    finally:
        if producer is not None:
            producer.purge()
        assert srv.stop() in (0, None)
