"""`trmkit email serve`: a local HTTP JSON API that classifies e-mail with a trained model.

Why a server: a mail filter (a sieve/procmail helper, a mail-client plug-in, a script) can POST
each new message and get a label back in milliseconds instead of paying torch's start-up per
message.

Routes
    GET  /health    -> {"status": "ok", "classes": [...]}
    POST /classify  one raw RFC 822 message (Content-Type message/rfc822 or application/octet-stream)
                    or JSON (application/json), one of
                        {"subject": ..., "sender" (or "from"): ..., "body": ..., "id"?: ...}
                        {"raw": "<RFC 822 text>", "id"?: ...}
                        {"messages": [objects of either kind above]}     (at most max_batch)
                    -> {"predictions": [{"id", "label", "probability", "top3"}, ...]} in input order;
                       id: the request's "id", else the Message-ID, else "message-<index>".

Choices and why
    - It binds 127.0.0.1 by default and warns loudly for any other address: mail is private and
      there is no authentication or TLS here.
    - The body size is checked twice: Content-Length before reading anything, and a running count
      while the body streams in, so a chunked upload or a lying header cannot make the server
      buffer unbounded data. A refused body is drained for at most another max_request_bytes (so
      a client that sends everything before reading sees the 413, not a reset), then the
      connection is closed: at most 2 * max_request_bytes are read and max_request_bytes kept.
    - Raw mail is decoded by trmkit.email.mail.mime.parse_message, the code that read the
      training mail, so a served message is seen exactly as a training message was.
    - Parsing runs in worker threads (run_in_threadpool); prediction is micro-batched
      (email/batcher.py): requests arriving within a few milliseconds share one model call, made
      by one thread, one batch at a time: /health keeps answering during a slow batch, batches
      running in parallel on a laptop would only fight for the same cores, and a predictor is not
      promised to be thread-safe.
    - Every error is JSON {"error": "..."} whose status says whose fault it is: 4xx for the
      request (bad input never gives a 500), 500 only when the predictor itself fails; that
      failure is logged with its traceback and the server keeps serving.
"""

from __future__ import annotations

import contextlib
import difflib
import ipaddress
import json
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Mapping, Protocol

from trmkit.email.mail import Message

if TYPE_CHECKING:  # starlette is an optional extra: imported for real only inside make_app
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

RAW_TYPES = ("message/rfc822", "application/octet-stream")
JSON_TYPE = "application/json"
SUPPORTED_TYPES = RAW_TYPES + (JSON_TYPE,)
FIELD_KEYS = ("subject", "sender", "from", "body", "id")
RAW_KEYS = ("raw", "id")
MESSAGE_SHAPE = ('{"subject": str, "sender" (or "from"): str, "body": str, "id"?: str} '
                 'or {"raw": "<RFC 822 text>", "id"?: str}')
ROUTES = (
    ("GET", "/health", "status and class names"),
    ("POST", "/classify", "a raw RFC 822 message (message/rfc822), or JSON: one message or "
                          '{"messages": [...]}'),
)
INSTALL_HINT = "pip install 'trmkit[serve]'"


class Predictor(Protocol):
    """What the server needs from a trained model; the e-mail bundle satisfies it."""

    class_names: list[str]

    def predict(self, messages: list[Message]) -> list[dict]:
        """One dict per message, same order:
        {"id": str, "label": str, "probability": float, "top3": [{"label": str, "probability": float}, ...]}."""
        ...


class RequestError(Exception):
    """A problem with the request; answered as {"error": message} with this HTTP status."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


@dataclass(frozen=True)
class Limits:
    """What one request may cost the server."""

    max_request_bytes: int = 10 * 2**20  # largest request body read, in bytes; above: 413
    max_batch: int = 256  # most messages in one {"messages": [...]} request; above: 413

    def __post_init__(self) -> None:
        for name in ("max_request_bytes", "max_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass
class Item:
    """One message of a request and the id its prediction will carry."""

    id: str
    message: Message = field(repr=False)


RawParser = Callable[[bytes, str], Message]


# --- reading the request ------------------------------------------------------------------------

def media_type(content_type: str) -> str:
    """'Application/JSON; charset=utf-8' -> 'application/json'."""
    return content_type.split(";", 1)[0].strip().lower()


def too_large(what: str, limit: int) -> RequestError:
    return RequestError(
        413, f"request body too large: {what} is over max_request_bytes={limit}; send fewer or "
             f"smaller messages, or restart the server with a larger limit (--max-request-mb)",
        headers={"Connection": "close"})  # do not go on reading the rest of a huge upload


async def discard(chunks: AsyncIterator[bytes], budget: int) -> None:
    """Read and drop at most `budget` more bytes of a refused body.

    Why: a client that sends its whole body before reading the answer (urllib, http.client) gets
    a connection reset instead of the 413 if the server closes with the body half read; draining a
    bounded amount lets a moderately oversized upload see the 413, and an endless one is still cut off.
    """
    async for chunk in chunks:
        budget -= len(chunk)
        if budget < 0:
            return


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) as soon as it is known to pass `limit` bytes.

    At most 2 * limit bytes are ever read (the body plus a bounded drain, see discard) and at most
    `limit` are kept, whatever Content-Length says or whether it is there at all.
    """
    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length")
    chunks, size, stream = [], 0, request.stream()
    try:
        if declared is not None:
            if not declared.strip().isdigit():
                raise RequestError(400, f"invalid Content-Length header {declared!r}")
            if int(declared) > limit:
                if int(declared) <= 2 * limit:
                    await discard(stream, limit)
                raise too_large(f"Content-Length {int(declared)}", limit)
        async for chunk in stream:
            size += len(chunk)
            if size > limit:  # a chunked body, or a Content-Length that lied
                await discard(stream, limit)
                raise too_large(f"the body (more than {limit} bytes received so far)", limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise RequestError(400, "the client disconnected before sending the whole body") from None
    return b"".join(chunks)


def load_json(body: bytes) -> Any:
    """json.loads with every failure a 400 that carries the parser's message."""
    if not body.strip():
        raise RequestError(400, "malformed JSON: the body is empty; expected a JSON object")
    try:
        return json.loads(body)
    except RecursionError:
        raise RequestError(400, "malformed JSON: nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an integer with too many digits
        raise RequestError(400, f"malformed JSON: {e}") from None


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def check_keys(obj: dict, allowed: tuple[str, ...], where: str) -> None:
    """Unknown keys are an error naming the closest valid one: a typo must not pass silently."""
    for key in obj:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            kind = "a raw message" if "raw" in allowed else "a message"
            raise RequestError(422, f"{where}: unknown field {key!r}{hint}; {kind} is {MESSAGE_SHAPE}")


def string_field(obj: dict, key: str, where: str, also: str = "") -> str:
    """obj[key], which must be present and a string (422 naming the field and message otherwise)."""
    if key not in obj:
        raise RequestError(422, f"{where}: missing field {key!r}{also}; a message is {MESSAGE_SHAPE}")
    value = obj[key]
    if not isinstance(value, str):
        raise RequestError(422, f"{where}: field {key!r} must be a string, got {json_type(value)}")
    return value


def message_from_fields(obj: dict, index: int, where: str) -> Message:
    check_keys(obj, FIELD_KEYS, where)
    if "sender" in obj and "from" in obj:
        raise RequestError(422, f"{where}: give 'sender' or 'from', not both")
    sender_key = "from" if "from" in obj else "sender"
    return Message(subject=string_field(obj, "subject", where),
                   sender=string_field(obj, sender_key, where, also=" (or 'from')"),
                   body=string_field(obj, "body", where), where=f"request#{index}")


def message_from_raw(obj: dict, where: str, parse_raw: RawParser) -> Message:
    check_keys(obj, RAW_KEYS, where)
    raw = string_field(obj, "raw", where)
    try:
        data = raw.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate such as "\ud800" in the JSON string
        raise RequestError(422, f"{where}: field 'raw' is not valid Unicode text: {e}") from None
    return parse_raw(data, where)


def item_from_object(obj: Any, index: int, parse_raw: RawParser) -> Item:
    """One message object of a JSON request -> Item (id: "id", else Message-ID, else message-<index>)."""
    where = f"message {index}"
    if not isinstance(obj, dict):
        raise RequestError(422, f"{where}: expected an object {MESSAGE_SHAPE}, got {json_type(obj)}")
    given_id = string_field(obj, "id", where) if "id" in obj else ""
    if "raw" in obj:
        message = message_from_raw(obj, where, parse_raw)
    else:
        message = message_from_fields(obj, index, where)
    return Item(given_id or message.message_id.strip() or f"message-{index}", message)


def items_from_json(data: Any, max_batch: int, parse_raw: RawParser) -> list[Item]:
    """A decoded JSON request: one message object, or {"messages": [...]} of at most max_batch."""
    if not isinstance(data, dict):
        raise RequestError(422, f"expected a JSON object (one message, or {{\"messages\": [...]}}), "
                                f"got {json_type(data)}")
    if "messages" not in data:
        return [item_from_object(data, 0, parse_raw)]
    extra = sorted(set(data) - {"messages"})
    if extra:
        raise RequestError(422, f"unexpected field(s) {', '.join(map(repr, extra))} beside 'messages': "
                                f"put every message inside the list")
    batch = data["messages"]
    if not isinstance(batch, list):
        raise RequestError(422, f"field 'messages' must be a list of message objects, got {json_type(batch)}")
    if len(batch) > max_batch:
        raise RequestError(413, f"a batch of {len(batch)} messages is over the limit max_batch={max_batch}: "
                                f"split it into requests of at most {max_batch} "
                                f"(or restart the server with --max-batch)")
    return [item_from_object(obj, i, parse_raw) for i, obj in enumerate(batch)]


def items_from_raw(body: bytes, parse_raw: RawParser) -> list[Item]:
    """A message/rfc822 body: exactly one message (id: Message-ID, else message-0)."""
    if not body.strip():
        raise RequestError(422, "the body is empty: POST one RFC 822 message (headers, blank line, body)")
    message = parse_raw(body, "the request body")
    return [Item(message.message_id.strip() or "message-0", message)]


def raw_parser(log: Callable[[str], None]) -> RawParser:
    """mime.parse_message with every failure a 422: bad input never becomes a 500."""
    from trmkit.email.mail.mime import ParseError, parse_message

    def parse(raw: bytes, where: str) -> Message:
        try:
            return parse_message(raw, where=where)
        except ParseError as e:
            why = f"{e.reason}: {e.detail}" if hasattr(e, "reason") else str(e)
            raise RequestError(422, f"{where}: cannot parse the RFC 822 message: {why}") from None
        except Exception as e:  # a parser bug: still the input's 422, but logged so it gets fixed
            log(f"serve: parse_message raised {type(e).__name__} on {where} (a bug in mail/mime.py):\n"
                f"{traceback.format_exc()}")
            raise RequestError(422, f"{where}: cannot parse the RFC 822 message: "
                                    f"{type(e).__name__}: {e}") from None
    return parse


# --- answering ----------------------------------------------------------------------------------

def plain(value: Any) -> Any:
    """json.dumps fallback: numpy/torch scalars and arrays become Python numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def json_response(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    from starlette.responses import Response

    text = json.dumps(data, ensure_ascii=False, allow_nan=False, default=plain)
    return Response(text.encode("utf-8"), status_code=status, media_type=JSON_TYPE,
                    headers=dict(headers or {}))


def error_response(error: RequestError) -> Response:
    return json_response({"error": error.message}, error.status, error.headers)


def with_ids(predictions: Any, items: list[Item]) -> list[dict]:
    """The predictor's dicts, checked, with the request's ids put first."""
    if not isinstance(predictions, list) or len(predictions) != len(items):
        got = f"{len(predictions)} predictions" if isinstance(predictions, list) else type(predictions).__name__
        raise RuntimeError(f"predictor returned {got} for {len(items)} messages")
    out = []
    for i, (item, prediction) in enumerate(zip(items, predictions)):
        if not isinstance(prediction, Mapping):
            raise RuntimeError(f"predictor returned {type(prediction).__name__} for message {i}, not a dict")
        out.append({"id": item.id, **{k: v for k, v in prediction.items() if k != "id"}})
    return out


def check_predictor(predictor: Any) -> None:
    """Fail at start-up, not on the first request, when the object cannot serve."""
    names = getattr(predictor, "class_names", None)
    if not callable(getattr(predictor, "predict", None)):
        raise TypeError(f"{type(predictor).__name__} has no predict(messages) method: it is not a Predictor")
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise TypeError(f"{type(predictor).__name__}.class_names must be a non-empty list of strings, "
                        f"got {names!r}")


def import_starlette() -> None:
    try:
        import starlette  # noqa: F401
    except ImportError as e:
        raise ImportError(f"trmkit email serve needs starlette and uvicorn: {INSTALL_HINT} ({e})") from e


class ClassifyAPI:
    """The request handlers, with what they share: the predictor, the limits, one lock, the log."""

    def __init__(self, predictor: Predictor, limits: Limits, log: Callable[[str], None], wait_s: float = 0.005):
        from trmkit.email.batcher import Batcher

        self.predictor, self.limits, self.log = predictor, limits, log
        self.parse_raw = raw_parser(log)
        self.batcher = Batcher(predictor.predict, limits.max_batch, wait_s)

    def parse_items(self, kind: str, body: bytes) -> list[Item]:
        if kind == JSON_TYPE:
            return items_from_json(load_json(body), self.limits.max_batch, self.parse_raw)
        return items_from_raw(body, self.parse_raw)

    async def predict(self, items: list[Item]) -> list[dict]:
        """Shares a model call with the requests arriving at the same moment (email/batcher.py)."""
        import asyncio

        predictions = await asyncio.wrap_future(self.batcher.submit([item.message for item in items]))
        return with_ids(predictions, items)

    async def health(self, request: Request) -> Response:
        return json_response({"status": "ok", "classes": list(self.predictor.class_names)})

    async def classify(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        kind = media_type(request.headers.get("content-type", ""))
        try:
            if kind not in SUPPORTED_TYPES:
                raise RequestError(415, f"unsupported Content-Type {kind or '(none)'!r}: "
                                        f"use one of {', '.join(SUPPORTED_TYPES)}")
            body = await read_body(request, self.limits.max_request_bytes)
            items = await run_in_threadpool(self.parse_items, kind, body)
        except RequestError as e:
            return error_response(e)
        try:
            predictions = await self.predict(items) if items else []
            return json_response({"predictions": predictions})
        except Exception as e:  # the predictor's fault, not the request's: 500, logged, keep serving
            self.log(f"serve: the predictor failed on a batch of {len(items)} message(s):\n"
                     f"{traceback.format_exc()}")
            return json_response({"error": f"the predictor failed on {len(items)} message(s): "
                                           f"{type(e).__name__}: {e} (logged on the server)"}, 500)

    async def http_error(self, request: Request, exc: Any) -> Response:
        """Starlette's own 404 and 405, as JSON that says what to do instead."""
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            message = f"method {request.method} is not allowed on {request.url.path}: use {allowed}"
        elif exc.status_code == 404:
            routes = ", ".join(f"{method} {path}" for method, path, _ in ROUTES)
            message = f"no route {request.url.path}: the routes are {routes}"
        else:
            message = str(exc.detail)
        return json_response({"error": message}, exc.status_code, exc.headers)

    async def unexpected(self, request: Request, exc: Exception) -> Response:
        """A bug in this file: still a JSON 500, and logged."""
        self.log(f"serve: unexpected {type(exc).__name__} on {request.method} {request.url.path}:\n"
                 f"{''.join(traceback.format_exception(exc))}")
        return json_response({"error": f"internal error: {type(exc).__name__}: {exc} (logged on the server)"},
                             500)


def make_app(predictor: Predictor, max_request_bytes: int = 10 * 2**20, max_batch: int = 256,
             log: Callable[[str], None] = print, batch_wait_ms: float = 5.0) -> Starlette:
    """The Starlette app: GET /health and POST /classify (see the module docstring)."""
    import_starlette()
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.routing import Route

    check_predictor(predictor)
    api = ClassifyAPI(predictor, Limits(max_request_bytes=max_request_bytes, max_batch=max_batch), log,
                      batch_wait_ms / 1000)
    routes = [Route("/health", api.health, methods=["GET"]), Route("/classify", api.classify, methods=["POST"])]
    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        api.batcher.close()  # the batching thread ends with the server

    app = Starlette(routes=routes, exception_handlers={HTTPException: api.http_error, Exception: api.unexpected},
                    lifespan=lifespan)
    app.state.batcher = api.batcher  # its call count: tests, and the shutdown
    return app


# --- running ------------------------------------------------------------------------------------

def is_loopback(host: str) -> bool:
    """True for localhost and 127.0.0.0/8 or ::1; False for 0.0.0.0, other addresses and host names
    (a name may resolve anywhere, so it gets the warning too)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str) -> str | None:
    """The loud warning for a non-loopback bind, or None for a loopback one."""
    if is_loopback(host):
        return None
    try:
        everywhere = ipaddress.ip_address(host.strip().strip("[]")).is_unspecified
    except ValueError:
        everywhere = False
    where = "every network interface of this machine" if everywhere else f"{host}, which is not loopback"
    bar = "!" * 78
    return "\n".join([
        bar,
        f"WARNING: listening on {where}.",
        "Anyone who can reach this port can send mail to the classifier and read its labels:",
        "there is no authentication and no TLS, and mail is private.",
        "Use --host 127.0.0.1 (the default) with an SSH tunnel, or put an authenticating proxy in front.",
        bar,
    ])


def base_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}"


def serve(predictor: Predictor, host: str = "127.0.0.1", port: int = 8080,
          log: Callable[[str], None] = print, batch_wait_ms: float = 5.0, **limits: int) -> None:
    """Run the API with uvicorn until interrupted. `limits`: max_request_bytes, max_batch."""
    for key in limits:
        if key not in Limits.__dataclass_fields__:
            close = difflib.get_close_matches(key, list(Limits.__dataclass_fields__), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"serve() got an unknown limit {key!r}{hint}; limits: max_request_bytes, max_batch")
    app = make_app(predictor, log=log, batch_wait_ms=batch_wait_ms, **limits)
    try:
        import uvicorn
    except ImportError as e:
        raise ImportError(f"trmkit email serve needs uvicorn: {INSTALL_HINT} ({e})") from e
    warning = exposure_warning(host)
    if warning:
        log(warning)
    url, resolved = base_url(host, port), Limits(**limits)
    log(f"serving {len(predictor.class_names)} classes ({', '.join(predictor.class_names)}) at {url}")
    for method, path, what in ROUTES:
        log(f"  {method:<4} {url}{path}  {what}")
    log(f"limits: max_request_bytes={resolved.max_request_bytes}, max_batch={resolved.max_batch}; requests "
        f"arriving within {batch_wait_ms:g} ms share a model call (--batch-wait-ms)")
    log(f"try: curl -s -H 'Content-Type: message/rfc822' --data-binary @message.eml {url}/classify")
    uvicorn.run(app, host=host, port=port, log_level="info")
