// Which of a job's processes `scancel --signal` reaches.
#pragma once

namespace baton::slurm {

enum class SignalScope {
    // The tasks of every step except the batch step (`scancel --signal=SIG`). The batch shell and its
    // children are spared, srun among them: srun answers TERM by force-terminating its step, which
    // leaves the tasks KillWait seconds before SIGKILL, however long their final checkpoint takes.
    Steps,
    // The batch shell, its children (srun included) and every step (`scancel --full --signal=SIG`): what
    // reaches a program that the batch script runs itself.
    Full,
};

} // namespace baton::slurm
