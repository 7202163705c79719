#include "brisk/core/detail/distributed.hpp"

#include <string>

namespace brisk::detail {

void write_error_info(Writer& w, const ErrorInfo& e) {
  w(static_cast<std::uint8_t>(e.kind), e.message, e.function, e.rank, e.attempts);
}

std::shared_ptr<const ErrorInfo> read_error_info(Reader& r) {
  auto e = std::make_shared<ErrorInfo>();
  std::uint8_t kind = 0;
  r(kind, e->message, e->function, e->rank, e->attempts);
  if (kind > static_cast<std::uint8_t>(ErrorKind::kObjectLost)) {
    throw SerializationError("brisk: unknown error kind " + std::to_string(kind) + " in a message");
  }
  e->kind = static_cast<ErrorKind>(kind);
  return e;
}

}  // namespace brisk::detail
