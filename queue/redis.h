// A small synchronous Redis client over hiredis: one connection, commands as argument vectors,
// replies as plain values. vinci's queue (queue/queue.h) is built on it.
//
// A queue is named by a URL, redis://HOST:PORT[/NAME] (queue/queue_url.h); a password comes from
// the environment, never from the URL.
#ifndef VINCI_QUEUE_REDIS_H_
#define VINCI_QUEUE_REDIS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "queue/queue_url.h"

namespace vinci {

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
