// Sequential test-time scaling (daVinci-kernel's Step 3, docs/method.md, Steps: 5 turns x 10
// iterations, keeping the best window of 4 turns), as an evaluation mode of the loop ([tts] keys).
//
// Per held-out task: one selection (as the ordinary evaluation does), then I iterations of T
// policy turns, turns numbered g = 0 .. I*T-1 over all iterations. Turn g sees the previous turn's
// choices and feedback, as in any rollout, except at the start of an iteration i > 0: it sees the
// last turn of the best window, over every turn so far, of W consecutive turns by summed reward
// (best_window; ties: the earliest window). The sim policy's context holds one turn, so "keeping a
// window" means continuing from that window's end rather than from the last turn. Draw keys:
// RngKey(seed).with("phase", "tts").with("task", id).with("turn", g).
//
// Records (phase tts, step = loop.steps, scheme 0, rollout = iteration, turn = g): per turn a
// sample, a measurement and a reward; after each iteration but the last, a ttsWindow record; then
// fast_p metrics with split "tts", turn mode "best" (best correct turn of all I*T) and "last"
// (turn I*T-1), denominators all and correct.
#ifndef VINCI_HARNESS_TTS_H_
#define VINCI_HARNESS_TTS_H_

#include <cstdint>
#include <vector>

namespace vinci {

struct Window {
  int32_t start = 0;
  int32_t length = 0;
  double reward_sum = 0;
};

// The window of min(w, n) consecutive rewards with the largest sum (the earliest on ties).
// REQUIRES: w >= 1. An empty list gives {0, 0, 0}.
Window best_window(const std::vector<double>& rewards, int32_t w);

}  // namespace vinci

#endif  // VINCI_HARNESS_TTS_H_
