#!/usr/bin/env python3
"""A2A peer check: drive an A2A server with the official A2A Python SDK.

Uses only the SDK's client API (ClientFactory, AuthInterceptor, Client.send_message,
Client.get_task, Client.cancel_task); no hand-made HTTP. Needs `a2a-sdk` (pinned 1.3.0).

Usage:
    a2a_client.py BASE_URL --token T --text "task" [--stream] [--answer TEXT ...]
                  [--context CONTEXT_ID] [--cancel-after-working] [--timeout SECONDS]

The agent card is resolved from BASE_URL/.well-known/agent-card.json. The SDK picks the
wire dialect from the card: an interface with protocolVersion "1.0" gets the v1.0 methods
(SendMessage, SendStreamingMessage, GetTask, CancelTask); a 0.3 card gets the legacy ones
(message/send, message/stream, tasks/get, tasks/cancel). The bearer token is attached by the
SDK's AuthInterceptor, so the card must declare an HTTP bearer security scheme and require it.

Prints one JSON line per event received:
    {"kind": "task"|"message"|"status-update"|"artifact-update", "state": ..., "text": ..., "task_id": ...}
When a task stops at input-required and an --answer is left, the next answer is sent as a new
message carrying the same taskId/contextId. With --context, the first message carries that
contextId and no taskId: a follow-up in an existing conversation. Ends with
    {"final_state": ..., "task_id": ..., "context_id": ..., "events": N}
(kind "cancel" is the Task returned by CancelTask.) Exit code: 0 when the final state is
completed (canceled with --cancel-after-working); 2 any other end state (or a bare Message
reply, final_state "message"); 1 protocol/SDK error or timeout (printed as {"error": ...}).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid

try:
    from a2a.client import (
        AuthInterceptor,
        ClientConfig,
        ClientFactory,
        CredentialService,
    )
    from a2a.types.a2a_pb2 import (
        CancelTaskRequest,
        GetTaskRequest,
        Message,
        Part,
        Role,
        SendMessageRequest,
        TaskState,
    )
except ImportError as exc:  # pragma: no cover - environment problem
    print(json.dumps({"error": f"a2a-sdk not importable: {exc}"}), flush=True)
    sys.exit(1)

TERMINAL = {"completed", "canceled", "failed", "rejected"}
INTERRUPTED = {"input-required", "auth-required"}


def state_name(state: int) -> str:
    """TASK_STATE_INPUT_REQUIRED -> input-required (the A2A 0.3 spelling)."""
    name = TaskState.Name(state)
    return name.removeprefix("TASK_STATE_").lower().replace("_", "-")


def parts_text(parts) -> str:
    out = []
    for p in parts:
        kind = p.WhichOneof("content")
        if kind == "text":
            out.append(p.text)
        elif kind == "data":
            from google.protobuf.json_format import MessageToDict

            out.append(json.dumps(MessageToDict(p.data)))
        elif kind == "url":
            out.append(p.url)
        elif kind == "raw":
            out.append(f"<{len(p.raw)} bytes>")
    return "\n".join(out)


class StaticToken(CredentialService):
    """Hands the same bearer token to every security scheme the card requires."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def get_credentials(self, security_scheme_name, context):  # noqa: ARG002
        return self._token


class Run:
    def __init__(self, client, args) -> None:
        self.client = client
        self.args = args
        self.answers = list(args.answer or [])
        self.events = 0
        self.state: str | None = None
        self.task_id = ""
        self.context_id = args.context or ""
        self.cancel_sent = False

    def emit(self, kind: str, state: str | None, text: str) -> None:
        self.events += 1
        print(
            json.dumps(
                {"kind": kind, "state": state, "text": text, "task_id": self.task_id}
            ),
            flush=True,
        )

    def note_task(self, task_id: str, context_id: str, state: str) -> None:
        if task_id:
            self.task_id = task_id
        if context_id:
            self.context_id = context_id
        self.state = state

    def handle(self, ev) -> None:
        which = ev.WhichOneof("payload")
        if which == "task":
            t = ev.task
            st = state_name(t.status.state)
            self.note_task(t.id, t.context_id, st)
            text = parts_text(t.status.message.parts) if t.status.HasField("message") else ""
            if not text and t.artifacts and st in TERMINAL:
                text = "\n".join(parts_text(a.parts) for a in t.artifacts)
            self.emit("task", st, text)
        elif which == "status_update":
            u = ev.status_update
            st = state_name(u.status.state)
            self.note_task(u.task_id, u.context_id, st)
            text = parts_text(u.status.message.parts) if u.status.HasField("message") else ""
            self.emit("status-update", st, text)
        elif which == "artifact_update":
            a = ev.artifact_update
            self.note_task(a.task_id, a.context_id, self.state or "")
            self.emit("artifact-update", self.state, parts_text(a.artifact.parts))
        elif which == "message":
            m = ev.message
            if m.task_id:
                self.task_id = m.task_id
            if m.context_id:
                self.context_id = m.context_id
            self.state = "message"
            self.emit("message", None, parts_text(m.parts))
        else:
            raise RuntimeError(f"empty StreamResponse: {ev}")

    async def cancel(self) -> None:
        self.cancel_sent = True
        task = await self.client.cancel_task(CancelTaskRequest(id=self.task_id))
        st = state_name(task.status.state)
        self.note_task(task.id, task.context_id, st)
        self.emit("cancel", st, "CancelTask result")

    async def send(self, text: str) -> None:
        msg = Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
        )
        if self.task_id:
            msg.task_id = self.task_id
        if self.context_id:
            msg.context_id = self.context_id
        async for ev in self.client.send_message(SendMessageRequest(message=msg)):
            self.handle(ev)
            if (
                self.args.cancel_after_working
                and not self.cancel_sent
                and self.state == "working"
                and self.task_id
            ):
                await self.cancel()

    async def poll(self) -> None:
        """After a non-streaming reply that is not settled yet: GetTask until it is."""
        while self.state not in TERMINAL | INTERRUPTED | {"message"}:
            if self.args.cancel_after_working and not self.cancel_sent and self.state == "working":
                await self.cancel()
                continue
            await asyncio.sleep(0.2)
            task = await self.client.get_task(GetTaskRequest(id=self.task_id))
            st = state_name(task.status.state)
            if st != self.state:
                self.note_task(task.id, task.context_id, st)
                text = parts_text(task.status.message.parts) if task.status.HasField("message") else ""
                self.emit("task", st, text)

    async def run(self) -> None:
        await self.send(self.args.text)
        while True:
            await self.poll()
            if self.state == "input-required" and self.answers:
                await self.send(self.answers.pop(0))
                continue
            break


async def main_async(args) -> int:
    config = ClientConfig(streaming=args.stream)
    factory = ClientFactory(config)
    interceptors = [AuthInterceptor(StaticToken(args.token))] if args.token else []
    client = await factory.create_from_url(args.base_url, interceptors=interceptors)
    run = Run(client, args)
    try:
        card = client._card  # noqa: SLF001 - only for the diagnostic line on stderr
        print(
            json.dumps(
                {
                    "card": card.name,
                    "streaming": card.capabilities.streaming,
                    "interfaces": [
                        [i.url, i.protocol_binding, i.protocol_version]
                        for i in card.supported_interfaces
                    ],
                    "security": list(card.security_schemes.keys()),
                }
            ),
            file=sys.stderr,
            flush=True,
        )
        if args.stream and not card.capabilities.streaming:
            print("warning: card says streaming=false; the SDK falls back to SendMessage",
                  file=sys.stderr, flush=True)
        try:
            await asyncio.wait_for(run.run(), timeout=args.timeout)
        except TimeoutError as exc:
            raise TimeoutError(
                f"no end state within {args.timeout}s (last state {run.state!r})"
            ) from exc
    finally:
        await client.close()
    print(
        json.dumps(
            {
                "final_state": run.state,
                "task_id": run.task_id,
                "context_id": run.context_id,
                "events": run.events,
            }
        ),
        flush=True,
    )
    wanted = "canceled" if args.cancel_after_working else "completed"
    return 0 if run.state == wanted else 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base_url")
    ap.add_argument("--token", default="", help="bearer token (sent via the SDK's AuthInterceptor)")
    ap.add_argument("--text", required=True, help="text of the first user message")
    ap.add_argument("--stream", action="store_true", help="use SendStreamingMessage (SSE)")
    ap.add_argument("--answer", action="append",
                    help="reply sent when the task is input-required (repeatable, used in order)")
    ap.add_argument("--context", help="contextId of the first message (a follow-up in that context)")
    ap.add_argument("--cancel-after-working", action="store_true",
                    help="call CancelTask once the task is seen working; exit 0 only if it ends canceled")
    ap.add_argument("--timeout", type=float, default=60.0, help="overall time limit, seconds")
    args = ap.parse_args()
    try:
        return asyncio.run(main_async(args))
    except Exception as exc:  # noqa: BLE001 - every SDK/protocol failure is exit 1
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
