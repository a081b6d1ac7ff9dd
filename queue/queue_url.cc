#include "queue/queue_url.h"

#include <cctype>
#include <cstdlib>

namespace vinci {

std::string redact_url(const std::string& url) {
  size_t scheme = url.find("://");
  size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  size_t end = url.find_first_of("/?#", start);
  if (end == std::string::npos) end = url.size();
  // The last '@' of the authority ends the user part (a password may hold '@' itself).
  size_t at = url.rfind('@', end == 0 ? 0 : end - 1);
  if (at == std::string::npos || at < start) return url;
  std::string user = url.substr(start, at - start);
  size_t colon = user.find(':');
  std::string shown = colon == std::string::npos ? "***" : user.substr(0, colon) + ":***";
  return url.substr(0, start) + shown + url.substr(at);
}

Result<QueueUrl> parse_queue_url(const std::string& url) {
  const std::string scheme = "redis://";
  auto bad = [&](const std::string& what) {
    return invalid_argument("queue URL '" + redact_url(url) + "': " + what +
                            " (expected redis://HOST:PORT or redis://HOST:PORT/NAME)");
  };
  if (url.compare(0, scheme.size(), scheme) != 0) return bad("it does not start with redis://");
  std::string rest = url.substr(scheme.size());
  QueueUrl q;
  q.text = url;
  size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (hostport.find('@') != std::string::npos)
    return bad(std::string("a URL carries no user or password: set ") + kRedisPasswordEnv + " (and " + kRedisUserEnv +
               " for an ACL user) instead");
  if (slash != std::string::npos) {
    q.name = rest.substr(slash + 1);
    if (q.name.empty()) return bad("the queue name after '/' is empty");
    for (char c : q.name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
        return bad("the queue name may hold letters, digits, '_', '-' and '.', found '" + q.name + "'");
  }
  size_t colon = hostport.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  q.host = hostport.substr(0, colon);
  std::string port = hostport.substr(colon + 1);
  if (q.host.empty()) return bad("no host");
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return bad("the port '" + port + "' is not a number");
  q.port = std::atoi(port.c_str());
  if (q.port < 1 || q.port > 65535) return bad("the port " + port + " is out of range 1..65535");
  return q;
}

}  // namespace vinci
