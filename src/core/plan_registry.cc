#include "core/plan_registry.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>

#include "core/plan_proof.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {

namespace {

std::vector<std::string> splitSpec(const std::string& spec) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    std::string item = spec.substr(at, comma - at);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
    at = comma + 1;
  }
  return out;
}

// The files a spec names: files as they are, folders' *.xml and *.json in name order.
std::vector<std::string> filesOf(const std::string& spec) {
  std::vector<std::string> files;
  for (const std::string& item : splitSpec(spec)) {
    std::error_code ec;
    if (std::filesystem::is_directory(item, ec)) {
      std::vector<std::string> inDir;
      for (const auto& e : std::filesystem::directory_iterator(item, ec)) {
        const std::string ext = e.path().extension().string();
        if (e.is_regular_file() && (ext == ".xml" || ext == ".json")) inDir.push_back(e.path().string());
      }
      if (ec) throw InvalidArgument("STRATA_PLANS: folder " + item + " cannot be read: " + ec.message());
      std::sort(inDir.begin(), inDir.end());
      files.insert(files.end(), inDir.begin(), inDir.end());
    } else {
      files.push_back(item);
    }
  }
  return files;
}

struct CacheKey {
  std::string path;
  size_t pieceBytes;
  int nslots;
  int64_t size, mtimeNs;
  auto tie() const { return std::tie(path, pieceBytes, nslots, size, mtimeNs); }
  bool operator<(const CacheKey& o) const { return tie() < o.tie(); }
};

}  // namespace

std::vector<LoadedProgram> loadPlanPrograms(const std::string& spec, size_t pieceBytes, int nslots) {
  static std::mutex mutex;
  static std::map<CacheKey, LoadedProgram> cache;
  std::vector<LoadedProgram> out;
  for (const std::string& file : filesOf(spec)) {
    struct stat st {};
    if (stat(file.c_str(), &st) != 0) throw InvalidArgument("STRATA_PLANS: " + file + ": cannot be read");
    const CacheKey key{file, pieceBytes, nslots, static_cast<int64_t>(st.st_size),
                       static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
    LoadedProgram loaded;
    {
      std::lock_guard<std::mutex> lk(mutex);
      auto it = cache.find(key);
      if (it != cache.end()) loaded = it->second;
    }
    if (!loaded.program) {
      try {
        loaded.program = loadProgram(file);
        ProofOptions options;
        options.pieceBytes = pieceBytes;
        options.nslots = nslots;
        const std::string verdict = proveProgram(*loaded.program, options);
        loaded.figures = programFigures(*loaded.program);
        loaded.digest = strprintf("%s@%016zx", loaded.program->name.c_str(),
                                  std::hash<std::string>{}(writeStrataPlan(*loaded.program)));
        STRATA_INFO(kLogInit, "STRATA_PLANS: %s", verdict.c_str());
      } catch (const Error& e) {
        throw InvalidArgument(std::string("STRATA_PLANS: ") + e.what());
      }
      std::lock_guard<std::mutex> lk(mutex);
      if (cache.size() > 256) cache.clear();
      cache.emplace(key, loaded);
    }
    const PlanProgram& p = *loaded.program;
    if (findAlgorithm(p.kind, p.name))
      throw InvalidArgument(
          strprintf("STRATA_PLANS: %s: its name '%s' is a built-in %s algorithm's; rename the file's "
                    "algorithm",
                    file.c_str(), p.name.c_str(), collName(p.kind)));
    for (const LoadedProgram& other : out)
      if (other.program->kind == p.kind && other.program->name == p.name)
        throw InvalidArgument(strprintf("STRATA_PLANS: %s and %s both name a %s algorithm '%s'",
                                        other.program->file.c_str(), file.c_str(), collName(p.kind), p.name.c_str()));
    out.push_back(loaded);
  }
  return out;
}

std::string programsDigest(const std::vector<LoadedProgram>& programs) {
  std::string out;
  for (const LoadedProgram& p : programs) out += (out.empty() ? "" : ",") + p.digest;
  return out;
}

}  // namespace strata
