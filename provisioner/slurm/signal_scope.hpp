// Which of a job's processes `scancel --signal` reaches.
#pragma once

namespace baton::slurm {

enum class SignalScope {
    // The tasks of every step except the batch step (`scancel --signal=SIG`). The batch shell and its
    // children are spared, srun among them: srun answers TERM by killing its step at once.
    Steps,
    // The batch shell, its children (srun included) and every step (`scancel --full --signal=SIG`): what
    // reaches a program that the batch script runs itself.
    Full,
};

} // namespace baton::slurm
