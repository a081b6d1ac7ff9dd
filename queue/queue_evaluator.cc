#include "queue/queue_evaluator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "core/atomic_file.h"
#include "core/text.h"

namespace vinci {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

}  // namespace

Status ensure_queue_group(Redis& redis, const QueueKeys& keys) {
  for (const char* kind : {"sim", "cuda"}) {
    Result<RedisReply> r = redis.command({"XGROUP", "CREATE", keys.requests(kind), kQueueGroup, "0", "MKSTREAM"});
    if (!r.ok() && r.status().message().find("BUSYGROUP") == std::string::npos) return r.status();
  }
  return Status();
}

Result<QueueStatus> read_queue_status(Redis& redis, const QueueKeys& keys) {
  QueueStatus s;
  for (const char* kind : {"sim", "cuda"}) {
    VINCI_ASSIGN_OR_RETURN(RedisReply len, redis.command({"XLEN", keys.requests(kind)}));
    Result<RedisReply> pending = redis.command({"XPENDING", keys.requests(kind), kQueueGroup});
    long long p = 0;
    if (pending.ok() && pending->is_array() && !pending->elements.empty())
      p = pending->elements[0].integer;
    else if (!pending.ok() && pending.status().code() == StatusCode::kIoError)
      return pending.status();
    // Answered entries are deleted: what is left is waiting or taken.
    s.in_progress += p;
    s.waiting += std::max(0LL, len.integer - p);
  }
  std::string cursor = "0";
  std::vector<std::string> names;
  do {
    VINCI_ASSIGN_OR_RETURN(RedisReply r,
                           redis.command({"SCAN", cursor, "MATCH", keys.workers_pattern(), "COUNT", "1000"}));
    if (!r.is_array() || r.elements.size() != 2)
      return internal_error("queue " + redis.url().text + ": SCAN: unexpected reply");
    cursor = r.elements[0].str;
    for (const auto& k : r.elements[1].elements) names.push_back(k.str);
  } while (cursor != "0");
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    VINCI_ASSIGN_OR_RETURN(RedisReply v, redis.command({"GET", n}));
    if (v.is_nil()) continue;  // expired between SCAN and GET
    ++s.workers;
    s.worker_lines.push_back(n.substr(keys.worker("").size()) + ": " + v.str);
  }
  VINCI_ASSIGN_OR_RETURN(RedisReply done, redis.command({"GET", keys.done()}));
  if (!done.is_nil()) s.done = std::atoll(done.str.c_str());
  return s;
}

QueueEvaluator::QueueEvaluator(QueueOptions options, EvaluatorSpec spec)
    : options_(std::move(options)), spec_(std::move(spec)), keys_("vinci") {}

QueueEvaluator::~QueueEvaluator() {
  stop_ = true;
  cv_.notify_all();
  if (reader_.joinable()) reader_.join();
  if (submit_) (void)submit_->command({"DEL", keys_.reply(client_)});
}

Status QueueEvaluator::start() {
  VINCI_ASSIGN_OR_RETURN(url_, parse_queue_url(options_.url));
  keys_ = QueueKeys(url_.name);
  // The reply stream's name only has to be unique among the queue's clients; it is no part of
  // any record.
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::random_device rd;
  client_ = std::string(host) + "-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 1000000);
  VINCI_ASSIGN_OR_RETURN(submit_, Redis::connect(url_));
  VINCI_RETURN_IF_ERROR(ensure_queue_group(*submit_, keys_));
  connected_ = true;
  started_at_ = now_s();
  reader_ = std::thread([this] { reader_loop(); });
  return Status();
}

Result<std::string> QueueEvaluator::task_file_text(const Task& task) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(task.source_file);
  if (it != files_.end()) return it->second;
  Result<std::string> text = read_file(task.source_file, kTaskFile);
  if (!text.ok())
    return Status(text.status().code(),
                  "queue: task " + task.id + ": its task file cannot be sent: " + text.status().message());
  files_[task.source_file] = *text;
  return text;
}

Status QueueEvaluator::with_connection(std::unique_ptr<Redis>* conn, const std::function<Status(Redis&)>& fn) {
  double down_since = -1;
  double wait = 0.05;
  bool said = false;
  for (;;) {
    if (stop_) return failed_precondition("queue " + url_.text + ": the evaluator is stopping");
    Status st;
    if (!*conn) {
      Result<std::unique_ptr<Redis>> c = Redis::connect(url_);
      if (c.ok()) {
        *conn = std::move(c).value();
        st = ensure_queue_group(**conn, keys_);
      } else {
        st = c.status();
      }
    }
    if (st.ok()) st = fn(**conn);
    if (st.ok()) {
      if (said) std::fprintf(stderr, "queue %s: reconnected\n", url_.text.c_str());
      return st;
    }
    if (st.code() != StatusCode::kIoError) return st;
    conn->reset();
    double t = now_s();
    if (down_since < 0) down_since = t;
    if (t - down_since > options_.give_up_s)
      return Status(st.code(),
                    st.message() + " (no server for " + format_number("%.0f", options_.give_up_s) + " s: giving up)");
    if (!said) {
      std::fprintf(stderr, "%s; waiting for the server\n", st.message().c_str());
      said = true;
    }
    sleep_s(wait);
    wait = std::min(1.0, wait * 2);
  }
}

Status QueueEvaluator::submit_locked(const EncodedRequest& e) {
  return with_connection(&submit_, [&](Redis& r) -> Status {
    double t = now_s();
    for (const auto& [address, bytes] : e.objects) {
      auto up = uploaded_.find(address);
      if (up != uploaded_.end() && t - up->second < 3600) continue;
      VINCI_RETURN_IF_ERROR(r.command({"SET", keys_.object(address), bytes, "EX",
                                       std::to_string(static_cast<long long>(options_.object_ttl_s))})
                                .status());
      uploaded_[address] = t;
    }
    return r
        .command({"XADD", keys_.requests(spec_.kind), "*", "addr", e.address.hex(), "reply", keys_.reply(client_),
                  "body", e.body, "plan", e.plan})
        .status();
  });
}

Result<EvalResult> QueueEvaluator::evaluate(const Task& task, const Plan& plan, const EvalRequest& request) {
  if (!connected_) return failed_precondition("queue evaluator: start() was not called");
  VINCI_ASSIGN_OR_RETURN(std::string text, task_file_text(task));
  EncodedRequest e = encode_queue_request(task, text, plan, request, spec_, options_.attempts);
  std::shared_ptr<Pending> p;
  bool send = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(e.address);
    if (it != pending_.end()) {
      p = it->second;  // the same evaluation is in flight: its result is this one's
    } else {
      p = std::make_shared<Pending>();
      p->encoded = e;
      pending_[e.address] = p;
      send = true;
    }
  }
  if (send) {
    Status st;
    {
      std::lock_guard<std::mutex> lock(submit_mu_);
      st = submit_locked(e);
    }
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      p->done = true;
      p->failed = true;
      p->error = st;
      pending_.erase(e.address);
      cv_.notify_all();
      return st;
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return p->done || stop_ || !broken_.ok(); });
  if (!p->done) {
    pending_.erase(e.address);
    if (!broken_.ok()) return broken_;
    return failed_precondition("queue " + url_.text + ": the evaluator stopped before the result came");
  }
  auto it = pending_.find(e.address);
  if (it != pending_.end() && it->second == p) pending_.erase(it);
  if (!p->error.ok()) return p->error;
  lock.unlock();
  if (p->failed) return failed_queue_result(spec_.kind, task, plan, request, p->failure);
  Result<EvalResult> r = decode_queue_result(p->measurement, p->compile_log);
  if (!r.ok()) return Status(r.status().code(), "queue " + url_.text + ": " + r.status().message());
  if (r->plan != plan_address(plan))
    return mismatch("queue " + url_.text + ": the result for request " + e.address.hex() + " is for plan " +
                    r->plan.hex() + ", not " + plan_address(plan).hex());
  return r;
}

void QueueEvaluator::reader_loop() {
  std::unique_ptr<Redis> conn;
  std::string last = "0-0";
  double down_since = -1;
  bool lost = false;
  const std::string stream = keys_.reply(client_);
  double quiet_since = now_s();  // since the last answer, or since requests began waiting
  bool warned = false;
  while (!stop_) {
    if (!conn) {
      Result<std::unique_ptr<Redis>> c = Redis::connect(url_, 5, 30);
      if (!c.ok()) {
        double t = now_s();
        if (down_since < 0) down_since = t;
        if (t - down_since > options_.give_up_s) {
          std::lock_guard<std::mutex> lock(mu_);
          broken_ = Status(c.status().code(), c.status().message() + " (no server for " +
                                                  format_number("%.0f", options_.give_up_s) + " s: giving up)");
          cv_.notify_all();
        }
        sleep_s(0.2);
        continue;
      }
      conn = std::move(c).value();
      {
        std::lock_guard<std::mutex> lock(mu_);
        broken_ = Status();
      }
      if (lost) {
        std::fprintf(stderr, "queue %s: reconnected; sending the requests in flight again\n", url_.text.c_str());
        // The server may have come back without what it held (no append-only file): the requests
        // still in flight go again. A request it kept is answered twice and taken once.
        std::vector<EncodedRequest> again;
        {
          std::lock_guard<std::mutex> lock(mu_);
          for (const auto& [a, p] : pending_)
            if (!p->done) again.push_back(p->encoded);
        }
        std::lock_guard<std::mutex> lock(submit_mu_);
        uploaded_.clear();
        for (const auto& e : again) {
          Status st = submit_locked(e);
          if (!st.ok())
            std::fprintf(stderr, "queue %s: resending a request: %s\n", url_.text.c_str(), st.message().c_str());
        }
      }
      down_since = -1;
      lost = false;
    }
    Result<RedisReply> r = conn->command({"XREAD", "COUNT", "256", "BLOCK", "200", "STREAMS", stream, last});
    if (!r.ok()) {
      conn.reset();
      if (!lost) std::fprintf(stderr, "%s; waiting for the server\n", r.status().message().c_str());
      lost = true;
      if (down_since < 0) down_since = now_s();
      if (r.status().code() != StatusCode::kIoError) sleep_s(0.5);
      continue;
    }
    if (r->is_nil() || !r->is_array() || r->elements.empty()) {
      size_t waiting = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& [a, p] : pending_) waiting += p->done ? 0 : 1;
      }
      double t = now_s();
      if (waiting == 0) {
        quiet_since = t;
      } else if (!warned && t - quiet_since > options_.no_worker_warn_s) {
        Result<QueueStatus> qs = read_queue_status(*conn, keys_);
        if (qs.ok() && qs->workers == 0) {
          std::fprintf(stderr,
                       "queue %s: %zu evaluations waiting for %.0f s and no worker is alive; start one with "
                       "`harness worker --queue %s` (the run waits for it)\n",
                       url_.text.c_str(), waiting, t - quiet_since, url_.text.c_str());
          warned = true;
        }
      }
      continue;
    }
    quiet_since = now_s();
    if (warned) {
      std::fprintf(stderr, "queue %s: a worker answers; going on\n", url_.text.c_str());
      warned = false;
    }
    const RedisReply& s = r->elements[0];
    if (!s.is_array() || s.elements.size() != 2) continue;
    std::vector<std::string> ids;
    for (const auto& entry : s.elements[1].elements) {
      std::string id;
      std::map<std::string, std::string> f;
      if (!stream_entry_fields(entry, &id, &f)) continue;
      last = id;
      ids.push_back(id);
      Digest address;
      if (!Digest::parse_hex(f["addr"], &address)) continue;
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(address);
      if (it == pending_.end() || it->second->done) continue;  // delivered twice: taken once
      Pending& p = *it->second;
      if (f.count("failed")) {
        p.failed = true;
        p.failure = f["failed"];
      } else {
        p.measurement = f["result"];
        p.compile_log = f["log"];
      }
      p.done = true;
      ++answered_;
      cv_.notify_all();
    }
    if (!ids.empty()) {
      std::vector<std::string> del = {"XDEL", stream};
      del.insert(del.end(), ids.begin(), ids.end());
      (void)conn->command(del);
    }
  }
}

std::string QueueEvaluator::progress_line() {
  std::lock_guard<std::mutex> lock(status_mu_);
  double t = now_s();
  if (status_at_ >= 0 && t - status_at_ < 1) return status_line_;
  status_at_ = t;
  if (!status_conn_) {
    Result<std::unique_ptr<Redis>> c = Redis::connect(url_, 1, 2);
    if (!c.ok()) return status_line_ = "queue unreachable";
    status_conn_ = std::move(c).value();
  }
  Result<QueueStatus> s = read_queue_status(*status_conn_, keys_);
  if (!s.ok()) {
    status_conn_.reset();
    return status_line_ = "queue unreachable";
  }
  double rate = t > started_at_ ? answered_.load() / (t - started_at_) : 0;
  status_line_ = "queue " + std::to_string(s->waiting) + " waiting, " + std::to_string(s->in_progress) +
                 " in progress, " + std::to_string(s->workers) + " workers, " + format_number("%.1f", rate) + " eval/s";
  return status_line_;
}

}  // namespace vinci
