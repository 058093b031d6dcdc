// Which part of a campaign this process runs, from the scheduler that started it: Bazel-style
// TEST_TOTAL_SHARDS/TEST_SHARD_INDEX, a Slurm job array, or a Kubernetes Indexed Job. Shards take
// disjoint parts (cases, entries or files: each subcommand says which) whose reports `merge`
// joins into the unsharded campaign's report.
#pragma once

#include <cstddef>
#include <string>

namespace mhc::runner {

struct Shard {
  int index = 0, count = 1;
  std::string source;  // how it was found, e.g. "SLURM_ARRAY_TASK_ID=7"; "" when not sharded
  bool takes(std::size_t i) const { return count <= 1 || int(i % std::size_t(count)) == index; }
  std::string text() const;  // "shard 2 of 8 (SLURM_ARRAY_TASK_ID=7)"
};

// The shard of this process. `count` is --shards (0: not given): required with
// JOB_COMPLETION_INDEX, which carries no count; checked against the count a scheduler gives;
// 1 runs the whole campaign whatever the environment says. Touches TEST_SHARD_STATUS_FILE, as
// test runners that shard expect. Throws std::invalid_argument naming the variables when they
// are malformed, out of range or contradict one another.
Shard shard_from_env(int count = 0);

}  // namespace mhc::runner
