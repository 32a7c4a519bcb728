#!/usr/bin/env python3
"""Drives a scripted provider server (tests/support/*_server.rs) with that provider's
official Python SDK, as a user of the SDK would, so the SDK's own request and response
models check the server's wire shapes. For the provider SDK test (tests/it/provider_sdks.rs).

    provider_sdks.py anthropic|gemini|openai BASE_URL API_KEY

Each provider makes a fixed series of calls, which the test scripts the answers for:

* anthropic (PyPI `anthropic`; BASE_URL without /v1): with a tool, extended thinking and a
  cache-marked system prompt of over 1024 tokens, `messages.create`, then the same request
  through `messages.stream`, then `messages.create` again with the first answer's content
  sent back (its thinking block and signature) and a `tool_result` for its `tool_use`,
  whole and then streamed;
* gemini (PyPI `google-genai`): with a function declaration and thoughts included,
  `models.generate_content`, then the same through `generate_content_stream`, then
  `generate_content` with the first answer's content sent back (its `thought_signature`
  bytes) and a function response, then a plain `generate_content` whose prompt the server
  blocks, then a `generate_content_stream` whose answer it withholds;
* openai (PyPI `openai`; BASE_URL with /v1): with a tool, `chat.completions.create`, then
  the same streamed (`stream=True`, usage included), then the tool's result sent back,
  whole, streamed, and streamed without asking for usage.

The Anthropic and OpenAI clients are made with `_strict_response_validation=True`, so every
response and stream event is validated against the SDK's pydantic models (a missing or
ill-typed field fails); google-genai always validates. A streamed answer is assembled into
the shape of a whole one, for the test to compare the two.

Prints {"calls": [...]} (one summary per call) and exits 0; on any SDK or HTTP error, or an
answer of the wrong kind, prints {"error": ...} with the traceback on stderr and exits 1.
"""

import base64
import json
import sys
import traceback

ASK = "What is the weather in Paris?"
# Over 1024 tokens at 4 characters a token, so it is cached.
SYSTEM = "You are a weather assistant; answer briefly and use the tools you have. " * 64
TOOL_RESULT = {"forecast": "sunny", "celsius": 21}


def anthropic_calls(base_url, key):
    import anthropic
    from anthropic.types import Message

    client = anthropic.Anthropic(
        base_url=base_url, api_key=key, max_retries=0, _strict_response_validation=True
    )
    request = {
        "model": "claude-test",
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "tools": [
            {
                "name": "get_weather",
                "description": "Get the current weather for a city.",
                "input_schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            }
        ],
        "messages": [{"role": "user", "content": ASK}],
    }

    def summary(message):
        if not isinstance(message, Message):
            raise TypeError(f"not a Message: {message!r}")
        blocks = []
        for b in message.content:
            if b.type == "thinking":
                blocks.append({"type": b.type, "thinking": b.thinking, "signature": b.signature})
            elif b.type == "tool_use":
                blocks.append({"type": b.type, "id": b.id, "name": b.name, "input": b.input})
            elif b.type == "text":
                blocks.append({"type": b.type, "text": b.text})
            else:
                raise TypeError(f"unexpected block {b!r}")
        u = message.usage
        return {
            "id": message.id,
            "model": message.model,
            "role": message.role,
            "content": blocks,
            "stop_reason": message.stop_reason,
            "usage": {
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "cache_creation_input_tokens": u.cache_creation_input_tokens,
                "cache_read_input_tokens": u.cache_read_input_tokens,
            },
        }

    calls = []
    first = client.messages.create(**request)
    calls.append(summary(first))

    def streamed(request):
        with client.messages.stream(**request) as stream:
            events = [event.type for event in stream]
            out = summary(stream.get_final_message())
            out["events"] = events
            out["content_type"] = stream.response.headers.get("content-type")
        return out

    calls.append(streamed(request))
    uses = [b for b in first.content if b.type == "tool_use"]
    if not uses:
        raise TypeError("the first answer calls no tool")
    follow = dict(request)
    follow["messages"] = request["messages"] + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": uses[0].id,
                    "content": json.dumps(TOOL_RESULT),
                }
            ],
        },
    ]
    calls.append(summary(client.messages.create(**follow)))
    calls.append(streamed(follow))
    return calls


def gemini_calls(base_url, key):
    from google import genai
    from google.genai import types

    client = genai.Client(api_key=key, http_options=types.HttpOptions(base_url=base_url))
    config = types.GenerateContentConfig(
        tools=[
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(
                        name="get_weather",
                        description="Get the current weather for a city.",
                        parameters=types.Schema(
                            type=types.Type.OBJECT,
                            properties={"city": types.Schema(type=types.Type.STRING)},
                            required=["city"],
                        ),
                    )
                ]
            )
        ],
        thinking_config=types.ThinkingConfig(include_thoughts=True),
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    ask = [types.Content(role="user", parts=[types.Part.from_text(text=ASK)])]

    def part_summary(p):
        out = {}
        if p.text is not None:
            out["text"] = p.text
        if p.thought:
            out["thought"] = True
        if p.function_call is not None:
            out["function_call"] = {"name": p.function_call.name, "args": p.function_call.args}
        if p.thought_signature is not None:
            if not isinstance(p.thought_signature, bytes):
                raise TypeError(f"thought_signature is not bytes: {p.thought_signature!r}")
            out["thought_signature"] = base64.b64encode(p.thought_signature).decode()
        return out

    def summary(responses):
        """The responses of one call (one, or a stream's chunks) as one answer: text parts
        of a kind joined, as the SDK's users join streamed text."""
        parts, finish, usage, block, ratings = [], None, None, None, []
        for r in responses:
            if not isinstance(r, types.GenerateContentResponse):
                raise TypeError(f"not a GenerateContentResponse: {r!r}")
            if r.prompt_feedback is not None and r.prompt_feedback.block_reason is not None:
                block = r.prompt_feedback.block_reason.value
            if r.usage_metadata is not None:
                u = r.usage_metadata
                usage = {
                    "prompt_token_count": u.prompt_token_count,
                    "candidates_token_count": u.candidates_token_count,
                    "thoughts_token_count": u.thoughts_token_count,
                    "total_token_count": u.total_token_count,
                }
            for c in r.candidates or []:
                if c.finish_reason is not None:
                    finish = c.finish_reason.value
                for rating in c.safety_ratings or []:
                    ratings.append({"category": rating.category.value,
                                    "probability": rating.probability.value,
                                    "blocked": rating.blocked})
                for p in (c.content.parts if c.content else None) or []:
                    s = part_summary(p)
                    last = parts[-1] if parts else None
                    joinable = (
                        last is not None
                        and set(s) <= {"text", "thought"}
                        and set(last) <= {"text", "thought"}
                        and s.get("thought") == last.get("thought")
                    )
                    if joinable:
                        last["text"] += s.get("text", "")
                    else:
                        parts.append(s)
        return {"parts": parts, "finish_reason": finish, "usage": usage, "block_reason": block,
                "safety_ratings": ratings}

    calls = []
    first = client.models.generate_content(model="gemini-test", contents=ask, config=config)
    calls.append(summary([first]))
    chunks = list(
        client.models.generate_content_stream(model="gemini-test", contents=ask, config=config)
    )
    streamed = summary(chunks)
    streamed["chunks"] = len(chunks)
    calls.append(streamed)
    if not first.function_calls:
        raise TypeError("the first answer calls no function")
    follow = ask + [
        first.candidates[0].content,
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name="get_weather", response=TOOL_RESULT)],
        ),
    ]
    answer = client.models.generate_content(model="gemini-test", contents=follow, config=config)
    calls.append(summary([answer]))
    calls[-1]["text"] = answer.text
    blocked = client.models.generate_content(model="gemini-test", contents="Say something bad.")
    calls.append(summary([blocked]))
    calls[-1]["candidates"] = blocked.candidates
    calls[-1]["text"] = blocked.text
    withheld = list(
        client.models.generate_content_stream(model="gemini-test", contents="Tell me how.")
    )
    calls.append(summary(withheld))
    calls[-1]["text"] = "".join(chunk.text or "" for chunk in withheld)
    return calls


def openai_calls(base_url, key):
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    client = openai.OpenAI(
        base_url=base_url, api_key=key, max_retries=0, _strict_response_validation=True
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get the current weather for a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    ask = [{"role": "user", "content": ASK}]

    def summary(completion):
        if not isinstance(completion, ChatCompletion):
            raise TypeError(f"not a ChatCompletion: {completion!r}")
        choice = completion.choices[0]
        calls = [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
            for c in choice.message.tool_calls or []
        ]
        u = completion.usage
        return {
            "content": choice.message.content,
            "tool_calls": calls,
            "finish_reason": choice.finish_reason,
            "usage": {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                      "total_tokens": u.total_tokens},
        }

    def streamed(messages, usage_asked=True):
        content, calls, finish, usage, n = None, {}, None, None, 0
        options = {"stream_options": {"include_usage": True}} if usage_asked else {}
        stream = client.chat.completions.create(
            model="gpt-test", messages=messages, tools=tools, stream=True, **options
        )
        for chunk in stream:
            n += 1
            if not isinstance(chunk, ChatCompletionChunk):
                raise TypeError(f"not a ChatCompletionChunk: {chunk!r}")
            if chunk.usage is not None:
                u = chunk.usage
                usage = {"prompt_tokens": u.prompt_tokens,
                         "completion_tokens": u.completion_tokens,
                         "total_tokens": u.total_tokens}
            for choice in chunk.choices:
                if choice.delta.content is not None:
                    content = (content or "") + choice.delta.content
                for d in choice.delta.tool_calls or []:
                    call = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                    call["id"] = d.id or call["id"]
                    if d.function is not None:
                        call["name"] += d.function.name or ""
                        call["arguments"] += d.function.arguments or ""
                if choice.finish_reason is not None:
                    finish = choice.finish_reason
        return {"content": content, "tool_calls": [calls[i] for i in sorted(calls)],
                "finish_reason": finish, "usage": usage, "chunks": n,
                "content_type": stream.response.headers.get("content-type")}

    calls = []
    first = client.chat.completions.create(model="gpt-test", messages=ask, tools=tools)
    calls.append(summary(first))
    calls.append(streamed(ask))
    call = first.choices[0].message.tool_calls[0]
    follow = ask + [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(TOOL_RESULT)},
    ]
    calls.append(summary(client.chat.completions.create(model="gpt-test", messages=follow,
                                                        tools=tools)))
    calls.append(streamed(follow))
    calls.append(streamed(follow, usage_asked=False))
    return calls


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("anthropic", "gemini", "openai"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    provider, base_url, key = sys.argv[1:]
    run = {"anthropic": anthropic_calls, "gemini": gemini_calls, "openai": openai_calls}
    try:
        calls = run[provider](base_url, key)
    except Exception as e:  # the SDK's error, whatever its class, is the finding
        traceback.print_exc()
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
    print(json.dumps({"calls": calls}, default=repr))


if __name__ == "__main__":
    main()
