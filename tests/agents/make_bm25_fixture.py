#!/usr/bin/env python3
"""Writes tests/agents/data/bm25_fixture.json: documents, queries and rank_bm25's scores.

The C++ test (bm25_test.cc) tokenizes the same texts with vinci's tokenizer, checks the tokens
equal the ones written here, and checks vinci's scores equal rank_bm25's to 1e-12 relative.

Run from the repository root (needs `pip install rank_bm25==0.2.2 numpy`):
    python3 tests/agents/make_bm25_fixture.py > tests/agents/data/bm25_fixture.json
The output is deterministic (random.Random(seed) per corpus).
"""
import json
import random
import string
import sys

import rank_bm25
from rank_bm25 import BM25Okapi


def tokenize(text):
    # daVinci-kernel's tokenizer (docs/method.md, Selection agent).
    text = text.lower()
    for ch in "_-/":
        text = text.replace(ch, " ")
    text = text.translate(str.maketrans("", "", string.punctuation))
    return text.split()


HANDWRITTEN = [
    "online_softmax_single_pass Fuse max and sum of softmax into one pass with the online "
    "rescaling trick. softmax reduction fusion ## Motivation Softmax over long rows reads the "
    "input three times. ## Key Idea Keep a running max m and sum s; when m grows, rescale s by "
    "exp(m_old - m_new). ## Example ```cuda float m = -INFINITY, s = 0.f; for (int i = tid; i < "
    "n; i += blockDim.x) { float x = in[i]; float m2 = fmaxf(m, x); s = s * __expf(m - m2) + "
    "__expf(x - m2); m = m2; } ```",
    "warp_shuffle_reduction Reduce within a warp with __shfl_down_sync instead of shared memory. "
    "reduction warp_shuffle general ## Motivation Shared-memory tree reductions need "
    "__syncthreads() at every level. ## Key Idea Use __shfl_down_sync(0xffffffff, v, offset) for "
    "offsets 16, 8, 4, 2, 1. ## Example ```cuda for (int o = 16; o > 0; o >>= 1) v += "
    "__shfl_down_sync(0xffffffff, v, o); ```",
    "vectorized_float4_loads Load and store with float4 so each thread moves 16 bytes per "
    "instruction. memory_bandwidth vectorization elementwise ## Motivation Elementwise kernels "
    "are bandwidth bound. ## Key Idea reinterpret_cast<const float4*>(in)[i] when the size is a "
    "multiple of 4 and pointers are 16-byte aligned; handle the tail separately.",
    "shared_memory_tiling_gemm Tile the matrix multiply through shared memory with a 32x32 "
    "block tile. gemm tiling shared_memory task_specific/matmul ## Key Idea Each block loads A "
    "and B tiles into __shared__ float As[32][33] (padding avoids bank conflicts), then "
    "accumulates.",
    "fuse_bias_relu_epilogue Apply bias and ReLU in the GEMM epilogue instead of separate "
    "kernels. fusion epilogue relu gemm ## Key Idea out = fmaxf(acc + bias[col], 0.f) before the "
    "store; saves two full passes over memory.",
    "tensor_core_wmma Use WMMA fragments (16x16x16, half inputs, float accumulate) for matrix "
    "multiply on tensor cores. tensor_cores wmma gemm half_precision",
    "occupancy_tuning Choose block size with cudaOccupancyMaxPotentialBlockSize and cap "
    "registers with __launch_bounds__ to raise occupancy. occupancy launch_config registers",
    "avoid_bank_conflicts Pad shared memory arrays by one element per row so column accesses "
    "hit distinct banks. shared_memory bank_conflicts padding",
    "",  # an empty document: length 0, still counted in N and in avgdl
    "grid-stride loops: for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += "
    "gridDim.x * blockDim.x) \u2014 tabs\tand\u00a0non-breaking\u2003em spaces\u3000split too",
]

VOCAB = (
    "kernel thread block warp grid shared memory global register tile tiling vectorized float4 "
    "load store coalesced bank conflict occupancy latency bandwidth reduction softmax online "
    "fusion fuse epilogue gemm matmul conv tensor core wmma mma half bf16 fp16 accumulate "
    "shuffle sync barrier atomic prefetch pipeline double buffer async copy cp_async l2 cache "
    "unroll loop stride launch bounds elementwise layernorm rmsnorm gelu relu sigmoid exp max "
    "sum mean variance welford transpose im2col pooling attention causal mask scale the a of "
    "to and in for with each per is by on"
).split()


def zipf_doc(rng, length):
    # Term i drawn with weight 1/(i+1): a few terms in most documents, a long tail in few.
    weights = [1.0 / (i + 1) for i in range(len(VOCAB))]
    return " ".join(rng.choices(VOCAB, weights=weights, k=length))


def make_case(name, docs, queries, prefixes, **params):
    case = {"name": name, "params": params or {"k1": 1.5, "b": 0.75, "epsilon": 0.25},
            "documents": docs, "tokens": [tokenize(d) for d in docs], "checks": []}
    p = case["params"]
    for n in prefixes:
        corpus = case["tokens"][:n]
        bm = BM25Okapi(corpus, k1=p["k1"], b=p["b"], epsilon=p["epsilon"])
        for q in queries:
            qt = tokenize(q)
            case["checks"].append({
                "prefix": n, "query": q, "query_tokens": qt,
                "average_idf": bm.average_idf, "avgdl": bm.avgdl,
                "scores": [float(x) for x in bm.get_scores(qt)],
            })
    return case


def main():
    cases = []
    queries = [
        "Write a fused softmax kernel using warp shuffle reductions and online rescaling",
        "matrix multiply GEMM with shared memory tiling, avoid bank conflicts; use tensor cores?",
        "elementwise ReLU + bias: vectorized float4 loads",
        "zebra quokka",  # no term in the corpus
        "tiling tiling tiling memory",  # repeated tokens
        "",  # empty query
    ]
    cases.append(make_case("handwritten", HANDWRITTEN, queries, [1, 2, 5, len(HANDWRITTEN)]))

    rng = random.Random(20261202)
    zipf_docs = [zipf_doc(rng, rng.randint(5, 60)) for _ in range(200)]
    zipf_queries = [zipf_doc(rng, rng.randint(3, 25)) for _ in range(12)]
    cases.append(make_case("zipf200", zipf_docs, zipf_queries, [3, 50, 200]))

    # Most terms in more than half the documents: average_idf < 0, so epsilon * average_idf is a
    # negative floor and some scores are negative.
    dense = ["a b c", "a b c d", "a b", "a c", "b c e", "a b c"]
    cases.append(make_case("negative_average_idf", dense, ["a", "a b c", "d e", "c c"], [6]))

    # n_t == N/2 gives idf_raw exactly 0 (not negative, so not floored).
    half = ["x y", "x z", "y w", "z w"]
    cases.append(make_case("zero_idf", half, ["x", "x y z w", "y"], [4]))

    cases.append(make_case("other_params", zipf_docs[:40], zipf_queries[:4], [40],
                           k1=1.2, b=0.5, epsilon=0.1))

    json.dump({"generator": "tests/agents/make_bm25_fixture.py",
               "rank_bm25": getattr(rank_bm25, "__version__", "0.2.2"),
               "cases": cases}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
