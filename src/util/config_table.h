// The configuration table: every STRATA_* variable declared once, as in UCC's config tables (name, default,
// accepted values, doc, field). Config's defaults, Config::fromEnv() and Config::describe() all come from
// configVariables(); the rows are in config.cc. Include this only to walk the table (config.cc, tests, a
// tool that dumps it) or to ask a row whether a Config holds a value it accepts (the transports' set-up check);
// everything else passes a Config.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace strata {

struct Config;  // util/config.h: the table only names its fields, so the two headers do not include each other

/// An integer in [lo, hi], in decimal, 0x hex or 0 octal, with an optional k/K, m/M or g/G suffix (x 2^10,
/// 2^20, 2^30); when multipleOf > 1 it must also be a multiple of it.
template <class T>
struct IntegerField {
  T Config::*field;
  int64_t lo, hi;
  int64_t multipleOf = 1;
};
// Spelled out for compilers without C++20's aggregate deduction (clang 14, which the fuzz targets use).
template <class T>
IntegerField(T Config::*, int64_t, int64_t) -> IntegerField<T>;
template <class T>
IntegerField(T Config::*, int64_t, int64_t, int64_t) -> IntegerField<T>;
/// One of the words in `choices`, written as the error message lists them: "auto, shm, tcp, ucx".
struct ChoiceField {
  std::string Config::*field;
  const char* choices;
};
/// Any text.
struct TextField {
  std::string Config::*field;
};
/// "collective:algorithm,..." as parseAlgoSpec() reads it.
struct AlgoSpecField {
  std::map<std::string, std::string> Config::*field;
};
/// No Config field: the file `by` reads the variable itself. Listed so that the table is the complete list.
struct ReadElsewhere {
  const char* by;
};

using ConfigBinding = std::variant<IntegerField<int64_t>, IntegerField<int>, IntegerField<size_t>, ChoiceField,
                                   TextField, AlgoSpecField, ReadElsewhere>;

/// One configuration variable.
struct ConfigVar {
  const char* name;          ///< "STRATA_..."
  const char* defaultValue;  ///< as the environment spells it; "" is unset
  ConfigBinding binding;     ///< the Config field it sets and the values it accepts
  const char* doc;           ///< one line, as describe() shows it

  /// Sets the field from `value`; throws InvalidArgument naming the variable and the value if the value is not
  /// accepted. Does nothing for a variable read elsewhere.
  void parse(Config& config, const char* value) const;
  /// The field's value in `config` as describe() shows it; "" for a variable read elsewhere.
  std::string show(const Config& config) const;
  /// The file that reads the variable, or nullptr when Config::fromEnv() does.
  const char* readBy() const;
  /// Throws InvalidArgument naming the variable and the value unless the field's value in `config` is one parse()
  /// would accept: for a Config whose fields were set in code rather than parsed. Text and variables read elsewhere
  /// always pass.
  void check(const Config& config) const;
};

/// Every STRATA_* variable of the library, in describe() order (the README's table lists the same).
std::span<const ConfigVar> configVariables();
/// The row of `name` ("STRATA_..."); throws InternalError when the table has none.
const ConfigVar& configVariable(std::string_view name);

}  // namespace strata
