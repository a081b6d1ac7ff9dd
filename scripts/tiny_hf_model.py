#!/usr/bin/env python3
"""A tiny random-weight Hugging Face causal language model with a tokenizer trained here, for
exercising vinci's language-model path against real Hugging Face, PEFT and vLLM code with no
download: `python3 scripts/tiny_hf_model.py OUT_DIR`.

The model: Qwen3ForCausalLM, hidden 128, 2 layers, 2 heads (1 KV head, head_dim 64: vLLM's CPU
attention has no kernel for head_dim 16), intermediate 256, float32 weights drawn under
torch.manual_seed(20261206). Its tokenizer is a byte-level BPE with 4096 tokens trained on vinci's
prompts/, docs/ and task files, with Qwen3's special tokens and a Qwen3-like chat template
(system/user/assistant/tool messages, tools, tool calls). The weights are random: replies are
noise until something trains them. Needs torch, transformers and tokenizers.
"""
import glob, json, os, sys
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

out = sys.argv[1]
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.makedirs(out, exist_ok=True)

# Qwen3's special tokens. <tool_call>, </tool_call>, <think>, </think> are ordinary added
# tokens (special=False), so they survive decoding and vLLM's tool and reasoning parsers see them.
specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
added = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]

files = sorted(glob.glob(os.path.join(repo, "prompts", "*.md")) +
               glob.glob(os.path.join(repo, "docs", "*.md")) +
               glob.glob(os.path.join(repo, "data", "tasks", "*.toml")))
def corpus():
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                yield line

tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(trim_offsets=False)
trainer = trainers.BpeTrainer(vocab_size=4096 - len(specials) - len(added), min_frequency=2,
                              show_progress=False, special_tokens=[],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(corpus(), trainer=trainer)
tok.add_special_tokens(specials)
tok.add_tokens(added)

template = r"""{%- macro text(content) -%}
{%- if content is string -%}{{ content }}
{%- elif content is iterable -%}{%- for part in content -%}{%- if part.type == 'text' -%}{{ part.text }}{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- set first_is_system = messages and messages[0].role == 'system' -%}
{%- if tools -%}
{{ '<|im_start|>system\n' }}
{%- if first_is_system -%}{{ text(messages[0].content) + '\n\n' }}{%- endif -%}
{{ '# Tools\n\nThese functions can be called. Their signatures:\n<tools>' }}
{%- for tool in tools -%}{{ '\n' }}{{ tool | tojson }}{%- endfor -%}
{{ '\n</tools>\n\nTo call one, answer with a JSON object naming it and its arguments between tags:\n<tool_call>\n{"name": NAME, "arguments": {ARGUMENTS}}\n</tool_call><|im_end|>\n' }}
{%- elif first_is_system -%}
{{ '<|im_start|>system\n' + text(messages[0].content) + '<|im_end|>\n' }}
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'system' -%}
{%- if not loop.first -%}{{ '<|im_start|>system\n' + text(m.content) + '<|im_end|>\n' }}{%- endif -%}
{%- elif m.role == 'user' -%}
{{ '<|im_start|>user\n' + text(m.content) + '<|im_end|>\n' }}
{%- elif m.role == 'assistant' -%}
{{ '<|im_start|>assistant\n' }}
{%- if m.reasoning_content is defined and m.reasoning_content -%}{{ '<think>\n' + m.reasoning_content + '\n</think>\n\n' }}{%- endif -%}
{{ text(m.content) }}
{%- if m.tool_calls is defined and m.tool_calls -%}
{%- for call in m.tool_calls -%}
{%- set f = call.function if call.function is defined else call -%}
{%- if not loop.first or m.content -%}{{ '\n' }}{%- endif -%}
{{ '<tool_call>\n{"name": "' + f.name + '", "arguments": ' }}
{%- if f.arguments is string -%}{{ f.arguments }}{%- else -%}{{ f.arguments | tojson }}{%- endif -%}
{{ '}\n</tool_call>' }}
{%- endfor -%}
{%- endif -%}
{{ '<|im_end|>\n' }}
{%- elif m.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{ '<|im_start|>user' }}{%- endif -%}
{{ '\n<tool_response>\n' + text(m.content) + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{ '<|im_end|>\n' }}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}
"""

fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                               pad_token="<|endoftext|>", unk_token=None,
                               model_max_length=4096, clean_up_tokenization_spaces=False)
fast.chat_template = template
fast.save_pretrained(out)

vocab = len(fast)
assert vocab == 4096, vocab
config = Qwen3Config(
    vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
    num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=4096,
    rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
    bos_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
    eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
    pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
    torch_dtype="float32")
torch.manual_seed(20261206)
model = Qwen3ForCausalLM(config)
model.save_pretrained(out, safe_serialization=True)
# The generation config vLLM reads its default stop tokens and sampling from: none of the
# latter, so a request's own settings (or vLLM's neutral defaults) apply.
with open(os.path.join(out, "generation_config.json"), "w") as fh:
    json.dump({"eos_token_id": [config.eos_token_id, config.pad_token_id]}, fh, indent=2)
n = sum(p.numel() for p in model.parameters())
print(f"model: {out}, {n} parameters, vocabulary {vocab}, trained on {len(files)} files")
