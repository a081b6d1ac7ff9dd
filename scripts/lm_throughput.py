#!/usr/bin/env python3
"""Measures `harness lm`'s throughput (docs/lm.md, "Speed"): starts the server, then times

  1. generation: --requests concurrent chat requests, each a prompt of --prompt-tokens tokens and
     --max-tokens to sample (the tokens counted are those generated);
  2. an rl update of --samples samples of --sample-tokens tokens each (half prompt, half reply);
  3. an sft update of the same samples, --epochs epochs, --batch samples per optimizer step.

Prints one JSON line per measurement: what, device, train_batch, tokens, seconds, tokens_per_s.
Flags it does not know (and --device, --train-batch, --layers, --d-model, --heads, --context) go
to `harness lm`. Standard library only. The defaults run on two CPU cores in well under a minute:

  python3 scripts/lm_throughput.py --harness build/bin/harness --device cpu
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def post(base, path, body, timeout):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def text_of(n, salt):
    """n ASCII bytes (n byte-level tokens), different per salt."""
    words = "tile the loop over rows and keep a running max then sum exp in registers "
    s = (str(salt) + " " + words * (n // len(words) + 2))
    return s[:max(0, n)]


def chat_request(model, prompt_tokens, salt, max_tokens=None):
    # <|user|>content<|end|><|assistant|>: the template adds three tokens to the content.
    r = {"model": model, "messages": [{"role": "user", "content": text_of(prompt_tokens - 3, salt)}],
         "temperature": 1.0, "seed": salt}
    if max_tokens is not None:
        r["max_tokens"] = max_tokens
    return r


def update_body(kind, model, samples, sample_tokens, options, step):
    prompt = sample_tokens // 2
    reply = sample_tokens - prompt - 1  # the reply is trained as completion<|end|>
    return {"protocol": "vinci.trainer/1", "kind": kind, "run": "lm_throughput", "step": step,
            "base_model": model, "parent": "", "roles": ["policy"], "seed": "00000000000000ab",
            "options": options,
            "samples": [{"role": "policy", "request": chat_request(model, prompt, i),
                         "completion": text_of(reply, 1000 + i), "advantage": 1.0 if i % 2 == 0 else -1.0,
                         "scale": 1} for i in range(samples)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harness", default="build/bin/harness", help="the harness binary")
    ap.add_argument("--store", default="", help="store folder (default: a temporary one, removed after)")
    ap.add_argument("--model", default="vinci-tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--train-batch", default="1")
    ap.add_argument("--requests", type=int, default=4, help="concurrent chat requests")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--samples", type=int, default=8, help="samples per update")
    ap.add_argument("--sample-tokens", type=int, default=128, help="tokens per sample, prompt and reply")
    ap.add_argument("--epochs", type=int, default=2, help="sft epochs")
    ap.add_argument("--batch", type=int, default=4, help="sft samples per optimizer step")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per HTTP request")
    args, rest = ap.parse_known_args()

    store = args.store or tempfile.mkdtemp(prefix="lm_throughput_")
    cmd = [args.harness, "lm", "--port", "0", "--store", os.path.join(store, "store"), "--model", args.model,
           "--device", args.device, "--train-batch", args.train_batch] + rest
    os.makedirs(store, exist_ok=True)
    err_path = os.path.join(store, "lm.err")
    err = open(err_path, "w")
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        line = server.stdout.readline()
        m = re.match(r"listening on ([^:\s]+):(\d+)", line)
        if not m:
            server.wait(timeout=30)
            with open(err_path) as f:
                sys.exit("lm_throughput: `%s` did not start: %s%s" % (" ".join(cmd), line, f.read()))
        base = "http://127.0.0.1:%s" % m.group(2)

        def report(what, tokens, seconds, **extra):
            out = {"what": what, "device": args.device, "train_batch": int(args.train_batch), "tokens": tokens,
                   "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else None}
            out.update(extra)
            print(json.dumps(out), flush=True)

        # 1. Generation: concurrent requests (the server runs model work one request at a time).
        results = [None] * args.requests
        errors = []

        def one(i):
            try:
                results[i] = post(base, "/v1/chat/completions",
                                  chat_request(args.model, args.prompt_tokens, i + 1, args.max_tokens), args.timeout)
            except Exception as e:  # noqa: BLE001 -- reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(args.requests)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.monotonic() - t0
        if errors:
            sys.exit("lm_throughput: chat failed: " + errors[0])
        generated = sum(r["usage"]["completion_tokens"] for r in results)
        prompt = sum(r["usage"]["prompt_tokens"] for r in results)
        report("generation", generated, seconds, requests=args.requests, prompt_tokens=prompt,
               max_tokens=args.max_tokens)

        # 2. One rl update (one optimizer step over all samples).
        t0 = time.monotonic()
        r = post(base, "/v1/vinci/update",
                 update_body("rl", args.model, args.samples, args.sample_tokens, {"lr": 1e-3}, 0), args.timeout)
        seconds = time.monotonic() - t0
        tokens = r["tokens"]["prompt"] + r["tokens"]["completion"]
        report("rl_update", tokens, seconds, samples=args.samples, sample_tokens=args.sample_tokens,
               steps=r["steps"], loss=r["loss"])

        # 3. One sft update: epochs over the samples, batch samples per step.
        t0 = time.monotonic()
        r = post(base, "/v1/vinci/update",
                 update_body("sft", args.model, args.samples, args.sample_tokens,
                             {"lr": 1e-3, "epochs": args.epochs, "batch": args.batch}, -1), args.timeout)
        seconds = time.monotonic() - t0
        tokens = (r["tokens"]["prompt"] + r["tokens"]["completion"]) * args.epochs
        report("sft_update", tokens, seconds, samples=args.samples, sample_tokens=args.sample_tokens,
               epochs=args.epochs, batch=args.batch, steps=r["steps"], loss_before=round(r["loss_before"], 4),
               loss_after=round(r["loss_after"], 4))
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        err.close()
        if not args.store:
            shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
