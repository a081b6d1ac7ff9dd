#!/usr/bin/env python3
"""vinci's reference trainer for Hugging Face causal language models (docs/training.md).

It answers the trainer protocol `vinci.trainer/1` (POST /v1/vinci/update, /v1/vinci/load,
/v1/vinci/logprob) with LoRA adapters made by PEFT, trained with the update vinci's own tiny model
uses: the token-mean policy gradient on the reply tokens with the TRLOO advantages the run sends
(already scaled per role), an optional KL term to the base model (the adapter switched off),
gradient-norm clipping and Adam; `sft` updates minimise the replies' cross-entropy.

The model being trained is served in one of two ways:

- `--serve` (small models): this process answers the OpenAI chat API itself (GET /v1/models,
  POST /v1/chat/completions) for the base model and every stored state, sampling with the
  request's seed;
- `--vllm URL` (real models): a running vLLM server started with runtime LoRA
  (`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve MODEL --enable-lora --max-lora-rank R ...`)
  serves them; after each update the new adapter is loaded through vLLM's
  POST /v1/load_lora_adapter under the name the reply gives, which the run's next requests use.

States are stored by content address: STORE/<64 hex>/state.safetensors holds the adapter's
weights and its Adam state (so an update from a parent is the same whichever process makes it),
STORE/<64 hex>/adapter/ the same adapter in PEFT's format for vLLM. The digest is SHA-256 over
the state's tensors (name, dtype, shape, bytes, in name order). The base state (the adapter as
PEFT initialises it from --init-seed, B = 0, so it computes the base model) is stored too; its
name is the base model's. A state's model name is BASE-<first 16 hex of its digest>.

Determinism: on CPU with --threads 1 (the default there) the same parent, samples and seed give
the same digest, in this process or after a restart. On a GPU, reductions are usually not
bit-exact; vinci's replay does not depend on it (the run records every update's reply).

Usage:
  python3 python/peft_trainer.py --model DIR --store DIR --name NAME (--serve | --vllm URL)
      [--host 127.0.0.1] [--port 8200] [--device cpu|cuda|cuda:N] [--threads N]
      [--lora-rank 8] [--lora-alpha 16] [--lora-targets q_proj,k_proj,v_proj,o_proj]
      [--api-key-env VAR] [--vllm-api-key-env VAR] [--init-seed 0] [--max-body-mb 1024]

Prints `listening on HOST:PORT` on stdout once it answers. Needs torch, transformers, peft and
safetensors; nothing else of vinci.
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROTOCOL = "vinci.trainer/1"
ADAM_BETA1, ADAM_BETA2, ADAM_EPS = 0.9, 0.999, 1e-8


class ApiError(Exception):
    def __init__(self, status, message, kind="invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def bad(message):
    return ApiError(400, message)


def found(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "the number " + json.dumps(v)
    if isinstance(v, str):
        return "the string " + json.dumps(v[:60])
    if isinstance(v, list):
        return "a list"
    return "an object"


def is_hex(s, n):
    return isinstance(s, str) and len(s) == n and all(c in "0123456789abcdef" for c in s)


def number(obj, key, prefix, default, lo, hi, lo_open):
    if key not in obj or obj[key] is None:
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < lo or \
            (lo_open and v == lo) or v > hi:
        raise bad(f"{prefix}{key}: expected a finite number {'>' if lo_open else '>='} {lo:g} and <= {hi:g}, "
                  f"found {found(v)}")
    return float(v)


def integer(obj, key, prefix, default, lo, hi):
    if key not in obj or obj[key] is None:
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or v > hi:
        raise bad(f"{prefix}{key}: expected a whole number from {lo} to {hi}, found {found(v)}")
    return v


def text(obj, key, required):
    if key not in obj:
        if required:
            raise bad(f"{key}: expected a string, found nothing")
        return ""
    if not isinstance(obj[key], str):
        raise bad(f"{key}: expected a string, found {found(obj[key])}")
    return obj[key]


class Trainer:
    """The base model with its LoRA adapter, the store of states, and the updates."""

    def __init__(self, args):
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer
        self.torch = torch
        self.args = args
        self.name = args.name
        self.store = os.path.abspath(args.store)
        os.makedirs(self.store, exist_ok=True)
        self.device = torch.device(args.device)
        if self.device.type == "cpu":
            torch.set_num_threads(args.threads)
            torch.use_deterministic_algorithms(True)
        self.tok = AutoTokenizer.from_pretrained(args.model)
        base = AutoModelForCausalLM.from_pretrained(args.model, dtype="auto")
        self.context = int(getattr(base.config, "max_position_embeddings", 0) or 4096)
        if args.context:
            self.context = min(self.context, args.context)
        torch.manual_seed(args.init_seed)
        config = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.0, bias="none",
                            target_modules=[t for t in args.lora_targets.split(",") if t], task_type="CAUSAL_LM")
        self.model = get_peft_model(base, config).to(self.device)
        self.model.eval()  # no dropout: the update is a function of its inputs
        self.params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        if not self.params:
            raise SystemExit(f"peft_trainer: --lora-targets {args.lora_targets} matched no module of {args.model}")
        stop = set()
        for t in (self.tok.eos_token_id,):
            if t is not None:
                stop.add(int(t))
        gen = getattr(self.model.base_model.model, "generation_config", None)
        ids = getattr(gen, "eos_token_id", None) if gen is not None else None
        for t in (ids if isinstance(ids, list) else [ids]):
            if t is not None:
                stop.add(int(t))
        self.stop_ids = stop
        self.lock = threading.Lock()
        self.loaded = None  # the digest whose tensors the model holds now
        self.base_state = self.capture(step=0, zero_moments=True)
        self.base_digest = self.digest(self.base_state)
        self.put(self.base_digest, self.base_state)
        self.loaded = self.base_digest
        self.trained_tokens, self.training_seconds = 0, 0.0
        self.generated_tokens, self.generation_seconds = 0, 0.0

    # ---- states

    def capture(self, step, zero_moments=False, moments=None):
        torch = self.torch
        state = {}
        for n, p in sorted(self.params.items()):
            state["param." + n] = p.detach().to("cpu").contiguous().clone()
            if zero_moments:
                state["exp_avg." + n] = torch.zeros_like(state["param." + n])
                state["exp_avg_sq." + n] = torch.zeros_like(state["param." + n])
            else:
                state["exp_avg." + n] = moments[n][0].detach().to("cpu").contiguous().clone()
                state["exp_avg_sq." + n] = moments[n][1].detach().to("cpu").contiguous().clone()
        state["adam_step"] = torch.tensor([step], dtype=torch.int64)
        return state

    @staticmethod
    def digest(state):
        h = hashlib.sha256(b"vinci.peft_trainer.state/1\0")
        for k in sorted(state):
            t = state[k]
            h.update(k.encode() + b"\0" + str(t.dtype).encode() + b"\0" + json.dumps(list(t.shape)).encode() + b"\0")
            h.update(t.numpy().tobytes())
        return h.hexdigest()

    def path_of(self, digest):
        return os.path.join(self.store, digest)

    def model_name(self, digest):
        return self.name if digest == self.base_digest else f"{self.name}-{digest[:16]}"

    def put(self, digest, state):
        """Writes STORE/DIGEST (state and PEFT adapter) through a temporary folder and a rename."""
        from safetensors.torch import save_file
        final = self.path_of(digest)
        if os.path.exists(os.path.join(final, "state.safetensors")):
            return
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=self.store)
        try:
            save_file(state, os.path.join(tmp, "state.safetensors"), metadata={"format": "pt", "vinci": PROTOCOL})
            self.load_tensors(state)
            self.model.save_pretrained(os.path.join(tmp, "adapter"))
            if os.path.exists(final):
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def read(self, digest):
        from safetensors.torch import load_file
        path = os.path.join(self.path_of(digest), "state.safetensors")
        if not os.path.exists(path):
            raise ApiError(404, f"unknown adapter {digest}: the store {self.store} does not hold it", "not_found")
        state = load_file(path)
        if self.digest(state) != digest:
            raise ApiError(500, f"the store's state {path} does not match its name: its digest is "
                                f"{self.digest(state)}", "internal_error")
        names = {"param." + n for n in self.params}
        if names != {k for k in state if k.startswith("param.")}:
            raise ApiError(409, f"the store's state {digest} is not an adapter of this model and LoRA setting",
                           "conflict")
        return state

    def load_tensors(self, state):
        with self.torch.no_grad():
            for n, p in self.params.items():
                p.copy_(state["param." + n].to(p.device, p.dtype))

    def use(self, digest):
        if self.loaded != digest:
            self.load_tensors(self.base_state if digest == self.base_digest else self.read(digest))
            self.loaded = digest

    def resolve(self, name):
        if name in ("", self.name):
            return self.base_digest
        prefix = self.name + "-"
        hex16 = name[len(prefix):] if name.startswith(prefix) else ""
        if is_hex(hex16, 16):
            for d in sorted(os.listdir(self.store)):
                if is_hex(d, 64) and d.startswith(hex16):
                    return d
        raise ApiError(404, f"unknown model '{name}': this trainer serves '{self.name}' and its states "
                            f"'{prefix}<16 hex>' (GET /v1/models lists them)", "not_found")

    def models(self):
        names = [self.name] + sorted(self.model_name(d) for d in os.listdir(self.store)
                                     if is_hex(d, 64) and d != self.base_digest)
        return {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "vinci",
                                             "max_model_len": self.context} for n in names]}

    # ---- text to tokens

    def prompt_text(self, request):
        msgs = request.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise bad("messages: expected a non-empty list of chat messages, found " + found(msgs))
        tools = request.get("tools") or None
        try:
            return self.tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False)
        except Exception as e:  # the template's own complaint, e.g. a role it does not know
            raise bad(f"messages: the model's chat template cannot render them: {e}")

    def encode(self, request, completion, tool_calls=None):
        """(prompt ids, reply ids): the reply as the chat template ends an assistant message."""
        prefix = self.prompt_text(request)
        message = {"role": "assistant", "content": completion}
        if tool_calls:
            message["tool_calls"] = tool_calls
        try:
            full = self.tok.apply_chat_template(request["messages"] + [message], tools=request.get("tools") or None,
                                                add_generation_prompt=False, tokenize=False)
        except Exception:
            full = ""
        eos = self.tok.eos_token or ""
        if full.startswith(prefix) and completion in full[len(prefix):]:
            reply = full[len(prefix):]
            if eos and eos in reply:
                reply = reply[:reply.rindex(eos) + len(eos)]
        else:
            reply = completion + eos
        p = self.tok(prefix, add_special_tokens=False)["input_ids"]
        r = self.tok(reply, add_special_tokens=False)["input_ids"]
        return self.fit(p, r)

    def fit(self, prompt, reply):
        """Fits prompt + reply to the context as vinci's tiny model does: the prompt keeps up to half
        the context, the reply what is left of it (cut at its end), then the prompt's last tokens."""
        promised = min(len(prompt), self.context // 2)
        reply = reply[:max(0, self.context - promised)]
        keep = min(len(prompt), self.context - len(reply))
        return prompt[len(prompt) - keep:], reply

    def reply_logprobs(self, prompt, reply):
        torch = self.torch
        ids = torch.tensor([prompt + reply], device=self.device)
        logits = self.model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
        target = torch.tensor(reply, device=self.device)
        return torch.log_softmax(logits, dim=-1).gather(1, target[:, None])[:, 0]

    # ---- the protocol

    def check_protocol(self, body):
        if not isinstance(body, dict):
            raise bad("body: expected a JSON object, found " + found(body))
        protocol = text(body, "protocol", True)
        if protocol != PROTOCOL:
            raise bad(f'protocol: expected "{PROTOCOL}", found "{protocol}"')

    def load(self, body):
        self.check_protocol(body)
        adapter = text(body, "adapter", True)
        if adapter and not is_hex(adapter, 64):
            raise bad(f'adapter: expected "" or 64 lower-case hex digits, found "{adapter}"')
        digest = adapter or self.base_digest
        with self.lock:
            if digest != self.base_digest:
                self.read(digest)
            self.publish(digest)
        return {"model": self.model_name(digest), "adapter": digest}

    def logprob(self, body):
        if not isinstance(body, dict):
            raise bad("body: expected a JSON object, found " + found(body))
        name = text(body, "model", True)
        completion = text(body, "completion", True)
        request = body.get("request")
        if not isinstance(request, dict):
            raise bad("request: expected a chat completions request object, found " + found(request))
        p, r = self.encode(request, completion, body.get("tool_calls"))
        with self.lock, self.torch.no_grad():
            self.use(self.resolve(name))
            lp = float(self.reply_logprobs(p, r).double().sum()) if r else 0.0
        return {"model": name, "logprob": lp, "tokens": len(r)}

    def update(self, body):
        torch = self.torch
        start = time.monotonic()
        self.check_protocol(body)
        kind = text(body, "kind", True)
        if kind not in ("rl", "sft"):
            raise bad(f'kind: expected "rl" or "sft", found "{kind}"')
        rl = kind == "rl"
        base_model = text(body, "base_model", False)
        if base_model and base_model != self.name:
            raise bad(f'base_model: expected "{self.name}" (the model this trainer trains), found "{base_model}"')
        parent = text(body, "parent", True)
        if parent and not is_hex(parent, 64):
            raise bad(f'parent: expected "" or 64 lower-case hex digits, found "{parent}"')
        seed = text(body, "seed", True)
        if not is_hex(seed, 16):
            raise bad(f'seed: expected 16 lower-case hex digits, found "{seed}"')
        step = integer(body, "step", "", 0, -2**63, 2**63 - 1)
        options = body.get("options") or {}
        if not isinstance(options, dict):
            raise bad("options: expected an object, found " + found(options))
        lr = number(options, "lr", "options.", 1e-4, 0, 10, True)
        clip = number(options, "clip", "options.", 1.0, 0, 1e9, False)
        kl = number(options, "kl", "options.", 0.0, 0, 1e6, False)
        epochs = integer(options, "epochs", "options.", 1, 1, 1000)
        batch = integer(options, "batch", "options.", 0, 0, 1 << 20)
        samples = body.get("samples")
        if not isinstance(samples, list):
            raise bad("samples: expected a list, found " + ("nothing" if samples is None else found(samples)))
        seqs = []
        for i, s in enumerate(samples):
            at = f"samples[{i}]"
            if not isinstance(s, dict):
                raise bad(f"{at}: expected an object, found {found(s)}")
            request = s.get("request")
            if not isinstance(request, dict):
                raise bad(f"{at}.request: expected a chat completions request object, found {found(request)}")
            completion = s.get("completion")
            if not isinstance(completion, str):
                raise bad(f"{at}.completion: expected a string, found {found(completion)}")
            advantage = 1.0
            if rl:
                a = s.get("advantage")
                if isinstance(a, bool) or not isinstance(a, (int, float)) or not math.isfinite(a):
                    raise bad(f"{at}.advantage: expected a finite number, found {found(a)}")
                advantage = float(a)
            try:
                p, r = self.encode(request, completion, s.get("tool_calls"))
            except ApiError as e:
                raise bad(f"{at}.request.{e.message}")
            if r and p:
                seqs.append((p, r, advantage))
        parent_digest = parent or self.base_digest
        with self.lock:
            parent_state = self.base_state if parent_digest == self.base_digest else self.read(parent_digest)
            reply = {"samples": len(samples), "parent": parent_digest}
            if not seqs:
                # Nothing to learn from: the parent is the result, unchanged (no optimizer step).
                self.publish(parent_digest)
                reply.update({"model": self.model_name(parent_digest), "adapter": parent_digest, "loss": 0.0,
                              "tokens": {"prompt": 0, "completion": 0}, "seconds": time.monotonic() - start})
                return reply
            began = time.monotonic()
            stats = self.train(rl, seqs, parent_state, lr, clip, kl, epochs, batch, int(seed, 16))
            self.training_seconds += time.monotonic() - began
            self.trained_tokens += (stats["prompt"] + stats["completion"]) * epochs
            reply["tokens"] = {"prompt": stats["prompt"], "completion": stats["completion"]}
            if not math.isfinite(stats["loss"]):
                # Recorded by the run as a failed update; the model stays the parent.
                self.loaded = None
                reply.update({"model": self.model_name(parent_digest), "adapter": parent_digest, "loss": None,
                              "failure": f"the update's loss is not finite ({stats['loss']}); the parent "
                                         f"{parent_digest} is unchanged and nothing was stored",
                              "seconds": time.monotonic() - start})
                return reply
            digest = self.digest(stats["state"])
            self.put(digest, stats["state"])
            self.loaded = digest
            self.publish(digest)
        reply.update({"model": self.model_name(digest), "adapter": digest, "loss": stats["loss"],
                      "steps": stats["steps"], "grad_norm": stats["grad_norm"]})
        if not rl:
            reply.update({"loss_before": stats["loss_before"], "loss_after": stats["loss_after"]})
        reply["seconds"] = time.monotonic() - start
        return reply

    def train(self, rl, seqs, parent_state, lr, clip, kl, epochs, batch, seed):
        """One update from parent_state; the new state in stats["state"]. Mirrors vinci's tiny model
        (lm/model.cc): per minibatch, loss = sum over its samples of -A * sum(log p(reply)) / n
        (n: the minibatch's reply tokens; A = 1 for sft) + kl * sum(exp(d) - d - 1) / n with
        d = log p_base - log p, then gradient clipping and one Adam step."""
        torch = self.torch
        self.load_tensors(parent_state)
        moments = {n: (parent_state["exp_avg." + n].to(self.device).clone(),
                       parent_state["exp_avg_sq." + n].to(self.device).clone()) for n in self.params}
        adam_step = int(parent_state["adam_step"][0])
        size = batch if batch > 0 else (len(seqs) if rl else 8)
        params = [self.params[n] for n in sorted(self.params)]

        def mean_ce():
            with torch.no_grad():
                total = sum(-float(self.reply_logprobs(p, r).double().sum()) for p, r, _ in seqs)
            return total / sum(len(r) for _, r, _ in seqs)

        stats = {"steps": 0, "grad_norm": 0.0, "loss": 0.0}
        if not rl:
            stats["loss_before"] = mean_ce()
        gen = torch.Generator().manual_seed(seed & ((1 << 63) - 1))
        for _ in range(epochs):
            order = torch.randperm(len(seqs), generator=gen).tolist()
            epoch_loss, epoch_sum, epoch_tokens, steps = 0.0, 0.0, 0, 0
            stats["prompt"] = stats["completion"] = 0
            for begin in range(0, len(order), size):
                chunk = [seqs[i] for i in order[begin:begin + size]]
                n = sum(len(r) for _, r, _ in chunk)
                step_loss = 0.0
                for p, r, a in chunk:
                    lp = self.reply_logprobs(p, r)
                    term = -a * lp.sum() / n
                    if rl and kl > 0:
                        with torch.no_grad(), self.model.disable_adapter():
                            ref = self.reply_logprobs(p, r)
                        d = ref - lp
                        term = term + kl * (torch.exp(d) - d - 1).sum() / n
                    term.backward()
                    step_loss += float(term)
                    epoch_sum -= float(lp.detach().double().sum())
                    stats["prompt"] += len(p)
                    stats["completion"] += len(r)
                norm = torch.nn.utils.clip_grad_norm_(params, clip) if clip > 0 else \
                    torch.linalg.vector_norm(torch.stack([q.grad.norm() for q in params]))
                stats["grad_norm"] = float(norm)
                adam_step += 1
                bias1 = 1 - ADAM_BETA1 ** adam_step
                bias2 = 1 - ADAM_BETA2 ** adam_step
                with torch.no_grad():
                    for name in sorted(self.params):
                        q = self.params[name]
                        m, v = moments[name]
                        g = q.grad
                        m.mul_(ADAM_BETA1).add_(g, alpha=1 - ADAM_BETA1)
                        v.mul_(ADAM_BETA2).addcmul_(g, g, value=1 - ADAM_BETA2)
                        q.addcdiv_(m, (v.sqrt() / math.sqrt(bias2)).add_(ADAM_EPS), value=-lr / bias1)
                        q.grad = None
                epoch_loss += step_loss
                epoch_tokens += n
                steps += 1
                stats["steps"] += 1
            # rl: the mean of the steps' losses; sft: the epoch's token-mean cross-entropy.
            stats["loss"] = epoch_loss / steps if rl else epoch_sum / epoch_tokens
            if not math.isfinite(stats["loss"]):
                return stats
        if not rl:
            stats["loss_after"] = mean_ce()
        stats["state"] = self.capture(adam_step, moments=moments)
        return stats

    # ---- serving

    def publish(self, digest):
        """Makes the state answerable under its model name (vLLM: loads the adapter)."""

    def chat(self, body):
        raise ApiError(404, "this trainer does not serve chat completions", "not_found")


class SelfServing(Trainer):
    """Answers the OpenAI chat API itself, for small models."""

    def chat(self, body):
        torch = self.torch
        if not isinstance(body, dict):
            raise bad("body: expected a JSON object, found " + found(body))
        if body.get("stream"):
            raise bad("stream: this trainer answers whole replies only")
        if int(body.get("n", 1) or 1) != 1:
            raise bad("n: this trainer answers one choice a request")
        name = text(body, "model", False)
        temperature = number(body, "temperature", "", 1.0, 0, 100, False)
        top_p = number(body, "top_p", "", 1.0, 0, 1, True)
        seed = integer(body, "seed", "", 0, -2**63, 2**64 - 1)
        prompt = self.tok(self.prompt_text(body), add_special_tokens=False)["input_ids"]
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        limit = self.context if limit is None else integer({"max_tokens": limit}, "max_tokens", "", 0, 1, 1 << 30)
        # A prompt longer than the context loses its first tokens (as in vinci's tiny model).
        prompt, room = self.fit(prompt, [0] * min(limit, self.context))
        limit = len(room)
        began = time.monotonic()
        with self.lock, torch.no_grad():
            digest = self.resolve(name)
            self.use(digest)
            gen = torch.Generator(device=self.device).manual_seed(seed & ((1 << 63) - 1))
            out, finish, past = [], "length", None
            ids = torch.tensor([prompt], device=self.device)
            for _ in range(limit):
                res = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = res.past_key_values
                logits = res.logits[0, -1].float()
                if temperature == 0:
                    t = int(torch.argmax(logits))
                else:
                    probs = torch.softmax(logits / temperature, dim=-1)
                    if top_p < 1:
                        sp, si = torch.sort(probs, descending=True)
                        keep = torch.cumsum(sp, 0) - sp < top_p
                        probs = torch.zeros_like(probs).scatter_(0, si[keep], sp[keep])
                    t = int(torch.multinomial(probs, 1, generator=gen))
                if t in self.stop_ids:
                    finish = "stop"
                    break
                out.append(t)
                ids = torch.tensor([[t]], device=self.device)
        self.generated_tokens += len(out)
        self.generation_seconds += time.monotonic() - began
        content = self.tok.decode(out, skip_special_tokens=False)
        used = len(out) + (1 if finish == "stop" else 0)
        return {"id": "chatcmpl-" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24],
                "object": "chat.completion", "created": 0, "model": self.model_name(digest),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "finish_reason": finish}],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": used,
                          "total_tokens": len(prompt) + used}}


class VllmDriving(Trainer):
    """Loads each state into a running vLLM server as a runtime LoRA adapter."""

    def __init__(self, args):
        self.vllm = args.vllm.rstrip("/")
        self.vllm_key = os.environ.get(args.vllm_api_key_env, "") if args.vllm_api_key_env else ""
        if args.vllm_api_key_env and not self.vllm_key:
            raise SystemExit(f"peft_trainer: --vllm-api-key-env names {args.vllm_api_key_env}, which is not set")
        super().__init__(args)
        served = [m.get("id") for m in self.vllm_call("GET", "/models").get("data", [])]
        if self.name not in served:
            raise SystemExit(f"peft_trainer: the vLLM server at {self.vllm} serves {served}, not --name "
                             f"{self.name} (its --served-model-name)")

    def vllm_call(self, method, path, body=None):
        req = urllib.request.Request(self.vllm + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        req.add_header("Content-Type", "application/json")
        if self.vllm_key:
            req.add_header("Authorization", "Bearer " + self.vllm_key)
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                raw = r.read().decode("utf-8", "replace")
                try:
                    return json.loads(raw)
                except ValueError:
                    return {"text": raw}
        except urllib.error.HTTPError as e:
            raise ApiError(502, f"the vLLM server at {self.vllm} answered HTTP {e.code} to {method} {path}: "
                                f"{e.read().decode('utf-8', 'replace')[:500]}", "bad_gateway")
        except (urllib.error.URLError, OSError) as e:
            raise ApiError(502, f"the vLLM server at {self.vllm} cannot be reached ({e}) for {method} {path}",
                           "bad_gateway")

    def publish(self, digest):
        if digest == self.base_digest:
            return
        name = self.model_name(digest)
        served = [m.get("id") for m in self.vllm_call("GET", "/models").get("data", [])]
        if name in served:
            return
        try:
            self.vllm_call("POST", "/load_lora_adapter",
                           {"lora_name": name, "lora_path": os.path.join(self.path_of(digest), "adapter")})
        except ApiError as e:
            if "already" not in e.message:  # loaded by a request that raced this one
                raise ApiError(502, e.message + " (start vLLM with --enable-lora and "
                                                "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)", "bad_gateway")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    trainer = None
    api_key = ""
    max_body = 1 << 30

    def log_message(self, fmt, *args):  # quiet: the run records what matters
        pass

    def send(self, status, obj):
        data = json.dumps(obj, allow_nan=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, e):
        self.send(e.status, {"error": {"message": e.message, "type": e.kind, "code": e.status}})

    def authorised(self):
        if not self.api_key or self.headers.get("Authorization", "") == "Bearer " + self.api_key:
            return True
        self.error(ApiError(401, "the request's API key is missing or wrong", "authentication_error"))
        return False

    def route(self):
        path = self.path.split("?", 1)[0]
        return path[3:] if path.startswith("/v1/") else path

    def do_GET(self):
        if not self.authorised():
            return
        if self.route() == "/models":
            return self.send(200, self.trainer.models())
        self.error(ApiError(404, f"no route GET {self.path}", "not_found"))

    def do_POST(self):
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > self.max_body:
            self.close_connection = True  # the body is not read: the connection cannot be reused
            return self.error(ApiError(413 if length > 0 else 400,
                                       f"body: expected a Content-Length from 0 to {self.max_body} bytes "
                                       f"(--max-body-mb), found {self.headers.get('Content-Length')!r}"))
        raw = self.rfile.read(length) if length > 0 else b""
        if not self.authorised():
            return
        routes = {"/chat/completions": self.trainer.chat, "/vinci/update": self.trainer.update,
                  "/vinci/load": self.trainer.load, "/vinci/logprob": self.trainer.logprob}
        fn = routes.get(self.route())
        if fn is None:
            return self.error(ApiError(404, f"no route POST {self.path}", "not_found"))
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            return self.error(bad(f"body: expected JSON, found bytes that do not parse ({e})"))
        try:
            self.send(200, fn(body))
        except ApiError as e:
            self.error(e)
        except Exception as e:  # the trainer's own failure: the run stops, resumable
            self.error(ApiError(500, f"the trainer failed: {type(e).__name__}: {e}", "internal_error"))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="peft_trainer.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the base model's folder (Hugging Face format)")
    ap.add_argument("--store", required=True, help="folder of the states (made when missing)")
    ap.add_argument("--name", required=True, help="the base model's name in the chat API (vLLM's "
                                                  "--served-model-name); states are NAME-<16 hex>")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--serve", action="store_true", help="answer the chat API in this process")
    mode.add_argument("--vllm", help="the vLLM server's base URL, e.g. http://127.0.0.1:8000/v1")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8200, help="0: any free port (printed)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (1: bit-exact updates)")
    ap.add_argument("--context", type=int, default=0, help="cap on prompt + reply tokens (0: the model's)")
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--lora-alpha", type=float, default=16)
    ap.add_argument("--lora-targets", default="q_proj,k_proj,v_proj,o_proj")
    ap.add_argument("--init-seed", type=int, default=0, help="seed of the adapter's initial A matrices")
    ap.add_argument("--api-key-env", default="", help="require the key this variable holds (Bearer)")
    ap.add_argument("--vllm-api-key-env", default="", help="the variable holding vLLM's --api-key")
    ap.add_argument("--max-body-mb", type=int, default=1024, help="the largest request body accepted (413 above)")
    args = ap.parse_args(argv)
    if not os.path.exists(os.path.join(args.model, "config.json")):
        ap.error(f"--model {args.model}: expected a Hugging Face model folder (with config.json), found none")
    for flag, v, lo in (("--port", args.port, 0), ("--threads", args.threads, 1), ("--lora-rank", args.lora_rank, 1)):
        if v < lo:
            ap.error(f"{flag}: expected a whole number >= {lo}, found {v}")
    key = ""
    if args.api_key_env:
        key = os.environ.get(args.api_key_env, "")
        if not key:
            ap.error(f"--api-key-env names {args.api_key_env}, which is not set")
    trainer = (VllmDriving if args.vllm else SelfServing)(args)
    handler = type("H", (Handler,), {"trainer": trainer, "api_key": key, "max_body": args.max_body_mb << 20})
    server = ThreadingHTTPServer((args.host, args.port), handler)
    print(f"peft_trainer: {args.name} from {args.model}, LoRA rank {args.lora_rank} on {args.lora_targets}, "
          f"{sum(p.numel() for p in trainer.params.values())} trained parameters, base state "
          f"{trainer.base_digest}, store {trainer.store}, device {args.device}"
          + (f", serving through vLLM at {args.vllm}" if args.vllm else ", serving the chat API itself"),
          file=sys.stderr, flush=True)
    print(f"listening on {args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        t = trainer
        print(f"peft_trainer: generated {t.generated_tokens} tokens in {t.generation_seconds:.1f} s; trained on "
              f"{t.trained_tokens} tokens in {t.training_seconds:.1f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    sys.exit(main())
