#!/usr/bin/env python3
"""Send a fixed set of requests to an OpenAI-compatible server (vLLM), through
chat_transcript.py record, to make tests/llm/data/vllm_cases.jsonl (tests/llm/README.md).

  send_cases.py plain URL    # a server started without --api-key and without tool parsing
  send_cases.py keyed URL    # a server started with --api-key KEY --enable-auto-tool-choice
                             #   --tool-call-parser hermes (KEY from VINCI_CASES_KEY)

Every request body is fixed text, so the transcript can be remade and replayed by key. Each
case prints one line: its name, the status and the first bytes of the answer. Standard library
only.
"""

import json
import os
import sys
import urllib.error
import urllib.request

MODEL = "qwen3-tiny"
SELECT_SKILLS = {
    "type": "function",
    "function": {
        "name": "select_skills",
        "description": "Choose the skills from the candidate list that will help write a faster "
                       "correct kernel for this task.",
        "parameters": {
            "type": "object",
            "properties": {
                "think": {"type": "string"},
                "selected_skills": {
                    "type": "array",
                    "items": {"type": "object",
                              "properties": {"name": {"type": "string"},
                                             "reason": {"type": "string"}},
                              "required": ["name", "reason"]},
                },
            },
            "required": ["think", "selected_skills"],
        },
    },
}


def chat(content, **extra):
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
    body.update(extra)
    return body


PLAIN = [
    ("models", "GET", "/v1/models", None),
    ("chat ok", "POST", "/v1/chat/completions",
     {"model": MODEL, "messages": [{"role": "system", "content": "You write CUDA kernels."},
                                   {"role": "user", "content": "Write a ReLU kernel."}],
      "temperature": 1.0, "max_tokens": 16, "seed": 7}),
    ("chat greedy", "POST", "/v1/chat/completions",
     chat("Write a ReLU kernel.", temperature=0, max_tokens=16, seed=7)),
    ("chat n=2 logprobs", "POST", "/v1/chat/completions",
     chat("Two answers.", n=2, max_tokens=4, seed=3, logprobs=True, top_logprobs=2)),
    ("chat stop string", "POST", "/v1/chat/completions",
     chat("Stop early.", max_tokens=32, seed=5, stop=["e"])),
    ("chat stream", "POST", "/v1/chat/completions",
     chat("Stream this.", max_tokens=4, seed=1, stream=True,
          stream_options={"include_usage": True})),
    ("unknown model", "POST", "/v1/chat/completions",
     {"model": "no-such-model", "messages": [{"role": "user", "content": "hello"}],
      "max_tokens": 4}),
    ("max_tokens over context", "POST", "/v1/chat/completions",
     chat("hello", max_tokens=5000)),
    ("prompt over context", "POST", "/v1/chat/completions",
     chat("kernel " * 5000, max_tokens=4)),
    ("auto tools without a parser", "POST", "/v1/chat/completions",
     chat("Pick skills.", tools=[SELECT_SKILLS], tool_choice="auto", max_tokens=8)),
    ("named tool without a parser", "POST", "/v1/chat/completions",
     chat("Pick skills.", tools=[SELECT_SKILLS],
          tool_choice={"type": "function", "function": {"name": "select_skills"}}, max_tokens=8)),
    ("temperature negative", "POST", "/v1/chat/completions",
     chat("hello", temperature=-1, max_tokens=4)),
    ("no messages", "POST", "/v1/chat/completions", {"model": MODEL, "max_tokens": 4}),
    ("malformed json", "POST", "/v1/chat/completions", b'{"model": "qwen3-tiny", "messages": ['),
    ("tokenize prompt", "POST", "/tokenize", {"model": MODEL, "prompt": "__global__ void relu"}),
    ("tokenize prompt with strings", "POST", "/tokenize",
     {"model": MODEL, "prompt": "__global__ void relu", "return_token_strs": True}),
    ("tokenize chat", "POST", "/tokenize",
     {"model": MODEL, "messages": [{"role": "system", "content": "You write CUDA kernels."},
                                   {"role": "user", "content": "Write a ReLU kernel."}],
      "add_generation_prompt": True}),
    ("detokenize", "POST", "/detokenize", {"model": MODEL, "tokens": [267, 1207, 2514]}),
    ("tokenize over context", "POST", "/tokenize", {"model": MODEL, "prompt": "kernel " * 5000}),
]

KEYED = [
    ("no api key", "POST", "/v1/chat/completions", chat("no key", max_tokens=4), None),
    ("wrong api key", "POST", "/v1/chat/completions", chat("wrong key", max_tokens=4), "wrong"),
    ("auto tools", "POST", "/v1/chat/completions",
     chat("Pick skills.", tools=[SELECT_SKILLS], tool_choice="auto", max_tokens=24, seed=2),
     "KEY"),
    # The random model never closes the JSON by itself: logit_bias on the tokens '"' (1),
    # '}' (92) and ']' (60) makes it do so, so the answer carries a parsed tool call.
    ("named tool", "POST", "/v1/chat/completions",
     chat("Pick skills.", tools=[SELECT_SKILLS],
          tool_choice={"type": "function", "function": {"name": "select_skills"}},
          max_tokens=64, seed=2, logit_bias={"1": 30, "92": 30, "60": 30}), "KEY"),
    ("required tool", "POST", "/v1/chat/completions",
     chat("Pick skills.", tools=[SELECT_SKILLS], tool_choice="required", max_tokens=64, seed=2,
          logit_bias={"1": 30, "92": 30, "60": 30}), "KEY"),
]


def send(base, name, method, path, body, key):
    if isinstance(body, (dict, list)):
        data = json.dumps(body).encode("utf-8")
    else:
        data = body
    req = urllib.request.Request(base.rstrip("/") + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            status, answer = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, answer = e.code, e.read()
    print("%-30s %d %s" % (name, status, answer[:150].decode("utf-8", "replace")), flush=True)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("plain", "keyed"):
        sys.exit(__doc__)
    which, base = sys.argv[1], sys.argv[2]
    if which == "plain":
        for name, method, path, body in PLAIN:
            send(base, name, method, path, body, None)
    else:
        real = os.environ.get("VINCI_CASES_KEY")
        if not real:
            sys.exit("send_cases.py keyed: set VINCI_CASES_KEY to the server's --api-key")
        for name, method, path, body, key in KEYED:
            send(base, name, method, path, body, real if key == "KEY" else key)


if __name__ == "__main__":
    main()
