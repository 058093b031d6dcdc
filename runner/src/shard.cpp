#include "mhc/runner/shard.hpp"

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace mhc::runner {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

long env_long(const char* name, long fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1L << 30))
    throw std::invalid_argument(std::string(name) + "=" + v + ": not a count or index");
  return x;
}

}  // namespace

std::string Shard::text() const {
  return "shard " + std::to_string(index) + " of " + std::to_string(count) +
         (source.empty() ? "" : " (" + source + ")");
}

Shard shard_from_env(int count) {
  struct Found {
    std::string source;
    long index, count;  // count -1: the scheduler gives none
    std::string count_source;
  };
  std::vector<Found> found;
  if (env("TEST_SHARD_INDEX") || env("TEST_TOTAL_SHARDS")) {
    if (!env("TEST_SHARD_INDEX") || !env("TEST_TOTAL_SHARDS"))
      throw std::invalid_argument("TEST_TOTAL_SHARDS and TEST_SHARD_INDEX go together");
    found.push_back({std::string("TEST_SHARD_INDEX=") + env("TEST_SHARD_INDEX"),
                     env_long("TEST_SHARD_INDEX", 0), env_long("TEST_TOTAL_SHARDS", 1),
                     std::string("TEST_TOTAL_SHARDS=") + env("TEST_TOTAL_SHARDS")});
  }
  if (env("SLURM_ARRAY_TASK_ID")) {
    // --array=MIN-MAX:STEP: the task IDs MIN, MIN+STEP, ...; SLURM_ARRAY_TASK_COUNT of them.
    const long id = env_long("SLURM_ARRAY_TASK_ID", 0), min = env_long("SLURM_ARRAY_TASK_MIN", 0),
               step = env_long("SLURM_ARRAY_TASK_STEP", 1);
    if (!env("SLURM_ARRAY_TASK_COUNT"))
      throw std::invalid_argument("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not");
    if (step < 1 || id < min || (id - min) % step != 0)
      throw std::invalid_argument(
          "SLURM_ARRAY_TASK_ID=" + std::to_string(id) +
          " is not MIN + k STEP (SLURM_ARRAY_TASK_MIN=" + std::to_string(min) +
          ", STEP=" + std::to_string(step) + "): shard with --array=0-(N-1) or MIN-MAX:STEP");
    found.push_back({"SLURM_ARRAY_TASK_ID=" + std::to_string(id), (id - min) / step,
                     env_long("SLURM_ARRAY_TASK_COUNT", 1),
                     std::string("SLURM_ARRAY_TASK_COUNT=") + env("SLURM_ARRAY_TASK_COUNT")});
  }
  if (env("JOB_COMPLETION_INDEX"))
    found.push_back({std::string("JOB_COMPLETION_INDEX=") + env("JOB_COMPLETION_INDEX"),
                     env_long("JOB_COMPLETION_INDEX", 0), -1, ""});
  if (const char* status = env("TEST_SHARD_STATUS_FILE")) std::ofstream(status).flush();

  Shard s;
  if (count == 1 || found.empty()) {
    if (count > 1)
      throw std::invalid_argument(
          "--shards " + std::to_string(count) +
          ": no shard index in the environment (TEST_SHARD_INDEX, SLURM_ARRAY_TASK_ID or "
          "JOB_COMPLETION_INDEX)");
    return s;
  }
  if (found.size() > 1)
    throw std::invalid_argument("two shard indices in the environment, " + found[0].source +
                                " and " + found[1].source +
                                ": unset one, or pass --shards 1 to run the whole campaign");
  const Found& f = found[0];
  if (f.count < 0 && count == 0)
    throw std::invalid_argument(f.source +
                                " gives no shard count: pass --shards N (the Job's "
                                "completions)");
  if (f.count >= 0 && count > 0 && f.count != count)
    throw std::invalid_argument("--shards " + std::to_string(count) + " contradicts " + f.source +
                                " of " + std::to_string(f.count));
  s.count = int(f.count >= 0 ? f.count : count);
  s.index = int(f.index);
  s.source = f.source;
  if (s.count < 1)
    throw std::invalid_argument(f.count_source + ": a campaign has at least one shard");
  if (s.index >= s.count)
    throw std::invalid_argument(f.source + ": index " + std::to_string(s.index) +
                                " is outside 0.." + std::to_string(s.count - 1));
  return s;
}

}  // namespace mhc::runner
