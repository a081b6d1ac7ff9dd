// `harness serve`: vinci's sim backbone behind the OpenAI chat completions API, so a whole
// language-model experiment runs on one machine with no model weights, and tests talk to a real
// HTTP server on loopback.
//
// The server reads a request as a model would, from its text alone:
//   role       the user message's sections: "# Candidate Skills" -> selection, "# Trajectory" ->
//              summary, anything else -> policy (prompt templates may change freely around them)
//   task       "Task <id>:" of the task header, its size from "Sizes (full|small)"
//   skills     the policy's injected skill block: each skill's name (looked up in the server's
//              library) and the "- `knob = value`" lines vinci's distilled skills carry
//   history    the last assistant reply's "# knobs:" line and the feedback after it
//              ("compiled: yes", "correct: yes", "speedup: 1.3x", ...)
// and answers with the sim network: selection and summary as tool calls (structured tool_calls
// when the request offered tools, else Qwen3-style XML in the content), the policy with the code
// generator's plan in the model-facing format (gpu/model_plan.h). Draws are keyed by the request's
// canonical body (which holds vinci's per-call seed), so one request always gets one answer and
// two runs against one server record the same replies.
#ifndef VINCI_HARNESS_SIM_SERVER_H_
#define VINCI_HARNESS_SIM_SERVER_H_

#include <memory>
#include <string>

#include "agents/backbone.h"
#include "agents/skill_library.h"
#include "gpu/task.h"
#include "harness/chat_server.h"

namespace vinci {

class SimChatResponder {
 public:
  // REQUIRES: suite, library and backbone outlive the responder.
  SimChatResponder(const TaskSuite& suite, const SkillLibrary& library, Backbone& backbone);
  // The answer to one chat completions request; InvalidArgument for a request it cannot read
  // (the server answers 400 with the message). A request no message of which names a task (no
  // line "Task <id>: "), such as a run's preflight, is answered "OK".
  Result<ChatAnswer> answer(const nlohmann::json& request);

 private:
  Result<ChatAnswer> select(const std::string& user, const RngKey& key, bool greedy, bool tools);
  Result<ChatAnswer> policy(const nlohmann::json& messages, const RngKey& key, bool greedy);
  Result<ChatAnswer> summary(const std::string& user, const RngKey& key, bool greedy, bool tools);

  const TaskSuite& suite_;
  const SkillLibrary& library_;
  Backbone& backbone_;
};

}  // namespace vinci

#endif  // VINCI_HARNESS_SIM_SERVER_H_
