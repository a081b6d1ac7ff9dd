#include "queue/redis.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace vinci {
namespace {

timeval to_timeval(double s) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(s);
  tv.tv_usec = static_cast<suseconds_t>((s - std::floor(s)) * 1e6);
  return tv;
}

RedisReply convert(const redisReply* r) {
  RedisReply out;
  if (!r) return out;
  switch (r->type) {
    case REDIS_REPLY_NIL: out.type = RedisReply::Type::kNil; break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default: break;
  }
  return out;
}

}  // namespace

Redis::~Redis() {
  if (context_) redisFree(static_cast<redisContext*>(context_));
}

Result<std::unique_ptr<Redis>> Redis::connect(const QueueUrl& url, double timeout_s, double command_timeout_s) {
  redisContext* c = redisConnectWithTimeout(url.host.c_str(), url.port, to_timeval(timeout_s));
  if (!c) return io_error("queue " + url.text + ": cannot allocate a Redis connection");
  if (c->err) {
    std::string why = c->errstr;
    redisFree(c);
    return io_error("queue " + url.text + ": cannot reach the Redis server at " + url.host + ":" +
                    std::to_string(url.port) + ": " + why);
  }
  redisSetTimeout(c, to_timeval(command_timeout_s));
  std::unique_ptr<Redis> r(new Redis());
  r->url_ = url;
  r->context_ = c;
  const char* password = std::getenv(kRedisPasswordEnv);
  if (password && *password) {
    const char* user = std::getenv(kRedisUserEnv);
    std::vector<std::string> argv = {"AUTH"};
    if (user && *user) argv.push_back(user);
    argv.push_back(password);
    Result<RedisReply> ok = r->command(argv);
    if (!ok.ok())
      return Status(ok.status().code(), "queue " + url.text + ": authentication with " + kRedisPasswordEnv +
                                            (user && *user ? std::string(" as user ") + user : std::string()) +
                                            " failed: " + ok.status().message().substr(r->url_.text.size() + 8));
  }
  return r;
}

Result<std::vector<RedisReply>> Redis::pipeline(const std::vector<std::vector<std::string>>& commands) {
  auto* c = static_cast<redisContext*>(context_);
  if (!c || c->err) return io_error("queue " + url_.text + ": the connection is lost");
  for (const auto& argv : commands) {
    std::vector<const char*> args;
    std::vector<size_t> lens;
    for (const auto& a : argv) {
      args.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(c, static_cast<int>(args.size()), args.data(), lens.data()) != REDIS_OK)
      return io_error("queue " + url_.text + ": cannot queue a command: " + c->errstr);
  }
  std::vector<RedisReply> out;
  Status first;
  for (size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK || !raw)
      return io_error("queue " + url_.text + ": " + commands[i][0] +
                      ": the connection to the Redis server was lost: " + c->errstr);
    out.push_back(convert(static_cast<redisReply*>(raw)));
    freeReplyObject(raw);
    if (out.back().type == RedisReply::Type::kError && first.ok()) {
      const std::string& text = out.back().str;
      first = text.rfind("LOADING", 0) == 0
                  ? io_error("queue " + url_.text + ": " + commands[i][0] + ": " + text)
                  : failed_precondition("queue " + url_.text + ": " + commands[i][0] + ": " + text);
    }
  }
  if (!first.ok()) return first;
  return out;
}

Result<RedisReply> Redis::command(const std::vector<std::string>& argv) {
  auto* c = static_cast<redisContext*>(context_);
  if (!c || c->err) return io_error("queue " + url_.text + ": the connection is lost");
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const auto& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* reply = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lens.data()));
  if (!reply) {
    return io_error("queue " + url_.text + ": " + (argv.empty() ? std::string() : argv[0]) +
                    ": the connection to the Redis server was lost: " + c->errstr);
  }
  RedisReply out = convert(reply);
  freeReplyObject(reply);
  if (out.type == RedisReply::Type::kError) {
    std::string text = out.str;
    // A server still loading its append-only file answers LOADING: as good as not there yet.
    if (text.rfind("LOADING", 0) == 0) return io_error("queue " + url_.text + ": " + argv[0] + ": " + text);
    if (text.rfind("NOAUTH", 0) == 0) text += std::string(" (set ") + kRedisPasswordEnv + ")";
    return failed_precondition("queue " + url_.text + ": " + argv[0] + ": " + text);
  }
  return out;
}

bool stream_entry_fields(const RedisReply& e, std::string* id, std::map<std::string, std::string>* fields) {
  if (!e.is_array() || e.elements.size() != 2 || !e.elements[1].is_array()) return false;
  *id = e.elements[0].str;
  const auto& kv = e.elements[1].elements;
  for (size_t i = 0; i + 1 < kv.size(); i += 2) (*fields)[kv[i].str] = kv[i + 1].str;
  return true;
}

}  // namespace vinci
