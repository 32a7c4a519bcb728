"""Checks an AG-UI event stream against the official Python SDK (ag-ui-protocol), for the
AG-UI test of `GET /v1/flows/{id}/events?protocol=ag-ui`.

    agui_check.py URL [--token T] [--timeout SECONDS]

Reads the SSE stream at URL until it ends or a RUN_FINISHED / RUN_ERROR arrives, and checks:

* each event's shape, with the SDK's discriminated `Event` union in pydantic strict mode
  (unknown type, missing or ill-typed field fail), plus what the SDK lets through but the
  protocol's schema and the TypeScript client do not: a key that is not the camelCase wire
  name (the SDK also accepts snake_case), a key the event does not define, and `null` on an
  optional field (the TypeScript client rejects it: leave the key out);
* the order: RUN_STARTED first and exactly one RUN_FINISHED or RUN_ERROR last, with the
  same threadId/runId; TEXT_MESSAGE_CONTENT/END only while their messageId is open, and
  TOOL_CALL_ARGS/END while their toolCallId is open (a closed id may be opened again, as the
  protocol allows); TOOL_CALL_RESULT only after its call's END, once, with a messageId of its
  own; STEP_FINISHED only for an open stepName; nothing left open at RUN_FINISHED;
* state: a STATE_DELTA needs an earlier STATE_SNAPSHOT and must apply to the state so far.

Prints {"events": N, "types": {TYPE: count}, "errors": [...]} and exits 0 when no error.
"""

import argparse
import copy
import json
import sys
import urllib.request

from pydantic import BaseModel, TypeAdapter, ValidationError

from ag_ui.core import Event

EVENT = TypeAdapter(Event)
TERMINAL = ("RUN_FINISHED", "RUN_ERROR")


# --- reading the stream -------------------------------------------------------------------


def sse_data(response, errors):
    """Yields the data of each SSE event (data: lines joined, dispatched on a blank line)."""
    data = []
    for raw in response:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith(":"):
            continue  # a comment, e.g. a keep-alive
        else:
            field, _, value = line.partition(":")
            if field == "data":
                data.append(value[1:] if value.startswith(" ") else value)
            # event:, id: and retry: carry nothing AG-UI reads
    if data:
        errors.append("stream ended inside an event (no blank line after its data): a client drops it")


def no_constants(name):
    raise ValueError(f"{name} is not JSON")


# --- shape ---------------------------------------------------------------------------------


def check_keys(model, raw, where, errors):
    """Walks the parsed model beside the raw JSON to find what pydantic let through."""
    fields = type(model).model_fields
    wire = {(f.alias or name): name for name, f in fields.items()}
    # JSON Patch operations are open: RFC 6902 says members they do not define are ignored.
    is_open = "op" in fields
    for key, value in raw.items():
        at = f"{where}.{key}" if where else key
        name = wire.get(key)
        if name is None:
            if key in fields:
                errors.append(f"{at}: the wire name is {fields[key].alias!r}")
            elif not is_open:
                errors.append(f"{at}: not a field of {type(model).__name__}")
            continue
        field = fields[name]
        if value is None and not field.is_required() and field.default is None:
            errors.append(f"{at}: null on an optional field (leave it out)")
            continue
        check_nested(getattr(model, name), value, at, errors)


def check_nested(value, raw, where, errors):
    if isinstance(value, BaseModel) and isinstance(raw, dict):
        check_keys(value, raw, where, errors)
    elif isinstance(value, list) and isinstance(raw, list):
        for i, (item, raw_item) in enumerate(zip(value, raw)):
            check_nested(item, raw_item, f"{where}[{i}]", errors)


# --- JSON Patch (RFC 6902), just enough to check that a delta applies ---------------------


def pointer(path):
    """Splits an RFC 6901 pointer into its unescaped reference tokens."""
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"pointer {path!r} does not start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def index(container, token, adding):
    """An array index: decimal without leading zeros, or '-' (one past the end) when adding."""
    if adding and token == "-":
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise ValueError(f"{token!r} is not an array index")
    i = int(token)
    if i > len(container) or (i == len(container) and not adding):
        raise ValueError(f"index {i} is out of range (length {len(container)})")
    return i


def resolve(doc, tokens):
    for token in tokens:
        if isinstance(doc, dict):
            if token not in doc:
                raise ValueError(f"no key {token!r}")
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[index(doc, token, False)]
        else:
            raise ValueError(f"cannot step into a {type(doc).__name__} with {token!r}")
    return doc


def add(doc, tokens, value):
    if not tokens:
        return value
    parent, last = resolve(doc, tokens[:-1]), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(index(parent, last, True), value)
    else:
        raise ValueError(f"cannot add into a {type(parent).__name__}")
    return doc


def remove(doc, tokens):
    if not tokens:
        raise ValueError("cannot remove the whole document")
    parent, last = resolve(doc, tokens[:-1]), tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise ValueError(f"no key {last!r}")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(index(parent, last, False))
    raise ValueError(f"cannot remove from a {type(parent).__name__}")


def apply_patch(doc, ops):
    """Applies a patch to a copy of doc; raises ValueError when an operation cannot apply."""
    doc = copy.deepcopy(doc)
    for n, op in enumerate(ops):
        try:
            kind, path = op["op"], pointer(op["path"])
            if kind == "add":
                doc = add(doc, path, copy.deepcopy(op["value"]))
            elif kind == "remove":
                doc, _ = remove(doc, path)
            elif kind == "replace":  # a remove of an existing target, then an add in its place
                if path:
                    doc, _ = remove(doc, path)
                doc = add(doc, path, copy.deepcopy(op["value"]))
            elif kind == "test":
                if resolve(doc, path) != op["value"]:
                    raise ValueError("test failed")
            elif kind in ("move", "copy"):
                source = pointer(op["from"])
                if kind == "move":
                    doc, value = remove(doc, source)
                else:
                    value = copy.deepcopy(resolve(doc, source))
                doc = add(doc, path, value)
            else:
                raise ValueError(f"unknown op {kind!r}")
        except (KeyError, ValueError, IndexError) as e:
            raise ValueError(f"op {n} ({op.get('op')} {op.get('path')!r}): {e}") from None
    return doc


# --- order ---------------------------------------------------------------------------------


class Sequence:
    """The protocol's ordering rules for one run, fed one validated event at a time."""

    def __init__(self):
        self.run = None  # (threadId, runId) of RUN_STARTED
        self.orphans = False  # events seen before any RUN_STARTED
        self.ended = False
        self.open_messages, self.text_messages = set(), set()
        self.open_calls, self.ended_calls, self.answered_calls = set(), set(), set()
        self.open_steps = set()
        self.state, self.has_state = None, False

    def feed(self, ev, raw, err):
        t = raw["type"]
        if self.run is None and t != "RUN_STARTED" and not self.orphans:
            err("the first event must be RUN_STARTED")
            self.orphans = True
        if t == "RUN_STARTED":
            if self.run is not None:
                err("a second RUN_STARTED in the stream")
            self.run = (ev.thread_id, ev.run_id)
        elif t == "TEXT_MESSAGE_START":
            if ev.message_id in self.open_messages:
                err(f"message {ev.message_id!r} is already open")
            self.open_messages.add(ev.message_id)
            self.text_messages.add(ev.message_id)
        elif t in ("TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"):
            if ev.message_id not in self.open_messages:
                err(f"message {ev.message_id!r} is not open (no TEXT_MESSAGE_START, or after its END)")
            elif t == "TEXT_MESSAGE_END":
                self.open_messages.discard(ev.message_id)
        elif t == "TOOL_CALL_START":
            if ev.tool_call_id in self.open_calls:
                err(f"tool call {ev.tool_call_id!r} is already open")
            self.open_calls.add(ev.tool_call_id)
        elif t in ("TOOL_CALL_ARGS", "TOOL_CALL_END"):
            if ev.tool_call_id not in self.open_calls:
                err(f"tool call {ev.tool_call_id!r} is not open (no TOOL_CALL_START, or after its END)")
            elif t == "TOOL_CALL_END":
                self.open_calls.discard(ev.tool_call_id)
                self.ended_calls.add(ev.tool_call_id)
        elif t == "TOOL_CALL_RESULT":
            if ev.tool_call_id not in self.ended_calls or ev.tool_call_id in self.open_calls:
                err(f"result for tool call {ev.tool_call_id!r} before its TOOL_CALL_END")
            if ev.tool_call_id in self.answered_calls:
                err(f"a second result for tool call {ev.tool_call_id!r}")
            if ev.message_id in self.text_messages:
                err(f"result messageId {ev.message_id!r} is a text message's id (a result mints its own message)")
            self.answered_calls.add(ev.tool_call_id)
        elif t == "STEP_STARTED":
            if ev.step_name in self.open_steps:
                err(f"step {ev.step_name!r} is already open")
            self.open_steps.add(ev.step_name)
        elif t == "STEP_FINISHED":
            if ev.step_name not in self.open_steps:
                err(f"step {ev.step_name!r} was not started")
            self.open_steps.discard(ev.step_name)
        elif t == "STATE_SNAPSHOT":
            self.state, self.has_state = copy.deepcopy(raw["snapshot"]), True
        elif t == "STATE_DELTA":
            if not self.has_state:
                err("STATE_DELTA before any STATE_SNAPSHOT")
            else:
                try:
                    self.state = apply_patch(self.state, raw["delta"])
                except ValueError as e:
                    err(f"delta does not apply to the state so far: {e}")
        elif t == "RUN_FINISHED":
            if self.run is not None and (ev.thread_id, ev.run_id) != self.run:
                err(f"threadId/runId {(ev.thread_id, ev.run_id)} differ from RUN_STARTED's {self.run}")
            for what, still in (("steps", self.open_steps), ("text messages", self.open_messages),
                                ("tool calls", self.open_calls)):
                if still:
                    err(f"{what} still open: {sorted(still)}")
        if t in TERMINAL:
            self.ended = True


# --- main ----------------------------------------------------------------------------------


def check(url, token, timeout):
    errors, types, count = [], {}, 0
    request = urllib.request.Request(url, headers={"Accept": "text/event-stream"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    seq = Sequence()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            ctype = response.headers.get("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                errors.append(f"Content-Type is {ctype!r}, not text/event-stream")
            for data in sse_data(response, errors):
                n, count = count, count + 1
                prefix = f"#{n}"

                def err(msg):
                    errors.append(f"{prefix}: {msg}")

                try:
                    raw = json.loads(data, parse_constant=no_constants)
                except ValueError as e:
                    err(f"data is not JSON ({e}): {data[:200]!r}")
                    continue
                if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
                    err(f"not an object with a string type: {data[:200]!r}")
                    continue
                types[raw["type"]] = types.get(raw["type"], 0) + 1
                prefix = f"#{n} {raw['type']}"
                try:
                    ev = EVENT.validate_json(data, strict=True)
                except ValidationError as e:
                    for x in e.errors():
                        if x["type"] == "union_tag_invalid" and not x["loc"]:
                            err("not an AG-UI event type")
                            continue
                        loc = ".".join(str(p) for p in x["loc"][1:])  # [0] is the type tag
                        err(f"{loc}: {x['msg']}" if loc else x["msg"])
                    continue
                shape = []
                check_keys(ev, raw, "", shape)
                for msg in shape:
                    err(msg)
                seq.feed(ev, raw, err)
                if seq.ended:
                    break  # the run is over; a well-behaved server closes the stream here
    except (OSError, UnicodeDecodeError) as e:  # OSError covers HTTPError, URLError, timeouts
        errors.append(f"reading {url}: {e}")
    if count == 0:
        errors.append("no events")
    elif not seq.ended:
        errors.append("the stream ended without RUN_FINISHED or RUN_ERROR")
    return {"events": count, "types": types, "errors": errors}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--token")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each read")
    args = parser.parse_args()
    report = check(args.url, args.token, args.timeout)
    print(json.dumps(report))
    sys.exit(1 if report["errors"] else 0)


if __name__ == "__main__":
    main()
