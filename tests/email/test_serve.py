"""trmkit email serve: the real uvicorn server in a thread, spoken to over HTTP with the stdlib.

A keyword predictor stands in for the model (the lead's end-to-end test uses a trained bundle);
these tests are about the HTTP contract: routes, input kinds, order, ids, limits and errors.
"""

from __future__ import annotations

import http.client
import inspect
import json
import select
import socket
import threading
import time
from contextlib import contextmanager

import pytest

from trmkit.email import serve as serve_module
from trmkit.email.serve import exposure_warning, make_app, serve

LIMIT = 16 * 1024  # max_request_bytes of the shared server: small, so 413s are cheap to provoke
MAX_BATCH = 4

QP_MESSAGE = (
    b"From: Lucky Draw <draw@example.com>\r\n"
    b"To: you@example.org\r\n"
    b"Subject: =?utf-8?q?Caf=C3=A9_news?=\r\n"
    b"Message-ID: <qp-1@example.com>\r\n"
    b"MIME-Version: 1.0\r\n"
    b"Content-Type: text/plain; charset=iso-8859-1\r\n"
    b"Content-Transfer-Encoding: quoted-printable\r\n"
    b"\r\n"
    b"Dear caf=E9 owner, you are a WIN=\r\n"
    b"NER of our draw.\r\n"
)  # "WINNER" only exists after quoted-printable decoding joins the soft line break

SERVER_START_LIMIT = 120  # seconds: safety nets on a loaded machine, not measurements
HTTP_LIMIT = 120


class KeywordPredictor:
    """spam if the subject or body says 'winner'; subject 'explode' raises, subject 'slow' waits."""

    class_names = ["ham", "spam"]

    def __init__(self) -> None:
        self.seen: list = []
        self.release = threading.Event()
        self.waiting = threading.Event()

    def predict(self, messages):
        self.seen.append(list(messages))
        out = []
        for m in messages:
            text = f"{m.subject} {m.body}".lower()
            if m.subject == "explode":
                raise RuntimeError("the model fell over")
            if m.subject == "slow":
                self.waiting.set()
                self.release.wait(10)
            spam = "winner" in text
            p = 0.9 if spam else 0.8
            label, other = ("spam", "ham") if spam else ("ham", "spam")
            out.append({"id": "ignored-by-server", "label": label, "probability": p,
                        "top3": [{"label": label, "probability": p}, {"label": other, "probability": 1 - p}]})
        return out


@contextmanager
def running(app):
    """uvicorn.Server on a free 127.0.0.1 port in a daemon thread; yields the port."""
    import uvicorn

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                          lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + SERVER_START_LIMIT
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped while starting (see the captured log)"
        assert time.monotonic() < deadline, f"uvicorn did not start within {SERVER_START_LIMIT} s"
        time.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(5)
        app.state.batcher.close()


@pytest.fixture(scope="module")
def server():
    """One shared server: (port, predictor, log lines)."""
    predictor, lines = KeywordPredictor(), []
    app = make_app(predictor, max_request_bytes=LIMIT, max_batch=MAX_BATCH, log=lines.append)
    with running(app) as port:
        yield port, predictor, lines


def call(port, method, path, body=None, content_type=None, headers=None):
    """One request -> (status, decoded JSON body, response headers)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_LIMIT)
    try:
        sent = dict(headers or {})
        if content_type:
            sent["Content-Type"] = content_type
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        data = response.read()
        assert response.getheader("Content-Type") == "application/json", data
        return response.status, json.loads(data), response
    finally:
        conn.close()


def test_health_names_the_classes(server):
    port, _, _ = server
    status, data, _ = call(port, "GET", "/health")
    assert (status, data) == (200, {"status": "ok", "classes": ["ham", "spam"]})


def test_one_raw_message_with_a_quoted_printable_body(server):
    port, predictor, _ = server
    for kind in ("message/rfc822", "application/octet-stream"):
        status, data, _ = call(port, "POST", "/classify", QP_MESSAGE, kind)
        assert status == 200, data
        [prediction] = data["predictions"]
        assert prediction["id"] == "<qp-1@example.com>"  # the Message-ID
        assert prediction["label"] == "spam" and prediction["probability"] == pytest.approx(0.9)
        assert [t["label"] for t in prediction["top3"]] == ["spam", "ham"]
        [message] = predictor.seen[-1]
        assert "café owner" in message.body and "WINNER" in message.body, message.body
        assert message.subject == "Café news" and "draw@example.com" in message.sender


def test_json_single_message_and_default_id(server):
    port, predictor, _ = server
    status, data, _ = call(port, "POST", "/classify",
                           {"subject": "You are a winner", "from": "x@example.com", "body": "claim now"},
                           "application/json; charset=utf-8")
    assert status == 200, data
    assert data["predictions"][0]["id"] == "message-0" and data["predictions"][0]["label"] == "spam"
    assert predictor.seen[-1][0].sender == "x@example.com"


def test_json_batch_keeps_order_and_ids(server):
    port, _, _ = server
    batch = {"messages": [
        {"subject": "lunch", "sender": "a@example.com", "body": "at noon?"},
        {"raw": QP_MESSAGE.decode("ascii")},
        {"subject": "WINNER", "sender": "b@example.com", "body": "", "id": "mine"},
        {"raw": "From: c@example.com\r\nSubject: minutes\r\n\r\nsee attached\r\n"},
    ]}
    status, data, _ = call(port, "POST", "/classify", batch, "application/json")
    assert status == 200, data
    got = [(p["id"], p["label"]) for p in data["predictions"]]
    assert got == [("message-0", "ham"), ("<qp-1@example.com>", "spam"), ("mine", "spam"), ("message-3", "ham")]


def test_a_batch_over_max_batch_is_refused(server):
    port, predictor, _ = server
    calls = len(predictor.seen)
    one = {"subject": "s", "sender": "a@example.com", "body": "b"}
    status, data, _ = call(port, "POST", "/classify", {"messages": [one] * (MAX_BATCH + 1)}, "application/json")
    assert status == 413 and f"max_batch={MAX_BATCH}" in data["error"] and "5 messages" in data["error"]
    assert len(predictor.seen) == calls  # refused before the model ran


def test_an_oversized_body_is_refused_by_content_length(server):
    port, _, _ = server
    body = json.dumps({"subject": "s", "sender": "a", "body": "x" * LIMIT}).encode()
    status, data, response = call(port, "POST", "/classify", body, "application/json")
    assert status == 413 and f"max_request_bytes={LIMIT}" in data["error"], data
    assert f"Content-Length {len(body)}" in data["error"]
    assert response.getheader("Connection") == "close"


def test_an_oversized_chunked_body_without_content_length_is_refused(server):
    port, _, _ = server
    chunks = (b"x" * 1024 for _ in range(3 * LIMIT // 2048))  # an iterable: http.client sends it chunked
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_LIMIT)
    conn.request("POST", "/classify", body=chunks, headers={"Content-Type": "message/rfc822"})
    response = conn.getresponse()
    data = json.loads(response.read())
    conn.close()
    assert response.status == 413 and f"max_request_bytes={LIMIT}" in data["error"], data
    assert "Content-Length" not in data["error"]  # caught by counting, not by the header


def test_an_endless_chunked_body_is_cut_off_early(server):
    """The server answers 413 while the client is still sending: it did not wait to read it all."""
    port, _, _ = server
    cap, sent, chunk = 200 * LIMIT, 0, b"400\r\n" + b"y" * 1024 + b"\r\n"
    sock = socket.create_connection(("127.0.0.1", port), timeout=HTTP_LIMIT)
    sock.sendall(b"POST /classify HTTP/1.1\r\nHost: x\r\nContent-Type: message/rfc822\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    try:
        while sent < cap and not select.select([sock], [], [], 0)[0]:
            sock.sendall(chunk)
            sent += 1024
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server closed after answering: also a cut-off
    if sent >= cap:
        sock.close()
        pytest.fail(f"the server read {sent} bytes (200x max_request_bytes) without answering")
    reply = sock.recv(65536)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]


def test_malformed_json_is_a_400_with_the_parsers_message(server):
    port, _, _ = server
    status, data, _ = call(port, "POST", "/classify", b'{"subject": "x",', "application/json")
    assert status == 400 and data["error"].startswith("malformed JSON: Expecting"), data


def test_missing_or_mistyped_fields_are_a_422_naming_field_and_index(server):
    port, _, _ = server
    ok = {"subject": "s", "sender": "a@example.com", "body": "b"}
    cases = [
        ({"messages": [ok, {"subject": "s", "sender": "a"}]}, ["message 1", "'body'"]),
        ({"messages": [ok, ok, {"subject": 3, "sender": "a", "body": "b"}]}, ["message 2", "'subject'", "number"]),
        ({"subject": "s", "body": "b"}, ["message 0", "'sender'", "'from'"]),
        ({"subjet": "s", "sender": "a", "body": "b"}, ["'subjet'", "did you mean 'subject'"]),
        ({"messages": [ok, "just text"]}, ["message 1", "a string"]),
        ({"raw": 5}, ["'raw'", "a number"]),
        ({"messages": "x"}, ["'messages'", "list"]),
        ([ok], ["a JSON object"]),
    ]
    for body, words in cases:
        status, data, _ = call(port, "POST", "/classify", body, "application/json")
        assert status == 422, (body, data)
        assert all(w in data["error"] for w in words), (words, data["error"])


def test_a_raw_message_that_cannot_be_parsed_is_a_422_with_the_reason(server):
    port, predictor, _ = server
    calls = len(predictor.seen)
    status, data, _ = call(port, "POST", "/classify", b"just some words, no headers at all\r\n", "message/rfc822")
    assert status == 422 and "not an e-mail" in data["error"] and "the request body" in data["error"], data
    ok = {"subject": "s", "sender": "a@example.com", "body": "b"}
    status, data, _ = call(port, "POST", "/classify", {"messages": [ok, {"raw": "hello"}]}, "application/json")
    assert status == 422 and "message 1: cannot parse" in data["error"] and "not an e-mail" in data["error"], data
    assert len(predictor.seen) == calls


def test_unsupported_content_type_is_a_415_listing_the_supported(server):
    port, _, _ = server
    status, data, _ = call(port, "POST", "/classify", b"hello", "text/plain")
    assert status == 415
    assert all(k in data["error"] for k in ("message/rfc822", "application/octet-stream", "application/json"))
    assert call(port, "POST", "/classify", b"hello")[0] == 415  # no Content-Type at all


def test_wrong_method_and_unknown_route_are_json(server):
    port, _, _ = server
    status, data, response = call(port, "GET", "/classify")
    assert status == 405 and "POST" in data["error"] and response.getheader("Allow") == "POST"
    assert call(port, "POST", "/health", b"{}", "application/json")[0] == 405
    status, data, _ = call(port, "GET", "/nope")
    assert status == 404 and "/classify" in data["error"]


def test_bad_input_never_gives_a_500(server):
    port, predictor, _ = server
    calls = len(predictor.seen)
    junk = [(b"", "message/rfc822"), (b"\x00\xff" * 100, "message/rfc822"), (b"", "application/json"),
            (b"\xff\xfe\x00", "application/json"), (b"[" * 5000 + b"]" * 5000, "application/json"),
            (b"1" * 5000, "application/json"), (b'"text"', "application/json"), (b"null", "application/json"),
            (b'{"raw": "\\ud800"}', "application/json"), (b'{"messages": [1]}', "application/json"),
            (b'{"messages": [], "subject": "x"}', "application/json"),
            (b'{"sender": "a", "from": "b", "subject": "", "body": ""}', "application/json")]
    for body, kind in junk:
        status, data, _ = call(port, "POST", "/classify", body, kind)
        assert 400 <= status < 500 and data["error"], (body[:40], status, data)
    assert len(predictor.seen) == calls


def test_a_failing_predictor_gives_a_500_and_the_server_keeps_serving(server):
    port, _, lines = server
    status, data, _ = call(port, "POST", "/classify", {"subject": "explode", "sender": "a", "body": ""},
                           "application/json")
    assert status == 500 and "the model fell over" in data["error"]
    assert any("RuntimeError: the model fell over" in line and "Traceback" in line for line in lines)
    status, data, _ = call(port, "POST", "/classify", {"subject": "hi", "sender": "a", "body": ""},
                           "application/json")
    assert status == 200 and data["predictions"][0]["label"] == "ham"


def test_health_answers_while_a_slow_batch_runs(server):
    port, predictor, _ = server
    predictor.release.clear()
    predictor.waiting.clear()
    result = {}
    slow = threading.Thread(target=lambda: result.update(r=call(port, "POST", "/classify",
                                                                 {"subject": "slow", "sender": "a", "body": ""},
                                                                 "application/json")))
    slow.start()
    assert predictor.waiting.wait(5), "the slow batch never reached the predictor"
    start = time.monotonic()
    status, _, _ = call(port, "GET", "/health")
    waited = time.monotonic() - start
    still_running = slow.is_alive()
    predictor.release.set()
    slow.join(10)
    assert status == 200 and still_running and waited < 2, waited
    assert result["r"][0] == 200


def test_concurrent_requests_share_model_calls_and_each_gets_its_own_answer():
    """24 single-message requests at once: fewer model calls than requests (micro-batching), and
    every answer the right one for its request."""

    class Slow(KeywordPredictor):
        def predict(self, messages):
            time.sleep(0.05)  # a model call: the requests behind it gather meanwhile
            return super().predict(messages)

    predictor = Slow()
    app = make_app(predictor, max_batch=64, log=lambda m: None, batch_wait_ms=20)
    results = {}
    subjects = [f"winner {i}" if i % 3 == 0 else f"hello {i}" for i in range(24)]

    def ask(i):
        results[i] = call(port, "POST", "/classify", {"subject": subjects[i], "sender": "a", "body": "",
                                                     "id": f"m{i}"}, "application/json")

    with running(app) as port:
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(HTTP_LIMIT)
    for i, (status, data, _) in results.items():
        assert status == 200 and data["predictions"][0]["id"] == f"m{i}"
        assert data["predictions"][0]["label"] == ("spam" if i % 3 == 0 else "ham")
    assert len(results) == 24
    assert app.state.batcher.calls < 24 and max(len(b) for b in predictor.seen) > 1, app.state.batcher.calls


def test_a_failing_message_in_a_shared_call_fails_only_its_own_request():
    from trmkit.email.batcher import Batcher
    from trmkit.email.mail import Message

    gate, started = threading.Event(), threading.Event()
    predictor = KeywordPredictor()

    def predict(messages):
        started.set()
        gate.wait(10)  # hold the first call so that the next three gather into one
        return predictor.predict(messages)

    batcher = Batcher(predict, max_batch=16, wait_s=0.05)
    try:
        first = batcher.submit([Message(subject="hello", sender="a", body="")])
        assert started.wait(10)  # the first call runs alone
        futures = [batcher.submit([Message(subject=s, sender="a", body="")]) for s in ("winner", "explode", "hi")]
        gate.set()
        assert first.result(10)[0]["label"] == "ham"
        assert futures[0].result(10)[0]["label"] == "spam" and futures[2].result(10)[0]["label"] == "ham"
        with pytest.raises(RuntimeError, match="fell over"):
            futures[1].result(10)
        assert [len(b) for b in predictor.seen[:2]] == [1, 3]  # the shared call that failed, then alone
    finally:
        batcher.close()
    assert not batcher.thread.is_alive()


def test_serve_binds_loopback_by_default_and_warns_otherwise(monkeypatch):
    import uvicorn

    assert inspect.signature(serve).parameters["host"].default == "127.0.0.1"
    runs = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: runs.append(kw))
    lines: list[str] = []
    serve(KeywordPredictor(), port=8123, log=lines.append, max_batch=8)
    assert runs[-1]["host"] == "127.0.0.1" and runs[-1]["port"] == 8123
    text = "\n".join(lines)
    assert "WARNING" not in text and "http://127.0.0.1:8123/classify" in text and "max_batch=8" in text
    lines.clear()
    serve(KeywordPredictor(), host="0.0.0.0", log=lines.append)
    assert runs[-1]["host"] == "0.0.0.0" and "WARNING" in lines[0] and "every network interface" in lines[0]
    with pytest.raises(TypeError, match="did you mean 'max_batch'"):
        serve(KeywordPredictor(), log=lines.append, max_batches=3)


def test_exposure_warning_knows_loopback_from_the_rest():
    for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"):
        assert exposure_warning(host) is None, host
    for host in ("0.0.0.0", "::", "192.168.1.5", "mail.example.org"):
        assert "WARNING" in exposure_warning(host), host


def test_make_app_rejects_a_non_predictor_and_bad_limits():
    with pytest.raises(TypeError, match="predict"):
        make_app(object())
    with pytest.raises(ValueError, match="max_batch"):
        make_app(KeywordPredictor(), max_batch=0)
    assert serve_module.SUPPORTED_TYPES == ("message/rfc822", "application/octet-stream", "application/json")
