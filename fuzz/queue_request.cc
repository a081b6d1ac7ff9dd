// A request body from an evaluation queue (queue/protocol.h): what a `harness worker` reads from
// the network. A body that decodes names a known evaluator and at least one attempt, and its
// addresses are addresses.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "queue/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  vinci::Result<vinci::QueueRequest> q = vinci::decode_queue_request(text);
  if (!q.ok()) return 0;
  VINCI_FUZZ_CHECK(q->spec.kind == "sim" || q->spec.kind == "cuda", "evaluator '" + q->spec.kind + "'");
  VINCI_FUZZ_CHECK(q->attempts >= 1, "attempts " + std::to_string(q->attempts));
  vinci::Digest back;
  VINCI_FUZZ_CHECK(vinci::Digest::parse_hex(q->plan.hex(), &back) && back == q->plan, "plan address");
  return 0;
}
