// The sbatch options a chain's jobs may carry. A chain's options come from its owner (`batonctl submit
// ... -- ARGS`) and are given to every job batond submits for it, as the owner: an option that makes
// sbatch wait for the job (`--wait`), submit nothing (`--test-only`, `--help`, `--usage`, `--version`),
// print something else than the job id, replace the script (`--wrap`), act for another user (`--uid`,
// `--gid`), or overwrite what batond sets itself (`--comment`, `--parsable`, the plugin's `--baton`)
// would stall the service or break the chain. Checked where a chain is created (so the owner hears at
// once) and again before each submission.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace baton::slurm {

// Whether the plugin's chain option `--baton[=CHAIN]` may appear: batond adds it itself before a
// submission (once), a chain's own options may not set it.
enum class ChainOption { Refused, AllowedOnce };

// nullopt when every element of `args` is an allowed sbatch option (with its value, as `--opt=value`,
// `--opt value`, `-o value`, `-ovalue`, or a cluster of short flags); else a message naming the first
// argument refused and why. Refused: options not on the allowlist (documented in provisioner/README.md),
// abbreviated long options (sbatch would take `--wai` for `--wait`), a value given to an option that
// takes none, a missing value, and any word that is not an option (sbatch would take it as the script).
std::optional<std::string> checkSbatchArgs(
    const std::vector<std::string>& args, ChainOption chainOption = ChainOption::Refused);

} // namespace baton::slurm
