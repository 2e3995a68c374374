// Config: every STRATA_* variable parses, and malformed values are rejected with a message naming them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "util/config.h"
#include "util/error.h"

namespace strata {
namespace {

// Sets a variable for the scope of one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

TEST(Config, Defaults) {
  Config c;
  EXPECT_EQ(c.timeoutMs, 600000);
  EXPECT_EQ(c.transport, "auto");
  EXPECT_EQ(c.connectionCapacity(), c.pieceBytes * static_cast<size_t>(c.nslots));
  EXPECT_FALSE(c.describe().empty());
}

TEST(Config, ReadsEveryVariable) {
  ScopedEnv a("STRATA_TIMEOUT_MS", "1234");
  ScopedEnv b("STRATA_TRANSPORT", "tcp");
  ScopedEnv d("STRATA_ALGO", "allreduce:ring,allgather:ring");
  ScopedEnv e("STRATA_PIECE_BYTES", "64K");
  ScopedEnv f("STRATA_NSLOTS", "4");
  ScopedEnv g("STRATA_NSOCKS", "3");
  ScopedEnv h("STRATA_HOSTID", "node7");
  Config c = Config::fromEnv();
  EXPECT_EQ(c.timeoutMs, 1234);
  EXPECT_EQ(c.transport, "tcp");
  EXPECT_EQ(c.algo.at("allreduce"), "ring");
  EXPECT_EQ(c.algo.at("allgather"), "ring");
  EXPECT_EQ(c.pieceBytes, 65536u);
  EXPECT_EQ(c.nslots, 4);
  EXPECT_EQ(c.nsocks, 3);
  EXPECT_EQ(c.hostId, "node7");
}

TEST(Config, RejectsMalformedValues) {
  {
    ScopedEnv a("STRATA_TIMEOUT_MS", "soon");
    try {
      Config::fromEnv();
      FAIL() << "accepted STRATA_TIMEOUT_MS=soon";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("STRATA_TIMEOUT_MS"), std::string::npos);
    }
  }
  {
    ScopedEnv a("STRATA_TRANSPORT", "carrier-pigeon");
    EXPECT_THROW(Config::fromEnv(), InvalidArgument);
  }
  {
    ScopedEnv a("STRATA_NSLOTS", "1");  // a connection needs at least two slots to pipeline
    EXPECT_THROW(Config::fromEnv(), InvalidArgument);
  }
  {
    ScopedEnv a("STRATA_PIECE_BYTES", "1000");  // not a multiple of 64
    EXPECT_THROW(Config::fromEnv(), InvalidArgument);
  }
  EXPECT_THROW(parseAlgoSpec("allreduce"), InvalidArgument);
  EXPECT_THROW(parseAlgoSpec("allreduce:"), InvalidArgument);
  EXPECT_EQ(parseAlgoSpec("").size(), 0u);
}

}  // namespace
}  // namespace strata
