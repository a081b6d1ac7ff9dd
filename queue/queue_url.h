// A queue's URL, redis://HOST:PORT[/NAME], and the one way to show a URL a user gave.
//
// NAME (default "vinci") prefixes every key the queue uses, so several queues can share one
// server. The URL never carries a password: a server that wants one (requirepass, or an ACL user)
// gets it from the environment, VINCI_REDIS_PASSWORD (and VINCI_REDIS_USER for an ACL user), so it
// is never written into a config, a manifest or a log. A URL that carries one anyway is refused,
// and every message that repeats a URL a user gave shows it through redact_url.
#ifndef VINCI_QUEUE_QUEUE_URL_H_
#define VINCI_QUEUE_QUEUE_URL_H_

#include <string>

#include "core/status.h"

namespace vinci {

constexpr const char* kRedisPasswordEnv = "VINCI_REDIS_PASSWORD";
constexpr const char* kRedisUserEnv = "VINCI_REDIS_USER";

struct QueueUrl {
  std::string host;
  int port = 6379;
  std::string name = "vinci";  // the key prefix
  std::string text;            // the URL as given (for messages); it never holds a user part
};

// Parses redis://HOST:PORT[/NAME]. Errors name the URL (redacted) and what was expected; a URL
// with a user or password part is refused (the password comes from VINCI_REDIS_PASSWORD).
Result<QueueUrl> parse_queue_url(const std::string& url);

// The URL with the password of its user part replaced by "***": "redis://alice:***@host:6379"
// for "redis://alice:PASS@host:6379"; a user part without ':' may be a password alone and is
// replaced whole ("redis://***@host:6379"). Any other text is returned as it is.
std::string redact_url(const std::string& url);

}  // namespace vinci

#endif  // VINCI_QUEUE_QUEUE_URL_H_
