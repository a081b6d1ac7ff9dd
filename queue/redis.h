// A small synchronous Redis client over hiredis: one connection, commands as argument vectors,
// replies as plain values. vinci's queue (queue/queue.h) is built on it.
//
// A queue is named by a URL: redis://HOST:PORT[/NAME]. NAME (default "vinci") prefixes every key
// the queue uses, so several queues can share one server. The URL never carries a password: a
// server that wants one (requirepass, or an ACL user) gets it from the environment,
// VINCI_REDIS_PASSWORD (and VINCI_REDIS_USER for an ACL user), so it is never written into a
// config, a manifest or a log.
#ifndef VINCI_QUEUE_REDIS_H_
#define VINCI_QUEUE_REDIS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace vinci {

constexpr const char* kRedisPasswordEnv = "VINCI_REDIS_PASSWORD";
constexpr const char* kRedisUserEnv = "VINCI_REDIS_USER";

struct QueueUrl {
  std::string host;
  int port = 6379;
  std::string name = "vinci";  // the key prefix
  std::string text;            // the URL as given (for messages)
};

// Parses redis://HOST:PORT[/NAME]. Errors name the URL and what was expected; a URL with a
// user or password part is refused (the password comes from VINCI_REDIS_PASSWORD).
Result<QueueUrl> parse_queue_url(const std::string& url);

struct RedisReply {
  enum class Type { kNil, kInteger, kString, kStatus, kError, kArray };
  Type type = Type::kNil;
  long long integer = 0;
  std::string str;  // string, status or error text
  std::vector<RedisReply> elements;

  bool is_nil() const { return type == Type::kNil; }
  bool is_array() const { return type == Type::kArray; }
};

class Redis {
 public:
  ~Redis();
  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;

  // Connects (and authenticates when VINCI_REDIS_PASSWORD is set) within timeout_s; every command
  // then waits at most command_timeout_s for its reply. An unreachable server is an kIoError
  // naming the URL.
  static Result<std::unique_ptr<Redis>> connect(const QueueUrl& url, double timeout_s = 5,
                                                double command_timeout_s = 30);

  // One command. A lost connection is kIoError (the connection is then unusable: reconnect); an
  // error reply from the server is kFailedPrecondition with the server's text.
  Result<RedisReply> command(const std::vector<std::string>& argv);

  // Several commands in one round trip (pipelined, not atomic); the replies in order. The first
  // error (a lost connection, or an error reply) is returned.
  Result<std::vector<RedisReply>> pipeline(const std::vector<std::vector<std::string>>& commands);

  const QueueUrl& url() const { return url_; }

 private:
  Redis() = default;
  QueueUrl url_;
  void* context_ = nullptr;  // redisContext
};

// An entry of an XREAD/XREADGROUP/XAUTOCLAIM reply, [id, [field, value, ...]]: its id and fields.
// False when the reply has another shape.
bool stream_entry_fields(const RedisReply& e, std::string* id, std::map<std::string, std::string>* fields);

}  // namespace vinci

#endif  // VINCI_QUEUE_REDIS_H_
