#include "core/comm_config.h"

#include <cstddef>
#include <cstring>
#include <string>

#include "util/config_table.h"
#include "util/error.h"

namespace strata {

CommSettings applyCommConfig(const strataConfig_t* user, const Config& base, const std::string& baseName,
                             const char* what) {
  CommSettings s{base, true, baseName};
  if (!user) return s;
  // The header (size, magic, version) and blocking are in every version of the struct.
  constexpr size_t kSmallest = offsetof(strataConfig_t, blocking) + sizeof(int);
  if (user->size < kSmallest)
    throw InvalidArgument(
        strprintf("%s: config->size %zu is smaller than any strataConfig_t (%zu bytes): initialise "
                  "it with STRATA_CONFIG_INITIALIZER",
                  what, user->size, kSmallest));
  if (user->magic != STRATA_CONFIG_MAGIC)
    throw InvalidArgument(
        strprintf("%s: config->magic 0x%x is not STRATA_CONFIG_MAGIC (0x%x): initialise the struct "
                  "with STRATA_CONFIG_INITIALIZER",
                  what, user->magic, STRATA_CONFIG_MAGIC));
  // A caller compiled against a newer header may have set fields this library cannot honour: refuse rather than
  // ignore them.
  if (user->size > sizeof(strataConfig_t))
    throw InvalidArgument(
        strprintf("%s: config->size %zu (a header of version %u) is larger than this library's "
                  "strataConfig_t (%zu bytes, version %d): it has fields this library does not know",
                  what, user->size, user->version, sizeof(strataConfig_t), STRATA_VERSION_CODE));
  auto present = [&](size_t offset, size_t bytes) { return user->size >= offset + bytes; };
  // Sets the variable's field from the struct's value, with the variable's own check, naming the struct's field.
  auto set = [&](const char* field, const char* variable, const std::string& value) {
    try {
      configVariable(variable).parse(s.config, value.c_str());
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(strprintf("%s: config->%s: %s", what, field, e.what()));
    }
  };
  auto setInt = [&](const char* field, size_t offset, const char* variable) {
    int value;
    if (!present(offset, sizeof(int))) return;
    std::memcpy(&value, reinterpret_cast<const char*>(user) + offset, sizeof(int));
    if (value != STRATA_CONFIG_UNDEF_INT) set(field, variable, std::to_string(value));
  };
  auto text = [&](size_t offset) -> const char* {
    const char* value = nullptr;
    if (present(offset, sizeof(const char*)))
      std::memcpy(&value, reinterpret_cast<const char*>(user) + offset, sizeof(value));
    return value;
  };
  if (user->blocking != STRATA_CONFIG_UNDEF_INT) {
    if (user->blocking != 0 && user->blocking != 1)
      throw InvalidArgument(strprintf("%s: config->blocking %d is neither 0 nor 1", what, user->blocking));
    s.blocking = user->blocking == 1;
  }
  setInt("timeoutMs", offsetof(strataConfig_t, timeoutMs), "STRATA_TIMEOUT_MS");
  if (const char* name = text(offsetof(strataConfig_t, commName))) s.name = name;
  if (const char* algo = text(offsetof(strataConfig_t, algo))) set("algo", "STRATA_ALGO", algo);
  if (const char* transport = text(offsetof(strataConfig_t, transport)))
    set("transport", "STRATA_TRANSPORT", transport);
  setInt("nslots", offsetof(strataConfig_t, nslots), "STRATA_NSLOTS");
  setInt("pieceBytes", offsetof(strataConfig_t, pieceBytes), "STRATA_PIECE_BYTES");
  return s;
}

}  // namespace strata
