// The harness's side of the evaluation queue: an Evaluator whose evaluate() publishes a request
// to a Redis stream and blocks until a worker's result comes back (docs/distributed.md).
//
// Thread-safe, with as many requests in flight as there are callers (the loop's threads). A
// request equal to one already in flight (same address) waits for that one's result. Results
// arrive on this evaluator's own reply stream, read by one thread, and are matched to requests by
// address: a result delivered twice is taken once. When the server goes away the evaluator waits
// and reconnects, and sends every request still in flight again (duplicates are harmless), so a
// restarted server loses nothing; after give_up_s without a server, evaluate() fails with the URL.
#ifndef VINCI_QUEUE_QUEUE_EVALUATOR_H_
#define VINCI_QUEUE_QUEUE_EVALUATOR_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu/eval_result.h"
#include "queue/protocol.h"
#include "queue/redis.h"

namespace vinci {

struct QueueOptions {
  std::string url;                      // redis://HOST:PORT[/NAME]
  int attempts = 3;                     // deliveries before a request is recorded as failed
  double give_up_s = 600;               // without a server this long, evaluations fail
  double object_ttl_s = 7 * 24 * 3600;  // objects (task files, profiles) expire after this
  // Requests unanswered this long with no worker alive: say so on stderr (once, until an answer
  // comes), naming the command that starts one. A run without workers otherwise waits silently.
  double no_worker_warn_s = 10;
};

// What the queue looks like now: for `harness queue status` and the progress line.
struct QueueStatus {
  long long waiting = 0;                  // requests not yet taken by a worker
  long long in_progress = 0;              // taken, not answered (pending in the group)
  long long workers = 0;                  // workers whose heartbeat has not expired
  long long done = 0;                     // results answered by all workers since the queue was made
  std::vector<std::string> worker_lines;  // "name: heartbeat JSON", sorted
};
Result<QueueStatus> read_queue_status(Redis& redis, const QueueKeys& keys);
// Creates the stream and the consumer group when missing.
Status ensure_queue_group(Redis& redis, const QueueKeys& keys);

class QueueEvaluator : public Evaluator {
 public:
  QueueEvaluator(QueueOptions options, EvaluatorSpec spec);
  ~QueueEvaluator() override;

  // Connects, makes the consumer group, starts the reader. Errors name the URL.
  Status start();

  Result<EvalResult> evaluate(const Task& task, const Plan& plan, const EvalRequest& request) override;
  std::string name() const override { return spec_.kind; }

  // "queue 3 waiting, 2 in progress, 4 workers, 12.5 eval/s": for the progress line (empty
  // while the server cannot be asked). Asks the server at most once a second.
  std::string progress_line();
  long long answered() const { return answered_.load(); }

 private:
  struct Pending {
    EncodedRequest encoded;
    bool done = false;
    bool failed = false;  // every delivery failed: reasons in failure
    std::string failure;
    std::string measurement;
    std::string compile_log;
    Status error;  // the request could not be sent
  };

  Status submit_locked(const EncodedRequest& e);  // submit_mu_ held; reconnects as needed
  Status with_connection(std::unique_ptr<Redis>* conn, const std::function<Status(Redis&)>& fn);
  void reader_loop();
  Result<std::string> task_file_text(const Task& task);

  QueueOptions options_;
  EvaluatorSpec spec_;
  QueueUrl url_;
  QueueKeys keys_;
  std::string client_;  // this evaluator's name on the queue (its reply stream)

  std::mutex mu_;  // pending_, files_, broken_
  std::condition_variable cv_;
  std::map<Digest, std::shared_ptr<Pending>> pending_;
  std::map<std::string, std::string> files_;  // task file path -> text
  Status broken_;                             // not ok: the server has been gone longer than give_up_s

  std::mutex submit_mu_;  // submit_, uploaded_
  std::unique_ptr<Redis> submit_;
  std::map<Digest, double> uploaded_;  // object -> when (steady seconds) it was stored

  std::mutex status_mu_;
  std::unique_ptr<Redis> status_conn_;
  double status_at_ = -1;
  std::string status_line_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> connected_{false};
  std::atomic<long long> answered_{0};
  double started_at_ = 0;
  std::thread reader_;
};

}  // namespace vinci

#endif  // VINCI_QUEUE_QUEUE_EVALUATOR_H_
