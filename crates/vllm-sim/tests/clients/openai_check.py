"""Talks to a vLLM-compatible server with the official openai Python SDK, as
an application would, and checks the shape of every answer.

    python openai_check.py BASE_URL MODEL      (BASE_URL like http://127.0.0.1:8000/v1)

Exits 0 and prints one JSON line of what it saw; on the first wrong answer it
exits 1 with the reason (AssertionError) or the SDK's own exception. No retries
and a 30 s timeout per request: the test's time stays bounded.

The counts checked are the simulator's (crates/vllm-sim/README.md, Endpoints):
it generates one word per token, always up to max_tokens (finish_reason
"length"), and counts a prompt's tokens as its whitespace-separated words.
"""

import json
import sys

import openai

MAX_TOKENS = 5


def words(text):
    return len(text.split())


def check_usage(usage, completion_tokens, what):
    assert usage is not None, f"{what}: no usage"
    assert usage.completion_tokens == completion_tokens, f"{what}: {usage}"
    assert usage.prompt_tokens >= 1, f"{what}: {usage}"
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, f"{what}: {usage}"


def main(base_url, model):
    client = openai.OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=30.0)
    seen = {}

    models = client.models.list()
    ids = [m.id for m in models.data]
    assert model in ids, f"models.list(): {model!r} not in {ids}"
    card = next(m for m in models.data if m.id == model)
    assert card.object == "model" and card.owned_by == "vllm", f"models.list(): {card}"
    seen["models"] = ids

    messages = [{"role": "user", "content": "Say hello to the operator"}]
    chat = client.chat.completions.create(model=model, messages=messages, max_tokens=MAX_TOKENS)
    assert chat.id.startswith("chatcmpl-"), f"chat id: {chat.id}"
    assert chat.object == "chat.completion" and chat.model == model, f"chat: {chat}"
    assert len(chat.choices) == 1, f"chat choices: {chat.choices}"
    choice = chat.choices[0]
    assert choice.index == 0 and choice.finish_reason == "length", f"chat choice: {choice}"
    assert choice.message.role == "assistant", f"chat message: {choice.message}"
    assert words(choice.message.content) == MAX_TOKENS, f"chat content: {choice.message.content!r}"
    check_usage(chat.usage, MAX_TOKENS, "chat")
    seen["chat"] = {"id": chat.id, "content": choice.message.content, "usage": chat.usage.model_dump()}

    # Streamed: one id for every chunk, the text in deltas, finish_reason on the
    # last choice chunk, and (include_usage) a final chunk with usage and no choices.
    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=MAX_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert len(chunks) >= 2, f"stream: {chunks}"
    assert len({c.id for c in chunks}) == 1, f"stream ids: {[c.id for c in chunks]}"
    assert all(c.object == "chat.completion.chunk" and c.model == model for c in chunks), chunks
    choice_chunks = [c for c in chunks if c.choices]
    text = "".join(c.choices[0].delta.content or "" for c in choice_chunks)
    assert words(text) == MAX_TOKENS, f"streamed text: {text!r}"
    reasons = [c.choices[0].finish_reason for c in choice_chunks]
    assert reasons[-1] == "length" and all(r is None for r in reasons[:-1]), f"finish_reasons: {reasons}"
    last = chunks[-1]
    assert not last.choices, f"usage chunk has choices: {last}"
    check_usage(last.usage, MAX_TOKENS, "stream")
    seen["stream"] = {"id": chunks[0].id, "chunks": len(chunks), "text": text}

    done = client.completions.create(model=model, prompt="The operator says", max_tokens=MAX_TOKENS)
    assert done.id.startswith("cmpl-"), f"completion id: {done.id}"
    assert done.object == "text_completion" and done.model == model, f"completion: {done}"
    assert len(done.choices) == 1 and done.choices[0].finish_reason == "length", done.choices
    assert words(done.choices[0].text) == MAX_TOKENS, f"completion text: {done.choices[0].text!r}"
    check_usage(done.usage, MAX_TOKENS, "completion")
    assert done.usage.prompt_tokens == 3, f"completion prompt tokens: {done.usage}"
    seen["completion"] = {"id": done.id, "text": done.choices[0].text}

    # The SDK maps vLLM's 404 for an unknown model to its own exception.
    try:
        client.chat.completions.create(model="no-such-model", messages=messages, max_tokens=1)
        raise AssertionError("an unknown model was answered")
    except openai.NotFoundError as err:
        assert err.status_code == 404 and "does not exist" in str(err), str(err)
        seen["unknown_model"] = err.status_code

    print(json.dumps(seen))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} BASE_URL MODEL")
    main(sys.argv[1], sys.argv[2])
