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
#include <string_view>
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

// The directives of a batch script, which sbatch obeys as well: its `#SBATCH` and `#SLURM` lines up to
// the first line that is neither blank nor a comment, their words split as sbatch splits them (quotes,
// backslash escapes, '#' comments): nullopt, or why one of them is refused. The script is the owner's, so
// only what would turn against batond is refused: --wait (sbatch would block until the job ends; the
// command line cannot undo it) and the options after which sbatch submits nothing (--test-only, --help,
// --usage, --version), in any form sbatch reads, abbreviations included. Options that the command line
// overrides (--comment, --baton, --parsable) and everything else are the owner's business.
std::optional<std::string> checkScriptDirectives(std::string_view script);

} // namespace baton::slurm
