# manus-rt's cell runner: one long-lived interpreter that runs the cells `python_execute`
# sends it, keeping their variables, imports and data between cells.
#
# It speaks JSON lines with the runtime over the stdin and stdout it was started with; the
# cells never see those. A cell's own stdin is /dev/null, and its stdout and stderr (with
# those of any process it starts) go through pipes this runner reads and forwards as
# `out` / `err` frames, so a cell can print anything without breaking the protocol.
#
# runtime -> runner:  {"tools": [{"name": ..., "tool": ..., "params": [...], "doc": ...}]}
#                     {"cell": {"id": N, "code": "..."}}
#                     {"answer": {"id": K, "ok": bool, "text": "..."}}    to a call
# runner -> runtime:  {"call": {"id": K, "name": "...", "args": {...}}}   from a cell
# runner -> runtime:  {"ready": {"pgid": G, "version": "3.11.7"}}  once, at start
#                     {"out": "text"} / {"err": "text"}             while a cell runs
#                     {"done": {"id": N, "value": "repr" | null, "error": "traceback" | null,
#                               "interrupted": bool}}
#
# `tools` makes each tool a Python function of the cells' namespace, with the signature and
# docstring the runtime gives (`code.rs`, `CellFunction`); calling one sends a `call` and
# waits for its `answer`: the text, or a `ToolError` raised in the cell.
#
# The runtime interrupts a cell with SIGINT (a KeyboardInterrupt in the cell); between cells
# SIGINT is ignored. The runner exits when its stdin closes.
import ast
import builtins
import codecs
import inspect
import linecache
import os
import signal
import sys
import threading
import traceback

try:
    import json
except ImportError:
    # Debian's python3-minimal, for one, leaves it out. Said on stdout, where the runtime
    # expects a frame and shows what it got instead.
    print("this Python has no `json` module, which the kept interpreter needs: install the "
          "whole standard library (Debian: python3), or set [tools] python_session = \"call\"")
    sys.exit(3)

# This runner's own code, whose frames tracebacks leave out.
HERE = (lambda: None).__code__.co_filename

# Longest repr of a last expression's value sent back.
MAX_VALUE = 8000


class Channel:
    """The protocol's two ends, kept on descriptors no cell and no child process holds."""

    def __init__(self):
        self.inp = os.fdopen(os.dup(0), "rb")
        self.out = os.dup(1)
        self.lock = threading.Lock()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)

    def send(self, frame):
        data = memoryview((json.dumps(frame) + "\n").encode())
        with self.lock:
            while data:
                data = data[os.write(self.out, data):]

    def receive(self):
        line = self.inp.readline()
        if not line:
            os._exit(0)
        return json.loads(line)


class Pump(threading.Thread):
    """Everything written to descriptor `fd` (1 or 2), forwarded as `kind` frames.

    `drain` waits until all that was written before it has been forwarded: it writes a mark
    no output contains and waits for this thread to read it.
    """

    def __init__(self, channel, fd, kind):
        super().__init__(daemon=True)
        read, write = os.pipe()
        os.dup2(write, fd)
        os.close(write)
        self.channel, self.fd, self.kind, self.read = channel, fd, kind, read
        self.mark = b"\0manus-rt-drain-" + os.urandom(8).hex().encode() + b"\0"
        self.seen = threading.Event()
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def run(self):
        held = b""
        while True:
            chunk = os.read(self.read, 65536)
            if not chunk:
                return
            held += chunk
            while True:
                at = held.find(self.mark)
                if at < 0:
                    break
                self.forward(held[:at])
                held = held[at + len(self.mark):]
                self.seen.set()
            keep = self.partial_mark(held)
            self.forward(held[: len(held) - keep])
            held = held[len(held) - keep:]

    def partial_mark(self, held):
        """How many bytes at the end of `held` could be the start of a mark."""
        for n in range(min(len(self.mark) - 1, len(held)), 0, -1):
            if held.endswith(self.mark[:n]):
                return n
        return 0

    def forward(self, data):
        text = self.decoder.decode(data)
        if text:
            self.channel.send({self.kind: text})

    def drain(self):
        self.seen.clear()
        try:
            os.write(self.fd, self.mark)
        except OSError:
            return  # the cell closed the descriptor: nothing more comes through it
        self.seen.wait(5)


class ToolError(Exception):
    """A tool call from a cell failed; the message says why, as the tool put it."""


# The annotations the runtime names for parameters.
TYPES = {"str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict}


def tool_function(runner, spec):
    """The function the runtime described (its name, the tool it calls, its parameters in
    order, required ones first, optional ones defaulting to None, and its docstring)."""
    params, lines = [], []
    required = [p["name"] for p in spec["params"] if p["required"]]
    for p in spec["params"]:
        kind = TYPES.get(p["annotation"], inspect.Parameter.empty)
        default = inspect.Parameter.empty if p["required"] else None
        params.append(inspect.Parameter(p["name"], inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=default, annotation=kind))
        lines.append("    %s%s: %s" % (p["name"], "" if p["required"] else " (optional)", p["about"]))
    signature = inspect.Signature(params, return_annotation=str)
    name, tool = spec["name"], spec["tool"]

    def call(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError("%s%s: %s" % (name, signature, e)) from None
        arguments = {k: v for k, v in bound.arguments.items() if v is not None or k in required}
        return runner.call(tool, arguments)

    call.__name__ = call.__qualname__ = name
    call.__signature__ = signature
    call.__doc__ = spec["doc"] + ("\n\nArgs:\n" + "\n".join(lines) if lines else "")
    return call


class Runner:
    def __init__(self):
        self.channel = Channel()
        self.pumps = [Pump(self.channel, 1, "out"), Pump(self.channel, 2, "err")]
        for pump in self.pumps:
            pump.start()
        self.running = False
        self.calls = 0
        self.names = {"__name__": "__main__", "__builtins__": builtins}
        signal.signal(signal.SIGINT, self.interrupt)

    def interrupt(self, signum, frame):
        if self.running:
            raise KeyboardInterrupt

    def serve(self):
        self.channel.send({"ready": {"pgid": os.getpgid(0), "version": sys.version.split()[0]}})
        while True:
            frame = self.channel.receive()
            if "cell" in frame:
                cell = frame["cell"]
                self.channel.send({"done": self.run(cell["id"], cell["code"])})
            elif "tools" in frame:
                for spec in frame["tools"]:
                    function = tool_function(self, spec)
                    self.names[function.__name__] = function
                self.names["ToolError"] = ToolError
            # An answer to a call its cell no longer waits for (it was interrupted) is dropped.

    def call(self, name, arguments):
        """Run a tool call from a cell: ask the runtime, wait for its answer."""
        self.calls += 1
        number = self.calls
        self.channel.send({"call": {"id": number, "name": name, "args": arguments}})
        while True:
            answer = self.channel.receive().get("answer")
            if answer is not None and answer["id"] == number:
                break
        if not answer["ok"]:
            raise ToolError(answer["text"])
        return answer["text"]

    def run(self, number, code):
        value = error = None
        interrupted = False
        try:
            value = self.execute(number, code)
        except KeyboardInterrupt as e:
            interrupted = True
            error = self.traceback(e)
        except BaseException as e:
            error = self.traceback(e)
        finally:
            self.running = False
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        for pump in self.pumps:
            pump.drain()
        return {"id": number, "value": value, "error": error, "interrupted": interrupted}

    def execute(self, number, code):
        """Run `code` as a REPL would: the repr of a last bare expression is its value."""
        name = "<cell %d>" % number
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        try:
            tree = ast.parse(code, name, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            body = compile(tree, name, "exec")
            tail = compile(last, name, "eval") if last is not None else None
        except SyntaxError as e:
            raise e.with_traceback(None)  # the parser's frames say nothing about the cell
        self.running = True
        exec(body, self.names)
        result = eval(tail, self.names) if tail is not None else None
        self.running = False
        if result is None:
            return None
        self.names["_"] = result
        shown = repr(result)
        if len(shown) > MAX_VALUE:
            shown = shown[:MAX_VALUE] + "... [%d characters cut]" % (len(shown) - MAX_VALUE)
        return shown

    def traceback(self, error):
        """The error as Python prints it, without this runner's own frames."""
        shown = traceback.TracebackException.from_exception(error)
        frames = [frame for frame in shown.stack if frame.filename != HERE]
        shown.stack = traceback.StackSummary.from_list(frames)
        return "".join(shown.format())

Runner().serve()
