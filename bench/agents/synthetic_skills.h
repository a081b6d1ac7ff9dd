// A synthetic skill library and task prompts for benchmarking BM25 recall.
//
// Skills look like daVinci-kernel's: a snake_case name, a one-line description, a scope, 3-6 tags
// and a markdown body (## Motivation, ## Key Idea, ## Example with a CUDA excerpt), 150-350 tokens.
// Words come from a kernel-optimization vocabulary (tiling, float4, warp shuffle, online softmax,
// fusion, tensor cores, bank conflicts, occupancy, ...) drawn with Zipf-like frequencies
// (P(rank r) proportional to 1/r), mixed with English function words and CUDA code words, plus a
// long tail of identifier-like tokens (tile sizes, buffer names) whose number grows with the
// library as in real corpora (Heaps' law). Everything is drawn from keyed streams, so a library of
// n skills is the same bytes on every machine and the first n skills of a bigger library equal
// the library of n.
#ifndef VINCI_BENCH_AGENTS_SYNTHETIC_SKILLS_H_
#define VINCI_BENCH_AGENTS_SYNTHETIC_SKILLS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "agents/skill.h"

namespace vinci {

// Skill number i of the synthetic library with the given seed.
Skill synthetic_skill(uint64_t seed, uint64_t i);

// A KernelBench-style task prompt (instructions plus a PyTorch reference model), number i of a
// fixed set of op families (softmax, GEMM + bias + ReLU, conv, layernorm, attention, ...).
std::string synthetic_task_prompt(uint64_t i);

}  // namespace vinci

#endif  // VINCI_BENCH_AGENTS_SYNTHETIC_SKILLS_H_
