// libFuzzer target: the frame decoder and the serialization reader behind it must
// never crash, hang or read past their input, whatever bytes arrive.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "brisk/core/frame.hpp"
#include "brisk/core/serialize.hpp"

using Payload = std::tuple<std::uint64_t, std::string, std::vector<double>, std::map<std::string, std::vector<int>>,
                           std::optional<std::variant<int, std::string>>>;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto frame = brisk::decode_frame(bytes);
  // Also decode the raw bytes as a payload: the checksum would otherwise keep the
  // fuzzer away from the deserializer.
  for (auto input : {bytes, frame.ok() ? frame->payload : std::span<const std::byte>{}}) {
    try {
      (void)brisk::from_bytes<Payload>(input);
    } catch (const brisk::SerializationError&) {
    }
  }
  return 0;
}
